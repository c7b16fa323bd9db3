package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/internal/tlsconfig"
)

// relayClient is the HTTP client an agent posts to its aggregators with: their CA, the agent's
// client certificate or bearer token, HTTP/2, and a bound on each request (an aggregator
// answers once the frames are on its disk).
func relayClient(r config.Relay) (*http.Client, error) {
	tc, err := tlsconfig.Client(r.CAFile, false, r.CertFile, r.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("relay TLS: %w", err)
	}
	var rt http.RoundTripper = &http.Transport{
		TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 2,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}
	if r.TokenFile != "" {
		toks, err := ingest.ReadTokenFile(r.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--relay-token-file: %w", err)
		}
		if len(toks) != 1 {
			return nil, fmt.Errorf("--relay-token-file %s holds %d tokens, want one", r.TokenFile, len(toks))
		}
		rt = bearer{rt: rt, header: "Bearer " + strings.TrimSpace(toks[0])}
	}
	return &http.Client{Transport: rt, Timeout: 60 * time.Second}, nil
}

// bearer sends a bearer token on every request.
type bearer struct {
	rt     http.RoundTripper
	header string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.rt.RoundTrip(r)
}
