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
