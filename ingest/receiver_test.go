package ingest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/ingest/dedup"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/test/testpki"
)

type fixture struct {
	rc    *Receiver
	spool *spool.Spool
	codec *record.Codec
	dir   string
}

func newFixture(t testing.TB, opts Options, spoolMax int64) *fixture {
	t.Helper()
	dir := t.TempDir()
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.APIServers == nil {
		opts.APIServers = []string{"kas-a", "kas-b", "kas-c"}
	}
	if spoolMax == 0 {
		spoolMax = 1 << 30
	}
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool"), MaxBytes: spoolMax, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	dl, err := OpenDeadLetters(filepath.Join(dir, "deadletter"), 1<<30, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close(); codec.Close() })
	rc := NewReceiver(opts, sp, dedup.NewIndex(10*time.Minute), codec, dl, slog.New(slog.DiscardHandler))
	return &fixture{rc: rc, spool: sp, codec: codec, dir: dir}
}

func (f *fixture) handler() http.Handler {
	mux := http.NewServeMux()
	f.rc.Register(mux)
	return mux
}

func (f *fixture) post(t *testing.T, path string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.handler().ServeHTTP(w, req)
	return w
}

// stored returns every record in the spool, in order.
func (f *fixture) stored(t *testing.T) []record.Record {
	t.Helper()
	r := f.spool.NewReader(0)
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
		b, err := f.codec.DecodeFrame(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Records...)
	}
}

func (f *fixture) deadLetters(t *testing.T) []DeadLetter {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(f.dir, "deadletter", "*.jsonl"))
	var out []DeadLetter
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var d DeadLetter
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				t.Fatalf("dead letter line is not JSON: %v", err)
			}
			out = append(out, d)
		}
		fh.Close()
	}
	return out
}

func events(t testing.TB, seed uint64, n int) []byte {
	t.Helper()
	b, _, err := simulate.NewEvents(seed, nil).EventList(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func eventCount(rc *Receiver, apiserver, result string) int {
	return int(testutil.ToFloat64(rc.m.events.WithLabelValues(apiserver, result)))
}

func TestAcceptedBatchIsSpooledOnce(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	body := events(t, 1, 5)
	if w := f.post(t, "/audit/kas-a", body, nil); w.Code != http.StatusOK {
		t.Fatalf("first post: %d %s", w.Code, w.Body)
	}
	if w := f.post(t, "/audit/kas-a", body, nil); w.Code != http.StatusOK {
		t.Fatalf("resent batch: %d %s", w.Code, w.Body)
	}
	// The same events from another apiserver are other events.
	if w := f.post(t, "/audit/kas-b", body, nil); w.Code != http.StatusOK {
		t.Fatalf("post as kas-b: %d", w.Code)
	}
	recs := f.stored(t)
	if len(recs) != 10 {
		t.Fatalf("spool holds %d records, want 10 (5 per apiserver, the resend not stored)", len(recs))
	}
	if recs[0].APIServer != "kas-a" || recs[5].APIServer != "kas-b" {
		t.Fatalf("apiserver not taken from the path: %q %q", recs[0].APIServer, recs[5].APIServer)
	}
	if got := eventCount(f.rc, "kas-a", metrics.ResultAccepted); got != 5 {
		t.Errorf("accepted kas-a = %d", got)
	}
	if got := eventCount(f.rc, "kas-a", metrics.ResultDuplicate); got != 5 {
		t.Errorf("duplicate kas-a = %d", got)
	}
}

func TestPartlyResentBatchStoresOnlyNewEvents(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	gen := simulate.NewEvents(7, nil)
	_, first, _ := gen.EventList(3)
	_, more, _ := gen.EventList(2)
	post := func(items ...any) int {
		b, _ := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": items})
		return f.post(t, "/audit/kas-c", b, nil).Code
	}
	if c := post(first[0], first[1], first[2]); c != 200 {
		t.Fatal(c)
	}
	// A batch overlapping the first, and carrying one event twice.
	if c := post(first[1], more[0], more[0], first[2], more[1]); c != 200 {
		t.Fatal(c)
	}
	recs := f.stored(t)
	if len(recs) != 5 {
		t.Fatalf("spool holds %d records, want 5 distinct events", len(recs))
	}
	if recs[3].AuditID != string(more[0].AuditID) || recs[4].AuditID != string(more[1].AuditID) {
		t.Fatalf("second frame holds %s %s", recs[3].AuditID, recs[4].AuditID)
	}
	if got := eventCount(f.rc, "kas-c", metrics.ResultDuplicate); got != 3 {
		t.Fatalf("duplicates counted %d, want 3", got)
	}
}

func TestConcurrentResendsStoreEachEventOnce(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	body := events(t, 3, 50)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			resp, err := http.Post(srv.URL+"/audit/kas-a", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if n := len(f.stored(t)); n != 50 {
		t.Fatalf("%d records stored from 16 concurrent copies of a 50-event batch", n)
	}
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestBadInputsGetClearAnswersAndLoseNothingElse(t *testing.T) {
	good := `{"level":"Metadata","auditID":"g1","stage":"ResponseComplete","verb":"get","user":{"username":"u"},"stageTimestamp":"2026-11-29T10:00:00.000001Z"}`
	mixed := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + good + `,{"stage":"ResponseComplete"},42]}`
	bomb := gz(make([]byte, 2<<20)) // 2 MiB of zeros in a few KiB
	cases := []struct {
		name     string
		path     string
		body     []byte
		hdr      map[string]string
		code     int
		stored   int
		dead     int
		contains string
	}{
		{name: "invalid json", path: "/audit/kas-a", body: []byte(`{"kind":"EventList","items":[`), code: 400, dead: 1, contains: "not an audit.k8s.io/v1 EventList"},
		{name: "wrong kind", path: "/audit/kas-a", body: []byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`), code: 400, dead: 1, contains: "PodList"},
		{name: "wrong apiVersion", path: "/audit/kas-a", body: []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[]}`), code: 400, dead: 1},
		{name: "binary garbage", path: "/audit/kas-a", body: []byte{0xff, 0x00, 0xfe}, code: 400, dead: 1},
		{name: "invalid items beside a good one", path: "/audit/kas-a", body: []byte(mixed), code: 200, stored: 1, dead: 2},
		{name: "gzip body", path: "/audit/kas-a", body: gz([]byte(mixed)), hdr: map[string]string{"Content-Encoding": "gzip"}, code: 200, stored: 1, dead: 2},
		{name: "gzip bomb", path: "/audit/kas-a", body: bomb, hdr: map[string]string{"Content-Encoding": "gzip"}, code: 413},
		{name: "broken gzip", path: "/audit/kas-a", body: []byte("not gzip at all"), hdr: map[string]string{"Content-Encoding": "gzip"}, code: 400},
		{name: "unsupported encoding", path: "/audit/kas-a", body: []byte(mixed), hdr: map[string]string{"Content-Encoding": "br"}, code: 415},
		{name: "huge body", path: "/audit/kas-a", body: bytes.Repeat([]byte(" "), 1<<20+1), code: 413},
		{name: "unknown apiserver", path: "/audit/kas-z", body: []byte(mixed), code: 403, contains: "unknown apiserver"},
		{name: "invalid apiserver name", path: "/audit/KAS_A", body: []byte(mixed), code: 403},
		{name: "no apiserver", path: "/audit", body: []byte(mixed), code: 403, contains: "cannot tell which apiserver"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, Options{MaxBodyBytes: 1 << 20}, 0)
			w := f.post(t, c.path, c.body, c.hdr)
			if w.Code != c.code {
				t.Fatalf("status %d, want %d: %s", w.Code, c.code, w.Body)
			}
			if !strings.Contains(w.Body.String(), c.contains) {
				t.Errorf("answer %q does not say %q", w.Body, c.contains)
			}
			if n := len(f.stored(t)); n != c.stored {
				t.Errorf("stored %d records, want %d", n, c.stored)
			}
			dls := f.deadLetters(t)
			if len(dls) != c.dead {
				t.Fatalf("%d dead letters, want %d", len(dls), c.dead)
			}
			for _, d := range dls {
				if d.Reason == "" || d.APIServer != "kas-a" || d.Raw == "" && d.RawBase64 == "" {
					t.Errorf("dead letter lacks its reason, sender or content: %+v", d)
				}
			}
		})
	}
}

func TestUnknownApiserversAcceptedWhenAllowed(t *testing.T) {
	f := newFixture(t, Options{AcceptUnknown: true}, 0)
	if w := f.post(t, "/audit/kas-new", events(t, 1, 2), nil); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if recs := f.stored(t); len(recs) != 2 || recs[0].APIServer != "kas-new" {
		t.Fatalf("stored %+v", recs)
	}
}

func TestBearerTokensNameOneApiserverEach(t *testing.T) {
	auth, err := NewAuthenticator(AuthOptions{
		SenderTokens: []NamedToken{{"kas-a", "token-of-a"}, {"kas-b", "token-of-b"}},
		ReaderTokens: []string{"reader-token"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{Auth: auth, RequireAuth: true}, 0)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for _, c := range []struct {
		name, path string
		hdr        map[string]string
		code       int
	}{
		{"no token", "/audit/kas-a", nil, 401},
		{"wrong token", "/audit/kas-a", bearer("wrong"), 401},
		{"not a bearer token", "/audit/kas-a", map[string]string{"Authorization": "Basic a2FzLWE6eA=="}, 401},
		{"kas-b's token posting as kas-a", "/audit/kas-a", bearer("token-of-b"), 403},
		{"a reader's token", "/audit/kas-a", bearer("reader-token"), 403},
		{"a reader's token without a name", "/audit", bearer("reader-token"), 403},
		{"encoded slash", "/audit/kas-a%2F..%2Fkas-b", bearer("token-of-a"), 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			if w := f.post(t, c.path, events(t, 1, 1), c.hdr); w.Code != c.code {
				t.Fatalf("status %d, want %d: %s", w.Code, c.code, w.Body)
			}
		})
	}
	if recs := f.stored(t); len(recs) != 0 {
		t.Fatalf("refused requests stored %d records", len(recs))
	}
	if w := f.post(t, "/audit/kas-a", events(t, 2, 1), bearer("token-of-a")); w.Code != 200 {
		t.Fatalf("right token: %d %s", w.Code, w.Body)
	}
	if w := f.post(t, "/audit", events(t, 3, 1), bearer("token-of-b")); w.Code != 200 {
		t.Fatalf("token alone names the sender: %d %s", w.Code, w.Body)
	}
	recs := f.stored(t)
	if len(recs) != 2 || recs[0].APIServer != "kas-a" || recs[1].APIServer != "kas-b" {
		t.Fatalf("stored %+v", recs)
	}
}

func TestAuthenticatorRefusesAmbiguousCredentials(t *testing.T) {
	ca := testpki.NewCA(t, t.TempDir(), "both")
	for name, o := range map[string]AuthOptions{
		"one CA for both":            {SenderCAs: []*x509.Certificate{ca.Cert}, ReaderCAs: []*x509.Certificate{ca.Cert}},
		"one token for two":          {SenderTokens: []NamedToken{{"kas-a", "t"}, {"kas-b", "t"}}},
		"reader token is a sender's": {SenderTokens: []NamedToken{{"kas-a", "t"}}, ReaderTokens: []string{"t"}},
		"empty token":                {SenderTokens: []NamedToken{{"kas-a", ""}}},
	} {
		if _, err := NewAuthenticator(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestClientCertificatesNameTheSender(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "audit")
	other := testpki.NewCA(t, dir, "other")
	serving := ca.Server(t, "peertrail")
	kasA := ca.Client(t, "kas-a", pkix.Name{CommonName: "kas-a-audit", Organization: []string{"control-plane"}})
	stranger := ca.Client(t, "stranger", pkix.Name{CommonName: "someone-else"})
	forged := other.Client(t, "forged", pkix.Name{CommonName: "kas-a-audit"})

	readerCA := testpki.NewCA(t, dir, "reader")
	reader := readerCA.Client(t, "reader", pkix.Name{CommonName: "kas-a-audit"})
	auth, err := NewAuthenticator(AuthOptions{
		SenderCAs: []*x509.Certificate{ca.Cert}, ReaderCAs: []*x509.Certificate{readerCA.Cert},
		CertSubjects: map[string]string{"kas-a-audit": "kas-a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Options{RequireAuth: true, Auth: auth}, 0)
	tc, err := ServerTLS(serving.CertFile, serving.KeyFile, ca.CertFile, readerCA.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: f.handler(), TLSConfig: tc, ErrorLog: log.New(io.Discard, "", 0)}
	go hs.ServeTLS(ln, "", "")
	defer hs.Close()
	base := "https://" + ln.Addr().String()

	client := func(p *testpki.Pair) *http.Client {
		c := &tls.Config{RootCAs: ca.Pool()}
		if p != nil {
			// Present the certificate whatever CAs the server names, as a misconfigured or
			// hostile client would.
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &p.TLS, nil }
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true}}
	}
	post := func(c *http.Client, path string) (*http.Response, error) {
		resp, err := c.Post(base+path, "application/json", bytes.NewReader(events(t, uint64(time.Now().UnixNano()), 1)))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	for _, c := range []struct {
		name   string
		client *http.Client
		path   string
		code   int
	}{
		{"certificate and path agree", client(&kasA), "/audit/kas-a", 200},
		{"certificate alone names the sender", client(&kasA), "/audit", 200},
		{"certificate and path disagree", client(&kasA), "/audit/kas-b", 403},
		{"certificate not mapped to an apiserver", client(&stranger), "/audit/kas-a", 403},
		{"reader certificate with an apiserver's subject", client(&reader), "/audit/kas-a", 403},
		{"no certificate, no token", client(nil), "/audit/kas-a", 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := post(c.client, c.path)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.code)
			}
			if resp.ProtoMajor != 2 {
				t.Fatalf("spoke %s, want HTTP/2 like the apiserver's client", resp.Proto)
			}
		})
	}
	if resp, err := post(client(&forged), "/audit/kas-a"); err == nil {
		t.Fatalf("a certificate from another CA got through the handshake: %d", resp.StatusCode)
	}
	recs := f.stored(t)
	if len(recs) != 2 || recs[0].APIServer != "kas-a" || recs[1].APIServer != "kas-a" {
		t.Fatalf("stored %d records", len(recs))
	}
}

func TestOverloadAnswers503WithRetryAfter(t *testing.T) {
	f := newFixture(t, Options{MaxInflight: 1, ReadTimeout: 30 * time.Second}, 0)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	// Hold the only slot with a request whose body never finishes.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/audit/kas-a", pr)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write([]byte(`{"kind":`))
	waitUntil(t, func() bool { return testutil.ToFloat64(f.rc.m.inflight) == 1 })
	resp, err := http.Post(srv.URL+"/audit/kas-a", "application/json", bytes.NewReader(events(t, 1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestFullSpoolAnswers503AndIsNotReady(t *testing.T) {
	f := newFixture(t, Options{}, 64<<10)
	var last *httptest.ResponseRecorder
	var refused []byte
	for i := range 100 {
		refused = events(t, uint64(i+1), 20)
		last = f.post(t, "/audit/kas-a", refused, nil)
		if last.Code != 200 {
			break
		}
	}
	if last.Code != 503 || last.Header().Get("Retry-After") == "" || !strings.Contains(last.Body.String(), "full") {
		t.Fatalf("status %d %q Retry-After %q", last.Code, last.Body, last.Header().Get("Retry-After"))
	}
	// Nothing was consumed, so the resent batch still does not fit; and a refused batch left no
	// keys behind that would make its resend look like a duplicate.
	if w := f.post(t, "/audit/kas-a", refused, nil); w.Code != 503 {
		t.Fatalf("the refused batch resent: %d", w.Code)
	}
	if got := eventCount(f.rc, "kas-a", metrics.ResultDuplicate); got != 0 {
		t.Fatalf("%d events of a refused batch counted as duplicates", got)
	}
	// The probe tells the truth: the spool is under its limit, but not by enough for that batch.
	if err := f.rc.Ready(); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("Ready() = %v while batches are refused as the spool is full", err)
	}
	// (Room freed by consumers is the spool's own test: TestFullUntilConsumersCatchUp.)
	// What was acknowledged before the spool filled is all there, and a refused batch left nothing.
	if n, acked := len(f.stored(t)), eventCount(f.rc, "kas-a", metrics.ResultAccepted); n != acked {
		t.Fatalf("spool holds %d records, %d were acknowledged", n, acked)
	}
}

func TestSlowClientTimesOutAndFreesItsSlot(t *testing.T) {
	f := newFixture(t, Options{MaxInflight: 1, ReadTimeout: 300 * time.Millisecond}, 0)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /audit/kas-a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"kind\":")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled body: status %d, want 408", resp.StatusCode)
	}
	r2, err := http.Post(srv.URL+"/audit/kas-a", "application/json", bytes.NewReader(events(t, 1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 {
		t.Fatalf("after the slow client: %d", r2.StatusCode)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not reached")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stall starts a request to path whose body never completes, and returns a func that ends it.
func stall(t *testing.T, base, path string, length int) func() {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"kind\":", path, length)
	return func() { conn.Close() }
}

func TestSlowSenderCannotStarveAnother(t *testing.T) {
	// Four processing slots for three apiservers: a share of two each.
	f := newFixture(t, Options{MaxInflight: 4, ReadTimeout: 30 * time.Second}, 0)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	for range 20 {
		defer stall(t, srv.URL, "/audit/kas-a", 100000)()
	}
	waitUntil(t, func() bool { return testutil.ToFloat64(f.rc.m.inflight) == 2 })
	resp, err := http.Post(srv.URL+"/audit/kas-b", "application/json", bytes.NewReader(events(t, 1, 3)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Answered while kas-a's bodies still stall (they hold their turns until the 30 s read
	// timeout): kas-b did not wait for them.
	if resp.StatusCode != 200 || testutil.ToFloat64(f.rc.m.inflight) != 2 {
		t.Fatalf("kas-b behind 20 stalled kas-a bodies: status %d, %v kas-a requests still in flight", resp.StatusCode, testutil.ToFloat64(f.rc.m.inflight))
	}
	resp, err = http.Post(srv.URL+"/audit/kas-a", "application/json", bytes.NewReader(events(t, 2, 3)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("kas-a beyond its share: %d, want 503 with Retry-After", resp.StatusCode)
	}
	if recs := f.stored(t); len(recs) != 3 || recs[0].APIServer != "kas-b" {
		t.Fatalf("stored %d records", len(recs))
	}
}

func TestBodiesBeingReadAreBoundedInMemory(t *testing.T) {
	// The budget's floor: one body of the largest size, and the memory of one item.
	f := newFixture(t, Options{MaxBodyBytes: 1 << 20, MaxBatchItems: 1, MaxReadingBytes: 1<<20 + 1, ReadTimeout: 30 * time.Second}, 0)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	end := stall(t, srv.URL, "/audit/kas-a", 1<<20)
	waitUntil(t, func() bool { return f.rc.reading.inUse() > 0 })
	resp, err := http.Post(srv.URL+"/audit/kas-b", "application/json", bytes.NewReader(events(t, 1, 3)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "memory budget") {
		t.Fatalf("a body beyond the budget: %d %s", resp.StatusCode, b)
	}
	end()
	waitUntil(t, func() bool { return f.rc.reading.inUse() == 0 })
	resp, err = http.Post(srv.URL+"/audit/kas-b", "application/json", bytes.NewReader(events(t, 1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the stalled body went: %d", resp.StatusCode)
	}
}

func TestReadyReportsAFailedWrite(t *testing.T) {
	f := newFixture(t, Options{}, 0)
	now := time.Now()
	f.rc.now = func() time.Time { return now }
	if err := f.rc.Ready(); err != nil {
		t.Fatal(err)
	}
	f.rc.noteAppend(fmt.Errorf("spool: write frame: %w", syscall.ENOSPC), 1000)
	if err := f.rc.Ready(); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("Ready() = %v after a write failed for lack of space", err)
	}
	now = now.Add(refusalHoldsFor)
	if err := f.rc.Ready(); err != nil {
		t.Fatalf("Ready() = %v once the refusal is old", err)
	}
	f.rc.noteAppend(fmt.Errorf("spool: write frame: %w", syscall.ENOSPC), 1000)
	f.rc.noteAppend(nil, 1000)
	if err := f.rc.Ready(); err != nil {
		t.Fatalf("Ready() = %v after a successful append", err)
	}
}

func TestReadTokenFileTakesAFileOrASecretDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	os.WriteFile(file, []byte("# readers\n\ntok-1\n  tok-2  \n"), 0o600)
	if got, err := ReadTokenFile(file); err != nil || strings.Join(got, ",") != "tok-1,tok-2" {
		t.Fatalf("file: %v %v", got, err)
	}
	// A mounted Secret: keys are links into ..data, which is skipped itself.
	sec := filepath.Join(dir, "secret")
	os.MkdirAll(filepath.Join(sec, "..data"), 0o700)
	os.WriteFile(filepath.Join(sec, "..data", "prometheus"), []byte("tok-p\n"), 0o600)
	os.WriteFile(filepath.Join(sec, "..data", "gate"), []byte("tok-g"), 0o600)
	os.Symlink("..data/prometheus", filepath.Join(sec, "prometheus"))
	os.Symlink("..data/gate", filepath.Join(sec, "gate"))
	if got, err := ReadTokenFile(sec); err != nil || strings.Join(got, ",") != "tok-g,tok-p" {
		t.Fatalf("directory: %v %v", got, err)
	}
	os.WriteFile(file, []byte("# nothing\n"), 0o600)
	if _, err := ReadTokenFile(file); err == nil {
		t.Fatal("a file without tokens was accepted")
	}
}

// TestFrameRefusedAnswers: records too large for a spool frame mean the sender's batch is too
// large (413, as for a body over the limit); anything else is the receiver's fault (500).
func TestFrameRefusedAnswers(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("%w: 3 records take 300 MiB", record.ErrFrameTooLarge): http.StatusRequestEntityTooLarge,
		fmt.Errorf("frame: 1 keys for 2 records"):                         http.StatusInternalServerError,
	} {
		if a := frameRefused("kas-a", err); a.code != want || a.apiserver != "kas-a" || a.msg != err.Error() {
			t.Errorf("%v: answered %+v, want %d", err, a, want)
		}
	}
}

// An EventList of more items than MaxBatchItems is refused 413 with what to change, before any
// item is decoded: nothing is stored, counted or kept as a dead letter, and the sender's next
// batch within the limit is taken whole. The 2,000,000 `{}` items (6 MB) allocate a
// small part of the body, where they took 3.3 GB of memory and 305 MB of dead letters.
func TestTooManyItemsAreRefusedBeforeDecoding(t *testing.T) {
	f := newFixture(t, Options{MaxBatchItems: 5}, 0)
	w := f.post(t, "/audit/kas-a", events(t, 1, 6), nil)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "limit of 5") ||
		!strings.Contains(w.Body.String(), "--audit-webhook-batch-max-size") || !strings.Contains(w.Body.String(), "--max-batch-items") {
		t.Fatalf("6 items, limit 5: %d %s", w.Code, w.Body)
	}
	if len(f.stored(t)) != 0 || len(f.deadLetters(t)) != 0 || eventCount(f.rc, "kas-a", metrics.ResultInvalid) != 0 {
		t.Fatal("a refused batch left records, dead letters or counts")
	}
	if w := f.post(t, "/audit/kas-a", gz(events(t, 1, 5)), map[string]string{"Content-Encoding": "gzip"}); w.Code != 200 || len(f.stored(t)) != 5 {
		t.Fatalf("5 items, limit 5: %d %s, %d stored", w.Code, w.Body, len(f.stored(t)))
	}
	if f.rc.reading.inUse() != 0 {
		t.Fatalf("%d bytes of the reading budget still held", f.rc.reading.inUse())
	}

	f = newFixture(t, Options{}, 0)
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}` + strings.Repeat(`,{}`, 2_000_000-1) + `]}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w = f.post(t, "/audit/kas-a", body, nil)
	runtime.ReadMemStats(&after)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), fmt.Sprint(record.DefaultMaxItems)) {
		t.Fatalf("2,000,000 items: %d %s", w.Code, w.Body)
	}
	// The body's buffer and the recorder's copy of the request; nothing by the item.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*uint64(len(body)) {
		t.Errorf("refusing 2,000,000 items of a %d-byte body allocated %d bytes", len(body), alloc)
	}
	if len(f.deadLetters(t)) != 0 {
		t.Error("a refused batch was kept as dead letters")
	}
}

// Each item of a batch takes decodedItemBytes of the reading budget before it is decoded, so
// that batches of tiny items cannot together take more memory than bodies may: beyond the
// budget the batch is answered 503 (retried), and taken once the budget is free again.
func TestItemsTakeTheReadingBudget(t *testing.T) {
	const items = 1000
	f := newFixture(t, Options{MaxBodyBytes: 1 << 20, MaxBatchItems: items, MaxReadingBytes: 1, ReadTimeout: 30 * time.Second}, 0)
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	// The budget is its floor, one largest body and its items; a stalled largest body holds
	// all of it but the items' share, and the batch's own bytes take a little of that.
	end := stall(t, srv.URL, "/audit/kas-a", 1<<20)
	waitUntil(t, func() bool { return f.rc.reading.inUse() > 0 })
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}` + strings.Repeat(`,{}`, items-1) + `]}`)
	resp, err := http.Post(srv.URL+"/audit/kas-b", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "memory budget") {
		t.Fatalf("%d items beside a stalled body: %d %s", items, resp.StatusCode, b)
	}
	if eventCount(f.rc, "kas-b", metrics.ResultInvalid) != 0 || len(f.deadLetters(t)) != 0 {
		t.Fatal("a batch refused for memory was decoded")
	}
	end()
	waitUntil(t, func() bool { return f.rc.reading.inUse() == 0 })
	resp, err = http.Post(srv.URL+"/audit/kas-b", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || eventCount(f.rc, "kas-b", metrics.ResultInvalid) != items {
		t.Fatalf("once the budget is free: %d, %d invalid", resp.StatusCode, eventCount(f.rc, "kas-b", metrics.ResultInvalid))
	}
	if f.rc.reading.inUse() != 0 {
		t.Fatalf("%d bytes of the reading budget still held after the answer", f.rc.reading.inUse())
	}
}

// In trial mode (AcceptUnknown) the names not configured are taken up to MaxUnknownAPIServers:
// a name past it is refused 403 with the flag to change and counted, without a series or any
// state of its own; the names taken, and the configured ones, go on being taken.
func TestUnknownApiserverNamesAreCapped(t *testing.T) {
	f := newFixture(t, Options{AcceptUnknown: true, MaxUnknownAPIServers: 3}, 0)
	for i := range 3 {
		if w := f.post(t, fmt.Sprintf("/audit/made-up-%d", i), events(t, uint64(i+1), 1), nil); w.Code != 200 {
			t.Fatalf("name %d of 3: %d %s", i, w.Code, w.Body)
		}
	}
	for i := 3; i < 50; i++ {
		w := f.post(t, fmt.Sprintf("/audit/made-up-%d", i), events(t, uint64(i+1), 1), nil)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "--max-unknown-apiservers") {
			t.Fatalf("name %d past the limit of 3: %d %s", i, w.Code, w.Body)
		}
	}
	for _, name := range []string{"made-up-0", "kas-a"} {
		if w := f.post(t, "/audit/"+name, events(t, 99, 1), nil); w.Code != 200 {
			t.Fatalf("%s after the limit was reached: %d %s", name, w.Code, w.Body)
		}
	}
	if got := testutil.ToFloat64(f.rc.m.unknownNames); got != 3 {
		t.Errorf("%s = %v, want 3", metrics.IngestUnknownAPIServers, got)
	}
	if got := testutil.ToFloat64(f.rc.m.unknownRefused); got != 47 {
		t.Errorf("%s = %v, want 47", metrics.IngestUnknownAPIServersRefusedTotal, got)
	}
	// Series: the configured name, the three taken, and "unknown" for the refusals.
	if n := testutil.CollectAndCount(f.rc.m.requests); n != 5 {
		t.Errorf("%d series of %s, want 5", n, metrics.IngestRequestsTotal)
	}
	if recs := f.stored(t); len(recs) != 5 {
		t.Errorf("stored %d records, want the 5 taken", len(recs))
	}
	if got := len(f.rc.LastBatches()); got != 4 {
		t.Errorf("batches remembered from %d apiservers, want 4", got)
	}
	first, last := f.rc.FirstBatches(), f.rc.LastBatches()
	if !first["made-up-0"].Before(last["made-up-0"]) || !first["kas-a"].Equal(last["kas-a"]) {
		t.Errorf("first %v, last %v", first, last)
	}
}
