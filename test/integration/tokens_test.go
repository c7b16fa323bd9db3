package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/test/testpki"
)

// TestRealWebhookBackendWithTokensOfTheirOwn: each apiserver's webhook kubeconfig carries its own
// bearer token (apiservers[].tokenFile), through the kube-apiserver's own webhook client over TLS
// and HTTP/2. A kubeconfig that posts under kas-c's name with kas-a's token stores nothing, and
// kas-a's and kas-b's events are stored once each, under their own names.
func TestRealWebhookBackendWithTokensOfTheirOwn(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "peertrail")
	serving := ca.Server(t, "peertrail")
	cfg := baseConfig(t, dir)
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	cfg.TLS = config.TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile}
	tokens := map[string]string{"kas-a": "token-of-kas-a-1f2e3d", "kas-b": "token-of-kas-b-4c5b6a", "kas-c": "token-of-kas-c-7a8b9c"}
	for _, n := range []string{"kas-a", "kas-b", "kas-c"} {
		f := filepath.Join(dir, n+".token")
		if err := os.WriteFile(f, []byte(tokens[n]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.APIServers = append(cfg.APIServers, config.APIServer{Name: n, TokenFile: f})
	}
	p := startPeertrail(t, cfg)

	want, forged := map[record.Key]sent{}, map[record.Key]sent{}
	a := newBackend(t, kubeconfig(t, dir, "kas-a", p.srv.URL()+"/audit/kas-a", ca.CertFile, nil, tokens["kas-a"]), 100*time.Millisecond)
	b := newBackend(t, kubeconfig(t, dir, "kas-b", p.srv.URL()+"/audit/kas-b", ca.CertFile, nil, tokens["kas-b"]), 100*time.Millisecond)
	// kas-a's token under kas-c's name: every batch is refused (403), retried, then dropped by
	// the client.
	c := newBackend(t, kubeconfig(t, dir, "kas-c-forged", p.srv.URL()+"/audit/kas-c", ca.CertFile, nil, tokens["kas-a"]), 100*time.Millisecond)
	send(t, a, "kas-a", 1, 2000, want)
	send(t, b, "kas-b", 2, 2000, want)
	send(t, c, "kas-c", 3, 500, forged)
	for _, be := range []backend{a, b, c} {
		be.shutdown()
	}
	acceptedA := metricValue(t, p.srv.URL(), ca, `peertrail_ingest_events_total{apiserver="kas-a",result="accepted"}`)
	acceptedC := metricValue(t, p.srv.URL(), ca, `peertrail_ingest_events_total{apiserver="kas-c",result="accepted"}`)
	refused := metricValue(t, p.srv.URL(), ca, `peertrail_ingest_requests_total{apiserver="unknown",code="403"}`)
	p.stop()
	if acceptedA != 2000 || acceptedC != 0 {
		t.Errorf("metrics say kas-a %v and kas-c %v events accepted, want 2000 and 0", acceptedA, acceptedC)
	}
	if refused == 0 {
		t.Error("no batch was refused 403: the forged kubeconfig never posted, the test proved nothing")
	}
	// exactlyOnce fails on any stored event that is not kas-a's or kas-b's.
	exactlyOnce(t, spooled(t, cfg.DataDir), want)
}

// TestSimulatorPostsWithEachAPIServersToken: the simulator (peertrail simulate --token-dir)
// gives each simulated apiserver's webhook kubeconfig its own token, also through its fault
// proxy (late and duplicated batches), so a peertrail that takes a token as one apiserver's only
// accepts every apiserver's events and refuses none.
func TestSimulatorPostsWithEachAPIServersToken(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(t, dir)
	cfg.InsecureHTTP = true
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	tokens := map[string]string{}
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("kas-%d", i)
		tokens[n] = fmt.Sprintf("token-of-%s-%d9f", n, i)
		f := filepath.Join(dir, n+".token")
		if err := os.WriteFile(f, []byte(tokens[n]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg.APIServers = append(cfg.APIServers, config.APIServer{Name: n, TokenFile: f})
	}
	p := startPeertrail(t, cfg)
	up := simulate.DefaultUpgrade()
	up.Duration, up.Rate, up.Seed = 6*time.Second, 30, 3
	simulateInto(t, p, up, simulate.WebhookOptions{Dir: dir, BatchWait: 300 * time.Millisecond,
		Late: 0.2, LateBy: 500 * time.Millisecond, Duplicate: 0.2, Seed: 3, Tokens: tokens})
	for n := range tokens {
		if v := metricValue(t, p.srv.URL(), nil, `peertrail_ingest_events_total{apiserver="`+n+`",result="accepted"}`); v == 0 {
			t.Errorf("no event of %s accepted", n)
		}
	}
	for _, code := range []string{"401", "403"} {
		if v := metricValue(t, p.srv.URL(), nil, `peertrail_ingest_requests_total{apiserver="unknown",code="`+code+`"}`); v != 0 {
			t.Errorf("%v batches refused %s", v, code)
		}
	}
}
