package chdb_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peertrail/peertrail/store/chdb"
)

// TestEngineThreadsRunBelowTheProcess checks that every thread the engine started inherited
// its lowered priority, and that the process's own threads kept theirs.
func TestEngineThreadsRunBelowTheProcess(t *testing.T) {
	e := engine(t)
	if e.Nice() != chdb.DefaultNice {
		t.Fatalf("engine threads at nice %d, want %d", e.Nice(), chdb.DefaultNice)
	}
	// A parallel query, so that the engine's query pool has threads.
	query(t, "SELECT sum(number) FROM numbers_mt(20000000)", "")

	self, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	goComm := strings.TrimSpace(string(self))
	tasks, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads under /proc/self/task: %v", err)
	}
	engineThreads, atNice := 0, 0
	for _, p := range tasks {
		comm, nice := threadStat(t, p)
		if comm == goComm {
			continue // the Go runtime's, the engine's own, and engine threads it did not name
		}
		engineThreads++
		switch {
		case nice == chdb.DefaultNice:
			atNice++
		case nice == 0:
			t.Errorf("engine thread %q (%s) runs at the process's priority", comm, p)
		}
		// Other values are ones the engine set itself (a MemoryWorker at -20 when it may).
	}
	if engineThreads == 0 || atNice == 0 {
		t.Fatalf("%d engine threads, %d of them at nice %d", engineThreads, atNice, chdb.DefaultNice)
	}
	// The threads goroutines run on keep the process's priority: several at once, each on a
	// thread of its own.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			switch _, nice, err := readThreadStat("/proc/thread-self/stat"); {
			case err != nil:
				t.Error(err)
			case nice != 0:
				t.Errorf("a goroutine's thread runs at nice %d, want 0", nice)
			}
			time.Sleep(10 * time.Millisecond)
		})
	}
	wg.Wait()
	if _, nice := threadStat(t, "/proc/self/stat"); nice != 0 {
		t.Errorf("the process's main thread is at nice %d, want 0", nice)
	}
	t.Logf("%d engine threads, %d at nice %d", engineThreads, atNice, chdb.DefaultNice)
}

// threadStat reads a thread's command name and nice value from its /proc stat file.
func threadStat(t *testing.T, path string) (comm string, nice int) {
	t.Helper()
	comm, nice, err := readThreadStat(path)
	if err != nil {
		t.Fatal(err)
	}
	return comm, nice
}

func readThreadStat(path string) (comm string, nice int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("unreadable %s: %q", path, s)
	}
	// After the command: state is field 3, nice field 19 (proc(5)).
	fields := strings.Fields(s[end+1:])
	if len(fields) < 17 {
		return "", 0, fmt.Errorf("short %s: %q", path, s)
	}
	if nice, err = strconv.Atoi(fields[16]); err != nil {
		return "", 0, fmt.Errorf("%s: nice %q: %w", path, fields[16], err)
	}
	return s[open+1 : end], nice, nil
}

// TestEngineThreadsGoIdle checks that the threads the engine starts are moved to SCHED_IDLE,
// and that the threads that run Go code, the runtime's and those that call into the engine
// (the engine's and a session's), are not: at SCHED_IDLE such a thread could hold up the Go
// runtime's stop-the-world.
func TestEngineThreadsGoIdle(t *testing.T) {
	e := engine(t)
	s, err := e.OpenSession(t.Context(), chdb.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Parallel queries on both connections, so that the engine's pools have threads.
	if _, err := s.Exec(t.Context(), "SELECT sum(number) FROM numbers_mt(20000000)", "", nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	query(t, "SELECT sum(number) FROM numbers_mt(20000000)", "")
	calls := map[int]bool{}
	for _, tid := range chdb.CallThreadIDs(e) {
		calls[tid] = true
	}
	if len(calls) < 2 {
		t.Fatalf("want the engine's and the session's call threads, have %v", calls)
	}

	var normal, idle []string
	// The idler sweeps every second.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		normal, idle = nil, nil
		tasks, err := filepath.Glob("/proc/self/task/*")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("no threads under /proc/self/task: %v", err)
		}
		for _, task := range tasks {
			comm, nice, err := readThreadStat(task + "/stat")
			if err != nil {
				continue // ended meanwhile
			}
			tid, _ := strconv.Atoi(filepath.Base(task))
			a, err := unix.SchedGetAttr(tid, 0)
			if err != nil {
				continue
			}
			name := fmt.Sprintf("%s (%d, nice %d, policy %d)", comm, tid, nice, a.Policy)
			switch {
			case calls[tid]:
				if a.Policy != unix.SCHED_NORMAL || nice != chdb.DefaultNice {
					t.Fatalf("a call thread left nice %d and the normal policy: %s", chdb.DefaultNice, name)
				}
			case nice == 0:
				if a.Policy != unix.SCHED_NORMAL {
					t.Fatalf("a thread at the process's nice value left the normal policy: %s", name)
				}
			case nice == chdb.DefaultNice && a.Policy == unix.SCHED_IDLE:
				idle = append(idle, name)
			case nice == chdb.DefaultNice:
				normal = append(normal, name)
			}
		}
		if len(normal) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(normal) > 0 {
		t.Errorf("engine threads still at the normal policy 10 s on: %v", normal)
	}
	if len(idle) == 0 {
		t.Errorf("no engine thread at SCHED_IDLE")
	}
	t.Logf("%d engine threads idle; %d call threads", len(idle), len(calls))
}
