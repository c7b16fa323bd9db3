package chdb_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peertrail/peertrail/store/chdb"
)

// openPTY returns the master and the slave of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// TestEngineLogStaysOffTheTerminal runs an engine whose stderr is a terminal, as a person's
// demo is: left to itself the engine logs there in colour (one "<Fatal> ThreadStatus:
// current_thread contains invalid address" line per streaming insert with chDB 26.7.3, see
// doc.go). Nothing of the engine's may reach the terminal; its log goes to the data directory.
func TestEngineLogStaysOffTheTerminal(t *testing.T) {
	engine(t)
	master, slave := openPTY(t)
	defer master.Close()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=stream-inserts", "PEERTRAIL_CHDB_TEST_DIR="+dir)
	cmd.Stdout, cmd.Stderr = slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var tty bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&tty, master); close(copied) }() // ends with EIO once the child is gone
	err := cmd.Wait()
	<-copied
	out := tty.String()
	if err != nil {
		t.Fatalf("helper: %v; terminal:\n%s", err, out)
	}
	if !strings.Contains(out, "helper done") {
		t.Fatalf("the helper did not finish; terminal:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "<Fatal>") || strings.Contains(l, "<Error>") || strings.Contains(l, "<Warning>") ||
			strings.Contains(l, "ThreadStatus") || strings.Contains(l, "\x1b[") || strings.HasPrefix(l, "Logging ") {
			t.Errorf("the engine logged to the terminal: %q", l)
		}
	}
	log, err := os.ReadFile(filepath.Join(dir, chdb.DefaultLogFile))
	if err != nil {
		t.Fatalf("the engine's log file: %v", err)
	}
	if bytes.Contains(log, []byte("<Debug>")) || bytes.Contains(log, []byte("<Information>")) {
		t.Errorf("the engine's log holds messages below %s:\n%.2000s", chdb.DefaultLogLevel, log)
	}
}

// streamInserts is the helper of TestEngineLogStaysOffTheTerminal: an engine on
// $PEERTRAIL_CHDB_TEST_DIR, streaming inserts and a session's read.
func streamInserts() error {
	ctx := context.Background()
	e, err := chdb.Open(ctx, chdb.Options{DataDir: os.Getenv("PEERTRAIL_CHDB_TEST_DIR")})
	if err != nil {
		return err
	}
	defer e.Close()
	if _, err := e.Query(ctx, "CREATE TABLE t (a UInt64) ENGINE = MergeTree ORDER BY a", ""); err != nil {
		return err
	}
	for i := range 3 {
		if _, err := e.Insert(ctx, "INSERT INTO t (a)", "JSONEachRow", strings.NewReader(fmt.Sprintf("{\"a\":%d}\n", i))); err != nil {
			return err
		}
	}
	s, err := e.OpenSession(ctx, chdb.SessionOptions{Settings: [][2]string{{"readonly", "1"}}})
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := s.Exec(ctx, "SELECT count() FROM t", "", nil, nil, 0)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(string(r.Data)); got != "3" {
		return fmt.Errorf("count() = %q, want 3", got)
	}
	// One more insert after the session connected: its connect must not have put the logger
	// back on the terminal.
	_, err = e.Insert(ctx, "INSERT INTO t (a)", "JSONEachRow", strings.NewReader("{\"a\":9}\n"))
	return err
}
