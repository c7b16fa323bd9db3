package integration

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/simulate"
)

// TestChainListReachesIntoTheStore: final chains leave memory after the late window, and
// GET /api/v1/chains?since= must still list them (from the store), with its filters.
func TestChainListReachesIntoTheStore(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(t, dir)
	cfg.InsecureHTTP = true
	cfg.AcceptUnknownAPIServers = true
	cfg.Correlate.ChainWindow = config.Duration(time.Second)
	cfg.Correlate.LateWindow = config.Duration(time.Second)
	p := startPeertrail(t, cfg)

	up := simulate.DefaultUpgrade()
	up.Duration, up.Rate, up.Seed = 8*time.Second, 30, 3
	up.Faults = simulate.Faults{}
	truths := simulateInto(t, p, up, simulate.WebhookOptions{Dir: dir, BatchWait: 300 * time.Millisecond, Seed: 3})
	want := map[string]int{}
	for _, tr := range truths {
		want[tr.Class]++
	}
	if want["internal"] == 0 || want["proxied"] == 0 {
		t.Fatalf("the run made no internal or no proxied request: %v", want)
	}

	list := func(query string) []*chain.Chain {
		t.Helper()
		resp, err := readerClient.Get(p.srv.URL() + "/api/v1/chains?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Chains  []*chain.Chain `json:"chains"`
			Warning string         `json:"warning"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Warning != "" {
			t.Fatalf("GET /api/v1/chains?%s: %s %v %q", query, resp.Status, err, body.Warning)
		}
		return body.Chains
	}
	var all, memory []*chain.Chain
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		all, memory = list("since=1h&limit=10000"), list("limit=10000")
		if len(all) >= len(truths) && len(memory) < len(truths)/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests sent; listed with since=1h %d chains, from memory %d", len(truths), len(all), len(memory))
		}
	}
	t.Logf("%d requests; since=1h lists %d chains, memory alone %d", len(truths), len(all), len(memory))
	for i := 1; i < len(all); i++ {
		if all[i].LastReceived.After(all[i-1].LastReceived) {
			t.Fatalf("chains not newest first at %d", i)
		}
	}
	internal := list("since=1h&limit=10000&class=internal")
	for _, c := range internal {
		if c.Class != chain.ClassInternal || c.ID == "" || c.AuditID == "" {
			t.Fatalf("class=internal listed %+v", c)
		}
	}
	if len(internal) != want["internal"] {
		t.Errorf("class=internal lists %d chains, the simulation made %d internal requests", len(internal), want["internal"])
	}
	if got := list("since=1h&limit=5&class=proxied"); len(got) != 5 {
		t.Errorf("limit=5 listed %d proxied chains", len(got))
	}
}
