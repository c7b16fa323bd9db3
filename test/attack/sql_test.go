package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peertrail/peertrail/internal/childproc"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store/chdb"
)

// The SQL interface's attack suite: a real `peertrail serve` on its embedded engine, attacked
// over HTTP the way the reproductions did. Each attack asserts the refusal AND that
// nothing changed: tables, row counts, databases, files, and what the next client sees.

var sqlBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "peertrail-attack-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "peertrail")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/peertrail/peertrail/cmd/peertrail").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// sqlTarget is a running peertrail serve.
type sqlTarget struct {
	cmd       *exec.Cmd
	proc      *childproc.Process
	url       string // the webhook
	sqlURL    string // the SQL interface, without credentials
	user      string
	pass      string
	dataDir   string
	tokenFile string // the readers' token file
	cwd       string // serve's working directory
	logs      *syncBuffer
	// client is this serve's own: a connection the shared client kept to an earlier test's
	// serve, killed since, was taken up again when this one listened on the same port, and the
	// request on it was reset.
	client *http.Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var (
	sqlServingRE = regexp.MustCompile(`msg="peertrail serving" url=(\S+)`)
	sqlSQLRE     = regexp.MustCompile(`msg="SQL: [^"]*" url=(\S+)`)
)

func startSQLTarget(t *testing.T, extra ...string) *sqlTarget {
	t.Helper()
	return startSQLTargetIn(t, t.TempDir(), extra...)
}

// startSQLTargetIn starts serve with its data, its reader token and its working directory
// under dir: a second one in the same dir takes over the first one's store.
func startSQLTargetIn(t *testing.T, dir string, extra ...string) *sqlTarget {
	t.Helper()
	bin, err := sqlBinary()
	if err != nil {
		t.Fatal(err)
	}
	st := &sqlTarget{dataDir: filepath.Join(dir, "data"), logs: &syncBuffer{}, user: "default",
		tokenFile: filepath.Join(dir, "reader-token"), cwd: filepath.Join(dir, "cwd"),
		client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	t.Cleanup(st.client.CloseIdleConnections)
	if err := os.WriteFile(st.tokenFile, []byte("attack-suite-reader-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(st.cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--sql-listen", "127.0.0.1:0",
		"--accept-unknown-apiservers", "--data-dir", st.dataDir, "--reader-token-file", st.tokenFile,
		"--chain-window", "1s", "--late-window", "2s"}, extra...)
	st.cmd = exec.Command(bin, args...)
	st.cmd.Dir = st.cwd
	// Killed with the test binary (a timeout, an interrupt), which skips t.Cleanup: an orphaned
	// serve kept running for hours, and it held whatever it inherited (a flock(1) lock
	// that serialises test runs, with it). Not by a thread of the test's ending: engineList's
	// engine ends one when it closes, which killed serve mid-test.
	st.cmd.Stdout = st.logs
	stderr, stderrW := io.Pipe()
	st.cmd.Stderr = stderrW
	proc, err := childproc.Start(st.cmd)
	if err != nil {
		t.Fatal(err)
	}
	st.proc = proc
	go func() { proc.Wait(); stderrW.Close() }()
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			st.logs.Write(append(sc.Bytes(), '\n'))
			if st.url != "" && st.sqlURL != "" {
				continue
			}
			line := sc.Text()
			if m := sqlServingRE.FindStringSubmatch(line); m != nil {
				st.url = m[1]
			}
			if m := sqlSQLRE.FindStringSubmatch(line); m != nil {
				st.sqlURL = m[1]
			}
			if st.url != "" && st.sqlURL != "" {
				once.Do(func() { close(found) })
			}
		}
	}()
	t.Cleanup(func() {
		st.proc.Kill()
		if t.Failed() {
			t.Logf("peertrail's log:\n%s", tail(st.logs.String(), 60))
		}
	})
	select {
	case <-found:
	case <-time.After(90 * time.Second):
		t.Fatalf("peertrail serve did not start:\n%s", st.logs.String())
	}
	pw, err := os.ReadFile(filepath.Join(st.dataDir, server.SQLPasswordFileName))
	if err != nil {
		t.Fatalf("serve made up no SQL password: %v", err)
	}
	st.pass = strings.TrimSpace(string(pw))
	return st
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// query posts q as the reader and returns status, exception code and body.
func (st *sqlTarget) query(ctx context.Context, q string, params url.Values) (int, string, string, error) {
	u := st.sqlURL + "/?" + params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(q))
	if err != nil {
		return 0, "", "", err
	}
	req.SetBasicAuth(st.user, st.pass)
	resp, err := st.client.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-ClickHouse-Exception-Code"), string(b), err
}

func (st *sqlTarget) mustQuery(t *testing.T, q string) string {
	t.Helper()
	code, _, body, err := st.query(context.Background(), q, nil)
	if err != nil || code != 200 {
		t.Fatalf("%s: %d %v %s", q, code, err, body)
	}
	return body
}

// post sends one EventList as apiserver name and wants it acknowledged.
func (st *sqlTarget) post(t *testing.T, name string, body []byte) {
	t.Helper()
	resp, err := st.client.Post(st.url+"/audit/"+name, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /audit/%s: %d %s", name, resp.StatusCode, b)
	}
}

// loadEvents posts n simulated events and waits until the store holds them all.
func (st *sqlTarget) loadEvents(t *testing.T, seed uint64, n int) {
	t.Helper()
	gen := simulate.NewEvents(seed, nil)
	body, _, err := gen.EventList(n)
	if err != nil {
		t.Fatal(err)
	}
	before := st.count(t, "SELECT count() FROM peertrail.events")
	st.post(t, "kas-a", body)
	st.waitCount(t, "SELECT count() FROM peertrail.events", before+n)
}

func (st *sqlTarget) count(t *testing.T, q string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(st.mustQuery(t, q)))
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (st *sqlTarget) waitCount(t *testing.T, q string, want int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := st.count(t, q)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", q, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshot is what an attack must not change: every table of the engine with its rows, the
// databases, mutations, and the files under the watched directories with their contents.
func (st *sqlTarget) snapshot(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(st.mustQuery(t, "SELECT database, name, engine FROM system.tables WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema') ORDER BY database, name"))
	b.WriteString(st.mustQuery(t, "SELECT name FROM system.databases ORDER BY name"))
	// Row counts of the tables whose rows merges do not fold together.
	for _, tbl := range []string{"events", "chains", "audit_ids", "schema_migrations"} {
		b.WriteString(tbl + " " + st.mustQuery(t, "SELECT count() FROM peertrail."+tbl+" FINAL"))
	}
	b.WriteString(st.mustQuery(t, "SELECT count() FROM system.functions WHERE origin != 'System'"))
	// Mutations leave their files in the tables' directories.
	filepath.WalkDir(st.dataDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(e.Name(), "mutation_") {
			fmt.Fprintf(&b, "%s\n", p)
		}
		return nil
	})
	for _, d := range dirs {
		filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil {
				fmt.Fprintf(&b, "%s\n", p)
				if !e.IsDir() {
					c, _ := os.ReadFile(p)
					fmt.Fprintf(&b, "  %x\n", sha256.Sum256(c))
				}
			}
			return nil
		})
	}
	return b.String()
}

// TestSQLAttacksChangeNothing throws the statement-level attacks at the SQL interface: every
// one is refused, no secret file's content comes back, no URL is fetched, no file is written,
// and the store is exactly as before.
func TestSQLAttacksChangeNothing(t *testing.T) {
	st := startSQLTarget(t)
	st.loadEvents(t, 7, 300)
	st.waitCount(t, "SELECT count() FROM peertrail.chains FINAL WHERE state = 'final'", 300)
	st.waitCount(t, "SELECT count() FROM peertrail.audit_ids FINAL", 300) // its view commits just after the events

	watch := t.TempDir()
	secret := filepath.Join(watch, "tls.key")
	const secretText = "PEERTRAIL-ATTACK-SECRET-5f1e"
	if err := os.WriteFile(secret, []byte(secretText+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outfile := filepath.Join(watch, "written")
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(w, secretText+"\n")
	}))
	defer ln.Close()
	internal := "http://" + ln.Addr().String() + "/"
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

	before := st.snapshot(t, watch)
	attacks := []string{
		// Hidden statements: a splitter that disagrees with the engine's parser.
		"SELECT $$ ' $$; ALTER TABLE peertrail.events DELETE WHERE 1 SETTINGS mutations_sync=1; SELECT 1 -- '",
		"SELECT $$ ' $$; DROP TABLE peertrail.events; SELECT 1 -- '",
		"SELECT $tag$ ; $tag$; TRUNCATE TABLE peertrail.events",
		"SELECT 1 /* /* */ */ ; CREATE TABLE peertrail.x (a UInt8) ENGINE = Memory",
		"SELECT '\\'' ; DROP DATABASE peertrail",
		"SELECT 1 AS `x;` ; DROP TABLE peertrail.events",
		"SELECT \"a;b\" FROM (SELECT 1 AS \"a;b\"); ALTER TABLE peertrail.events DELETE WHERE 1",
		"SELECT 1; INSERT INTO FUNCTION file(" + q(outfile) + ", 'LineAsString') SELECT 'x'",
		"SELECT 1 -- \n; DROP TABLE peertrail.events",
		"SELECT 1 # \n; DROP TABLE peertrail.events",
		// Writes, DDL, control.
		"ALTER TABLE peertrail.events DELETE WHERE 1 SETTINGS mutations_sync = 1",
		"ALTER TABLE peertrail.events UPDATE verb = 'x' WHERE 1",
		"DELETE FROM peertrail.events WHERE 1",
		"INSERT INTO peertrail.events (audit_id) VALUES ('forged')",
		"INSERT INTO peertrail.events (audit_id) SELECT 'forged'",
		"INSERT INTO FUNCTION file(" + q(outfile) + ", 'LineAsString') SELECT 'x'",
		"CREATE TABLE peertrail.x (a UInt8) ENGINE = Memory",
		"CREATE TEMPORARY TABLE x (a UInt8)",
		"CREATE DATABASE evil",
		"CREATE FUNCTION evil AS (x) -> x",
		"CREATE VIEW peertrail.v AS SELECT 1",
		"DROP TABLE peertrail.events",
		"DROP DATABASE peertrail",
		"TRUNCATE TABLE peertrail.events",
		"RENAME TABLE peertrail.events TO peertrail.gone",
		"DETACH TABLE peertrail.events",
		"OPTIMIZE TABLE peertrail.events FINAL",
		"SYSTEM SHUTDOWN",
		"SYSTEM DROP MARK CACHE",
		"KILL QUERY WHERE 1 ASYNC",
		"KILL MUTATION WHERE 1",
		"SET readonly = 0",
		"USE system",
		"BACKUP DATABASE peertrail TO File(" + q(filepath.Join(watch, "backup")) + ")",
		"SELECT 1 INTO OUTFILE " + q(outfile),
		"SELECT * FROM peertrail.events INTO OUTFILE " + q(outfile) + " FORMAT CSV",
		"EXPLAIN SELECT 1 INTO OUTFILE " + q(outfile),
		// Table functions that reach files, URLs, other servers or processes, at the top
		// and behind subquery, CTE, scalar and IN tricks with a nested SETTINGS clause.
		"SELECT * FROM file(" + q(secret) + ", 'LineAsString')",
		"SELECT * FROM (SELECT * FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 0)",
		"SELECT * FROM (SELECT * FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 2)",
		"WITH s AS (SELECT * FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 0) SELECT * FROM s",
		"SELECT (SELECT any(line) FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 0)",
		"SELECT 1 WHERE 'x' IN (SELECT line FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 0)",
		"SELECT * FROM (SELECT * FROM file(" + q(secret) + ", 'LineAsString') SETTINGS enable_analyzer = 1, readonly = 0)",
		"SELECT * FROM url(" + q(internal) + ", 'LineAsString')",
		"SELECT * FROM (SELECT * FROM url(" + q(internal) + ", 'LineAsString') SETTINGS readonly = 0)",
		"SELECT * FROM urlCluster('default', " + q(internal) + ", 'LineAsString')",
		"SELECT * FROM s3(" + q(internal+"b/k") + ", 'LineAsString')",
		"SELECT * FROM remote('127.0.0.1:9000', system.one)",
		"SELECT * FROM remoteSecure('127.0.0.1:9440', system.one)",
		"SELECT * FROM cluster('default', system.one)",
		"SELECT * FROM executable('cat " + secret + "', 'LineAsString', 'line String')",
		"SELECT * FROM mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
		"SELECT * FROM postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
		"SELECT * FROM sqlite(" + q(secret) + ", 't')",
		"SELECT * FROM hdfs('hdfs://127.0.0.1:9000/x', 'LineAsString')",
		"SELECT * FROM jdbc('jdbc:x', 't')",
		"SELECT * FROM odbc('DSN=x', 't')",
		"SELECT * FROM mongodb('127.0.0.1:27017', 'db', 'c', 'u', 'p', 'x String')",
		"SELECT * FROM redis('127.0.0.1:6379', 'k', 'k String')",
		"SELECT * FROM azureBlobStorage('DefaultEndpointsProtocol=http', 'c', 'b')",
		"SELECT * FROM input('x String')",
		"SELECT * FROM format(LineAsString, (SELECT * FROM file(" + q(secret) + ", 'LineAsString') SETTINGS readonly = 0))",
		"SELECT * FROM merge(currentDatabase(), '') SETTINGS readonly = 0",
		// Settings that would lift a limit, by the statement or the request.
		"SELECT 1 SETTINGS max_memory_usage = 100000000000",
		"SELECT 1 SETTINGS max_execution_time = 100000",
		"SELECT 1 SETTINGS readonly = 0",
		"SELECT 1 SETTINGS allow_ddl = 0",
		"SELECT 1 SETTINGS enable_analyzer = 1",
	}
	// The engine nests comments, so this is one harmless read: it may run, and the snapshot
	// below shows that the DROP inside the comment did nothing.
	if code, _, body, err := st.query(context.Background(), "SELECT 1 /* /* */ ; DROP TABLE peertrail.chains; /* */ */", nil); err != nil || code != 200 || body != "1\n" {
		t.Errorf("a nested comment: %d %v %q", code, err, body)
	}
	for _, a := range attacks {
		code, exc, body, err := st.query(context.Background(), a, nil)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if code == 200 {
			t.Errorf("attack answered 200: %s\n%s", a, body)
		}
		if exc == "" {
			t.Errorf("attack refused without a ClickHouse exception code (%d): %s\n%s", code, a, body)
		}
		if strings.Contains(body, secretText) {
			t.Errorf("attack read the secret: %s", a)
		}
	}
	// Settings in the request that would lift a limit or readonly.
	for _, p := range []url.Values{
		{"readonly": {"0"}}, {"allow_ddl": {"1"}}, {"max_memory_usage": {"100000000000"}},
		{"max_result_bytes": {"0"}}, {"max_rows_to_read": {"0"}}, {"enable_analyzer": {"1"}},
		{"max_threads": {"10000"}}, {"max_execution_time": {"100000"}, "max_memory_usage": {"0"}},
		{"database": {"system; DROP TABLE peertrail.events"}},
	} {
		code, _, body, err := st.query(context.Background(), "SELECT * FROM (SELECT * FROM file("+q(secret)+", 'LineAsString'))", p)
		if err != nil || code == 200 || strings.Contains(body, secretText) {
			t.Errorf("request settings %v: %d %v %s", p, code, err, body)
		}
	}
	// A parameter is a value, never SQL.
	code, _, body, _ := st.query(context.Background(), "SELECT {x:String}", url.Values{"param_x": {"'; DROP TABLE peertrail.events; --"}})
	if code != 200 || body != "\\'; DROP TABLE peertrail.events; --\n" { // TabSeparated escapes the quote
		t.Errorf("parameter: %d %q", code, body)
	}

	if after := st.snapshot(t, watch); after != before {
		t.Errorf("the attacks changed something:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := os.Stat(outfile); err == nil {
		t.Errorf("a file was written at %s", outfile)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the engine fetched an internal URL %d times", n)
	}
	// Reads still work.
	if got := st.count(t, "SELECT count() FROM events"); got != 300 {
		t.Errorf("events: %d, want 300", got)
	}
}

// TestSQLNoRequestSeesAnotherRequestsOutput: a query that fails part-way through leaves its
// output nowhere; the next request, anyone's, gets its own answer and nothing else.
func TestSQLNoRequestSeesAnotherRequestsOutput(t *testing.T) {
	st := startSQLTarget(t, "--sql-max-concurrent-queries", "1")
	ctx := context.Background()
	for i := range 4 {
		code, _, body, err := st.query(ctx, "SELECT number FROM (SELECT arrayJoin(range(3000000)) AS number) WHERE throwIf(number = 2500000) = 0", nil)
		if err != nil || code == 200 {
			t.Fatalf("the failing query: %d %v %.200s", code, err, body)
		}
		want := fmt.Sprintf("answer-for-B-%d\n", i)
		code, _, body, err = st.query(ctx, "SELECT 'answer-for-B-"+strconv.Itoa(i)+"'", nil)
		if err != nil || code != 200 || body != want {
			t.Fatalf("the next request got %d bytes (%d), want %q: %.200q", len(body), code, want, body)
		}
		if body := st.mustQuery(t, "SELECT 1"); body != "1\n" {
			t.Fatalf("SELECT 1 got %.200q", body)
		}
	}
}

// TestSQLBombsAreBoundedAndTheRestGoesOn: a memory bomb, a time bomb, a huge result and a
// query whose client went away are each stopped by the engine's limits, the process stays
// small, and meanwhile the webhook acknowledges, the store writer stores and /metrics
// answers.
func TestSQLBombsAreBoundedAndTheRestGoesOn(t *testing.T) {
	st := startSQLTarget(t, "--sql-max-query-memory", "256Mi", "--sql-max-execution-time", "4s", "--store-max-memory", "2Gi")
	ctx := context.Background()
	// The engine as a whole is capped where --store-max-memory says (the engine's own setting
	// is out of a reader's reach; serve says what it gave).
	if !strings.Contains(st.logs.String(), "engine="+fmt.Sprint(2<<30)) {
		t.Errorf("serve's memory budget does not give the engine --store-max-memory 2Gi:\n%s", tail(st.logs.String(), 20))
	}
	st.loadEvents(t, 11, 100)

	code, exc, body, err := st.query(ctx, "SELECT length(groupArray(number)) FROM (SELECT arrayJoin(range(1000000)) AS a) ARRAY JOIN range(1000) AS number", nil)
	if err != nil || code == 200 || exc != "241" {
		t.Errorf("memory bomb: %d %s %v %.300s", code, exc, err, body)
	}
	// 1 GB of result: the result limit (396) or the memory limit (241) stops it first.
	code, exc, body, err = st.query(ctx, "SELECT repeat('x', 1000000) FROM (SELECT arrayJoin(range(1000)))", nil)
	if err != nil || code == 200 || (exc != "396" && exc != "241") {
		t.Errorf("huge result: %d %s %v %.300s", code, exc, err, body)
	}
	if rss := peakRSS(t, st.cmd.Process.Pid); rss > 1500<<20 {
		t.Errorf("peak RSS after the bombs: %d MiB", rss>>20)
	}

	// The time bomb runs while the rest of the service is used.
	bomb := make(chan string, 1)
	bombStart := time.Now()
	var bombTook time.Duration
	go func() {
		code, exc, body, err := st.query(ctx, slowQuery, nil)
		bombTook = time.Since(bombStart)
		bomb <- fmt.Sprintf("%d %s %v %.200s", code, exc, err, body)
	}()
	time.Sleep(500 * time.Millisecond)
	gen := simulate.NewEvents(12, nil)
	batch, _, err := gen.EventList(50)
	if err != nil {
		t.Fatal(err)
	}
	st.post(t, "kas-b", batch)
	hc := &http.Client{Timeout: 3 * time.Second}
	if resp, err := hc.Get(st.url + "/healthz"); err != nil {
		t.Errorf("/healthz during the time bomb: %v", err)
	} else {
		resp.Body.Close()
	}
	// The reads the issue saw time out behind a long query: /metrics, the chain API, the gate.
	for _, path := range []string{"/metrics", "/api/v1/chains?limit=5", "/api/v1/gate"} {
		req, _ := http.NewRequest(http.MethodGet, st.url+path, nil)
		req.Header.Set("Authorization", "Bearer attack-suite-reader-token")
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s during the time bomb: %v", path, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s during the time bomb: %d", path, resp.StatusCode)
		}
	}
	if len(bomb) > 0 {
		t.Error("the time bomb ended before the webhook and the reads were tried: they proved nothing")
	}
	st.waitCount(t, "SELECT count() FROM peertrail.events", 150)
	if got := <-bomb; !strings.HasPrefix(got, "500 159") {
		t.Errorf("time bomb: %s", got)
	}
	// It ends at the 4 s limit, give or take the engine's check between blocks and the kill a
	// second after it (the issue saw a 30 s limit overrun by 75 s).
	t.Logf("the time bomb answered after %s", bombTook.Round(time.Millisecond))
	if bombTook > 8*time.Second {
		t.Errorf("the time bomb ran %s with a 4 s limit", bombTook)
	}

}

// TestSQLAbandonedQueryIsKilled: a client that goes away gets its query killed, long before
// the time limit would stop it: with one slot, the next query runs at once.
func TestSQLAbandonedQueryIsKilled(t *testing.T) {
	st := startSQLTarget(t, "--sql-max-concurrent-queries", "1", "--sql-max-execution-time", "8s")
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	_, _, _, err := st.query(cctx, slowQuery, nil)
	cancel()
	if err == nil {
		t.Fatal("the abandoned query answered")
	}
	start := time.Now()
	if body := st.mustQuery(t, "SELECT 'next'"); body != "next\n" {
		t.Fatalf("the next query: %q", body)
	}
	// The time limit is 8s; the kill acts within about a second of the client leaving.
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the next query waited %s for the slot: the abandoned one was not killed", took)
	}
}

// TestSQLConcurrencyIsBounded: with one slot, a second query waits and a flood is refused
// with 503, while the store writer goes on.
func TestSQLConcurrencyIsBounded(t *testing.T) {
	st := startSQLTarget(t, "--sql-max-concurrent-queries", "1", "--sql-max-execution-time", "3s")
	ctx := context.Background()
	st.loadEvents(t, 13, 20)
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Go(func() {
			// Each holds the slot for its 3 s limit, then times out (500).
			code, _, _, _ := st.query(ctx, slowQuery, nil)
			codes <- code
		})
	}
	// While they hold the slot or wait, events are still acknowledged and stored.
	time.Sleep(time.Second)
	st.loadEventsNoWait(t, 14, 20)
	wg.Wait()
	close(codes)
	n503, nRan := 0, 0
	for c := range codes {
		switch c {
		case http.StatusServiceUnavailable:
			n503++
		case http.StatusInternalServerError: // ran, and timed out
			nRan++
		default:
			t.Errorf("a query answered %d", c)
		}
	}
	if nRan == 0 {
		t.Error("no query ran")
	}
	if n503 == 0 {
		t.Error("8 concurrent 3-second queries with one slot and a 10s queue: none refused with 503")
	}
	st.waitCount(t, "SELECT count() FROM peertrail.events", 40)
}

func (st *sqlTarget) loadEventsNoWait(t *testing.T, seed uint64, n int) {
	t.Helper()
	body, _, err := simulate.NewEvents(seed, nil).EventList(n)
	if err != nil {
		t.Fatal(err)
	}
	st.post(t, "kas-c", body)
}

// TestSQLNeedsThePassword: no credentials, a wrong password, or a reader token of the API
// are refused.
func TestSQLNeedsThePassword(t *testing.T) {
	st := startSQLTarget(t)
	for _, c := range []struct {
		name       string
		user, pass string
		want       int
	}{
		{"no credentials", "", "", 401},
		{"wrong password", "default", "guess", 403},
		{"the API's reader token", "default", "attack-suite-reader-token", 403},
	} {
		req, _ := http.NewRequest(http.MethodPost, st.sqlURL+"/", strings.NewReader("SELECT count() FROM events"))
		if c.user != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := st.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	if fi, err := os.Stat(filepath.Join(st.dataDir, server.SQLPasswordFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the password file: %v %v, want mode 0600", fi, err)
	}
}

// slowQuery reads few rows (under max_rows_to_read) and holds little, but takes far longer
// than the time limit: a hash of each of 400 million pairs.
const slowQuery = "SELECT count() FROM (SELECT arrayJoin(range(20000)) AS a) AS x, (SELECT arrayJoin(range(20000)) AS b) AS y WHERE NOT ignore(SHA256(toString(a * b)))"

// peakRSS is the process's peak resident set (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// engineList asks an engine of the test process's own (in memory) for one column of a
// catalogue: what the engine has, whatever the SQL interface lets a reader see of it.
func engineList(t *testing.T, q string) []string {
	t.Helper()
	e, err := chdb.Open(context.Background(), chdb.Options{})
	if err != nil {
		t.Fatalf("the embedded engine: %v", err)
	}
	defer e.Close()
	out, err := e.Query(context.Background(), q, "TabSeparatedRaw")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestSQLEveryTableFunctionIsRefused asks the engine for every table function it has and calls
// each through the SQL interface with argument shapes that pass its argument check (files,
// URLs, servers, processes, a cluster, a local table), aimed at a secret file and at a listener
// that counts requests: the allowlist refuses every one (497), or the engine's parser does not
// take the shape (62); none answers 200, reads the secret or reaches the listener.
func TestSQLEveryTableFunctionIsRefused(t *testing.T) {
	st := startSQLTarget(t)
	ctx := context.Background()
	watch := t.TempDir()
	secret := filepath.Join(watch, "tls.key")
	const secretText = "PEERTRAIL-TABLE-FUNCTION-SECRET"
	if err := os.WriteFile(secret, []byte(secretText+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\n"+secretText+"\n")
			c.Close()
		}
	}()
	defer ln.Close()
	addr := ln.Addr().String()
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }
	azure := q("DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a;BlobEndpoint=http://" + addr + "/a")
	shapes := []string{
		q(secret) + ", 'LineAsString'",
		q("http://"+addr+"/b/k") + ", 'LineAsString'",
		q("http://"+addr) + ", '//x', 'tok', 'line String'",
		q("http://" + addr + "/b/k"),
		q(addr),
		q(addr) + ", 'db', 't', 'u', 'p'",
		q(addr) + ", 'db', 'c', 'u', 'p', 'line String'",
		q(addr) + ", 'k', 'k String'",
		q("hdfs://"+addr+"/x") + ", 'LineAsString'",
		azure + ", 'c', 'b', 'LineAsString'",
		"'cat " + secret + "', 'LineAsString', 'line String'",
		"'default', " + q(secret) + ", 'LineAsString'",
		"'default', " + q("http://"+addr+"/b/k") + ", 'LineAsString'",
		"'default', system.one",
		"'peertrail', 'events'",
		"peertrail.events",
		"peertrail.events, 'up', now()",
		"peertrail.events, 'up', now() - 60, now()",
		"peertrail.events, 'up', now() - 60, now(), 15",
		"'EXPLAIN', '', (SELECT 1)",
		"LineAsString, 'x'",
		"numbers(3)",
		"",
	}
	fns := engineList(t, "SELECT name FROM system.table_functions ORDER BY name")
	if len(fns) < 50 {
		t.Fatalf("the engine lists %d table functions", len(fns))
	}
	for _, name := range fns {
		for _, sh := range shapes {
			stmt := "SELECT * FROM " + name + "(" + sh + ") LIMIT 3"
			code, exc, body, err := st.query(ctx, stmt, nil)
			if err != nil {
				t.Fatalf("%s: %v", stmt, err)
			}
			if strings.Contains(body, secretText) {
				t.Errorf("%s read the secret", stmt)
			}
			if code == http.StatusOK || (exc != "497" && exc != "62") {
				t.Errorf("%s: %d %s %.200s", stmt, code, exc, body)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("table functions reached the listener %d times", n)
	}
}
