package integration

import (
	"context"
	"fmt"
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
	truths := simulateInto(t, p, up, simulate.WebhookOptions{
		Dir: dir, BatchWait: 500 * time.Millisecond, Late: 0.05, LateBy: 2 * time.Second, Duplicate: 0.1, Seed: 7,
	})
	sc, err := simulate.Score(context.Background(), readerClient, p.srv.URL(), truths, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; %d of %d right (%s)", simulate.Summary(truths), sc.Matched, sc.Requests, sc.Percent())
	for _, m := range sc.Mismatches {
		t.Log("wrong:", m)
	}
	if sc.Missing > 0 {
		t.Errorf("%d requests never became a final chain", sc.Missing)
	}
	// Every request's class and findings are known to the simulator: a miss is a bug.
	if sc.Matched != sc.Requests {
		t.Errorf("%d of %d requests classified wrong", sc.Requests-sc.Matched, sc.Requests)
	}
	for _, class := range []string{"proxied", "proxy_failed", "misleading_404", "broken", "internal", "local"} {
		if sc.Confusion[class][class] == 0 {
			t.Errorf("no %s request classified as such: %v", class, sc.Confusion[class])
		}
	}
	if sc.Confusion["proxy_failed"]["proxy_failed"] > 0 && sc.Faults["peer_killed"][1] == 0 {
		t.Error("no request of the killed peer was found with its restart noise")
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

// simulateInto plays the upgrade up into p through the real audit webhook backend (opts.URL is
// p's) and returns the truth of every request.
func simulateInto(t *testing.T, p *peertrail, up simulate.UpgradeConfig, opts simulate.WebhookOptions) []simulate.Truth {
	t.Helper()
	names := make([]string, up.APIServers)
	for i := range names {
		names[i] = fmt.Sprintf("kas-%d", i+1) // as simulate.NewUpgrade names them
	}
	opts.URL = p.srv.URL()
	sink, err := simulate.NewWebhookSink(names, opts)
	if err != nil {
		t.Fatal(err)
	}
	u := simulate.NewUpgrade(up, sink)
	if err := u.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	sink.Close()
	return u.Truths()
}
