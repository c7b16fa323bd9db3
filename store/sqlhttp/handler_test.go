package sqlhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// httpServer serves the ClickHouse HTTP interface over the shared engine.
func httpServer(t *testing.T, opts sqlhttp.Options) *httptest.Server {
	t.Helper()
	h, err := sqlhttp.NewHandler(context.Background(), engine(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return srv
}

func hostPort(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// chOpen connects clickhouse-go over HTTP.
func chOpen(t *testing.T, srv *httptest.Server, mod func(*clickhouse.Options)) driver.Conn {
	t.Helper()
	opts := &clickhouse.Options{Addr: []string{hostPort(t, srv)}, Protocol: clickhouse.HTTP, DialTimeout: 5 * time.Second}
	if mod != nil {
		mod(opts)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Ping(context.Background()); err != nil {
		t.Fatalf("ping over HTTP: %v", err)
	}
	return conn
}

func exceptionCode(err error) int32 {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex.Code
	}
	return -1
}

// clickhouse-go, HTTP protocol, against the embedded engine through the handler: typed values
// of every kind the schema uses, server-side parameters, settings, errors as exceptions.
func TestHTTPInterfaceClickHouseGo(t *testing.T) {
	sc := loadScenario(t)
	srv := httpServer(t, sqlhttp.Options{})
	conn := chOpen(t, srv, nil)
	ctx := context.Background()

	v, err := conn.ServerVersion()
	if err != nil || v.Version.Major != 26 {
		t.Fatalf("server version %v, %v; want the engine's 26.x", v, err)
	}

	// One proxied request's ResponseComplete records, read with typed values.
	id := sc.Expect[string(chain.ClassProxied)][0]
	qctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"id": id}),
		clickhouse.WithSettings(clickhouse.Settings{"max_threads": 1, "output_format_json_quote_64bit_integers": 0}))
	rows, err := conn.Query(qctx, `SELECT apiserver, audit_id, stage, code, stage_timestamp, source_ips, user_groups, annotations, has_response_object, response_object_bytes
FROM events WHERE audit_id = {id:String} AND stage = 'ResponseComplete' ORDER BY apiserver`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type rec struct {
		APIServer   string
		AuditID     string
		Stage       string
		Code        int32
		Stage1      time.Time
		SourceIPs   []string
		Groups      []string
		Annotations map[string]string
		HasResp     bool
		RespBytes   int64
	}
	var got []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.APIServer, &r.AuditID, &r.Stage, &r.Code, &r.Stage1, &r.SourceIPs, &r.Groups, &r.Annotations, &r.HasResp, &r.RespBytes); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []rec
	for _, r := range sc.Records {
		if r.AuditID == id && r.Stage == "ResponseComplete" {
			want = append(want, rec{r.APIServer, r.AuditID, r.Stage, r.Code, r.StageTimestamp.UTC(), r.SourceIPs, r.UserGroups, r.Annotations, r.HasResponseObject, r.ResponseObjectBytes})
		}
	}
	if len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("records of %s over HTTP:\n got %+v\nwant %+v", id, got, want)
	}
	if got[1].APIServer != "kas-c" || len(got[1].SourceIPs) != 2 || !got[1].HasResp {
		t.Errorf("the peer's record should carry two source IPs and the response object: %+v", got[1])
	}

	// A rollup with an aggregate state merged to an array.
	var minutes uint64
	var p99 []float32
	row := conn.QueryRow(ctx, `SELECT count() AS n, quantilesTDigestMerge(0.5, 0.9, 0.99)(latency_seconds) FROM peertrail.request_latency_per_minute WHERE apiserver = 'kas-c'`)
	if err := row.Scan(&minutes, &p99); err != nil {
		t.Fatal(err)
	}
	if minutes == 0 || len(p99) != 3 || p99[2] <= 0 {
		t.Errorf("rollup over HTTP: %d rows, quantiles %v", minutes, p99)
	}

	// Errors arrive as ClickHouse exceptions with their codes.
	for _, c := range []struct {
		sql  string
		code int32
	}{
		{"SELECT * FROM no_such_table", 60},
		{"SELEC 1", 62},
		{"INSERT INTO peertrail.events (audit_id) VALUES ('x')", 164},
		{"DROP TABLE peertrail.events", 164},
		{"SELECT 1; DROP TABLE peertrail.events", 164},
		{"SELECT * FROM file('/etc/passwd', 'LineAsString')", 497},
		{"SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')", 497},
		{"SELECT file('/etc/passwd')", 497},
		{"SELECT count() FROM system.stack_trace", 497},
		{"SELECT 1 INTO OUTFILE '/tmp/peertrail-should-not-exist'", 164},
		{"SELECT 1 SETTINGS readonly = 0", 164},
	} {
		err := conn.Exec(ctx, c.sql)
		if code := exceptionCode(err); code != c.code {
			t.Errorf("%s: got %v (code %d), want code %d", c.sql, err, code, c.code)
		}
	}
	if scalar(t, engine(t), "SELECT count() FROM system.tables WHERE database = 'peertrail' AND name = 'events'", nil) != "1" {
		t.Fatal("the events table is gone")
	}
}

// Grafana's data source uses clickhouse-go through database/sql over HTTP with gzip; and
// clickhouse-go's own LZ4 and ZSTD compression work too.
func TestHTTPInterfaceCompressionAndDatabaseSQL(t *testing.T) {
	loadScenario(t)
	srv := httpServer(t, sqlhttp.Options{})
	for _, method := range []clickhouse.CompressionMethod{clickhouse.CompressionGZIP, clickhouse.CompressionLZ4, clickhouse.CompressionZSTD, clickhouse.CompressionDeflate} {
		t.Run(method.String(), func(t *testing.T) {
			db := clickhouse.OpenDB(&clickhouse.Options{
				Addr: []string{hostPort(t, srv)}, Protocol: clickhouse.HTTP,
				Compression: &clickhouse.Compression{Method: method},
				Settings:    clickhouse.Settings{"max_execution_time": 10},
			})
			defer db.Close()
			var n uint64
			var names []string
			err := db.QueryRowContext(context.Background(), "SELECT count(), groupArray(name) FROM (SELECT name FROM system.tables WHERE database = 'peertrail' ORDER BY name)").Scan(&n, &names)
			if err != nil {
				t.Fatal(err)
			}
			if n < 10 || !strings.Contains(strings.Join(names, ","), "chains_per_minute") {
				t.Fatalf("%d tables: %v", n, names)
			}
			// Many rows, so compressed blocks and the Native stream span more than one chunk.
			var sum uint64
			const many = "SELECT raw FROM peertrail.events ARRAY JOIN range(3) AS copy"
			if err := db.QueryRowContext(context.Background(), "SELECT sum(length(raw)) FROM ("+many+")").Scan(&sum); err != nil {
				t.Fatal(err)
			}
			rows, err := db.QueryContext(context.Background(), many)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var total uint64
			for rows.Next() {
				var raw string
				if err := rows.Scan(&raw); err != nil {
					t.Fatal(err)
				}
				total += uint64(len(raw))
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if total != sum || total < 1<<20 {
				t.Fatalf("read %d bytes of raw events, the engine sums %d (want over 1 MiB)", total, sum)
			}
		})
	}
	// database/sql's error path.
	db := sql.OpenDB(clickhouse.Connector(&clickhouse.Options{Addr: []string{hostPort(t, srv)}, Protocol: clickhouse.HTTP}))
	defer db.Close()
	if _, err := db.Exec("TRUNCATE TABLE peertrail.events"); exceptionCode(err) != 164 {
		t.Fatalf("TRUNCATE through database/sql: %v, want code 164", err)
	}
}

func httpGet(t *testing.T, u string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// What curl sees.
func TestHTTPInterfacePlainHTTP(t *testing.T) {
	srv := httpServer(t, sqlhttp.Options{})
	resp, body := httpGet(t, srv.URL+"/?query=SELECT+1", nil)
	if resp.StatusCode != 200 || body != "1\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/tab-separated-values") {
		t.Fatalf("SELECT 1: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp.Header.Get("X-ClickHouse-Query-Id") == "" || !strings.Contains(resp.Header.Get("X-ClickHouse-Summary"), "result_rows") {
		t.Errorf("headers: %v", resp.Header)
	}
	resp, body = httpGet(t, srv.URL+"/ping", nil)
	if resp.StatusCode != 200 || body != "Ok.\n" {
		t.Fatalf("/ping: %d %q", resp.StatusCode, body)
	}
	// default_format, a FORMAT clause, a parameter, the default database.
	resp, body = httpGet(t, srv.URL+"/?default_format=JSONEachRow&param_n=41&query="+url.QueryEscape("SELECT {n:UInt8} + 1 AS answer, currentDatabase() AS db"), nil)
	if resp.StatusCode != 200 || body != `{"answer":42,"db":"peertrail"}`+"\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("default_format: %d %q", resp.StatusCode, body)
	}
	resp, body = httpGet(t, srv.URL+"/?database=peertrail&query="+url.QueryEscape("SELECT currentDatabase() AS db FORMAT CSVWithNames -- trailing comment"), nil)
	if resp.StatusCode != 200 || body != "\"db\"\n\"peertrail\"\n" || resp.Header.Get("X-ClickHouse-Format") != "CSVWithNames" {
		t.Fatalf("FORMAT clause: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	// Reads run in the peertrail database; another is refused, with the reason.
	resp, body = httpGet(t, srv.URL+"/?database=system&query="+url.QueryEscape("SELECT 1"), nil)
	if resp.StatusCode != 403 || !strings.Contains(body, "the database system") {
		t.Fatalf("database=system: %d %q", resp.StatusCode, body)
	}
	// POST body, and the query parameter joined with it.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/?query=SELECT", strings.NewReader("'posted' AS x"))
	pr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(pr.Body)
	pr.Body.Close()
	if pr.StatusCode != 200 || string(b) != "posted\n" {
		t.Fatalf("POST: %d %q", pr.StatusCode, b)
	}
	// Refusals look like ClickHouse's.
	resp, body = httpGet(t, srv.URL+"/?query="+url.QueryEscape("CREATE TABLE x (a UInt8) ENGINE = Memory"), nil)
	if resp.StatusCode != 403 || resp.Header.Get("X-ClickHouse-Exception-Code") != "164" || !strings.HasPrefix(body, "Code: 164. DB::Exception: ") {
		t.Fatalf("CREATE: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = httpGet(t, srv.URL+"/?query="+url.QueryEscape("SELECT * FROM nope"), nil)
	if resp.StatusCode != 404 || resp.Header.Get("X-ClickHouse-Exception-Code") != "60" || !strings.Contains(body, "UNKNOWN_TABLE") {
		t.Fatalf("unknown table: %d %q", resp.StatusCode, body)
	}
	resp, body = httpGet(t, srv.URL+"/?query="+url.QueryEscape("SELECT 'unterminated"), nil)
	if resp.StatusCode != 400 || resp.Header.Get("X-ClickHouse-Exception-Code") != "62" {
		t.Fatalf("unterminated string: %d %q", resp.StatusCode, body)
	}
	// A subquery on a table with a URL setting a client may set (fewer threads): it runs.
	resp, body = httpGet(t, srv.URL+"/?max_threads=1&query="+url.QueryEscape(
		"SELECT count() FROM peertrail.schema_migrations WHERE version IN (SELECT version FROM peertrail.schema_migrations) FORMAT TSV"), nil)
	if ms, _ := store.Migrations(); resp.StatusCode != 200 || body != strconv.Itoa(len(ms))+"\n" {
		t.Fatalf("subquery with max_threads=1: %d %q", resp.StatusCode, body)
	}
	// The statement's own SETTINGS clause changes a setting: the read-only connection refuses
	// it, as a ClickHouse server does under readonly=1.
	resp, body = httpGet(t, srv.URL+"/?query="+url.QueryEscape("SELECT 1 SETTINGS max_block_size = 1000"), nil)
	if resp.StatusCode != 403 || resp.Header.Get("X-ClickHouse-Exception-Code") != "164" {
		t.Fatalf("own SETTINGS clause: %d %q", resp.StatusCode, body)
	}
	// A comment hiding nothing, and one trying to hide a second statement.
	resp, body = httpGet(t, srv.URL+"/?query="+url.QueryEscape("/* ; */ SELECT ';' AS s -- ; DROP"), nil)
	if resp.StatusCode != 200 || body != ";\n" {
		t.Fatalf("semicolons in a comment and a string: %d %q", resp.StatusCode, body)
	}
}

func TestHTTPInterfaceAuthentication(t *testing.T) {
	srv := httpServer(t, sqlhttp.Options{User: "grafana", Password: "s3cret"})
	if resp, _ := httpGet(t, srv.URL+"/?query=SELECT+1", nil); resp.StatusCode != 401 {
		t.Fatalf("no credentials: %d, want 401", resp.StatusCode)
	}
	if resp, _ := httpGet(t, srv.URL+"/?query=SELECT+1&user=grafana&password=wrong", nil); resp.StatusCode != 403 {
		t.Fatalf("wrong password: %d, want 403", resp.StatusCode)
	}
	h := http.Header{"X-Clickhouse-User": {"grafana"}, "X-Clickhouse-Key": {"s3cret"}}
	if resp, body := httpGet(t, srv.URL+"/?query=SELECT+1", h); resp.StatusCode != 200 || body != "1\n" {
		t.Fatalf("headers: %d %q", resp.StatusCode, body)
	}
	conn := chOpen(t, srv, func(o *clickhouse.Options) { o.Auth = clickhouse.Auth{Username: "grafana", Password: "s3cret"} })
	var one uint8
	if err := conn.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("clickhouse-go with basic auth: %v", err)
	}
}
