package server

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/store"
)

// Budget is how the process's memory is shared: the embedded engine's hard cap (its
// max_server_memory_usage) and the Go runtime's soft limit, without which Go keeps a burst's
// heap while the process sits idle (BENCHMARKS.md, "Later the same day"). It is soft: a live
// heap above it is never refused, only collected harder.
type Budget struct {
	// Total is what the process may use: config.File.MemoryLimit, or its cgroup's limit or
	// the host's RAM.
	Total int64
	// Engine caps the embedded engine (0 for another store): Store.MaxMemory, or half of Total.
	Engine int64
	// Go is the runtime's soft limit: 90% of Total less Engine (the rest is stacks, the
	// runtime's own and the kernel's page cache of the spool), at least 256 MiB.
	Go int64
	// EngineDecay is how soon the engine's allocator returns the pages the engine freed
	// (engineDecay; 0 for another store).
	EngineDecay time.Duration
}

// engineDecay is Budget.EngineDecay: the engine's cap counts what it has allocated, not the
// freed pages its allocator keeps, which a cgroup charges and the host's RSS shows all the same.
// Kept 30 s without a limit (as before) they were most of what a run without a limit held above
// one with, for a few percent less CPU (BENCHMARKS.md, "A thirty-third session"), so memory
// comes before that CPU with a limit or without, as with Go's soft limit.
const engineDecay = time.Second

// minGoLimit keeps a small Total from starving the receiver and the correlator.
const minGoLimit = 256 << 20

// MemoryBudget shares cfg's memory between the engine and Go.
func MemoryBudget(cfg config.File) Budget {
	b := Budget{Total: int64(cfg.MemoryLimit)}
	if b.Total <= 0 {
		b.Total, _ = store.MemoryAvailable()
	}
	if cfg.Store.Engine == "" || cfg.Store.Engine == "embedded" {
		b.Engine = int64(cfg.Store.MaxMemory)
		if b.Engine <= 0 {
			b.Engine = b.Total / 2
		}
		b.EngineDecay = engineDecay
	}
	b.Go = max(b.Total/10*9-b.Engine, minGoLimit)
	return b
}

// gcPercent is the Go collector's GOGC unless the environment sets one: it collects when the
// heap has grown by an eighth of what was live, not by all of it (Go's default of 100). The
// heap peertrail keeps live is mostly without pointers (the correlator's chains, the spool
// frames the store writer holds), so a collection costs little and more of them cost no
// measurable CPU or latency while Go holds less (BENCHMARKS.md, "An eleventh session").
const gcPercent = 12

// applyGoLimit sets the runtime's soft memory limit to b.Go, unless GOMEMLIMIT is set, and the
// collector's percentage to gcPercent, unless GOGC is: the environment is Go's own way to say
// either, and wins.
func applyGoLimit(b Budget, log *slog.Logger) {
	gogc := strconv.Itoa(gcPercent)
	if v := os.Getenv("GOGC"); v != "" {
		gogc = "GOGC=" + v
	} else {
		debug.SetGCPercent(gcPercent)
	}
	limit := strconv.FormatInt(b.Go, 10)
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		limit = "GOMEMLIMIT=" + v
	} else {
		debug.SetMemoryLimit(b.Go)
	}
	log.Info("memory budget", "total", b.Total, "engine", b.Engine, "engine_page_decay", b.EngineDecay, "go_soft_limit", limit, "go_gc_percent", gogc)
}
