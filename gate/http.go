package gate

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

// Register adds GET /api/v1/gate to mux: the verdict as JSON, with status 200 whether it says
// proceed or pause (the verdict is in the body; a non-200 means the gate itself failed).
func (g *Gate) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/gate", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(g.Evaluate())
	})
}

var (
	descProceed   = prometheus.NewDesc(metrics.GateProceed, "1 while the upgrade gate says proceed, 0 while it says pause.", nil, nil)
	descFailing   = prometheus.NewDesc(metrics.GateCheckFailing, "1 for each gate check that currently fails.", []string{metrics.LabelCheck}, nil)
	descValue     = prometheus.NewDesc(metrics.GateCheckValue, "Each gate check's current value (ratio, count or seconds).", []string{metrics.LabelCheck}, nil)
	descThreshold = prometheus.NewDesc(metrics.GateCheckThreshold, "Each gate check's limit.", []string{metrics.LabelCheck}, nil)
	descVersion   = prometheus.NewDesc(metrics.APIServerVersionInfo, "1 per apiserver, labelled with the version it was last seen running.", []string{metrics.LabelAPIServer, metrics.LabelVersion}, nil)
)

// Collector exports the verdict and every check, evaluated at scrape time.
func (g *Gate) Collector() prometheus.Collector { return collector{g} }

type collector struct{ g *Gate }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProceed, descFailing, descValue, descThreshold, descVersion} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	v := c.g.Evaluate()
	ch <- prometheus.MustNewConstMetric(descProceed, prometheus.GaugeValue, b2f(v.Proceed))
	for _, k := range v.Checks {
		ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, b2f(!k.OK), k.Name)
		ch <- prometheus.MustNewConstMetric(descValue, prometheus.GaugeValue, k.Value, k.Name)
		ch <- prometheus.MustNewConstMetric(descThreshold, prometheus.GaugeValue, k.Threshold, k.Name)
	}
	for _, s := range c.g.src.APIServers() {
		if s.Version != "" {
			ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, 1, s.Name, s.Version)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
