package correlate

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// peertrail_correlate_forwarded_total counts, per entry apiserver, the chains it forwarded
// (labelled apiserver, as the apiservers' own apiserver_rerouted_request_total), from 0 for
// every apiserver known at registration.
func TestForwardedCountsPerEntryAPIServer(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.co.Collectors()...)
	if n, err := testutil.GatherAndCount(reg, metrics.CorrelateForwardedTotal); err != nil || n != 3*len(chain.ForwardedClasses) {
		t.Fatalf("%d series before any chain (%v), want %d: each known apiserver, each forwarded class", n, err, 3*len(chain.ForwardedClasses))
	}
	at := t0.Add(time.Minute)
	learnPodgroupsOnC(h)
	p := podgroups("p1", at)
	h.feed(p.entry("kas-a", 200), p.peer("kas-c", addrA, 200))
	f := podgroups("f1", at)
	h.feed(f.entry("kas-a", 503))
	l := pods("l1", at)
	h.feed(l.local("kas-b", 200, ""))
	h.settle()
	got := func(apiserver string, class chain.Class) float64 {
		return testutil.ToFloat64(h.co.m.forwarded.WithLabelValues(apiserver, string(class)))
	}
	if got("kas-a", chain.ClassProxied) != 2 || got("kas-a", chain.ClassProxyFailed) != 1 {
		t.Errorf("kas-a forwarded %v served and %v failed, want 2 (with the seed) and 1", got("kas-a", chain.ClassProxied), got("kas-a", chain.ClassProxyFailed))
	}
	if got("kas-b", chain.ClassProxied)+got("kas-b", chain.ClassProxyFailed) != 0 {
		t.Errorf("kas-b's local request counted as forwarded")
	}
}
