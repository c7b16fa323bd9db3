package store_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
)

// The tests run against the real embedded ClickHouse engine (libchdb.so; CI runs
// scripts/fetch-chdb.sh first). A process holds one engine, so TestMain opens one, migrated,
// that every test shares; tests that need a fresh engine (a restart) run this test binary
// again as a subprocess in a helper mode. Tests keep apart by using their own apiserver names,
// auditIDs and time ranges, or by reading only what they wrote.

const helperEnv = "PEERTRAIL_STORE_TEST_HELPER"

var (
	shared    *store.Embedded
	sharedErr error
	sharedDir string
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	var err error
	// PEERTRAIL_STORE_TEST_DIR keeps the engine's data between runs (the benchmarks' large
	// data sets take minutes to build); by default it is a temporary directory.
	sharedDir = os.Getenv("PEERTRAIL_STORE_TEST_DIR")
	keep := sharedDir != ""
	if !keep {
		sharedDir, err = os.MkdirTemp("", "peertrail-store-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	ctx := context.Background()
	shared, sharedErr = store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: sharedDir})
	if sharedErr == nil {
		if err := store.Migrate(ctx, shared, store.SchemaOptions{}, nil); err != nil {
			sharedErr = fmt.Errorf("migrate: %w", err)
		}
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close:", err)
			code = 1
		}
	}
	if !keep {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// engine returns the shared, migrated embedded store, failing (never skipping) the test when
// the engine is missing.
func engine(tb testing.TB) *store.Embedded {
	tb.Helper()
	if sharedErr != nil {
		tb.Fatalf("the embedded ClickHouse engine is required and did not open: %v\n"+
			"Run scripts/fetch-chdb.sh first (CI does), or set CHDB_LIB_PATH to a libchdb.so %s.", sharedErr, chdb.Version)
	}
	return shared
}

// query runs a query on s and fails the test on error.
func query(tb testing.TB, s store.Store, q string, params map[string]string) *store.Result {
	tb.Helper()
	r, err := s.Query(context.Background(), q, params)
	if err != nil {
		tb.Fatalf("query %q: %v", q, err)
	}
	return r
}

// scalar runs a query returning one value.
func scalar(tb testing.TB, s store.Store, q string, params map[string]string) string {
	tb.Helper()
	r := query(tb, s, q, params)
	if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
		tb.Fatalf("query %q: want one value, got %v", q, r.Rows)
	}
	return r.Rows[0][0]
}

// runSubprocess runs this test binary in a helper mode and returns its output.
func runSubprocess(t *testing.T, mode string, timeout time.Duration, env ...string) string {
	t.Helper()
	return runSubprocessIn(t, "", mode, timeout, env...)
}

// runSubprocessIn is runSubprocess in the working directory dir ("": this one).
func runSubprocessIn(t *testing.T, dir, mode string, timeout time.Duration, env ...string) string {
	t.Helper()
	engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("helper %q did not finish within %v; output:\n%s", mode, timeout, out)
	}
	if err != nil {
		t.Fatalf("helper %q failed: %v; output:\n%s", mode, err, out)
	}
	return string(out)
}
