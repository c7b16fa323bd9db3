package ingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

type receiverMetrics struct {
	events      *prometheus.CounterVec
	requests    *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	ack         prometheus.Histogram
	inflight    prometheus.Gauge
	lastBatch   *prometheus.GaugeVec
	deadLetters *prometheus.CounterVec
	dlDropped   prometheus.Counter
	// unknownNames and unknownRefused: names not configured taken, and requests refused
	// past their limit (Options.MaxUnknownAPIServers).
	unknownNames   prometheus.Gauge
	unknownRefused prometheus.Counter
}

func newReceiverMetrics() *receiverMetrics {
	m := &receiverMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.IngestEventsTotal,
			Help: "Audit events received, by sending apiserver and result: accepted (stored), duplicate (already stored, e.g. a resent batch) or invalid (kept as a dead letter).",
		}, []string{metrics.LabelAPIServer, metrics.LabelResult}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.IngestRequestsTotal,
			Help: "Audit webhook requests by sending apiserver (\"unknown\" until established) and HTTP status code.",
		}, []string{metrics.LabelAPIServer, metrics.LabelCode}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.IngestBytesTotal,
			Help: "Audit webhook body bytes as received (compressed when the body was gzip-encoded).",
		}, []string{metrics.LabelAPIServer}),
		ack: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metrics.IngestAckDurationSeconds,
			Help:    "Time from the start of an audit webhook request to its answer, spool fsync included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.IngestInflightRequests,
			Help: "Audit webhook requests being read or processed.",
		}),
		lastBatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.IngestLastEventTimestampSeconds,
			Help: "Unix time of the last batch accepted from each apiserver.",
		}, []string{metrics.LabelAPIServer}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.IngestDeadLettersTotal,
			Help: "Items and bodies kept in the dead-letter files, by reason: invalid_item or not_eventlist.",
		}, []string{metrics.LabelReason}),
		dlDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.IngestDeadLettersDroppedTotal,
			Help: "Dead letters that could not be kept (dead-letter size limit reached or write error).",
		}),
		unknownNames: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.IngestUnknownAPIServers,
			Help: "Apiserver names not in the configuration whose batches are taken (--accept-unknown-apiservers), at most --max-unknown-apiservers.",
		}),
		unknownRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.IngestUnknownAPIServersRefusedTotal,
			Help: "Requests under a new apiserver name not in the configuration, refused (403) because --max-unknown-apiservers names were taken already.",
		}),
	}
	// Every reason's series exists from the start, at 0, so that rate() and increase() see the
	// first dead letter (a series born at 1 shows no increase) and absence alerts can tell a
	// silent receiver from a missing one.
	for _, r := range []string{reasonInvalidItem, reasonNotEventList} {
		m.deadLetters.WithLabelValues(r)
	}
	return m
}

func (m *receiverMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.events, m.requests, m.bytes, m.ack, m.inflight, m.lastBatch, m.deadLetters, m.dlDropped,
		m.unknownNames, m.unknownRefused}
}

// Dead-letter reasons (LabelReason values of IngestDeadLettersTotal).
const (
	reasonInvalidItem  = "invalid_item"
	reasonNotEventList = "not_eventlist"
)
