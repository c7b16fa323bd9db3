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

// The memory's split covers the same window as the RSS it splits: the polls before the last
// minute of the load (the start, when the heap is small) do not count, and a run whose serve
// never answered /metrics reports none.
func TestSummariseSplitsTheLastMinute(t *testing.T) {
	s := &rssSamples{}
	for at := 0.0; at <= 120; at++ {
		s.add(at, procUsage{rss: 600 << 20, rssAnon: 500 << 20})
	}
	for at := 0.0; at <= 120; at += 15 {
		heap := int64(50 << 20)
		if at >= 60 {
			heap = int64(200<<20) + int64(at-60)*(1<<20)
		}
		s.addHeap(at, heap, 30<<20)
	}
	var r Result
	s.summarise(60, 120, &r)
	if r.LoadRSSMeanBytes != 600<<20 {
		t.Errorf("RSS mean %d, want %d", r.LoadRSSMeanBytes, 600<<20)
	}
	// The polls at 60, 75, 90, 105 and 120 s: 200-260 MiB, 230 on average.
	if want := int64(230 << 20); r.LoadGoHeapMeanBytes != want || r.LoadEngineLiveMeanBytes != 30<<20 {
		t.Errorf("Go heap %d, engine %d; want %d and %d", r.LoadGoHeapMeanBytes, r.LoadEngineLiveMeanBytes, want, 30<<20)
	}

	none := &rssSamples{}
	none.add(1, procUsage{rss: 1 << 20})
	var r2 Result
	none.summarise(0, 2, &r2)
	if r2.LoadGoHeapMeanBytes != 0 || r2.LoadEngineLiveMeanBytes != 0 || r2.LoadRSSMeanBytes != 1<<20 {
		t.Errorf("without /metrics: %+v", r2)
	}
}
