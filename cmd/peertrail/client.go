package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/internal/tlsconfig"
)

// tokenEnv is the environment variable the API clients take a reader token from when neither
// --token nor --token-file is given.
const tokenEnv = "PEERTRAIL_TOKEN"

// serverFlags are how the commands that ask a running peertrail serve (gate, chain) reach it.
// serve listens with TLS by default, so these must be able to verify it, and its API answers
// readers only, so these carry a reader's credential.
type serverFlags struct {
	server            string
	caFile            string
	insecure          bool
	token, tokenFile  string
	certFile, keyFile string
}

func (s *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.server, "server", "http://127.0.0.1:8443", "base URL of a running peertrail serve (https:// when it serves TLS, its default)")
	s.registerCredentials(fs)
}

// registerCredentials registers the flags of register but --server.
func (s *serverFlags) registerCredentials(fs *pflag.FlagSet) {
	fs.StringVar(&s.caFile, "ca-file", "", "CA bundle that verifies peertrail serve's certificate")
	fs.BoolVar(&s.insecure, "insecure-skip-tls-verify", false, "do not verify peertrail serve's certificate")
	fs.StringVar(&s.token, "token", "", "reader bearer token (one of serve's --reader-token-file); default $"+tokenEnv+"; prefer --token-file, a\n"+
		"token on the command line shows in the process list")
	fs.StringVar(&s.tokenFile, "token-file", "", "file holding the reader bearer token")
	fs.StringVar(&s.certFile, "client-cert", "", "reader client certificate (PEM, signed by serve's --reader-client-ca-file)")
	fs.StringVar(&s.keyFile, "client-key", "", "the reader client certificate's key (PEM)")
}

// bearer returns the reader token from --token, --token-file or $PEERTRAIL_TOKEN ("" for none).
func (s *serverFlags) bearer() (string, error) {
	switch {
	case s.token != "" && s.tokenFile != "":
		return "", fmt.Errorf("give --token or --token-file, not both")
	case s.token != "":
		return s.token, nil
	case s.tokenFile != "":
		b, err := os.ReadFile(s.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return "", fmt.Errorf("--token-file %s: want one token on one line", s.tokenFile)
		}
		return tok, nil
	}
	return strings.TrimSpace(os.Getenv(tokenEnv)), nil
}

func (s *serverFlags) client(timeout time.Duration) (*http.Client, error) {
	if (s.certFile == "") != (s.keyFile == "") {
		return nil, fmt.Errorf("--client-cert and --client-key go together")
	}
	tc, err := clientTLS(s.caFile, s.insecure, s.certFile, s.keyFile)
	if err != nil {
		return nil, err
	}
	tok, err := s.bearer()
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	if tok != "" {
		rt = withBearer(rt, tok)
	}
	return &http.Client{Transport: rt, Timeout: timeout}, nil
}

// withBearer returns a RoundTripper that sends token as a bearer token on every request
// through rt (http.DefaultTransport when nil) that has no Authorization header of its own (a
// URL's user and password win). It does not modify the caller's request.
func withBearer(rt http.RoundTripper, token string) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return bearerTransport{rt: rt, header: "Bearer " + token}
}

type bearerTransport struct {
	rt     http.RoundTripper
	header string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.rt.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.rt.RoundTrip(r)
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
		if ue := unreachable(err, base, "peertrail serve's API", "--server"); ue != nil {
			return nil, ue
		}
		return nil, errorf(exitUnreachable, "is peertrail serve running there? --server sets its address", "ask %s: %v", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, errorf(exitUnreachable, "", "read the answer of %s: %v", base, err)
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	if resp.Header.Get("X-ClickHouse-Exception-Code") != "" || resp.Header.Get("X-ClickHouse-Server-Display-Name") != "" ||
		strings.Contains(string(body), "UNKNOWN_HANDLER") {
		return nil, errorf(exitUnreachable, "--server takes serve's --listen (or --api-listen) address, e.g. http://127.0.0.1:8443",
			"%s is a ClickHouse SQL interface (serve's --sql-listen), not peertrail serve's API", base)
	}
	var e struct{ Error string }
	apiErr := json.Unmarshal(body, &e) == nil && e.Error != ""
	text := oneLine(strings.TrimSpace(string(body)))
	if apiErr {
		text = oneLine(e.Error)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, errorf(exitRefused, "the API answers readers only: --token-file, $"+tokenEnv+", or --client-cert/--client-key",
			"%s: %s", resp.Status, text)
	case resp.StatusCode == http.StatusNotFound && apiErr:
		return nil, errorf(exitNotFound, "", "%s", text)
	case resp.StatusCode == http.StatusNotFound:
		return nil, errorf(exitUnreachable, "--server takes peertrail serve's --listen (or --api-listen) address",
			"%s answered %s for %s: it is not peertrail serve's API", base, resp.Status, path)
	}
	return nil, errorf(exitFailure, "", "%s%s: %s: %s", base, path, resp.Status, text)
}

// clientTLS is the TLS configuration of a client of peertrail serve: the CA that verifies it (the
// system's when empty), whether to skip that, and an optional client certificate.
func clientTLS(caFile string, insecure bool, certFile, keyFile string) (*tls.Config, error) {
	return tlsconfig.Client(caFile, insecure, certFile, keyFile)
}

// probeReceiver asks base once whether anything answers there before a command spends its
// whole run posting to it: without it, simulate posted for minutes into a refused port (the
// webhook backend's retries printed screens of events, and it exited 0) and loadgen reported
// only that no event was acknowledged. Any HTTP answer will do (the receiver's path for a
// probe depends on serve's listeners), except the SQL interface's: a wrong port.
func probeReceiver(ctx context.Context, c *http.Client, base, flag string) error {
	const hint = " takes the receiver's base URL, e.g. http://127.0.0.1:8443"
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errorf(exitUsage, flag+hint, "%s %q is not an http:// or https:// URL", flag, base)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/healthz", nil)
	if err != nil {
		return errorf(exitUsage, flag+hint, "%s %q: %v", flag, base, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err // interrupted
		}
		if ue := unreachable(err, base, "peertrail serve's webhook receiver", flag); ue != nil {
			return ue
		}
		return errorf(exitUnreachable, "is peertrail serve running there? "+flag+" sets its address", "ask %s: %v", base, err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-ClickHouse-Exception-Code") != "" || resp.Header.Get("X-ClickHouse-Server-Display-Name") != "" {
		return errorf(exitUnreachable, flag+" takes serve's --listen address, e.g. http://127.0.0.1:8443",
			"%s is a ClickHouse SQL interface (serve's --sql-listen), not peertrail serve's webhook receiver", base)
	}
	return nil
}
