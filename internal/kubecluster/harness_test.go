package kubecluster

import (
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestPKI(t *testing.T) {
	p, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Serving cert: valid for 127.0.0.1 and localhost under the server CA.
	cert, err := p.Serving.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: p.ServerCA.Pool()}); err != nil {
			t.Errorf("serving cert for %s: %v", host, err)
		}
	}
	// Proxy client cert: CN front-proxy-client, client auth, front-proxy CA.
	pc, _ := p.ProxyClient.TLSCertificate()
	pleaf, _ := x509.ParseCertificate(pc.Certificate[0])
	if pleaf.Subject.CommonName != ProxyClientName {
		t.Errorf("proxy client CN %q", pleaf.Subject.CommonName)
	}
	if _, err := pleaf.Verify(x509.VerifyOptions{Roots: p.FrontProxyCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Error(err)
	}
	if _, err := pleaf.Verify(x509.VerifyOptions{Roots: p.ClientCA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("proxy client cert must not verify against the client CA")
	}
	// User cert: CN user, O groups.
	kp, err := p.ClientCert("alice", "team-a", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	uc, _ := kp.TLSCertificate()
	uleaf, _ := x509.ParseCertificate(uc.Certificate[0])
	if uleaf.Subject.CommonName != "alice" || strings.Join(uleaf.Subject.Organization, ",") != "team-a,team-b" {
		t.Errorf("user cert subject %v", uleaf.Subject)
	}
}

func TestMergeKV(t *testing.T) {
	m := map[string]string{"A": "true"}
	rest := mergeKV([]string{"--x=1", "--feature-gates=B=false,A=false", "--feature-gates=C"}, "feature-gates", m)
	if strings.Join(rest, " ") != "--x=1" {
		t.Errorf("rest %v", rest)
	}
	if got := joinKV(m); got != "A=false,B=false,C=true" {
		t.Errorf("merged %s", got)
	}
}

func TestMissingBinaryMessage(t *testing.T) {
	t.Setenv("PEERTRAIL_CACHE", t.TempDir())
	_, err := Binary("v1.99.0")
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "scripts/build-kube.sh v1.99.0") {
		t.Errorf("error %v", err)
	}
	_, err = Start(t.Context(), t, Config{Servers: []ServerConfig{{Name: "x", Version: "v1.99.0"}}})
	if !errors.Is(err, ErrMissingBinary) {
		t.Errorf("Start: %v", err)
	}
}

func TestRecorder(t *testing.T) {
	p, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := StartRecorder(p.ServerCA, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &Cluster{PKI: p}
	cfg := c.AdminConfig("")
	hc, err := HTTPClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[{"auditID":"x","stage":"ResponseComplete","user":{"username":"u"}}]}`
	resp, err := hc.Post(r.WebhookURL("kas-a"), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Errorf("status %d proto %s", resp.StatusCode, resp.Proto)
	}
	evs, err := r.Events()
	if err != nil || len(evs) != 1 || evs[0].Server != "kas-a" || evs[0].AuditID != "x" || evs[0].User.Username != "u" {
		t.Errorf("events %+v %v", evs, err)
	}
}

// TestPortTakenRetry: a server whose picked port is taken before it binds is
// restarted on another port (real binary).
func TestPortTakenRetry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPort = func() (int, error) {
		calls++
		if calls == 1 {
			return taken, nil
		}
		return FreePort()
	}
	defer func() { pickPort = FreePort }()
	c, err := Start(t.Context(), t, Config{Servers: []ServerConfig{{Name: "kas-x", Version: OldVersion}}})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server("kas-x")
	if s.Port == taken || len(s.LogFiles()) != 2 {
		t.Errorf("port %d (taken %d), logs %v", s.Port, taken, s.LogFiles())
	}
	if st := c.Get(t.Context(), "kas-x", "/version"); st.Code != http.StatusOK {
		t.Errorf("/version: %s", st)
	}
}
