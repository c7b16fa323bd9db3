package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store"
)

// The engine's counters on /metrics move with what is inserted, and the active parts of the
// events table are counted.
func TestEngineCollectorCountsInserts(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	before := gatherEngine(t, store.NewEngineCollector(s, nil))

	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	g := simulate.NewEvents(7, func() time.Time { at = at.Add(time.Millisecond); return at })
	recs, err := simulatedRecords(g, "engine-stats-a", at, 500)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]any, len(recs))
	for i := range recs {
		rows[i] = store.EventRow(&recs[i])
	}
	if err := s.Insert(ctx, store.EventsTable, store.EventColumns, rows); err != nil {
		t.Fatal(err)
	}

	after := gatherEngine(t, store.NewEngineCollector(s, nil))
	if d := after.events["InsertedRows"] - before.events["InsertedRows"]; d < float64(len(rows)) {
		t.Errorf("InsertedRows grew by %v over an insert of %d rows", d, len(rows))
	}
	if d := after.events["InsertQuery"] - before.events["InsertQuery"]; d < 1 {
		t.Errorf("InsertQuery grew by %v over an insert", d)
	}
	if after.parts["events"] < 1 {
		t.Errorf("active parts of events: %v, want at least the one just inserted (all: %v)", after.parts["events"], after.parts)
	}
	for name := range after.events {
		if !slices.Contains(store.EngineProfileEvents, name) {
			t.Errorf("counter %q is not one of EngineProfileEvents", name)
		}
	}
	// The engine holds memory of its own once it has stored something (its tables, parts and
	// caches); its accounting of it is on /metrics beside Go's.
	if after.memory[store.EngineMemoryTracking] <= 0 {
		t.Errorf("engine memory: %v, want %s above 0", after.memory, store.EngineMemoryTracking)
	}
	for name := range after.memory {
		if !slices.Contains(store.EngineMemoryMetrics, name) {
			t.Errorf("memory gauge %q is not one of EngineMemoryMetrics", name)
		}
	}
}

type engineFigures struct {
	events map[string]float64
	parts  map[string]float64
	memory map[string]float64
}

func gatherEngine(t *testing.T, c prometheus.Collector) engineFigures {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	f := engineFigures{events: map[string]float64{}, parts: map[string]float64{}, memory: map[string]float64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			label := m.GetLabel()[0].GetValue()
			switch mf.GetName() {
			case metrics.StoreEngineProfileEventsTotal:
				f.events[label] = m.GetCounter().GetValue()
			case metrics.StoreEngineActiveParts:
				f.parts[label] = m.GetGauge().GetValue()
			case metrics.StoreEngineMemoryBytes:
				f.memory[label] = m.GetGauge().GetValue()
			}
		}
	}
	if len(f.events) == 0 {
		t.Fatalf("no engine counters gathered")
	}
	return f
}
