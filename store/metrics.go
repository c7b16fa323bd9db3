package store

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

type writerMetrics struct {
	rowsWritten    *prometheus.CounterVec
	rowsSkipped    *prometheus.CounterVec
	insertErrors   *prometheus.CounterVec
	insertDuration *prometheus.HistogramVec
	newest         *prometheus.GaugeVec
	badFrames      prometheus.Counter
	// chainsRetracted counts superseded final chain rows written again as retracted.
	chainsRetracted prometheus.Counter
}

func newWriterMetrics() *writerMetrics {
	table := []string{metrics.LabelTable}
	m := &writerMetrics{
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.StoreRowsWrittenTotal,
			Help: "Rows inserted into ClickHouse, by table.",
		}, table),
		rowsSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.StoreRowsSkippedTotal,
			Help: "Rows not inserted because ClickHouse already held them (redelivered after a restart or a failed insert; chain versions already written), by table.",
		}, table),
		insertErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.StoreInsertErrorsTotal,
			Help: "Failed inserts into ClickHouse, by table; each is retried, nothing is dropped.",
		}, table),
		insertDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metrics.StoreInsertDurationSeconds,
			Help:    "Time of one insert into ClickHouse, by table.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, table),
		newest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.StoreNewestRowTimestampSeconds,
			Help: "Unix time peertrail received the newest row written, by table; time() minus it is how far the store is behind.",
		}, table),
		badFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.StoreBadFramesTotal,
			Help: "Spool frames the store writer could not decode and skipped.",
		}),
		chainsRetracted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.StoreChainsRetractedTotal,
			Help: "Final chains the writer took back from the rollups because a newer version superseded them (reclassified by a late record, or replayed).",
		}),
	}
	// Every table's series exist from the start, so that rate() and absence alerts work before
	// the first insert (or the first failure).
	for _, t := range []string{"events", "chains"} {
		m.rowsWritten.WithLabelValues(t)
		m.rowsSkipped.WithLabelValues(t)
		m.insertErrors.WithLabelValues(t)
		m.insertDuration.WithLabelValues(t)
	}
	return m
}

// Collectors returns the writer's metrics, to register with the process's registry.
func (w *Writer) Collectors() []prometheus.Collector {
	m := w.metrics
	return append([]prometheus.Collector{m.rowsWritten, m.rowsSkipped, m.insertErrors, m.insertDuration, m.newest, m.badFrames, m.chainsRetracted},
		w.chainMetrics.collectors()...)
}
