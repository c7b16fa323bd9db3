package bench

import (
	"os"
	"testing"
	"time"
)

// The CPU this process burns shows under its own threads' group, and nowhere else (a test
// binary starts no engine threads).
func TestThreadCPUCountsTheProcessThreads(t *testing.T) {
	before, err := threadCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
	}
	after, err := threadCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := after[ThreadsProcess] - before[ThreadsProcess]; d < 0.1 {
		t.Errorf("the process's threads used %.2f s over a 0.3 s spin", d)
	}
	if after[ThreadsMerges] != 0 {
		t.Errorf("merge threads in a test binary: %v", after)
	}
}

// The per-second figures are the counters' increments over the load's seconds.
func TestEngineDuringLoad(t *testing.T) {
	before := &engineFigures{events: map[string]float64{"InsertedCompactParts": 10, "InsertedWideParts": 1, "Merge": 5,
		"MergeTreeDataWriterUncompressedBytes": 1e9, "MergedUncompressedBytes": 2e9}}
	after := &engineFigures{parts: 40, events: map[string]float64{"InsertedCompactParts": 100, "InsertedWideParts": 11, "Merge": 25,
		"MergeTreeDataWriterUncompressedBytes": 3e9, "MergedUncompressedBytes": 5e9}}
	r := &Result{SendSeconds: 10}
	r.engineDuringLoad(before, after)
	if r.EnginePartsPerSec != 10 || r.EngineMergesPerSec != 2 || r.EngineMergeRewrite != 1.5 || r.EngineInsertedMBPerSec != 200 || r.EngineActivePartsEnd != 40 {
		t.Errorf("figures %+v", r)
	}
	if r.EngineCounters["Merge"] != 20 {
		t.Errorf("counters %v", r.EngineCounters)
	}
	r = &Result{SendSeconds: 10}
	r.engineDuringLoad(nil, after) // serve without an embedded engine
	if r.EngineCounters != nil || r.EnginePartsPerSec != 0 {
		t.Errorf("figures without counters at the start: %+v", r)
	}
}
