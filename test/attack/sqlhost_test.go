package attack

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The SQL reader against the host: what the engine's functions, formats, settings and system
// tables could do to the process under readonly=1, each tried as a hostile reader with the SQL
// password would, against a real `peertrail serve`. Each is refused, and nothing changed: the
// files it aimed at, every stored row (after a restart too), the process alive and answering.

// partFile is a file of a stored part of the events table.
func (st *sqlTarget) partFile(t *testing.T) string {
	t.Helper()
	var found string
	filepath.WalkDir(filepath.Join(st.dataDir, "clickhouse"), func(p string, e os.DirEntry, err error) error {
		if err == nil && found == "" && !e.IsDir() && (e.Name() == "data.bin" || strings.HasSuffix(e.Name(), ".bin")) && strings.Contains(p, "/all_") {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatal("no part file under the store's directory")
	}
	return found
}

// stop sends SIGTERM and returns how long serve took to exit.
func (st *sqlTarget) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	st.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-st.proc.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not exit within 60s of SIGTERM")
	}
	return time.Since(start)
}

func TestSQLHostIsOutOfReach(t *testing.T) {
	dir := t.TempDir()
	st := startSQLTargetIn(t, dir)
	if !strings.Contains(st.logs.String(), "the engine's threads are confined") {
		t.Errorf("serve did not confine the engine on this kernel:\n%s", tail(st.logs.String(), 30))
	}
	st.loadEvents(t, 21, 400)
	st.waitCount(t, "SELECT count() FROM peertrail.chains FINAL WHERE state = 'final'", 400)
	events := st.count(t, "SELECT count() FROM peertrail.events")
	token, err := os.ReadFile(st.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(token))
	part := st.partFile(t)
	watchPart := filepath.Dir(part)
	before := st.snapshot(t, watchPart, st.cwd) + fileDigest(t, st.tokenFile)

	type attack struct {
		q      string
		params url.Values
	}
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
	attacks := []attack{
		// 1. Any file the process can read: the scalar file(), in every spelling, and the
		// Template format's files quoted in its error.
		{q: "SELECT file(" + q(st.tokenFile) + ")"},
		{q: "SELECT FILE(" + q(st.tokenFile) + ")"},
		{q: "SELECT `file`(" + q(st.tokenFile) + ")"},
		{q: "SELECT file('/proc/self/cmdline')"},
		{q: "SELECT length(file('/proc/self/environ'))"},
		{q: "SELECT base64Encode(file(" + q(st.tokenFile) + "))"},
		{q: "SELECT x FROM (SELECT file(" + q(st.tokenFile) + ") AS x)"},
		{q: "SELECT 1 AS `a\nFunction numbers`, file(" + q(st.tokenFile) + ")"},
		{q: "SELECT 1 FORMAT Template", params: url.Values{"format_template_resultset": {st.tokenFile}}},
		{q: "SELECT 1", params: url.Values{"default_format": {"Template"}, "format_template_row": {st.tokenFile}}},
		{q: "SELECT 1", params: url.Values{"default_format": {"CustomSeparated"}, "format_custom_result_before_delimiter": {st.tokenFile}}},
		// 2. Any file the process can write: a Protobuf schema written over a stored part,
		// and schema files in the working directory.
		{q: "SELECT 'a\nb' AS `x\ny` FORMAT Protobuf", params: url.Values{"output_format_schema": {part}}},
		{q: "SELECT 1", params: url.Values{"default_format": {"Protobuf"}, "output_format_schema": {part}}},
		{q: "SELECT 1", params: url.Values{"default_format": {"Protobuf"}, "format_schema_source": {"query"}}},
		{q: "SELECT 1 FORMAT CapnProto", params: url.Values{"format_schema": {part + ":x"}}},
		// 3. The whole process: reading the stack traces signals every thread.
		{q: "SELECT count(), countIf(length(trace) > 0) FROM system.stack_trace"},
		{q: "SELECT * FROM system.stack_trace"},
		{q: "SELECT 1 WHERE 1 IN system.stack_trace"},
		{q: "SELECT (SELECT count() FROM `system`.`stack_trace`)"},
		{q: "SELECT * FROM {t:Identifier}", params: url.Values{"param_t": {"system.stack_trace"}}},
		{q: "SELECT * FROM merge('system', '^stack')"},
		{q: "SELECT addressToSymbol(toUInt64(1))"},
		{q: "SELECT * FROM system.processes"},
		{q: "SELECT path FROM system.parts"},
		// Settings that would lift what keeps a read small.
		{q: "SELECT 1", params: url.Values{"allow_introspection_functions": {"1"}}},
		{q: "SELECT 1", params: url.Values{"output_format_pretty_max_column_pad_width": {"100000000"}, "default_format": {"Pretty"}}},
		{q: "SELECT 1", params: url.Values{"database": {"system"}}},
	}
	// 4. A read that blocks for good: file() of one of the process's own pipes, twice at once
	// (two slots), for every descriptor the process may hold.
	for fd := 0; fd < 40; fd++ {
		attacks = append(attacks, attack{q: fmt.Sprintf("SELECT length(file('/proc/self/fd/%d'))", fd)})
	}
	var wg sync.WaitGroup
	results := make([]string, len(attacks))
	sem := make(chan struct{}, 2)
	for i, a := range attacks {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			code, exc, body, err := st.query(ctx, a.q, a.params)
			switch {
			case err != nil:
				results[i] = fmt.Sprintf("%s %v: %v", a.q, a.params, err)
			case code == http.StatusOK:
				results[i] = fmt.Sprintf("%s %v answered 200: %.200q", a.q, a.params, body)
			case strings.Contains(body, secret):
				results[i] = fmt.Sprintf("%s %v read the token", a.q, a.params)
			case exc == "":
				results[i] = fmt.Sprintf("%s %v: %d without an exception code", a.q, a.params, code)
			}
		})
	}
	wg.Wait()
	for _, r := range results {
		if r != "" {
			t.Error(r)
		}
	}

	// The process is alive, and answers at once: no slot is held.
	select {
	case <-st.proc.Done():
		t.Fatalf("serve died: %v", st.proc.Wait())
	default:
	}
	start := time.Now()
	if got := st.count(t, "SELECT count() FROM peertrail.events"); got != events {
		t.Errorf("events: %d, want %d", got, events)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a read after the attacks took %s", took)
	}
	if after := st.snapshot(t, watchPart, st.cwd) + fileDigest(t, st.tokenFile); after != before {
		t.Errorf("the attacks changed something:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// SIGTERM stops it in its usual time; restarted on the same data, every row is there.
	if took := st.stop(t); took > 20*time.Second {
		t.Errorf("serve took %s to stop after SIGTERM", took)
	}
	st2 := startSQLTargetIn(t, dir)
	if got := st2.count(t, "SELECT count() FROM peertrail.events"); got != events {
		t.Errorf("after a restart: %d events, want %d", got, events)
	}
	if strings.Contains(st2.logs.String(), "broken") || strings.Contains(st2.logs.String(), "detached") {
		t.Errorf("the restarted store found broken parts:\n%s", tail(st2.logs.String(), 30))
	}
}

// fileDigest is a file's name and contents, for a snapshot.
func fileDigest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %q\n", path, b)
}

// TestSQLResultsAreBoundedAsSent: a result the engine's block limit lets through, multiplied by
// its format (a long column name in every JSON row, Pretty's padding), is refused at the
// SQL interface's result limit, two at once do not take the process past its memory, and the
// next read is answered.
func TestSQLResultsAreBoundedAsSent(t *testing.T) {
	st := startSQLTarget(t, "--store-max-memory", "2Gi")
	long := strings.Repeat("x", 2000)
	bombs := []string{
		"SELECT 1 AS " + long + " FROM (SELECT arrayJoin(range(3000000))) FORMAT JSON",
		"SELECT toString(a) AS " + long + " FROM (SELECT arrayJoin(range(3000000)) AS a) FORMAT JSONEachRow",
	}
	var wg sync.WaitGroup
	for _, b := range bombs {
		wg.Go(func() {
			code, exc, body, err := st.query(context.Background(), b, nil)
			if err != nil || code == http.StatusOK || (exc != "396" && exc != "241") {
				t.Errorf("%.60s: %d %s %v %.200s", b, code, exc, err, body)
			}
			if len(body) > 1<<20 {
				t.Errorf("%.60s: the refusal is %d bytes", b, len(body))
			}
		})
	}
	wg.Wait()
	rss := peakRSS(t, st.cmd.Process.Pid)
	t.Logf("peak RSS: %d MiB", rss>>20)
	// The engine's cap (2 GiB) and two results held to their limit (256 MiB each, once
	// grown in memory), with the rest of the process.
	if rss > 3<<30 {
		t.Errorf("peak RSS %d MiB with the engine capped at 2 GiB", rss>>20)
	}
	if body := st.mustQuery(t, "SELECT 'next'"); body != "next\n" {
		t.Errorf("the next read: %q", body)
	}
}
