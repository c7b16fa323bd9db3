package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
	"github.com/peertrail/peertrail/store/sqlhttp"
	"github.com/peertrail/peertrail/test/storetest"
)

// runCLI runs the root command with args and returns its output.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

// sql, report and schema against the ClickHouse HTTP interface of an embedded store holding a
// synthetic MVP scenario (as `peertrail serve` will answer them).
func TestSQLReportSchemaCommands(t *testing.T) {
	ctx := context.Background()
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("the embedded engine is required (run scripts/fetch-chdb.sh; chDB %s): %v", chdb.Version, err)
	}
	defer s.Close()
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	sc, err := storetest.Build(storetest.Options{Begin: time.Now().UTC().Add(-20 * time.Minute), Duration: 10 * time.Minute, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := storetest.Write(ctx, s, sc.Records, sc.Chains); err != nil {
		t.Fatal(err)
	}
	h, err := sqlhttp.NewHandler(ctx, s, sqlhttp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h)
	defer srv.Close()

	q := "SELECT class, count() AS n FROM chains FINAL WHERE class IN ('misleading_404', 'broken') GROUP BY class ORDER BY class"
	for format, want := range map[string]string{
		"table": "class            n\n--------------  --\nbroken           5\nmisleading_404  16\n",
		"tsv":   "class\tn\nbroken\t5\nmisleading_404\t16\n",
		"csv":   "class,n\nbroken,5\nmisleading_404,16\n",
		"json":  "{\"class\":\"broken\",\"n\":5}\n{\"class\":\"misleading_404\",\"n\":16}\n",
	} {
		out, err := runCLI(t, "sql", "--sql-server", srv.URL, "--format", format, q)
		if err != nil {
			t.Fatalf("sql --format %s: %v", format, err)
		}
		if out != want {
			t.Errorf("sql --format %s:\n%s\nwant\n%s", format, out, want)
		}
	}

	// A parameter, and JSON values keeping their types.
	id := sc.Expect["proxied"][0]
	out, err := runCLI(t, "sql", "--sql-server", srv.URL, "--format", "json", "--param", "id="+id,
		"SELECT apiserver, stage, code, source_ips FROM events WHERE audit_id = {id:String} ORDER BY apiserver, stage")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("records of %s: %q", id, out)
	}
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[3]), &last); err != nil {
		t.Fatal(err)
	}
	if last["apiserver"] != "kas-c" || last["stage"] != "ResponseComplete" || last["source_ips"] != "['192.168.7.20','10.0.0.11']" {
		t.Errorf("peer's record: %v", last)
	}
	if _, ok := last["code"].(float64); !ok {
		t.Errorf("code should be a JSON number: %#v", last["code"])
	}

	// Errors come back as errors.
	if _, err := runCLI(t, "sql", "--sql-server", srv.URL, "DROP TABLE peertrail.events"); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("DROP through sql: %v", err)
	}
	if _, err := runCLI(t, "sql", "--sql-server", "http://127.0.0.1:1", "SELECT 1"); err == nil || !strings.Contains(err.Error(), "peertrail serve") {
		t.Errorf("no server: %v", err)
	}

	// The report: every section, with the scenario's numbers.
	out, err = runCLI(t, "report", "--server", srv.URL, "--since", "1h") // the flag's old name still works
	if err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	for _, want := range []string{
		"== Chains by class per apiserver pair (chains_by_class)",
		"== Misleading 404s by resource (misleading_404s)",
		"== Broken chains (broken_chains)",
		"== Identity mismatches by user (identity_mismatches)",
		"== Slowest forwardings (slowest_forwardings)",
		"== Failed forwardings by entry apiserver (proxy_failures)",
		"== Apiserver versions (apiserver_versions)",
		"scheduling.k8s.io  v1alpha2  podgroups  kas-b               12",
		"kas-c      v1.36.3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dashboard_") {
		t.Error("the report runs dashboard queries")
	}
	out, err = runCLI(t, "report", "--sql-server", srv.URL, "--query", "audit_id_chain", "--param", "audit_id="+id, "--format", "tsv")
	if err != nil || !strings.Contains(out, "\tproxied\t") {
		t.Fatalf("report --query audit_id_chain: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "report", "--sql-server", srv.URL, "--query", "audit_id_chain"); err == nil || !strings.Contains(err.Error(), "audit_id") {
		t.Errorf("a named query without its parameter: %v", err)
	}

	out, err = runCLI(t, "schema", "--cluster", "audit")
	if err != nil || !strings.Contains(out, "ENGINE = Distributed('audit', peertrail, events_local, cityHash64(audit_id))") {
		t.Fatalf("schema --cluster: %v\n%.400s", err, out)
	}
	out, err = runCLI(t, "schema", "--retention-days", "7")
	if err != nil || !strings.Contains(out, "TTL toDateTime(received_at) + toIntervalDay(7)") || strings.Contains(out, " \n") {
		t.Fatalf("schema: %v", err)
	}
}

// TestProbeSQLKeepsTheURLsParameters: --sql-server may carry DSN parameters
// (https://host:8443?secure=true); the probe still asks the interface's /ping.
func TestProbeSQLKeepsTheURLsParameters(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" && r.URL.RawQuery == "" {
			io.WriteString(w, "Ok.\n")
			return
		}
		http.Error(w, "a query", http.StatusUnauthorized)
	}))
	defer srv.Close()
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "?dial_timeout=5s", srv.URL + "/?dial_timeout=5s"} {
		if err := probeSQL(context.Background(), base, store.ServerOptions{}); err != nil {
			t.Errorf("%s: %v", base, err)
		}
	}
}

// The table's last column, where the report puts a broken chain's explanation, is printed
// whole, however long: a person needs all of it to act. Other columns are cut to keep the
// table readable.
func TestRenderTablePrintsTheLastColumnWhole(t *testing.T) {
	explanation := "the peer kas-b never reported this forwarded request: " + strings.Repeat("its audit buffer was lost when it was killed; ", 4) + "look at kas-b's restart"
	uri := "/apis/" + strings.Repeat("x", 100)
	r := &store.Result{
		Columns: []store.Column{{Name: "what", Type: "String"}, {Name: "code", Type: "UInt16"}, {Name: "explanation", Type: "String"}},
		Rows:    [][]string{{uri, "404", explanation}},
	}
	var b bytes.Buffer
	if err := render(&b, r, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), explanation+"\n") {
		t.Errorf("the explanation is not whole:\n%s", b.String())
	}
	if strings.Contains(b.String(), uri) || !strings.Contains(b.String(), "…") {
		t.Errorf("a long middle cell is not cut:\n%s", b.String())
	}
}

// Values a client chose (a name with ESC, a user agent with C1 CSI and a bidi override, bytes
// that are not UTF-8) reach the terminal escaped in table, tsv and csv, and exact in json.
func TestRenderEscapesForTheTerminal(t *testing.T) {
	hostile := []string{
		"cm\x1b]0;owned\x07\x1b[2J",
		"kubectl/v1.36 \u009b31m\u202etxt.exe\u2066",
		`back\slash` + "\ttab\nnewline\r\x7f",
		"bad\xffutf8",
	}
	r := &store.Result{Columns: []store.Column{{Name: "name\x1b[1m", Type: "String"}, {Name: "n", Type: "UInt8"}}}
	for _, v := range hostile {
		r.Rows = append(r.Rows, []string{v, "1"})
	}
	for _, format := range []string{"table", "tsv", "csv"} {
		var b bytes.Buffer
		if err := render(&b, r, format); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if bad := unsafeForTerminal(out); bad != "" {
			t.Errorf("-o %s prints %s:\n%q", format, bad, out)
		}
		if !strings.Contains(out, `\x1b]0;owned\x07`) || !strings.Contains(out, `\u202e`) {
			t.Errorf("-o %s does not show the escapes:\n%s", format, out)
		}
		if format == "tsv" {
			// Each field reads back as it was stored (TabSeparated escaping, then the terminal's).
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(hostile)+1 {
				t.Fatalf("tsv has %d lines for %d rows:\n%s", len(lines), len(hostile), out)
			}
			for i, line := range lines[1:] {
				fields := strings.Split(line, "\t")
				got, err := strconv.Unquote(`"` + fields[0] + `"`)
				if len(fields) != 2 || err != nil || got != hostile[i] {
					t.Errorf("tsv row %d: %q reads back as %q (%v), want %q", i, line, got, err, hostile[i])
				}
			}
		}
	}
	var b bytes.Buffer
	if err := render(&b, r, "json"); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&b)
	for i, v := range hostile {
		var row map[string]any
		if err := dec.Decode(&row); err != nil {
			t.Fatal(err)
		}
		if want := strings.ToValidUTF8(v, "\ufffd"); row["name\x1b[1m"] != want {
			t.Errorf("json row %d: %q, want %q exactly", i, row["name\x1b[1m"], want)
		}
	}
}

// unsafeForTerminal names the first thing in out that a terminal could act on, other than the
// tab and newline that separate fields and rows.
func unsafeForTerminal(out string) string {
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\ufffd"):
			return fmt.Sprintf("a byte that is not UTF-8 at %d", i)
		case r == '\t' || r == '\n':
		case r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x061c || r == 0x200e || r == 0x200f ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069):
			return fmt.Sprintf("U+%04X at %d", r, i)
		}
	}
	return ""
}
