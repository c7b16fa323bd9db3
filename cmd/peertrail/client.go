package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// serverFlags are how the commands that ask a running peertrail serve (gate, chain) reach it.
// serve listens with TLS by default, so these must be able to verify it.
type serverFlags struct {
	server   string
	caFile   string
	insecure bool
}

func (s *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.server, "server", "http://127.0.0.1:8443", "base URL of a running peertrail serve (https:// when it serves TLS, its default)")
	fs.StringVar(&s.caFile, "ca-file", "", "CA bundle that verifies peertrail serve's certificate")
	fs.BoolVar(&s.insecure, "insecure-skip-tls-verify", false, "do not verify peertrail serve's certificate")
}

func (s *serverFlags) client(timeout time.Duration) (*http.Client, error) {
	tc, err := clientTLS(s.caFile, s.insecure, "", "")
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: timeout}, nil
}

// get asks serve's API for path and returns the body of its 200 answer.
func (s *serverFlags) get(ctx context.Context, path string) ([]byte, error) {
	c, err := s.client(30 * time.Second)
	if err != nil {
		return nil, err
	}
	return apiGet(ctx, c, s.server, path)
}

// apiGet GETs base+path from peertrail serve's API with c. An answer other than 200 is an error
// saying the API's own message ({"error": ...}) or the status and body.
func apiGet(ctx context.Context, c *http.Client, base, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w (is peertrail serve running there? --server sets its address)", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s: %w", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s", e.Error)
		}
		return nil, fmt.Errorf("%s%s: %s: %s", base, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// clientTLS is the TLS configuration of a client of peertrail serve: the CA that verifies it (the
// system's when empty), whether to skip that, and an optional client certificate.
func clientTLS(caFile string, insecure bool, certFile, keyFile string) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: insecure} //nolint:gosec // opt-in flag for test servers
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}
