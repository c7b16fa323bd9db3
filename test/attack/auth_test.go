package attack

// Attacks on who may post and who may read: forged senders, another apiserver's credential,
// path tricks, readers posting, apiservers reading, anonymous reads, slow bodies from one
// sender, and a full spool behind /readyz. Each checks the answer and that nothing was stored.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/test/testpki"
)

const (
	authKasAToken   = "kas-a-token-0123456789"
	authKasBToken   = "kas-b-token-9876543210"
	authReaderToken = "reader-token-abcdefghij"
)

// authTarget is a peertrail serving TLS in this process (server.New, as `peertrail serve`
// runs it), with apiservers kas-a and kas-b authenticated by certificates of one CA and by
// tokens of their own, and readers by a token and by certificates of another CA.
type authTarget struct {
	t   *testing.T
	srv *server.Server
	cfg config.File

	auditCA, readerCA, otherCA *testpki.CA
	// Clients, each presenting one credential (or none).
	anon, kasACert, kasBCert, stranger, forged, readerCert *http.Client
	cancel                                                 context.CancelFunc
	done                                                   chan error
}

func startAuthTarget(t *testing.T, edit func(*config.File)) *authTarget {
	t.Helper()
	dir := t.TempDir()
	at := &authTarget{t: t, done: make(chan error, 1)}
	at.auditCA = testpki.NewCA(t, dir, "audit")
	at.readerCA = testpki.NewCA(t, dir, "readers")
	at.otherCA = testpki.NewCA(t, dir, "other")
	serving := at.auditCA.Server(t, "peertrail")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := config.Defaults()
	cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	cfg.EnablePprof = true
	cfg.TLS = config.TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: at.auditCA.CertFile}
	cfg.Readers = config.Readers{TokenFile: write("readers", authReaderToken), ClientCAFile: at.readerCA.CertFile}
	cfg.APIServers = []config.APIServer{
		{Name: "kas-a", CertSubject: "kas-a-audit", TokenFile: write("kas-a.token", authKasAToken)},
		{Name: "kas-b", CertSubject: "kas-b-audit", TokenFile: write("kas-b.token", authKasBToken)},
	}
	if edit != nil {
		edit(&cfg)
	}
	at.cfg = cfg
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	at.srv, at.cancel = srv, cancel
	go func() { at.done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-at.done })

	at.anon = at.client(nil)
	at.kasACert = at.client(at.auditCA.Client(t, "kas-a", pkix.Name{CommonName: "kas-a-audit"}).TLS)
	at.kasBCert = at.client(at.auditCA.Client(t, "kas-b", pkix.Name{CommonName: "kas-b-audit"}).TLS)
	at.stranger = at.client(at.auditCA.Client(t, "stranger", pkix.Name{CommonName: "someone-else"}).TLS)
	at.forged = at.client(at.otherCA.Client(t, "forged", pkix.Name{CommonName: "kas-a-audit"}).TLS)
	at.readerCert = at.client(at.readerCA.Client(t, "grafana", pkix.Name{CommonName: "kas-a-audit"}).TLS)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := at.do(at.anon, http.MethodGet, "/readyz", "", nil); code == http.StatusOK {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatal("peertrail never became ready")
		}
	}
}

// client presents cert (whatever CAs the server asks for, as a hostile client would), over
// HTTP/2 like the apiserver's webhook client, and never follows a redirect.
func (at *authTarget) client(cert any) *http.Client {
	tc := &tls.Config{RootCAs: at.auditCA.Pool()}
	if c, ok := cert.(tls.Certificate); ok {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true},
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// do sends one request; path may hold encoded or unclean segments, sent as they are. It
// returns the status (0 when the connection failed) and the body or the error.
func (at *authTarget) do(c *http.Client, method, path, token string, body []byte) (int, string) {
	at.t.Helper()
	req, err := http.NewRequest(method, at.srv.URL()+path, bytes.NewReader(body))
	if err != nil {
		at.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// accepted is how many events peertrail accepted from apiserver ("" for all), from the
// registry /metrics serves.
func (at *authTarget) accepted(apiserver string) float64 {
	at.t.Helper()
	mfs, err := at.srv.Registry().Gather()
	if err != nil {
		at.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != metrics.IngestEventsTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelResult && l.GetValue() != metrics.ResultAccepted ||
					apiserver != "" && l.GetName() == metrics.LabelAPIServer && l.GetValue() != apiserver {
					ok = false
				}
			}
			if ok {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// spoolWritten is how many bytes the spool has written, from the registry.
func (at *authTarget) spoolWritten() float64 {
	at.t.Helper()
	mfs, err := at.srv.Registry().Gather()
	if err != nil {
		at.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metrics.SpoolWrittenBytesTotal {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	at.t.Fatalf("no %s", metrics.SpoolWrittenBytesTotal)
	return 0
}

func batch(t *testing.T, seed uint64, n int) []byte {
	t.Helper()
	b, _, err := simulate.NewEvents(seed, nil).EventList(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestForgedSendersStoreNothing(t *testing.T) {
	at := startAuthTarget(t, nil)
	body := batch(t, 1, 5)
	for _, c := range []struct {
		name   string
		client *http.Client
		path   string
		token  string
		want   int // 0: the TLS handshake must fail
	}{
		{"kas-a's certificate posting as kas-b", at.kasACert, "/audit/kas-b", "", 403},
		{"kas-b's token posting as kas-a", at.anon, "/audit/kas-a", authKasBToken, 403},
		{"kas-b's token and kas-a's certificate", at.kasACert, "/audit/kas-a", authKasBToken, 401},
		{"a certificate of the CA that maps to no apiserver", at.stranger, "/audit/kas-a", "", 403},
		{"a certificate of another CA with kas-a's subject", at.forged, "/audit/kas-a", "", 0},
		{"a reader's certificate with kas-a's subject", at.readerCert, "/audit/kas-a", "", 403},
		{"a reader's token", at.anon, "/audit/kas-a", authReaderToken, 403},
		{"a reader's token naming no apiserver", at.anon, "/audit", authReaderToken, 403},
		{"no credential", at.anon, "/audit/kas-a", "", 401},
		{"an unknown token", at.anon, "/audit/kas-a", "kas-a-token-0123456788", 401},
		{"a token of the right apiserver with another's prefix", at.anon, "/audit/kas-a", authKasAToken + "x", 401},
		// Path tricks with kas-b's credential, aimed at kas-a's name: the mux redirects an
		// unclean path (307, nothing read; a client that follows it arrives at kas-a's path with
		// kas-b's credential: 403), an encoded slash stays inside the name (not a valid one).
		{"dot-dot out of kas-b's path", at.kasBCert, "/audit/kas-b/../kas-a", "", 307},
		{"dot-dot with kas-b's token", at.anon, "/audit/kas-b/../kas-a", authKasBToken, 307},
		{"double slash", at.kasBCert, "//audit/kas-a", "", 307},
		{"encoded slashes", at.kasBCert, "/audit/kas-b%2F..%2Fkas-a", "", 403},
		{"encoded dot-dot", at.anon, "/audit/kas-b/%2E%2E/kas-a", authKasBToken, 404},
		{"upper case", at.kasBCert, "/audit/KAS-A", "", 403},
		{"trailing segment", at.kasBCert, "/audit/kas-a/x", "", 404},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := at.do(c.client, http.MethodPost, c.path, c.token, body)
			if code != c.want {
				t.Fatalf("status %d (%s), want %d", code, msg, c.want)
			}
		})
	}
	if n, w := at.accepted(""), at.spoolWritten(); n != 0 || w != 0 {
		t.Fatalf("forged posts left %v events accepted, %v bytes in the spool", n, w)
	}
	// The same body from its own apiserver goes through, under that apiserver's name only.
	if code, msg := at.do(at.kasACert, http.MethodPost, "/audit/kas-a", "", body); code != 200 {
		t.Fatalf("kas-a's certificate: %d %s", code, msg)
	}
	if code, msg := at.do(at.anon, http.MethodPost, "/audit", authKasBToken, batch(t, 2, 3)); code != 200 {
		t.Fatalf("kas-b's token alone: %d %s", code, msg)
	}
	if a, b := at.accepted("kas-a"), at.accepted("kas-b"); a != 5 || b != 3 {
		t.Fatalf("accepted kas-a %v, kas-b %v; want 5 and 3", a, b)
	}
}

func TestReadsNeedAReaderCredential(t *testing.T) {
	at := startAuthTarget(t, nil)
	if code, msg := at.do(at.kasACert, http.MethodPost, "/audit/kas-a", "", batch(t, 3, 5)); code != 200 {
		t.Fatalf("kas-a: %d %s", code, msg)
	}
	before := at.spoolWritten()
	reads := []string{"/api/v1/chains", "/api/v1/chains?limit=10", "/api/v1/chains/some-id", "/api/v1/apiservers",
		"/api/v1/gate", "/metrics", "/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1", "/api/v1/nothing-here"}
	for _, path := range reads {
		for _, c := range []struct {
			who    string
			client *http.Client
			token  string
			want   int
		}{
			{"anonymous", at.anon, "", 401},
			{"an unknown token", at.anon, "nope", 401},
			{"kas-a's certificate", at.kasACert, "", 403},
			{"kas-a's token", at.anon, authKasAToken, 403},
			{"a certificate of another CA", at.forged, "", 0},
		} {
			code, msg := at.do(c.client, http.MethodGet, path, c.token, nil)
			if code != c.want {
				t.Errorf("GET %s as %s: %d, want %d (%s)", path, c.who, code, c.want, msg)
			}
			// Nothing of what the endpoints hold leaks into a refusal.
			if code != 0 && (strings.Contains(msg, "kas-a\"") || strings.Contains(msg, metrics.IngestEventsTotal)) {
				t.Errorf("GET %s as %s: the refusal says %q", path, c.who, msg)
			}
		}
	}
	// An unclean path is redirected before anything is read or answered.
	if code, msg := at.do(at.anon, http.MethodGet, "//metrics", "", nil); code != http.StatusTemporaryRedirect {
		t.Errorf("GET //metrics anonymous: %d %s", code, msg)
	}
	for _, path := range []string{"/api/v1/chains?limit=10", "/api/v1/apiservers", "/api/v1/gate", "/metrics", "/debug/pprof/goroutine?debug=1"} {
		if code, msg := at.do(at.anon, http.MethodGet, path, authReaderToken, nil); code != 200 {
			t.Errorf("GET %s with a reader's token: %d %s", path, code, msg)
		}
		if code, msg := at.do(at.readerCert, http.MethodGet, path, "", nil); code != 200 {
			t.Errorf("GET %s with a reader's certificate: %d %s", path, code, msg)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := at.do(at.anon, http.MethodGet, path, "", nil); code != 200 {
			t.Errorf("GET %s without a credential: %d, want 200", path, code)
		}
	}
	if code, msg := at.do(at.anon, http.MethodGet, "/metrics", authReaderToken, nil); code != 200 || !strings.Contains(msg, `apiserver="kas-a"`) {
		t.Errorf("/metrics with a reader's token: %d", code)
	}
	if after := at.spoolWritten(); after != before {
		t.Errorf("reads wrote %v bytes to the spool", after-before)
	}
}

func TestReadsAreClosedWithoutReaderCredentials(t *testing.T) {
	at := startAuthTarget(t, func(c *config.File) { c.Readers = config.Readers{} })
	for _, path := range []string{"/api/v1/chains", "/api/v1/gate", "/metrics", "/debug/pprof/"} {
		for _, token := range []string{"", authReaderToken, authKasAToken} {
			code, msg := at.do(at.anon, http.MethodGet, path, token, nil)
			if code != http.StatusForbidden || !strings.Contains(msg, "--reader-token-file") {
				t.Errorf("GET %s (token %q) with no reader configured: %d %q, want 403 naming --reader-token-file", path, token, code, msg)
			}
		}
	}
	if code, _ := at.do(at.anon, http.MethodGet, "/readyz", "", nil); code != 200 {
		t.Errorf("/readyz: %d", code)
	}
}

func TestSharedTokenIsRefusedWithSeveralApiservers(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("shared\n"), 0o600)
	cfg := config.Defaults()
	cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
	cfg.Listen, cfg.InsecureHTTP, cfg.DataDir = "127.0.0.1:0", true, filepath.Join(dir, "data")
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	cfg.TLS.TokenFile = tok
	cfg.APIServers = []config.APIServer{{Name: "kas-a"}, {Name: "kas-b"}}
	_, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "apiservers[].tokenFile") {
		t.Fatalf("a token shared by two apiservers: %v, want a refusal naming apiservers[].tokenFile", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "spool")); err == nil {
		t.Fatal("the refused configuration opened a spool")
	}
}

// slowPost opens a TLS connection with cert, HTTP/1.1, and starts a POST to path whose body
// of length bytes comes one byte a second until the returned func is called.
func slowPost(t *testing.T, addr string, pool *testpki.CA, cert tls.Certificate, path string, length int) func() {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool.Pool(), Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: peertrail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, length)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	return func() { once.Do(func() { close(stop); conn.Close() }) }
}

func TestSlowBodiesOfOneSenderDoNotStarveAnother(t *testing.T) {
	at := startAuthTarget(t, nil)
	addr := strings.TrimPrefix(at.srv.URL(), "https://")
	kasA := at.auditCA.Client(t, "kas-a-slow", pkix.Name{CommonName: "kas-a-audit"}).TLS
	// 200 connections of kas-a's certificate, each sending a byte a second of a 1 MB body.
	var ends []func()
	for range 200 {
		ends = append(ends, slowPost(t, addr, at.auditCA, kasA, "/audit/kas-a", 1<<20))
	}
	defer func() {
		for _, end := range ends {
			end()
		}
	}()
	time.Sleep(time.Second) // let every one of them reach the handler
	// kas-b's batches are acknowledged promptly, every one of them.
	for i := range 5 {
		start := time.Now()
		code, msg := at.do(at.kasBCert, http.MethodPost, "/audit/kas-b", "", batch(t, uint64(10+i), 20))
		if code != 200 || time.Since(start) > 5*time.Second {
			t.Fatalf("kas-b's batch %d behind 200 slow kas-a bodies: %d %s after %s", i, code, msg, time.Since(start))
		}
	}
	// kas-a itself is over its share: 503 with Retry-After, its other connections' bodies
	// still unread, and nothing of kas-a stored.
	code, msg := at.do(at.kasACert, http.MethodPost, "/audit/kas-a", "", batch(t, 99, 20))
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "kas-a") {
		t.Fatalf("kas-a beyond its share: %d %s, want 503", code, msg)
	}
	if a, b := at.accepted("kas-a"), at.accepted("kas-b"); a != 0 || b != 100 {
		t.Fatalf("accepted kas-a %v, kas-b %v; want 0 and 100", a, b)
	}
}

func TestUnauthenticatedSlowBodiesHoldNothing(t *testing.T) {
	at := startAuthTarget(t, func(c *config.File) { c.Limits.MaxInflight = 4 })
	addr := strings.TrimPrefix(at.srv.URL(), "https://")
	// Without a client certificate or token the request is answered 401 before its body is read.
	for range 50 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: at.auditCA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		fmt.Fprintf(tc, "POST /audit/kas-b HTTP/1.1\r\nHost: peertrail\r\nContent-Length: 1000000\r\n\r\n{")
		tc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := readLine(tc)
		if !strings.Contains(line, " 401 ") {
			t.Fatalf("an anonymous slow body: %q %v, want 401 at once", line, err)
		}
	}
	if code, msg := at.do(at.kasBCert, http.MethodPost, "/audit/kas-b", "", batch(t, 5, 7)); code != 200 {
		t.Fatalf("kas-b after 50 anonymous slow bodies: %d %s", code, msg)
	}
	if a := at.accepted(""); a != 7 {
		t.Fatalf("accepted %v events, want kas-b's 7", a)
	}
}

func readLine(r io.Reader) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 200 {
		if _, err := r.Read(one); err != nil {
			return string(b), err
		}
		if one[0] == '\n' {
			break
		}
		b = append(b, one[0])
	}
	return string(b), nil
}

func TestReadyzSaysNotReadyWhenTheSpoolIsFull(t *testing.T) {
	at := startAuthTarget(t, func(c *config.File) {
		c.Spool.MaxBytes, c.Spool.SegmentBytes = 256<<10, 64<<10
	})
	var code int
	var msg string
	for i := range 200 {
		if code, msg = at.do(at.kasACert, http.MethodPost, "/audit/kas-a", "", batch(t, uint64(100+i), 20)); code != 200 {
			break
		}
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "full") {
		t.Fatalf("filling the spool ended with %d %s, want 503 full", code, msg)
	}
	accepted, written := at.accepted(""), at.spoolWritten()
	rcode, rmsg := at.do(at.anon, http.MethodGet, "/readyz", "", nil)
	if rcode != http.StatusServiceUnavailable || !strings.Contains(rmsg, "full") {
		t.Fatalf("/readyz while batches are refused: %d %q, want 503 saying the spool is full", rcode, rmsg)
	}
	// Another sender's batch is refused too, and stores nothing.
	if code, msg := at.do(at.anon, http.MethodPost, "/audit/kas-b", authKasBToken, batch(t, 999, 20)); code != http.StatusServiceUnavailable {
		t.Fatalf("kas-b into a full spool: %d %s", code, msg)
	}
	if a, w := at.accepted(""), at.spoolWritten(); a != accepted || w != written {
		t.Fatalf("refused batches changed the store: accepted %v -> %v, spool %v -> %v bytes", accepted, a, written, w)
	}
}

// TestStalledHTTP2BodiesTimeOutAndFreeTheirTurns: the apiserver's webhook client speaks HTTP/2,
// where one connection carries many requests; a stalled body still ends at --read-timeout
// (408), and its sender's turns come back.
func TestStalledHTTP2BodiesTimeOutAndFreeTheirTurns(t *testing.T) {
	at := startAuthTarget(t, func(c *config.File) {
		c.Limits.ReadTimeout = config.Duration(2 * time.Second)
		c.Limits.MaxInflightPerAPIServer = 4
	})
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	var writers []*io.PipeWriter
	for range 8 {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, at.srv.URL()+"/audit/kas-a", pr)
			resp, err := at.kasACert.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			if resp.ProtoMajor != 2 {
				t.Errorf("spoke %s, want HTTP/2", resp.Proto)
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
		pw.Write([]byte(`{"kind":`))
	}
	start := time.Now()
	wg.Wait()
	for _, pw := range writers {
		pw.Close()
	}
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	// Four turns: four stalled bodies time out (408), the other four are refused at once (503).
	if got[http.StatusRequestTimeout] != 4 || got[http.StatusServiceUnavailable] != 4 || time.Since(start) > 15*time.Second {
		t.Fatalf("8 stalled HTTP/2 bodies of kas-a with 4 turns: %v after %s, want 4 x 408 and 4 x 503", got, time.Since(start))
	}
	if code, msg := at.do(at.kasACert, http.MethodPost, "/audit/kas-a", "", batch(t, 7, 4)); code != 200 {
		t.Fatalf("kas-a after its stalled bodies timed out: %d %s", code, msg)
	}
	if a := at.accepted(""); a != 4 {
		t.Fatalf("accepted %v events, want the 4 of the last batch", a)
	}
}
