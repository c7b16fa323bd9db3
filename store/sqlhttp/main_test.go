package sqlhttp_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
	"github.com/peertrail/peertrail/test/storetest"
)

// The tests run against the real embedded ClickHouse engine (libchdb.so; test/run fetches it).
// A process holds one engine, so TestMain opens one, migrated, that every test shares.

var (
	shared    *store.Embedded
	sharedErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "peertrail-sqlhttp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	shared, sharedErr = store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: dir})
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
	os.RemoveAll(dir)
	os.Exit(code)
}

// engine returns the shared, migrated embedded store, failing (never skipping) the test when
// the engine is missing.
func engine(tb testing.TB) *store.Embedded {
	tb.Helper()
	if sharedErr != nil {
		tb.Fatalf("the embedded ClickHouse engine is required and did not open: %v\n"+
			"Run scripts/fetch-chdb.sh first (test/run does), or set CHDB_LIB_PATH to a libchdb.so %s.", sharedErr, chdb.Version)
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

var (
	scenarioOnce sync.Once
	scenarioData *storetest.Scenario
	scenarioErr  error
)

// loadScenario writes the MVP scenario (three hours ago) into the shared engine, once.
func loadScenario(t *testing.T) *storetest.Scenario {
	t.Helper()
	s := engine(t)
	scenarioOnce.Do(func() {
		begin := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
		scenarioData, scenarioErr = storetest.Build(storetest.Options{Begin: begin, Duration: 10 * time.Minute, Seed: 7})
		if scenarioErr == nil {
			scenarioErr = storetest.Write(context.Background(), s, scenarioData.Records, scenarioData.Chains)
		}
	})
	if scenarioErr != nil {
		t.Fatalf("load the scenario: %v", scenarioErr)
	}
	return scenarioData
}
