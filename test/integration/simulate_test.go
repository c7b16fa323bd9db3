package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/simulate"
)

// TestSimulatedUpgradeIsClassified runs a short simulated rolling upgrade with every fault,
// through the real webhook backend into a running peertrail, and scores peertrail's chains
// against the simulator's truth.
func TestSimulatedUpgradeIsClassified(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(t, dir)
	cfg.InsecureHTTP = true
	cfg.AcceptUnknownAPIServers = true
	cfg.Correlate.ChainWindow = config.Duration(3 * time.Second)
	p := startPeertrail(t, cfg)

	up := simulate.DefaultUpgrade()
	up.Duration, up.Rate, up.Seed = 30*time.Second, 40, 7
	up.Faults = simulate.Faults{DropPeerAudit: 0.05, IdentityMismatch: 0.2, Impersonation: 0.3,
		KillPeer: true, KillFor: 8 * time.Second, MVPOff: true}
	sink, err := simulate.NewWebhookSink([]string{"kas-1", "kas-2", "kas-3"}, simulate.WebhookOptions{
		URL: p.srv.URL(), Dir: dir, BatchWait: 500 * time.Millisecond, Late: 0.05, LateBy: 2 * time.Second, Duplicate: 0.1, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	u := simulate.NewUpgrade(up, sink)
	if err := u.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.Close()
	truths := u.Truths()
	sc, err := simulate.Score(context.Background(), http.DefaultClient, p.srv.URL(), truths, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; accuracy %.2f%%", simulate.Summary(truths), 100*sc.Accuracy())
	for _, m := range sc.Mismatches {
		t.Log("wrong:", m)
	}
	if sc.Missing > 0 {
		t.Errorf("%d requests never became a final chain", sc.Missing)
	}
	if sc.Accuracy() < 0.98 {
		t.Errorf("accuracy %.2f%% below 98%%", 100*sc.Accuracy())
	}
	for _, class := range []string{"proxied", "proxy_failed", "misleading_404", "broken", "internal", "local"} {
		if sc.Confusion[class][class] == 0 {
			t.Errorf("no %s request classified as such: %v", class, sc.Confusion[class])
		}
	}
	for _, fault := range []string{"dropped_peer_audit", "identity_mismatch", "mvp_off", "peer_killed"} {
		if sc.Faults[fault][0] == 0 {
			t.Errorf("the run injected no %s fault; the test would prove nothing about it", fault)
		}
	}
	for fault, v := range sc.Faults {
		if v[1] < v[0]*9/10 {
			t.Errorf("fault %s: %d of %d requests classified right", fault, v[1], v[0])
		}
	}
}
