package spool

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

// Collector exports the spool's size, limits, consumer lag and fsync latency.
func (s *Spool) Collector() prometheus.Collector { return spoolCollector{s} }

type spoolCollector struct{ s *Spool }

var (
	descBytes     = prometheus.NewDesc(metrics.SpoolBytes, "Bytes in all spool segments.", nil, nil)
	descCapacity  = prometheus.NewDesc(metrics.SpoolCapacityBytes, "Size limit of the spool; appends beyond it are refused with 503.", nil, nil)
	descSegments  = prometheus.NewDesc(metrics.SpoolSegments, "Spool segment files.", nil, nil)
	descWritten   = prometheus.NewDesc(metrics.SpoolWrittenBytesTotal, "Bytes appended to the spool.", nil, nil)
	descTruncated = prometheus.NewDesc(metrics.SpoolRecoveredBytesTotal, "Bytes of torn or corrupt tail cut off when the spool was opened.", nil, nil)
	descCorrupt   = prometheus.NewDesc(metrics.SpoolCorruptFramesTotal, "Frames that failed their checksum when read; the rest of their segment was skipped.", nil, nil)
	descLag       = prometheus.NewDesc(metrics.SpoolConsumerLagBytes, "Durable spool bytes a consumer has not yet committed as done.", []string{metrics.LabelConsumer}, nil)
)

func (c spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBytes, descCapacity, descSegments, descWritten, descTruncated, descCorrupt, descLag} {
		ch <- d
	}
	c.s.syncDuration.Describe(ch)
}

func (c spoolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(st.MaxBytes))
	ch <- prometheus.MustNewConstMetric(descSegments, prometheus.GaugeValue, float64(st.Segments))
	ch <- prometheus.MustNewConstMetric(descWritten, prometheus.CounterValue, float64(st.WrittenBytes))
	ch <- prometheus.MustNewConstMetric(descTruncated, prometheus.CounterValue, float64(st.TruncatedBytes))
	ch <- prometheus.MustNewConstMetric(descCorrupt, prometheus.CounterValue, float64(st.CorruptFrames))
	for name, lag := range st.Lag {
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(lag), name)
	}
	c.s.syncDuration.Collect(ch)
}
