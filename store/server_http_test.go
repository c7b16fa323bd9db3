package store_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

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

// The server store (clickhouse-go) runs the same schema, writer and queries as the embedded
// one. Here it talks HTTP to the embedded engine through the handler in its test-only write
// mode: the same code as against a ClickHouse server, on the 26.7 engine.
func TestServerStoreAgainstEngine(t *testing.T) {
	loadScenario(t)
	srv := httpServer(t, sqlhttp.Options{UnsafeAllowWrites: true})
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
	var chains []chain.Chain
	for i := range 10 {
		c := chainAt("server-chain-"+strconv.Itoa(i), base.Add(time.Duration(i)*time.Second), chain.StateFinal, base.Add(time.Duration(i+2)*time.Second))
		c.Entry.APIServer = "server-chains-a"
		if i%2 == 0 {
			c.Peer, c.Class = nil, chain.ClassMisleading404
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
