// Package integration drives peertrail with real clients: the kube-apiserver's own audit
// webhook backend (k8s.io/apiserver/plugin/pkg/audit/webhook, batched by plugin/pkg/audit/buffered)
// and the peertrail binary itself.
package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	utilwebhook "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	"k8s.io/apiserver/plugin/pkg/audit/webhook"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/test/testpki"
)

// kubeconfig writes the audit webhook kubeconfig an apiserver would be given.
func kubeconfig(t *testing.T, dir, name, url, caFile string, client *testpki.Pair, token string) string {
	t.Helper()
	user := ""
	if client != nil {
		user += fmt.Sprintf("    client-certificate: %s\n    client-key: %s\n", client.CertFile, client.KeyFile)
	}
	if token != "" {
		user += fmt.Sprintf("    token: %s\n", token)
	}
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: peertrail
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: %s
  user:
%scontexts:
- name: default
  context: {cluster: peertrail, user: %s}
current-context: default
`, url, caFile, name, user, name)
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// backend is the audit backend a kube-apiserver runs with --audit-webhook-mode=batch.
type backend struct {
	audit.Backend
	stop chan struct{}
}

// shutdown stops the backend as the apiserver does on exit: it flushes every buffered event
// (retrying as it would) before it returns.
func (b backend) shutdown() {
	close(b.stop)
	b.Shutdown()
}

func newBackend(t *testing.T, kubeconfigPath string, batchWait time.Duration) backend {
	t.Helper()
	// A short backoff so that retries happen within the test; the apiserver's default is 10 s.
	backoff := utilwebhook.DefaultRetryBackoffWithInitialDelay(50 * time.Millisecond)
	delegate, err := webhook.NewBackend(kubeconfigPath, auditv1.SchemeGroupVersion, backoff, nil)
	if err != nil {
		t.Fatalf("webhook backend: %v", err)
	}
	b := buffered.NewBackend(delegate, buffered.BatchConfig{
		// Large enough that the test's bursts are never dropped by the client itself.
		BufferSize:     60000,
		MaxBatchSize:   400,
		MaxBatchWait:   batchWait,
		ThrottleEnable: false,
		AsyncDelegate:  true,
	})
	stop := make(chan struct{})
	if err := b.Run(stop); err != nil {
		t.Fatal(err)
	}
	return backend{b, stop}
}

type sent struct {
	apiserver string
	key       record.Key
}

// send generates n events and hands them to the backend as the apiserver's audit pipeline does.
func send(t *testing.T, b audit.Backend, apiserver string, seed uint64, n int, into map[record.Key]sent) {
	t.Helper()
	gen := simulate.NewEvents(seed, nil)
	for range n {
		v1 := gen.Next()
		var ev auditinternal.Event
		if err := auditv1.Convert_v1_Event_To_audit_Event(&v1, &ev, nil); err != nil {
			t.Fatal(err)
		}
		k := record.KeyOf(apiserver, string(v1.AuditID), string(v1.Stage), v1.StageTimestamp.Time)
		if _, dup := into[k]; dup {
			t.Fatalf("generator repeated an event")
		}
		into[k] = sent{apiserver, k}
		b.ProcessEvents(&ev)
	}
}

type peertrail struct {
	srv    *server.Server
	cancel context.CancelFunc
	done   chan error
	dir    string
}

func startPeertrail(t *testing.T, cfg config.File) *peertrail {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &peertrail{srv: srv, cancel: cancel, done: make(chan error, 1), dir: cfg.DataDir}
	go func() { p.done <- srv.Run(ctx) }()
	t.Cleanup(p.stop)
	return p
}

func (p *peertrail) stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	<-p.done
	p.cancel = nil
}

// spooled reads every record peertrail stored, after it stopped.
func spooled(t *testing.T, dataDir string) []record.Record {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(dataDir, "spool"), MaxBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer codec.Close()
	r := sp.NewReader(0)
	defer r.Close()
	var out []record.Record
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		b, err := codec.DecodeFrame(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Records...)
	}
}

// exactlyOnce checks that the records are exactly the sent events, none missing, none twice.
func exactlyOnce(t *testing.T, recs []record.Record, want map[record.Key]sent) {
	t.Helper()
	seen := make(map[record.Key]bool, len(recs))
	for _, r := range recs {
		k := r.Key()
		s, ok := want[k]
		if !ok {
			t.Fatalf("stored an event that was never sent: %s %s", r.APIServer, r.AuditID)
		}
		if s.apiserver != r.APIServer {
			t.Fatalf("event of %s stored as %s's", s.apiserver, r.APIServer)
		}
		if seen[k] {
			t.Fatalf("event %s of %s stored twice", r.AuditID, r.APIServer)
		}
		seen[k] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("stored %d of %d events sent", len(seen), len(want))
	}
}

func baseConfig(t *testing.T, dir string) config.File {
	cfg := config.Defaults()
	cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.SQLListen = "127.0.0.1:0"
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Readers.TokenFile = readerTokenFile(t, dir)
	return cfg
}

// TestRealWebhookBackendDeliversEveryEventOnce sends 100,000 events from three apiservers
// through the kube-apiserver's own batching webhook client, over TLS and HTTP/2 with client
// certificates naming each apiserver, and checks that peertrail stored each exactly once.
func TestRealWebhookBackendDeliversEveryEventOnce(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "peertrail")
	serving := ca.Server(t, "peertrail")
	cfg := baseConfig(t, dir)
	cfg.TLS = config.TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: ca.CertFile}
	names := []string{"kas-a", "kas-b", "kas-c"}
	for _, n := range names {
		cfg.APIServers = append(cfg.APIServers, config.APIServer{Name: n, CertSubject: n + "-audit"})
	}
	p := startPeertrail(t, cfg)

	want := map[record.Key]sent{}
	var backends []backend
	counts := []int{33334, 33333, 33333}
	for i, n := range names {
		client := ca.Client(t, n, pkix.Name{CommonName: n + "-audit"})
		kc := kubeconfig(t, dir, n, p.srv.URL()+"/audit/"+n, ca.CertFile, &client, "")
		b := newBackend(t, kc, 200*time.Millisecond)
		backends = append(backends, b)
		send(t, b, n, uint64(i+1), counts[i], want)
	}
	for _, b := range backends {
		b.shutdown()
	}
	accepted := metricValue(t, p.srv.URL(), ca, `peertrail_ingest_events_total{apiserver="kas-b",result="accepted"}`)
	p.stop()
	if accepted != float64(counts[1]) {
		t.Errorf("metrics say %.0f events accepted from kas-b, %d were sent", accepted, counts[1])
	}
	exactlyOnce(t, spooled(t, cfg.DataDir), want)
	if len(want) != 100000 {
		t.Fatalf("sent %d events, meant 100000", len(want))
	}
}

// TestResentBatchesAreRecognised puts a proxy between the webhook client and peertrail that
// loses one answer in four after peertrail has stored the batch, so the client resends batches
// peertrail already has. Every event must still be stored once, and the resends counted.
func TestResentBatchesAreRecognised(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "peertrail")
	cfg := baseConfig(t, dir)
	cfg.InsecureHTTP = true
	cfg.AcceptUnknownAPIServers = true
	p := startPeertrail(t, cfg)

	target, _ := url.Parse(p.srv.URL())
	rp := httputil.NewSingleHostReverseProxy(target)
	var n, lost atomic.Int64
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.StatusCode == 200 && n.Add(1)%4 == 0 {
			lost.Add(1)
			return fmt.Errorf("answer lost on the way back")
		}
		return nil
	}
	proxy := httptest.NewUnstartedServer(rp)
	proxy.EnableHTTP2 = true
	proxy.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "proxy").TLS}}
	proxy.StartTLS()
	defer proxy.Close()

	want := map[record.Key]sent{}
	kc := kubeconfig(t, dir, "kas-a", proxy.URL+"/audit/kas-a", ca.CertFile, nil, "")
	b := newBackend(t, kc, 50*time.Millisecond)
	send(t, b, "kas-a", 42, 20000, want)
	b.shutdown()

	dups := metricValue(t, p.srv.URL(), nil, `peertrail_ingest_events_total{apiserver="kas-a",result="duplicate"}`)
	p.stop()
	if lost.Load() == 0 {
		t.Fatal("the proxy lost no answers; the test proved nothing")
	}
	if dups < float64(lost.Load()) {
		t.Fatalf("%d answers lost but only %.0f duplicate events counted", lost.Load(), dups)
	}
	exactlyOnce(t, spooled(t, cfg.DataDir), want)
}

// metricValue scrapes peertrail's /metrics and returns one series' value (0 if absent).
func metricValue(t *testing.T, base string, ca *testpki.CA, series string) float64 {
	t.Helper()
	c := readerClient
	if ca != nil {
		c = &http.Client{Transport: bearer{&http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}}
	}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}
