package kubecluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// HarnessUserAgent is the User-Agent of the harness's own polling requests
// (readiness, WaitStatus/WaitPeerProxy), so they can be told apart in audit.
const HarnessUserAgent = "peertrail-e2e-harness"

// AdminConfig is a rest.Config for server as user "admin" (system:masters).
func (c *Cluster) AdminConfig(server string) *rest.Config {
	return c.certConfig(server, c.PKI.Admin)
}

// UserConfig is a rest.Config for server authenticating with a fresh client
// certificate for user in groups (no RBAC is granted: bind roles yourself).
func (c *Cluster) UserConfig(server, user string, groups ...string) (*rest.Config, error) {
	kp, err := c.PKI.ClientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	return c.certConfig(server, kp), nil
}

// ImpersonateConfig is the admin's rest.Config for server, impersonating
// user in groups (Impersonate-User / Impersonate-Group headers).
func (c *Cluster) ImpersonateConfig(server, user string, groups ...string) *rest.Config {
	cfg := c.AdminConfig(server)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

func (c *Cluster) certConfig(server string, kp *KeyPair) *rest.Config {
	host := ""
	if s := c.Server(server); s != nil {
		host = s.URL
	}
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.PKI.ServerCA.CertPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		QPS:   1000,
		Burst: 1000,
	}
}

// WithSourceIP makes cfg's connections originate from ip (any 127.x.y.z
// works on loopback), so the apiservers see a client address that differs
// from their own: a proxied request's peer record then shows two sourceIPs
// (client, entry) instead of one. It returns cfg.
func WithSourceIP(cfg *rest.Config, ip string) *rest.Config {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	return cfg
}

// HTTPClient returns a plain *http.Client for cfg (TLS, client cert and
// impersonation applied), for raw requests whose status code matters.
func HTTPClient(cfg *rest.Config) (*http.Client, error) {
	return rest.HTTPClientFor(cfg)
}

func (c *Cluster) httpClient(cfg *rest.Config) (*http.Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	hc.Timeout = 10 * time.Second
	return hc, nil
}

// Status is what one polled request saw.
type Status struct {
	Code int
	Body string
	Err  error
}

func (s Status) String() string {
	if s.Err != nil {
		return s.Err.Error()
	}
	return fmt.Sprintf("%d %s", s.Code, strings.TrimSpace(s.Body))
}

// Get does one GET of path on server as admin.
func (c *Cluster) Get(ctx context.Context, server, path string) Status {
	hc, err := c.httpClient(c.AdminConfig(server))
	if err != nil {
		return Status{Err: err}
	}
	return get(ctx, hc, c.Server(server), path)
}

func get(ctx context.Context, hc *http.Client, s *Server, path string) Status {
	if s == nil {
		return Status{Err: fmt.Errorf("no such server")}
	}
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
	if err != nil {
		return Status{Err: err}
	}
	req.Header.Set("User-Agent", HarnessUserAgent)
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return Status{Err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return Status{Code: resp.StatusCode, Body: string(b)}
}

// WaitStatus polls GET path on server (as admin, every 100ms) until it
// answers one of codes; it returns the last status seen. Each poll is a real
// request (audited with userAgent HarnessUserAgent).
func (c *Cluster) WaitStatus(ctx context.Context, server, path string, timeout time.Duration, codes ...int) (Status, error) {
	s, err := c.mustServer(server)
	if err != nil {
		return Status{}, err
	}
	hc, err := c.httpClient(c.AdminConfig(server))
	if err != nil {
		return Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last Status
	for {
		last = get(ctx, hc, s, path)
		for _, code := range codes {
			if last.Err == nil && last.Code == code {
				return last, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("kubecluster: GET %s on %s: want %v, last: %s: %w", path, server, codes, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// WaitPeerProxy waits until GET path through entry succeeds (200), e.g. the
// list of a resource only a peer serves: then peer discovery has synced and
// the entry proxies. Timeout 60s.
func (c *Cluster) WaitPeerProxy(ctx context.Context, entry, path string) error {
	_, err := c.WaitStatus(ctx, entry, path, 60*time.Second, http.StatusOK)
	return err
}
