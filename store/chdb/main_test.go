package chdb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store/chdb"
)

// The tests use the real libchdb.so. One process can hold one engine, so
// TestMain opens a shared one for the in-process tests, and tests that need
// an engine of their own (reopen, a crash-prone check, a second process) run
// this test binary again as a subprocess in helper mode.

// helperEnv selects a helper mode in a subprocess; see runHelper.
const helperEnv = "PEERTRAIL_CHDB_TEST_HELPER"

var (
	shared    *chdb.Engine
	sharedErr error
	sharedDir string
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	var err error
	sharedDir, err = os.MkdirTemp("", "peertrail-chdb-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, sharedErr = chdb.Open(context.Background(), chdb.Options{DataDir: sharedDir})
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
	}
	os.RemoveAll(sharedDir)
	os.Exit(code)
}

// engine returns the shared engine, failing (not skipping) the test when the
// library could not be loaded.
func engine(tb testing.TB) *chdb.Engine {
	tb.Helper()
	if sharedErr != nil {
		tb.Fatalf("the chDB engine is required for this test and did not open: %v\n"+
			"Run scripts/fetch-chdb.sh first (CI does), or set CHDB_LIB_PATH to a libchdb.so %s.",
			sharedErr, chdb.Version)
	}
	return shared
}

// query runs sql on the shared engine and returns its output, failing the test on error.
func query(tb testing.TB, sql, format string) string {
	tb.Helper()
	out, err := engine(tb).Query(context.Background(), sql, format)
	if err != nil {
		tb.Fatalf("query %q: %v", sql, err)
	}
	return string(out)
}

// run runs statements one by one on the shared engine.
func run(tb testing.TB, stmts ...string) {
	tb.Helper()
	for _, s := range stmts {
		query(tb, s, "")
	}
}

// runSubprocess runs this test binary in helper mode and returns its output.
// A helper that has not finished after the timeout is killed and the test
// fails: a regression that hangs the process must not hang the suite.
func runSubprocess(t *testing.T, mode string, timeout time.Duration, env ...string) string {
	t.Helper()
	engine(t) // fail early, with the clear message, when the library is missing
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Env = append(cmd.Env, env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("helper %q did not finish within %v and was killed (hung?); output:\n%s", mode, timeout, out)
	}
	if err != nil {
		t.Fatalf("helper %q failed: %v; output:\n%s", mode, err, out)
	}
	return string(out)
}

// nilPtr is a package variable so the compiler cannot prove the dereference
// below faults: it must be a real SIGSEGV turned into a Go panic.
var nilPtr *int

// runHelper runs one helper mode in a subprocess and returns the exit code.
func runHelper(mode string) int {
	ctx := context.Background()
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL: "+format+"\n", args...)
		return 1
	}
	switch mode {
	case "confined":
		return confinedHelper(ctx, fail)
	case "stream-inserts":
		if err := streamInserts(); err != nil {
			return fail("%v", err)
		}
		fmt.Println("helper done")
		return 0
	case "recover":
		// After the engine is loaded and has run a query, a nil dereference in
		// a function with recover() must be recovered. With the engine's own
		// signal handlers installed (no chdb_set_signal_handlers_enabled(0))
		// this hangs the process instead.
		e, err := chdb.Open(ctx, chdb.Options{})
		if err != nil {
			return fail("open: %v", err)
		}
		if out, err := e.Query(ctx, "SELECT 40 + 2", "CSV"); err != nil || string(out) != "42\n" {
			return fail("query before the panic: %q, %v", out, err)
		}
		recovered := func() (r any) {
			defer func() { r = recover() }()
			return *nilPtr
		}()
		if recovered == nil {
			return fail("nil dereference did not panic")
		}
		fmt.Printf("recovered: %v\n", recovered)
		if out, err := e.Query(ctx, "SELECT 1", "CSV"); err != nil || string(out) != "1\n" {
			return fail("query after the panic: %q, %v", out, err)
		}
		if err := e.Close(); err != nil {
			return fail("close: %v", err)
		}
		fmt.Println("ok")
		return 0

	case "persist-write":
		// Write, Close, reopen in the same process, check; Close semantics.
		dir := os.Getenv("CHDB_TEST_DIR")
		e, err := chdb.Open(ctx, chdb.Options{DataDir: dir})
		if err != nil {
			return fail("open: %v", err)
		}
		for _, s := range []string{
			"CREATE DATABASE IF NOT EXISTS p",
			"CREATE TABLE p.t (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
			"INSERT INTO p.t SELECT number, toString(number) FROM numbers(12345)",
		} {
			if _, err := e.Query(ctx, s, ""); err != nil {
				return fail("%s: %v", s, err)
			}
		}
		if err := e.Close(); err != nil {
			return fail("close: %v", err)
		}
		if _, err := e.Query(ctx, "SELECT 1", ""); !errors.Is(err, chdb.ErrClosed) {
			return fail("query after Close: got %v, want ErrClosed", err)
		}
		if err := e.Close(); err != nil {
			return fail("second Close: %v", err)
		}
		e, err = chdb.Open(ctx, chdb.Options{DataDir: dir})
		if err != nil {
			return fail("reopen in the same process: %v", err)
		}
		out, err := e.Query(ctx, "SELECT count(), sum(id) FROM p.t", "CSV")
		if err != nil {
			return fail("query after reopen: %v", err)
		}
		fmt.Printf("same process: %s", out)
		if err := e.Close(); err != nil {
			return fail("close: %v", err)
		}
		return 0

	case "persist-read":
		e, err := chdb.Open(ctx, chdb.Options{DataDir: os.Getenv("CHDB_TEST_DIR")})
		if err != nil {
			return fail("open: %v", err)
		}
		defer e.Close()
		out, err := e.Query(ctx, "SELECT count(), sum(id) FROM p.t", "CSV")
		if err != nil {
			return fail("query: %v", err)
		}
		fmt.Printf("new process: %s", out)
		return 0

	case "locked":
		_, err := chdb.Open(ctx, chdb.Options{DataDir: os.Getenv("CHDB_TEST_DIR")})
		if !errors.Is(err, chdb.ErrDataDirLocked) {
			return fail("open of a directory in use: got %v, want ErrDataDirLocked", err)
		}
		fmt.Printf("locked: %v\n", err)
		return 0
	case "allocator":
		// The allocator's options as the loaded library took them (Options.DirtyPageDecay).
		decay, err := time.ParseDuration(os.Getenv("CHDB_TEST_DECAY"))
		if err != nil {
			return fail("CHDB_TEST_DECAY: %v", err)
		}
		e, err := chdb.Open(ctx, chdb.Options{DirtyPageDecay: decay})
		if err != nil {
			return fail("open: %v", err)
		}
		defer e.Close()
		out, err := e.Query(ctx, "SELECT * FROM system.jemalloc_stats", "TSVRaw")
		if err != nil {
			return fail("jemalloc_stats: %v", err)
		}
		m := regexp.MustCompile(`opt\.dirty_decay_ms: (-?\d+)`).FindSubmatch(out)
		if m == nil {
			return fail("no opt.dirty_decay_ms in system.jemalloc_stats")
		}
		fmt.Printf("dirty_decay_ms=%s\n", m[1])
		return 0
	case "library-pages":
		// The library's resident code and constants once the engine is open and has worked,
		// its pages released after Open or not (CHDB_TEST_RELEASE), from a private copy of the
		// library that no other process maps: the kernel pages out only what this process
		// alone maps.
		lib := os.Getenv("CHDB_TEST_LIB")
		e, err := chdb.Open(ctx, chdb.Options{LibPath: lib, DataDir: os.Getenv("CHDB_TEST_DIR")})
		if err != nil {
			return fail("open: %v", err)
		}
		defer e.Close()
		if os.Getenv("CHDB_TEST_RELEASE") == "1" {
			if err := e.ReleaseLibraryPages(); err != nil {
				return fail("release: %v", err)
			}
		}
		var sum []byte
		for _, sql := range []string{
			"CREATE TABLE t (n UInt64, s String) ENGINE = MergeTree ORDER BY n",
			"INSERT INTO t SELECT number, toString(number) FROM numbers(100000)",
			"SELECT sum(n), count(DISTINCT s) FROM t",
		} {
			if sum, err = e.Query(ctx, sql, "CSV"); err != nil {
				return fail("%s: %v", sql, err)
			}
		}
		kb, err := residentKB(lib)
		if err != nil {
			return fail("%v", err)
		}
		fmt.Printf("answer: %slibrary resident: %d kB\n", sum, kb)
		return 0
	case "not-a-library":
		e, err := chdb.Open(ctx, chdb.Options{})
		if err == nil || e != nil || errors.Is(err, chdb.ErrLibraryNotFound) {
			return fail("Open of a file that is not a library: got %v, %v", e, err)
		}
		fmt.Printf("error: %v\n", err)
		return 0
	}
	return fail("unknown helper mode %q", mode)
}

// The engine's allocator gives freed pages back after Options.DirtyPageDecay, unless the
// operator set JE_MALLOC_CONF. In subprocesses: the allocator reads its options once, when the
// library is loaded.
func TestDirtyPageDecay(t *testing.T) {
	for _, tc := range []struct {
		decay, env, want string
	}{
		{"0s", "", "5000"}, // the library's own
		{"250ms", "", "250"},
		{"250ms", "dirty_decay_ms:3000", "3000"}, // the operator's
	} {
		out := runSubprocess(t, "allocator", 60*time.Second, "CHDB_TEST_DECAY="+tc.decay, "JE_MALLOC_CONF="+tc.env)
		if !strings.Contains(out, "dirty_decay_ms="+tc.want+"\n") {
			t.Errorf("DirtyPageDecay %s, JE_MALLOC_CONF=%q: want dirty_decay_ms=%s; output:\n%s", tc.decay, tc.env, tc.want, out)
		}
	}
}

func TestRecoverAfterLoad(t *testing.T) {
	out := runSubprocess(t, "recover", 60*time.Second)
	if !strings.Contains(out, "recovered: runtime error: invalid memory address or nil pointer dereference") ||
		!strings.Contains(out, "\nok\n") {
		t.Fatalf("helper output:\n%s", out)
	}
}

func TestPersistenceAcrossCloseAndReopen(t *testing.T) {
	dir := t.TempDir()
	want := "12345,76193340\n" // count(), sum(0..12344)
	out := runSubprocess(t, "persist-write", 90*time.Second, "CHDB_TEST_DIR="+dir)
	if !strings.Contains(out, "same process: "+want) {
		t.Fatalf("after Close and Open in the same process, want %q; output:\n%s", want, out)
	}
	out = runSubprocess(t, "persist-read", 90*time.Second, "CHDB_TEST_DIR="+dir)
	if !strings.Contains(out, "new process: "+want) {
		t.Fatalf("in a new process, want %q; output:\n%s", want, out)
	}
}

func TestDataDirLockedByAnotherProcess(t *testing.T) {
	engine(t)
	runSubprocess(t, "locked", 90*time.Second, "CHDB_TEST_DIR="+sharedDir)
}

func TestSecondOpenIsRefused(t *testing.T) {
	engine(t)
	e, err := chdb.Open(context.Background(), chdb.Options{DataDir: t.TempDir()})
	if !errors.Is(err, chdb.ErrAlreadyOpen) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("second Open: got %v, want ErrAlreadyOpen", err)
	}
}

func TestMissingLibrary(t *testing.T) {
	ctx := context.Background()
	missing := t.TempDir() + "/nope/libchdb.so"

	e, err := chdb.Open(ctx, chdb.Options{LibPath: missing})
	if !errors.Is(err, chdb.ErrLibraryNotFound) || e != nil {
		t.Fatalf("Open with a missing LibPath: got %v, %v; want ErrLibraryNotFound", e, err)
	}
	if !strings.Contains(err.Error(), "scripts/fetch-chdb.sh") || !strings.Contains(err.Error(), missing) {
		t.Errorf("error should say how to get the library and what was missing: %v", err)
	}

	t.Setenv("CHDB_LIB_PATH", missing)
	if _, err := chdb.Open(ctx, chdb.Options{}); !errors.Is(err, chdb.ErrLibraryNotFound) {
		t.Fatalf("Open with a missing $CHDB_LIB_PATH: got %v, want ErrLibraryNotFound", err)
	}

	// Nothing anywhere: empty cache, no env, and (if absent) no /usr/local/lib/libchdb.so.
	if _, err := os.Stat("/usr/local/lib/libchdb.so"); err == nil {
		return
	}
	t.Setenv("CHDB_LIB_PATH", "")
	t.Setenv("PEERTRAIL_CACHE", t.TempDir())
	_, err = chdb.Open(ctx, chdb.Options{})
	if !errors.Is(err, chdb.ErrLibraryNotFound) {
		t.Fatalf("Open with no library anywhere: got %v, want ErrLibraryNotFound", err)
	}
	t.Logf("error: %v", err)
}

func TestDefaultLibPath(t *testing.T) {
	t.Setenv("PEERTRAIL_CACHE", "/x/cache")
	if got, want := chdb.DefaultLibPath(), "/x/cache/chdb/"+chdb.Version+"/libchdb.so"; got != want {
		t.Fatalf("DefaultLibPath() = %q, want %q", got, want)
	}
}

// A file that is not a library is an error from dlopen, not a panic. In a
// subprocess: here the shared engine already holds the process's one slot.
func TestNotALibrary(t *testing.T) {
	bogus := t.TempDir() + "/libchdb.so"
	if err := os.WriteFile(bogus, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runSubprocess(t, "not-a-library", 60*time.Second, "CHDB_LIB_PATH="+bogus)
	if !strings.Contains(out, "dlopen") {
		t.Fatalf("output:\n%s", out)
	}
}

// residentKB is how much of the file at path this process has resident (Rss in
// /proc/self/smaps, summed over the file's mappings).
func residentKB(path string) (int64, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var kb int64
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-"):
			mine = len(fields) >= 6 && fields[5] == path
		case mine && len(fields) == 3 && fields[0] == "Rss:":
			n, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps: %q: %w", sc.Text(), err)
			}
			kb += n
		}
	}
	return kb, sc.Err()
}
