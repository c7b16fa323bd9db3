package integration

import (
	"bytes"
	"crypto/tls"
	"crypto/x509/pkix"
	"net/http"
	"testing"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/test/testpki"
)

// TestAPIListenSeparatesTheWebhook: with --api-listen, the webhook listener serves only /audit
// and the probes, and metrics and the APIs move to their own listener (so a NetworkPolicy can
// admit only the apiservers to the webhook's port), both with the serving certificate; reads need
// a reader's certificate (of a CA of its own), and an apiserver's certificate may only post.
func TestAPIListenSeparatesTheWebhook(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "peertrail")
	serving := ca.Server(t, "peertrail")
	cfg := baseConfig(t, dir)
	cfg.APIListen = "127.0.0.1:0"
	cfg.TLS = config.TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: ca.CertFile}
	readerCA := testpki.NewCA(t, dir, "readers")
	cfg.Readers = config.Readers{ClientCAFile: readerCA.CertFile}
	cfg.APIServers = []config.APIServer{{Name: "kas-a", CertSubject: "kas-a-audit"}}
	p := startPeertrail(t, cfg)
	if p.srv.APIURL() == p.srv.URL() {
		t.Fatalf("one URL for both: %s", p.srv.URL())
	}
	withCert := func(pair testpki.Pair) *http.Client {
		return &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{
			RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair.TLS},
		}}}
	}
	apiserver := withCert(ca.Client(t, "kas-a", pkix.Name{CommonName: "kas-a-audit"}))
	reader := withCert(readerCA.Client(t, "grafana", pkix.Name{CommonName: "grafana"}))
	body, _, err := simulate.NewEvents(5, nil).EventList(10)
	if err != nil {
		t.Fatal(err)
	}
	status := func(client *http.Client, method, url string) int {
		t.Helper()
		var rd *bytes.Reader
		if method == http.MethodPost {
			rd = bytes.NewReader(body)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, err := http.NewRequest(method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("%s %s over HTTP/%d, want HTTP/2", method, url, resp.ProtoMajor)
		}
		return resp.StatusCode
	}
	webhook, api := p.srv.URL(), p.srv.APIURL()
	for _, c := range []struct {
		who         string
		client      *http.Client
		method, url string
		want        int
	}{
		{"apiserver", apiserver, http.MethodPost, webhook + "/audit/kas-a", 200},
		{"reader", reader, http.MethodPost, webhook + "/audit/kas-a", 403},
		{"apiserver", apiserver, http.MethodGet, webhook + "/healthz", 200},
		{"apiserver", apiserver, http.MethodGet, webhook + "/readyz", 200},
		{"reader", reader, http.MethodGet, webhook + "/metrics", 404},
		{"reader", reader, http.MethodGet, webhook + "/api/v1/gate", 404},
		{"reader", reader, http.MethodGet, webhook + "/api/v1/chains?limit=1", 404},
		{"apiserver", apiserver, http.MethodPost, api + "/audit/kas-a", 404},
		{"reader", reader, http.MethodGet, api + "/metrics", 200},
		{"reader", reader, http.MethodGet, api + "/api/v1/gate", 200},
		{"reader", reader, http.MethodGet, api + "/api/v1/chains?limit=1", 200},
		{"apiserver", apiserver, http.MethodGet, api + "/metrics", 403},
		{"apiserver", apiserver, http.MethodGet, api + "/api/v1/gate", 403},
		{"apiserver", apiserver, http.MethodGet, api + "/healthz", 200},
		{"apiserver", apiserver, http.MethodGet, api + "/readyz", 200},
	} {
		if got := status(c.client, c.method, c.url); got != c.want {
			t.Errorf("%s: %s %s: %d, want %d", c.who, c.method, c.url, got, c.want)
		}
	}
}
