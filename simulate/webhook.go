package simulate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	utilwebhook "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	"k8s.io/apiserver/plugin/pkg/audit/webhook"
)

// WebhookOptions configure the audit webhook clients of the simulated apiservers.
type WebhookOptions struct {
	// URL is the receiver's base URL; each apiserver posts to URL/audit/<name>.
	URL string
	// CAFile verifies the receiver's certificate; InsecureSkipVerify skips that (demos).
	CAFile             string
	InsecureSkipVerify bool
	// Token is a bearer token for the receiver ("" for none), and Tokens each apiserver's own,
	// by name, which wins over Token: peertrail takes a token as one apiserver's only.
	Token  string
	Tokens map[string]string
	// Dir holds the generated kubeconfigs.
	Dir string
	// BatchWait is --audit-webhook-batch-max-wait (the apiserver's default is 30 s).
	BatchWait time.Duration
	// Late and Duplicate are shares of batches delivered LateBy late, or twice.
	Late, Duplicate float64
	LateBy          time.Duration
	Seed            uint64
}

// WebhookSink delivers each simulated apiserver's events through the kube-apiserver's own
// audit webhook backend in batch mode (k8s.io/apiserver/plugin/pkg/audit/webhook behind
// plugin/pkg/audit/buffered), configured by a kubeconfig as --audit-webhook-config-file is.
type WebhookSink struct {
	backends map[string]backend
	faults   *faultProxy
}

type backend struct {
	audit.Backend
	stop chan struct{}
}

// NewWebhookSink starts one webhook backend per apiserver name.
func NewWebhookSink(names []string, o WebhookOptions) (*WebhookSink, error) {
	if o.BatchWait <= 0 {
		o.BatchWait = time.Second
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubeconfig directory: %w", err)
	}
	w := &WebhookSink{backends: map[string]backend{}}
	base := o.URL
	if o.Late > 0 || o.Duplicate > 0 {
		fp, err := newFaultProxy(o)
		if err != nil {
			return nil, err
		}
		w.faults, base = fp, fp.url
	}
	for _, name := range names {
		kc := filepath.Join(o.Dir, name+".kubeconfig")
		if err := os.WriteFile(kc, kubeconfig(base+"/audit/"+name, o, o.tokenFor(name), w.faults != nil), 0o600); err != nil {
			w.Close()
			return nil, fmt.Errorf("write kubeconfig: %w", err)
		}
		// The apiserver's own retry policy (--audit-webhook-initial-backoff 10s, five tries).
		delegate, err := webhook.NewBackend(kc, auditv1.SchemeGroupVersion, utilwebhook.DefaultRetryBackoffWithInitialDelay(webhook.DefaultInitialBackoffDelay), nil)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("audit webhook backend for %s: %w", name, err)
		}
		b := buffered.NewBackend(delegate, buffered.BatchConfig{
			BufferSize: 10000, MaxBatchSize: 400, MaxBatchWait: o.BatchWait,
			ThrottleEnable: true, ThrottleQPS: 10, ThrottleBurst: 15, AsyncDelegate: true,
		})
		stop := make(chan struct{})
		if err := b.Run(stop); err != nil {
			w.Close()
			return nil, err
		}
		w.backends[name] = backend{b, stop}
	}
	return w, nil
}

// tokenFor is the bearer token apiserver name posts with.
func (o WebhookOptions) tokenFor(name string) string {
	if t, ok := o.Tokens[name]; ok {
		return t
	}
	return o.Token
}

// kubeconfig is the audit webhook kubeconfig an apiserver would be given.
func kubeconfig(url string, o WebhookOptions, token string, viaProxy bool) []byte {
	cluster := fmt.Sprintf("    server: %s\n", url)
	switch {
	case viaProxy:
		// The fault proxy listens on plain HTTP on loopback.
	case o.CAFile != "":
		cluster += fmt.Sprintf("    certificate-authority: %s\n", o.CAFile)
	case o.InsecureSkipVerify:
		cluster += "    insecure-skip-tls-verify: true\n"
	}
	user := "  user: {}\n"
	if token != "" && !viaProxy {
		user = fmt.Sprintf("  user:\n    token: %s\n", token)
	}
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: peertrail
  cluster:
%susers:
- name: apiserver
%scontexts:
- name: default
  context: {cluster: peertrail, user: apiserver}
current-context: default
`, cluster, user)
}

// Send implements Sink.
func (w *WebhookSink) Send(apiserver string, events ...*auditinternal.Event) {
	if b, ok := w.backends[apiserver]; ok {
		b.ProcessEvents(events...)
	}
}

// Close flushes every backend (as an apiserver does when it shuts down) and stops them.
func (w *WebhookSink) Close() {
	var wg sync.WaitGroup
	for _, b := range w.backends {
		wg.Go(func() {
			close(b.stop)
			b.Shutdown()
		})
	}
	wg.Wait()
	if w.faults != nil {
		w.faults.close()
	}
}

// faultProxy sits between the webhook clients and the receiver and delays or repeats batches.
type faultProxy struct {
	o      WebhookOptions
	target string
	client *http.Client
	srv    *http.Server
	url    string
	mu     sync.Mutex
	rng    *rand.Rand
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

func newFaultProxy(o WebhookOptions) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	tc, err := ClientTLS(o)
	if err != nil {
		ln.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &faultProxy{o: o, target: o.URL, url: "http://" + ln.Addr().String(), rng: rand.New(rand.NewPCG(o.Seed, 99)),
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 30 * time.Second},
		ctx:    ctx, cancel: cancel}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	late := p.rng.Float64() < p.o.Late
	dup := p.rng.Float64() < p.o.Duplicate
	p.mu.Unlock()
	if late {
		// The apiserver hears 200 at once; the receiver gets the batch LateBy later.
		w.WriteHeader(http.StatusOK)
		p.wg.Go(func() {
			select {
			case <-time.After(p.o.LateBy):
			case <-p.ctx.Done():
			}
			p.forward(context.Background(), r.URL.Path, body)
		})
		return
	}
	code := p.forward(r.Context(), r.URL.Path, body)
	if dup && code == http.StatusOK {
		p.forward(r.Context(), r.URL.Path, body)
	}
	w.WriteHeader(code)
}

func (p *faultProxy) forward(ctx context.Context, path string, body []byte) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.target+path, bytes.NewReader(body))
	if err != nil {
		return http.StatusBadGateway
	}
	req.Header.Set("Content-Type", "application/json")
	if t := p.o.tokenFor(strings.TrimPrefix(path, "/audit/")); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return http.StatusBadGateway
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (p *faultProxy) close() {
	p.cancel()
	p.wg.Wait()
	p.srv.Close()
}
