package store_test

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

	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/store"
)

// httpServer serves the ClickHouse HTTP interface over the shared engine.
func httpServer(t *testing.T, opts store.HTTPOptions) *httptest.Server {
	t.Helper()
	h, err := store.NewHTTPHandler(context.Background(), engine(t), opts)
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
	srv := httpServer(t, store.HTTPOptions{})
	conn := chOpen(t, srv, nil)
	ctx := context.Background()

	v, err := conn.ServerVersion()
	if err != nil || v.Version.Major != 26 {
		t.Fatalf("server version %v, %v; want the engine's 26.x", v, err)
	}

	// One proxied request's ResponseComplete records, read with typed values.
	id := sc.Expect[string(correlate.ClassProxied)][0]
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
		{"SELECT * FROM file('/etc/passwd', 'LineAsString')", 164},
		{"SELECT * FROM url('http://127.0.0.1:1/', 'LineAsString')", 164},
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
	srv := httpServer(t, store.HTTPOptions{})
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
	srv := httpServer(t, store.HTTPOptions{})
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
	resp, body = httpGet(t, srv.URL+"/?database=system&query="+url.QueryEscape("SELECT currentDatabase() AS db FORMAT CSVWithNames -- trailing comment"), nil)
	if resp.StatusCode != 200 || body != "\"db\"\n\"system\"\n" || resp.Header.Get("X-ClickHouse-Format") != "CSVWithNames" {
		t.Fatalf("FORMAT clause: %d %q %v", resp.StatusCode, body, resp.Header)
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
	srv := httpServer(t, store.HTTPOptions{User: "grafana", Password: "s3cret"})
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

// The server store (clickhouse-go) runs the same schema, writer and queries as the embedded
// one. Here it talks HTTP to the embedded engine through the handler in its test-only write
// mode: the same code as against a ClickHouse server, on the 26.7 engine.
func TestServerStoreAgainstEngine(t *testing.T) {
	loadScenario(t)
	srv := httpServer(t, store.HTTPOptions{UnsafeAllowWrites: true})
	ctx := context.Background()
	s, err := store.OpenServer(ctx, store.ServerOptions{DSN: "http://" + hostPort(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		t.Fatalf("Migrate through clickhouse-go: %v", err)
	}

	// Every canned query answers the same through both stores.
	qs, err := store.Queries()
	if err != nil {
		t.Fatal(err)
	}
	params := scenarioWindow()
	params["audit_id"] = loadScenario(t).Expect["proxied"][0]
	for _, q := range qs {
		a, err := q.Run(ctx, engine(t), params)
		if err != nil {
			t.Fatal(err)
		}
		b, err := q.Run(ctx, s, params)
		if err != nil {
			t.Fatalf("%s through clickhouse-go: %v", q.Name, err)
		}
		// clickhouse-go names DateTime('UTC') columns DateTime; the values are the same.
		for i := range b.Columns {
			b.Columns[i].Type = strings.ReplaceAll(b.Columns[i].Type, "DateTime", "")
			a.Columns[i].Type = strings.ReplaceAll(strings.ReplaceAll(a.Columns[i].Type, "DateTime('UTC')", ""), "DateTime", "")
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the stores disagree\nembedded: %v\n%v\nserver:   %v\n%v", q.Name, a.Columns, a.Rows, b.Columns, b.Rows)
		}
	}

	// The writer through clickhouse-go batches (Native over HTTP).
	codec := newCodec(t)
	tr := newTraffic(t, "server", 13, 5, 30)
	sp := spoolOf(t, codec, tr)
	w := store.NewWriter(&flaky{Store: s, lostAnswers: 1}, codec, store.WriterOptions{FlushRows: 100})
	runUntilStored(t, sp, w, tr)
	assertExactlyOnce(t, tr)
	// Every column round-trips: compare the rows written through clickhouse-go with the same
	// records rendered by the engine from a direct insert... via their raw JSON and key fields.
	got := query(t, engine(t), "SELECT audit_id, stage, user_extra, annotations, stage_timestamp, raw FROM peertrail.events WHERE apiserver = {a:String} ORDER BY stage_timestamp, audit_id, stage", map[string]string{"a": tr.apiservers[0]})
	var n int
	for _, b := range tr.batches {
		if b.APIServer == tr.apiservers[0] {
			n += len(b.Records)
		}
	}
	if len(got.Rows) != n {
		t.Fatalf("%d rows of %s, want %d", len(got.Rows), tr.apiservers[0], n)
	}
	byID := map[string][]string{}
	for _, row := range got.Rows {
		byID[row[0]+row[1]] = row
	}
	for _, b := range tr.batches {
		for _, r := range b.Records {
			if b.APIServer != tr.apiservers[0] {
				continue
			}
			row := byID[r.AuditID+r.Stage]
			if row == nil || row[5] != string(r.Raw) || row[4] != store.FormatTime(r.StageTimestamp) ||
				!strings.Contains(row[2], "authentication.kubernetes.io/credential-id") || !strings.Contains(row[3], "authorization.k8s.io/decision") {
				t.Fatalf("record %s/%s came back as %q", r.AuditID, r.Stage, row)
			}
		}
	}

	// Chains through clickhouse-go, a side missing (zero times) included.
	base := time.Now().UTC().Truncate(time.Hour).Add(-14 * time.Hour)
	var chains []correlate.Chain
	for i := range 10 {
		c := chainAt("server-chain-"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Second), correlate.StateFinal, base.Add(time.Duration(i+2)*time.Second))
		c.Entry.APIServer = "server-chains-a"
		if i%2 == 0 {
			c.Peer, c.Class = nil, correlate.ClassMisleading404
		}
		chains = append(chains, c)
	}
	cw := store.NewWriter(s, codec, store.WriterOptions{})
	for range 2 {
		if err := cw.WriteChains(ctx, chains); err != nil {
			t.Fatal(err)
		}
	}
	res := query(t, engine(t), "SELECT class, has_peer, min(peer_request_received) AS peer_request_received, count() AS n FROM peertrail.chains WHERE entry_apiserver = 'server-chains-a' GROUP BY class, has_peer ORDER BY class", nil)
	if len(res.Rows) != 2 || res.Value(0, "class") != "misleading_404" || res.Value(0, "n") != "5" ||
		res.Value(0, "peer_request_received") != "1970-01-01 00:00:00.000000" || res.Value(1, "n") != "5" {
		t.Fatalf("chains through clickhouse-go: %v", res.Rows)
	}

	// DDL through the server store.
	if err := s.Exec(ctx, "CREATE TABLE IF NOT EXISTS default.server_store_test (a UInt8) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx, "DROP TABLE default.server_store_test"); err != nil {
		t.Fatal(err)
	}
	var se *store.Error
	if _, err := s.Query(ctx, "SELECT * FROM nope", nil); !errors.As(err, &se) || se.Code != 60 {
		t.Fatalf("unknown table through the server store: %v", err)
	}
}
