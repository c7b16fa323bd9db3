package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peertrail/peertrail/server"
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

// occupy listens on addr for the test's duration, so that whatever else wants it finds it
// busy; an address something else already holds is busy anyway.
func occupy(t *testing.T, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if _, probe := net.Dial("tcp", addr); probe != nil {
			t.Fatalf("cannot occupy %s: %v", addr, err)
		}
		return // someone else holds it
	}
	t.Cleanup(func() { ln.Close() })
}

// engineLogLine tells a line of the embedded engine's own log (ClickHouse's format, in colour
// on a terminal) or of its "Logging ... to" notice.
func engineLogLine(l string) bool {
	for _, s := range []string{"<Fatal>", "<Critical>", "<Error>", "<Warning>", "<Information>", "<Debug>", "<Trace>", "ThreadStatus", "Fatal\x1b", "Error\x1b", "Warning\x1b"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return strings.HasPrefix(strings.TrimSpace(l), "Logging ")
}

// TestDemoOnBusyDefaultPortsPrintsWorkingCommands runs the demo as a person does, on a
// terminal, while 8123 (ClickHouse's default port) and 8443 are taken: it must pick free
// ports, print no line of the engine's log, and every command it prints must work as printed,
// while it keeps running until Ctrl-C.
func TestDemoOnBusyDefaultPortsPrintsWorkingCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (about half a minute)")
	}
	requireEngine(t)
	occupy(t, "127.0.0.1:8123")
	occupy(t, "127.0.0.1:8443")
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(os.Args[0], "demo", "--duration", "10s", "--rate", "30")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var (
		mu  sync.Mutex
		all bytes.Buffer
	)
	explore := make(chan []string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(io.TeeReader(master, lockedWriter{&mu, &all}))
		var cmds []string
		in := false
		for sc.Scan() {
			l := strings.TrimRight(sc.Text(), "\r")
			switch {
			case strings.HasPrefix(l, "=== Explore"):
				in = true
			case in && strings.HasPrefix(l, "  dashboards:"):
				explore <- cmds
				in = false
			case in && strings.HasPrefix(l, "  "):
				if _, c, ok := strings.Cut(strings.TrimSpace(l), ": "); ok {
					cmds = append(cmds, strings.TrimSpace(c))
				}
			}
		}
		close(explore)
	}()
	cmds, ok := <-explore
	if !ok {
		cmd.Wait()
		<-copied
		t.Fatalf("the demo printed no Explore section; its output:\n%s", all.String())
	}
	if len(cmds) != 5 {
		t.Errorf("want 5 commands to explore, got %d: %q", len(cmds), cmds)
	}
	for _, c := range cmds {
		line := strings.Replace(c, "go run ./cmd/peertrail", shellQuote(os.Args[0]), 1)
		if !strings.Contains(line, "curl ") && line == c {
			t.Errorf("the command does not start with how the demo was run (go run ./cmd/peertrail): %s", c)
			continue
		}
		run := exec.Command("sh", "-c", line)
		run.Env = append(os.Environ(), mainEnv+"=1")
		out, err := run.CombinedOutput()
		code := run.ProcessState.ExitCode()
		// The gate of a demo full of faults says pause: 3.
		if err != nil && !(strings.Contains(c, " gate ") && code == exitPause) {
			t.Errorf("%s\nfailed (exit %d): %v\n%s", c, code, err, out)
			continue
		}
		if len(bytes.TrimSpace(out)) == 0 {
			t.Errorf("%s printed nothing", c)
		}
	}
	// Ctrl-C on the terminal ends it.
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	<-copied
	mu.Lock()
	out := all.String()
	mu.Unlock()
	if err != nil {
		t.Errorf("the demo ended with %v after Ctrl-C; its output:\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if engineLogLine(l) {
			t.Errorf("the engine's log reached the terminal: %q", l)
		}
	}
	if strings.Contains(out, server.WarnNoAPIServerAuth) {
		t.Errorf("the demo warns that its apiservers have no credentials, which it chose:\n%s", out)
	}
	for _, want := range []string{"What peertrail saw", "The upgrade gate", "press Ctrl-C"} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The demo's logger leaves out the one warning the demo chose to earn, and nothing else.
func TestDemoLoggerDropsOnlyTheNoAuthWarning(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(dropMessage{slog.NewTextHandler(&b, nil), server.WarnNoAPIServerAuth}).With("k", "v")
	log.Warn(server.WarnNoAPIServerAuth)
	log.Warn("the spool is full")
	if strings.Contains(b.String(), "no client CA") || !strings.Contains(b.String(), "the spool is full") || !strings.Contains(b.String(), "k=v") {
		t.Fatalf("logged %q", b.String())
	}
}
