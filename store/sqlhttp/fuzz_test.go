package sqlhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// FuzzSQLInterfaceOnlyReads feeds the SQL interface arbitrary query text, one arbitrary setting
// and an arbitrary output format, and checks against the engine itself that nothing but reads
// ever ran: the tables, their rows, the databases, mutations, functions, the files of a watched
// directory and their contents, and the working directory are what they were; no secret file
// was read; and the next request gets exactly its own answer.
func FuzzSQLInterfaceOnlyReads(f *testing.F) {
	watch := f.TempDir()
	secret := filepath.Join(watch, "secret")
	if err := os.WriteFile(secret, []byte("FUZZ-SECRET\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"SELECT 1",
		"SELECT count() FROM events",
		"SELECT $$ ' $$; ALTER TABLE peertrail.events DELETE WHERE 1 SETTINGS mutations_sync=1; SELECT 1 -- '",
		"SELECT 1 /* /* */ ; DROP TABLE peertrail.chains; /* */ */",
		"SELECT * FROM (SELECT * FROM file('" + secret + "', 'LineAsString') SETTINGS readonly = 0)",
		"WITH s AS (SELECT * FROM file('" + secret + "', 'LineAsString') SETTINGS readonly = 0) SELECT * FROM s",
		"INSERT INTO FUNCTION file('" + filepath.Join(watch, "w") + "', 'LineAsString') SELECT 'x'",
		"SELECT 1 INTO OUTFILE '" + filepath.Join(watch, "o") + "'",
		"SELECT 1; DROP TABLE peertrail.events",
		"CREATE TABLE peertrail.x (a UInt8) ENGINE = Memory",
		"ALTER TABLE peertrail.chains DELETE WHERE 1",
		"KILL QUERY WHERE 1 ASYNC",
		"SET readonly = 0",
		"SELECT number FROM numbers(300000) WHERE throwIf(number = 250000) = 0",
		"SELECT file('" + secret + "')",
		"SELECT count(), countIf(length(trace) > 0) FROM system.stack_trace",
		"SELECT 1 AS `a\nFunction numbers`, file('" + secret + "')",
		"SELECT 1 IN system.processes",
		"SELECT * FROM events LIMIT 3 FORMAT JSON",
	} {
		f.Add(s, "", "", "")
	}
	f.Add("SELECT 1", "readonly", "0", "")
	f.Add("SELECT 1", "allow_ddl", "1", "")
	f.Add("SELECT 1", "max_threads", "1", "")
	f.Add("SELECT 1", "output_format_json_quote_64bit_integers", "1", "JSON")
	f.Add("SELECT 'a\nb' AS x", "output_format_schema", secret, "Protobuf")
	f.Add("SELECT 1", "format_template_resultset", secret, "Template")
	f.Add("SELECT 1", "format_schema_source", "query", "Protobuf")
	f.Add("SELECT 1", "output_format_pretty_max_column_pad_width", "100000000", "PrettyCompact")
	f.Add("SELECT 1", "allow_introspection_functions", "1", "TSV")

	s := engine(f)
	ctx := context.Background()
	// The engine writes some formats' schema files into the working directory.
	cwd, err := os.Getwd()
	if err != nil {
		f.Fatal(err)
	}
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		f.Fatal(err)
	}
	h, err := sqlhttp.NewHandler(ctx, s, sqlhttp.Options{Limits: sqlhttp.ReadLimits{MaxMemory: 256 << 20}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { h.Close() })
	// Every table's rows: a write to any of them (events, chains, a rollup) shows. Merges fold
	// rows of every table of the schema, so they are stopped while the fuzzer runs (they are
	// not the engine's defence against writes, readonly is).
	for _, stmt := range []string{"SYSTEM STOP MERGES", "SYSTEM STOP TTL MERGES"} {
		if err := s.Exec(ctx, stmt); err != nil {
			f.Fatal(err)
		}
	}
	f.Cleanup(func() {
		s.Exec(context.Background(), "SYSTEM START MERGES")
		s.Exec(context.Background(), "SYSTEM START TTL MERGES")
	})
	const rowCounts = "SELECT arrayStringConcat(groupArray(database || '.' || name || '=' || toString(total_rows)), ',') FROM (SELECT * FROM system.tables WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') AND total_rows IS NOT NULL ORDER BY database, name)"
	snapshot := func(t testing.TB) string {
		var b strings.Builder
		for _, q := range []string{
			"SELECT arrayStringConcat(groupArray(database || '.' || name || ':' || engine), ',') FROM (SELECT * FROM system.tables WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') ORDER BY database, name)",
			"SELECT arrayStringConcat(groupArray(name), ',') FROM (SELECT name FROM system.databases ORDER BY name)",
			rowCounts,
			"SELECT count() FROM system.mutations",
			"SELECT count() FROM system.functions WHERE origin != 'System'",
		} {
			b.WriteString(scalar(t, s, q, nil))
			b.WriteByte('\n')
		}
		for _, dir := range []string{watch, cwd} {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				b.WriteString(e.Name() + "\n")
			}
		}
		content, _ := os.ReadFile(secret)
		b.Write(content)
		return b.String()
	}
	before := snapshot(f)

	f.Fuzz(func(t *testing.T, text, setting, value, format string) {
		params := url.Values{"query": {text}}
		if setting != "" {
			params.Set(setting, value)
		}
		if format != "" {
			params.Set("default_format", format)
		}
		req, _ := http.NewRequest(http.MethodGet, "/?"+params.Encode(), nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if strings.Contains(w.Body.String(), "FUZZ-SECRET") {
			t.Fatalf("%q read the secret file", text)
		}
		if after := snapshot(t); after != before {
			t.Fatalf("%q (%s=%s, %s) changed the store or files:\nbefore:\n%s\nafter:\n%s", text, setting, value, format, before, after)
		}
		// The next request gets its own answer, whatever the last one left behind.
		req, _ = http.NewRequest(http.MethodGet, "/?query="+url.QueryEscape("SELECT 'own-answer'"), nil)
		w = httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 || w.Body.String() != "own-answer\n" {
			t.Fatalf("after %q the next request got %d %.200q", text, w.Code, w.Body.String())
		}
	})
}
