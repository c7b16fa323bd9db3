package server

import (
	"os"
	"runtime"
)

// WidenScheduler gives the Go scheduler twice as many Ps as the CPUs it would use, unless
// $GOMAXPROCS says otherwise, and reports the number it set. A webhook request that becomes
// runnable then gets a thread of its own at once rather than waiting, up to Go's 10 ms time
// slice, for a P the correlator, the store writer or the collector holds (BENCHMARKS.md,
// "Under load"). Process-wide: serve calls it once, before New.
func WidenScheduler() (procs int, set bool) {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0), false
	}
	n := 2 * runtime.GOMAXPROCS(0)
	runtime.GOMAXPROCS(n)
	return n, true
}
