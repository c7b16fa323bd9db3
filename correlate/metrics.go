package correlate

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

type correlateMetrics struct {
	// known reports whether some apiserver serves group/resource (Capabilities.KnownResource);
	// the chains' labels name only those (nil: every one).
	known        func(group, resource string) bool
	records      prometheus.Counter
	chains       *prometheus.CounterVec
	forwarded    *prometheus.CounterVec
	findings     *prometheus.CounterVec
	overhead     *prometheus.HistogramVec
	proxiedDur   *prometheus.HistogramVec
	open         prometheus.Gauge
	evictions    *prometheus.CounterVec
	reclassified *prometheus.CounterVec
	held         prometheus.Counter
	reevaluated  prometheus.Counter
	pending      prometheus.Gauge
	sinkErrors   prometheus.Counter
	badFrames    prometheus.Counter
}

// latencyBuckets span a loopback forward (sub-millisecond) to a slow cross-zone one.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newCorrelateMetrics() *correlateMetrics {
	pair := []string{metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer}
	return &correlateMetrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.CorrelateRecordsTotal, Help: "Audit records joined into chains.",
		}),
		chains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.CorrelateChainsTotal,
			Help: "Final chains (one per request) by class, entry and peer apiserver, group and resource (\"" + metrics.GroupResourceOther + "\" for both where no apiserver was seen to serve the resource).",
		}, []string{metrics.LabelClass, metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer, metrics.LabelGroup, metrics.LabelResource}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.CorrelateForwardedTotal,
			Help: "Requests the apiserver forwarded to a peer as the entry, as the chains show them, by class (proxied, proxy_failed, broken, loop): what its own apiserver_rerouted_request_total counts.",
		}, []string{metrics.LabelAPIServer, metrics.LabelClass}),
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.CorrelateFindingsTotal, Help: "Findings on final chains.",
		}, append([]string{metrics.LabelFinding}, pair...)),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metrics.CorrelateForwardingOverheadSeconds,
			Help:    "Per proxied request, the entry's duration minus the peer's: the time forwarding added.",
			Buckets: latencyBuckets,
		}, pair),
		proxiedDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metrics.CorrelateProxiedDurationSeconds,
			Help:    "Per proxied request, the entry's duration: what the client waited.",
			Buckets: latencyBuckets,
		}, pair),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.CorrelateOpenChains, Help: "Chains still open: records of them may still arrive.",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.CorrelateEvictionsTotal, Help: "Chains finalised early because the open-chain limit was reached, by the class they got.",
		}, []string{metrics.LabelClass}),
		reclassified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.CorrelateReclassifiedTotal, Help: "Final chains reopened by a late record whose class changed.",
		}, []string{metrics.LabelFrom, metrics.LabelTo}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.CorrelateHeldTotal, Help: "Chains kept open one more chain window because their verdict needed evidence not known yet (who serves a resource, whose address an IP is).",
		}),
		reevaluated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.CorrelateReevaluatedTotal, Help: "Final chains decided without the evidence they waited for whose verdict changed when that evidence came later (re-emitted with a higher revision).",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.CorrelatePendingChains, Help: "Final chains waiting to be written to the store.",
		}),
		sinkErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.CorrelateSinkErrorsTotal, Help: "Failed attempts to write chains to the store (retried).",
		}),
		badFrames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.CorrelateBadFramesTotal, Help: "Spool frames the correlator could not decode and skipped.",
		}),
	}
}

// Collectors returns the correlator's metrics, for registration.
func (co *Correlator) Collectors() []prometheus.Collector {
	m := co.m
	// The joiner's own counts, read under the lock at scrape time.
	joinerCount := func(name, help string, n func(*Joiner) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			co.mu.Lock()
			defer co.mu.Unlock()
			return float64(n(co.j))
		})
	}
	reopened := joinerCount(metrics.CorrelateReopenedTotal, "Final chains reopened by a late record (its apiserver's webhook was behind).",
		func(j *Joiner) int64 { return j.Reopened })
	dropped := joinerCount(metrics.CorrelateDroppedRecordsTotal, "Records not joined: their chain or auditID had as many as a chain takes (a reused Audit-ID).",
		func(j *Joiner) int64 { return j.Dropped })
	remnants := joinerCount(metrics.CorrelateReplayRemnantsTotal, "Chains of a replay after a restart that left memory unseen: the last process had stored them whole (a remnant of a chain whose earlier records lay before where the replay began, or a chain replayed whole).",
		func(j *Joiner) int64 { return j.Remnants })
	// The forwarded counts of the apiservers known by now (configured) exist at 0, so that the
	// first forward shows as an increase and the cross-check with their own counter holds from
	// the start.
	if co.caps != nil {
		for _, srv := range co.caps.Servers() {
			for _, c := range chain.ForwardedClasses {
				m.forwarded.WithLabelValues(srv.Name, string(c))
			}
		}
	}
	return []prometheus.Collector{m.records, m.chains, m.forwarded, m.findings, m.overhead, m.proxiedDur, m.open, m.evictions, reopened, dropped, remnants, m.reclassified, m.held, m.reevaluated, m.pending, m.sinkErrors, m.badFrames, co.versionErrors, newMemCollector(co)}
}

// memCollector reports what the joiner holds (Joiner.memory), read under the lock at scrape
// time: it is a few counters, not a walk over the chains.
type memCollector struct {
	co                            *Correlator
	recent, slots, interned, size *prometheus.Desc
}

func newMemCollector(co *Correlator) memCollector {
	return memCollector{co: co,
		recent: prometheus.NewDesc(metrics.CorrelateRecentChains,
			"Final chains kept in memory for the late window (a late record reopens them; the chain API serves them).", nil, nil),
		slots: prometheus.NewDesc(metrics.CorrelateChainSlots,
			"Chain slots allocated: the most chains held at once, rounded up to a page of 4096 (reused, not returned).", nil, nil),
		interned: prometheus.NewDesc(metrics.CorrelateInternedValues,
			"Distinct values (strings, identities, addresses, targets, verdicts) the chains in memory refer to; decoded: the values the frame decoder shares between records.", []string{metrics.LabelTable}, nil),
		size: prometheus.NewDesc(metrics.CorrelateMemoryBytes,
			"Estimated bytes the correlator holds for its chains: their slots (table chains), each table of interned values, and the frame decoder's shared values (decoded).", []string{metrics.LabelTable}, nil),
	}
}

func (c memCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.recent
	ch <- c.slots
	ch <- c.interned
	ch <- c.size
}

func (c memCollector) Collect(ch chan<- prometheus.Metric) {
	c.co.mu.Lock()
	m := c.co.j.memory()
	recent := c.co.j.nDone
	decoded, decodedBytes := c.co.intern.Stats()
	c.co.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.recent, prometheus.GaugeValue, float64(recent))
	ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(m.slots))
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(m.slabBytes), "chains")
	for _, t := range m.tables {
		ch <- prometheus.MustNewConstMetric(c.interned, prometheus.GaugeValue, float64(t.entries), t.name)
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(t.bytes), t.name)
	}
	// The frame decoder's shared values (record.Interner), bounded by its slots.
	ch <- prometheus.MustNewConstMetric(c.interned, prometheus.GaugeValue, float64(decoded), "decoded")
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(decodedBytes), "decoded")
}

// count adds a final chain to the counters.
func (m *correlateMetrics) count(c *chain.Chain) {
	entry, peer := "", ""
	if c.Entry != nil {
		entry = c.Entry.APIServer
	}
	if c.Peer != nil {
		peer = c.Peer.APIServer
	}
	group, resource := c.Group, c.Resource
	if resource != "" && m.known != nil && !m.known(group, resource) {
		group, resource = metrics.GroupResourceOther, metrics.GroupResourceOther
	}
	m.chains.WithLabelValues(string(c.Class), entry, peer, group, resource).Inc()
	if entry != "" && slices.Contains(chain.ForwardedClasses, c.Class) {
		m.forwarded.WithLabelValues(entry, string(c.Class)).Inc()
	}
	for _, f := range c.Findings {
		m.findings.WithLabelValues(string(f), entry, peer).Inc()
	}
	if c.Class == chain.ClassProxied {
		m.overhead.WithLabelValues(entry, peer).Observe(max(c.ForwardingOverheadSeconds, 0))
		m.proxiedDur.WithLabelValues(entry, peer).Observe(c.EntryDurationSeconds)
	}
}
