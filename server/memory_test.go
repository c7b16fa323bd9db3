package server

import (
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
)

func TestMemoryBudget(t *testing.T) {
	const gi = 1 << 30
	for _, tc := range []struct {
		name               string
		cfg                config.File
		total, engine, goL int64
	}{
		{"embedded: half to the engine", config.File{MemoryLimit: 2 * gi}, 2 * gi, gi, 2*gi/10*9 - gi},
		{"engine cap given", config.File{MemoryLimit: 4 * gi, Store: config.Store{MaxMemory: gi}}, 4 * gi, gi, 4*gi/10*9 - gi},
		{"no engine", config.File{MemoryLimit: 2 * gi, Store: config.Store{Engine: "none"}}, 2 * gi, 0, 2 * gi / 10 * 9},
		{"a server store", config.File{MemoryLimit: 2 * gi, Store: config.Store{Engine: "clickhouse"}}, 2 * gi, 0, 2 * gi / 10 * 9},
		{"small: Go keeps a floor", config.File{MemoryLimit: 300 << 20}, 300 << 20, 150 << 20, minGoLimit},
	} {
		b := MemoryBudget(tc.cfg)
		if b.Total != tc.total || b.Engine != tc.engine || b.Go != tc.goL {
			t.Errorf("%s: %+v, want total %d engine %d go %d", tc.name, b, tc.total, tc.engine, tc.goL)
		}
		// The embedded engine's freed pages go back within a second; another store has none.
		want := time.Duration(0)
		if tc.engine > 0 {
			want = engineDecay
		}
		if b.EngineDecay != want {
			t.Errorf("%s: engine page decay %v, want %v", tc.name, b.EngineDecay, want)
		}
	}
	b := MemoryBudget(config.File{})
	if b.Total <= 0 || b.Engine != b.Total/2 {
		t.Errorf("from the host or cgroup: %+v", b)
	}
	if want := engineDecay; b.EngineDecay != want {
		t.Errorf("from the host or cgroup: engine page decay %v, want %v", b.EngineDecay, want)
	}
}

func TestGoLimitAppliedUnlessGOMEMLIMIT(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log := slog.New(slog.DiscardHandler)
	t.Setenv("GOMEMLIMIT", "")
	applyGoLimit(Budget{Go: 700 << 20}, log)
	if got := debug.SetMemoryLimit(-1); got != 700<<20 {
		t.Fatalf("soft limit %d, want %d", got, 700<<20)
	}
	t.Setenv("GOMEMLIMIT", "900MiB")
	applyGoLimit(Budget{Go: 100 << 20}, log)
	if got := debug.SetMemoryLimit(-1); got != 700<<20 {
		t.Fatalf("with GOMEMLIMIT set the soft limit moved to %d", got)
	}
}

func TestGCPercentAppliedUnlessGOGC(t *testing.T) {
	prevLimit := debug.SetMemoryLimit(-1)
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev); debug.SetMemoryLimit(prevLimit) })
	log := slog.New(slog.DiscardHandler)
	t.Setenv("GOMEMLIMIT", "1GiB")
	t.Setenv("GOGC", "")
	applyGoLimit(Budget{Go: 700 << 20}, log)
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Fatalf("GOGC unset: the collector's percentage is %d, want %d", got, gcPercent)
	}
	t.Setenv("GOGC", "100")
	applyGoLimit(Budget{Go: 700 << 20}, log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("with GOGC=100 set the percentage moved to %d", got)
	}
}
