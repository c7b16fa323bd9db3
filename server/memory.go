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
// max_server_memory_usage) and the Go runtime's soft limit. Without a soft limit Go lets the
// heap grow to twice what was live at the last collection, and after a burst it kept that
// much (over a gigabyte in peertrail bench) while the process sat idle; with one, the
// collector runs more often as the heap nears it, which cost no measurable rate in the bench
// (BENCHMARKS.md). It is soft: a live heap above it is never refused, only collected harder.
type Budget struct {
	// Total is what the process may use: config.File.MemoryLimit, or its cgroup's limit or
	// the host's RAM.
	Total int64
	// Engine caps the embedded engine (0 for another store): Store.MaxMemory, or half of Total.
	Engine int64
	// Go is the runtime's soft limit: 90% of Total less Engine (the rest is stacks, the
	// runtime's own and the kernel's page cache of the spool), at least 256 MiB.
	Go int64
	// EngineDecay is how soon the engine's allocator returns the pages the engine freed:
	// limitedDecay when Total is a limit (config.File.MemoryLimit or the cgroup's), else 0,
	// the library's own 5 s.
	EngineDecay time.Duration
}

// limitedDecay is Budget.EngineDecay under a limit. The engine's cap counts what it has
// allocated, not the pages it freed and its allocator keeps for 5 s: at 10,000 events/s those
// were 250-450 MB more on average, up to 700 MB, which a cgroup charges and cannot reclaim.
// After 1 s they were 100-250 MB fewer, for 7-25% more CPU (BENCHMARKS.md): under a limit
// memory comes before CPU, as with Go's soft limit.
const limitedDecay = time.Second

// minGoLimit keeps a small Total from starving the receiver and the correlator.
const minGoLimit = 256 << 20

// MemoryBudget shares cfg's memory between the engine and Go.
func MemoryBudget(cfg config.File) Budget {
	b := Budget{Total: int64(cfg.MemoryLimit)}
	limited := b.Total > 0
	if !limited {
		b.Total, limited = store.MemoryAvailable()
	}
	if cfg.Store.Engine == "" || cfg.Store.Engine == "embedded" {
		b.Engine = int64(cfg.Store.MaxMemory)
		if b.Engine <= 0 {
			b.Engine = b.Total / 2
		}
		if limited {
			b.EngineDecay = limitedDecay
		}
	}
	b.Go = max(b.Total/10*9-b.Engine, minGoLimit)
	return b
}

// gcPercent is the Go collector's GOGC unless the environment sets one: it collects when the
// heap has grown by an eighth of what was live, not by all of it (Go's default of 100). The
// heap peertrail keeps live is mostly without pointers (the correlator's chains, the spool
// frames the store writer holds), so a collection costs little: at 10,000 events/s the
// collector took under 1% of serve's CPU. Four times as many collections (25 against 100)
// moved neither its CPU nor the acknowledge latency beyond the noise, while Go held 120-220 MB
// less; twice as many again (12 against 25), 20-40 MB less, again for no CPU or latency
// beyond the noise (BENCHMARKS.md).
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
