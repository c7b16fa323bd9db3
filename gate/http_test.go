package gate

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/metrics"
)

// peertrail_apiserver_version_info exists from the start for every apiserver whose version the
// configuration gives (server seeds the capability view with it), before any of its audit
// arrives, so that the version-skew alert and the dashboard's version panel have a series
// from the first scrape. An apiserver configured without a version has none until its own
// loopback requests tell it (a version label peertrail would have to make up).
func TestVersionInfoFromTheStart(t *testing.T) {
	caps := correlate.NewCapabilities(time.Hour)
	caps.NoteServer("kas-a", "v1.35.4", "10.0.0.11", time.Time{})
	caps.NoteServer("kas-b", "v1.36.3", "", time.Time{})
	caps.NoteServer("kas-c", "", "", time.Time{})
	g := New(DefaultThresholds(), Sources{
		Recent:      func(time.Duration) chain.Totals { return chain.Totals{} },
		APIServers:  caps.Servers,
		LastBatches: func() map[string]time.Time { return nil },
		Started:     time.Now(),
	}, slog.New(slog.DiscardHandler))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(g.Collector())
	want := `# HELP ` + metrics.APIServerVersionInfo + ` 1 per apiserver, labelled with the version it was last seen running.
# TYPE ` + metrics.APIServerVersionInfo + ` gauge
` + metrics.APIServerVersionInfo + `{apiserver="kas-a",version="v1.35.4"} 1
` + metrics.APIServerVersionInfo + `{apiserver="kas-b",version="v1.36.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metrics.APIServerVersionInfo); err != nil {
		t.Fatal(err)
	}
}
