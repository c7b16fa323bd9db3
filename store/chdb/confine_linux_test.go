package chdb_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/peertrail/peertrail/store/chdb"
)

// TestConfinedEngine: with Confine, the engine's threads can reach only its own directory and
// the system files it needs: a file elsewhere cannot be read or written through the engine,
// nor a TCP connection made, while the engine stores, merges and reads as before and the rest
// of the process still reads that file. (A subprocess: Landlock cannot be undone.)
func TestConfinedEngine(t *testing.T) {
	if _, err := llsyscall.LandlockGetABIVersion(); err != nil {
		t.Fatalf("this machine's kernel has no Landlock (%v): the confinement cannot be tested here", err)
	}
	out := runSubprocess(t, "confined", 2*time.Minute)
	if !strings.Contains(out, "helper done") {
		t.Fatalf("helper output:\n%s", out)
	}
}

func confinedHelper(ctx context.Context, fail func(string, ...any) int) int {
	base, err := os.MkdirTemp("", "peertrail-confined-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(base)
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o755)
	secret := filepath.Join(outside, "tls.key")
	if err := os.WriteFile(secret, []byte("CONFINED-SECRET\n"), 0o644); err != nil {
		return fail("%v", err)
	}
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("%v", err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); fmt.Fprintln(w, "CONFINED-SECRET") }))

	dataDir := filepath.Join(base, "data")
	e, err := chdb.Open(ctx, chdb.Options{DataDir: dataDir, Confine: true})
	if err != nil {
		return fail("open: %v", err)
	}
	if !e.Confined() {
		return fail("the engine is not confined on a kernel with Landlock")
	}
	// The engine's own work: DDL, inserts, a merge, reads, on its connection and a session's.
	for _, q := range []string{
		"CREATE DATABASE d",
		"CREATE TABLE d.t (a UInt64, s String) ENGINE = MergeTree ORDER BY a",
		"INSERT INTO d.t SELECT number, toString(number) FROM numbers(100000)",
		"INSERT INTO d.t SELECT number, toString(number) FROM numbers(100000)",
		"OPTIMIZE TABLE d.t FINAL",
	} {
		if _, err := e.Query(ctx, q, ""); err != nil {
			return fail("%s: %v", q, err)
		}
	}
	sess, err := e.OpenSession(ctx, chdb.SessionOptions{})
	if err != nil {
		return fail("session: %v", err)
	}
	defer sess.Close()
	if r, err := sess.Exec(ctx, "SELECT count(), uniqExact(a) FROM d.t", "CSV", nil, nil, 0); err != nil || string(r.Data) != "200000,100000\n" {
		return fail("read: %v %q", err, r)
	}
	// Through the engine, on a connection that is not read-only: nothing outside.
	written := filepath.Join(outside, "written")
	for _, q := range []string{
		"SELECT file('" + secret + "')",
		"SELECT * FROM file('" + secret + "', 'LineAsString')",
		"INSERT INTO FUNCTION file('" + written + "', 'LineAsString') SELECT 'x'",
		// One try: the engine retries a refused connection for minutes.
		"SELECT * FROM url('http://" + ln.Addr().String() + "/', 'LineAsString') SETTINGS http_max_tries = 1",
	} {
		r, err := sess.Exec(ctx, q, "TSV", nil, nil, 0)
		if err == nil {
			return fail("%s answered %q", q, r.Data)
		}
		if strings.Contains(err.Error(), "CONFINED-SECRET") {
			return fail("%s read the secret: %v", q, err)
		}
	}
	if _, err := os.Stat(written); err == nil {
		return fail("the engine wrote %s", written)
	}
	if n := hits.Load(); n != 0 {
		return fail("the engine reached the listener %d times", n)
	}
	// The rest of the process is not confined.
	if b, err := os.ReadFile(secret); err != nil || string(b) != "CONFINED-SECRET\n" {
		return fail("Go could not read the file: %v", err)
	}
	// The engine's threads outlive it, confined: a later Open elsewhere is refused, one in
	// the same directory is confined as the first was, confined or not.
	sess.Close()
	if err := e.Close(); err != nil {
		return fail("close: %v", err)
	}
	if e2, err := chdb.Open(ctx, chdb.Options{DataDir: outside}); err == nil || !strings.Contains(err.Error(), "confined") {
		if e2 != nil {
			e2.Close()
		}
		return fail("an Open outside the confinement: %v", err)
	}
	e, err = chdb.Open(ctx, chdb.Options{DataDir: dataDir})
	if err != nil {
		return fail("reopen: %v", err)
	}
	defer e.Close()
	if !e.Confined() {
		return fail("the reopened engine says it is not confined")
	}
	if r, err := e.Query(ctx, "SELECT file('"+secret+"')", "TSV"); err == nil {
		return fail("the reopened engine read the file: %q", r)
	}
	fmt.Println("helper done")
	return 0
}
