package store

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

// EngineProfileEvents are the engine's cumulative counters (system.events) that /metrics
// carries: what inserts wrote, what merges read and rewrote, and how long merges took. They
// say where the store's per-second cost goes (how many parts a second, how much the merges
// rewrite per byte inserted) without a query in the engine's log, which the embedded engine
// does not keep.
var EngineProfileEvents = []string{
	"InsertQuery",
	"InsertedRows",
	"InsertedBytes",
	"InsertedCompactParts",
	"InsertedWideParts",
	"MergeTreeDataWriterRows",
	"MergeTreeDataWriterUncompressedBytes",
	"MergeTreeDataWriterCompressedBytes",
	"MergeTreeDataWriterBlocks",
	"MergeTreeDataWriterSortingBlocksMicroseconds",
	"Merge",
	"MergeSourceParts",
	"MergedRows",
	"MergedUncompressedBytes",
	"MergeTotalMilliseconds",
	"MergeHorizontalStageTotalMilliseconds",
	"MergeVerticalStageTotalMilliseconds",
	"MergedIntoCompactParts",
	"MergedIntoWideParts",
	"SelectQuery",
}

// EngineMemoryMetrics are the engine's gauges of its own memory (system.metrics) that /metrics
// carries: all it has allocated and not freed (MemoryTracking). The process's resident memory
// less Go's heap and this is code (the library's and serve's), the engine's threads' stacks,
// and the pages its allocator keeps after the engine freed them (chdb.Options.DirtyPageDecay).
var EngineMemoryMetrics = []string{EngineMemoryTracking}

// EngineMemoryTracking is the engine's gauge of all it has allocated and not freed.
const EngineMemoryTracking = "MemoryTracking"

// engineStatsEvery bounds how often a scrape asks the engine: the engine runs one statement at
// a time, so a scrape must not queue behind every insert (Prometheus scrapes every 15-60 s;
// the bench every second).
const engineStatsEvery = 5 * time.Second

// engineStatsTimeout bounds a scrape's wait for the engine; past it the last figures are served.
const engineStatsTimeout = 2 * time.Second

// EngineCollector exports the embedded engine's counters (EngineProfileEvents), the active
// parts of each peertrail table and the engine's memory (EngineMemoryMetrics), read at scrape
// time at most every engineStatsEvery.
//
// Concurrency: Collect may be called from several scrapes at once; one reads the engine, the
// others serve what it read last. Lifecycle: it reads s until s is closed, then serves the
// last figures; it owns nothing.
type EngineCollector struct {
	s   Store
	log *slog.Logger

	events *prometheus.Desc
	parts  *prometheus.Desc
	memory *prometheus.Desc
	// eventsQuery reads EngineProfileEvents from system.events, memoryQuery EngineMemoryMetrics
	// from system.metrics.
	eventsQuery, memoryQuery string

	mu     sync.Mutex
	read   time.Time          // when the figures were last read
	counts map[string]float64 // EngineProfileEvents by name
	active map[string]float64 // active parts by table
	held   map[string]float64 // EngineMemoryMetrics by name
}

// NewEngineCollector returns the collector of s's engine counters.
func NewEngineCollector(s Store, log *slog.Logger) *EngineCollector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &EngineCollector{
		s: s, log: log,
		eventsQuery: "SELECT event, value FROM system.events WHERE event IN (" + quotedList(EngineProfileEvents) + ")",
		memoryQuery: "SELECT metric, value FROM system.metrics WHERE metric IN (" + quotedList(EngineMemoryMetrics) + ")",
		events: prometheus.NewDesc(metrics.StoreEngineProfileEventsTotal,
			"The embedded engine's cumulative counters (its system.events) of inserts and merges, by event: rows and bytes written by inserts, parts inserted, merges, rows and bytes they rewrote, their milliseconds.",
			[]string{metrics.LabelEvent}, nil),
		parts: prometheus.NewDesc(metrics.StoreEngineActiveParts,
			"Active data parts of each peertrail table in the embedded engine; a count that keeps growing means merges fall behind the inserts.",
			[]string{metrics.LabelTable}, nil),
		memory: prometheus.NewDesc(metrics.StoreEngineMemoryBytes,
			"Bytes the embedded engine has allocated and not freed, by its own accounting (its system.metrics MemoryTracking); the pages its allocator keeps after they are freed are not counted.",
			[]string{metrics.LabelMetric}, nil),
	}
}

// quotedList is names as a list of SQL string literals; the names are the constants above.
func quotedList(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	return strings.Join(quoted, ", ")
}

// Describe implements prometheus.Collector.
func (c *EngineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.parts
	ch <- c.memory
}

// Collect implements prometheus.Collector.
func (c *EngineCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.read) >= engineStatsEvery {
		ctx, cancel := context.WithTimeout(context.Background(), engineStatsTimeout)
		if err := c.refresh(ctx); err != nil {
			c.log.Debug("engine statistics not read; serving the last", "err", err)
		}
		cancel()
	}
	for _, name := range EngineProfileEvents {
		if v, ok := c.counts[name]; ok {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, v, name)
		}
	}
	for table, n := range c.active {
		ch <- prometheus.MustNewConstMetric(c.parts, prometheus.GaugeValue, n, table)
	}
	for _, name := range EngineMemoryMetrics {
		if v, ok := c.held[name]; ok {
			ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, v, name)
		}
	}
}

// refresh reads the engine's counters, parts and memory (under c.mu).
func (c *EngineCollector) refresh(ctx context.Context) error {
	c.read = time.Now()
	r, err := c.s.Query(ctx, c.eventsQuery, nil)
	if err != nil {
		return err
	}
	p, err := c.s.Query(ctx, "SELECT table, count() FROM system.parts WHERE database = {db:String} AND active GROUP BY table", map[string]string{"db": Database})
	if err != nil {
		return err
	}
	m, err := c.s.Query(ctx, c.memoryQuery, nil)
	if err != nil {
		return err
	}
	c.counts, c.active, c.held = numbersByName(r), numbersByName(p), numbersByName(m)
	return nil
}

// numbersByName turns rows of (name, number) into a map; a row that is not one is left out.
func numbersByName(r *Result) map[string]float64 {
	out := make(map[string]float64, len(r.Rows))
	for _, row := range r.Rows {
		if len(row) != 2 {
			continue
		}
		if v, err := strconv.ParseFloat(row[1], 64); err == nil {
			out[row[0]] = v
		}
	}
	return out
}
