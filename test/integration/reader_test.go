package integration

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// readerToken is the reader credential every test's peertrail accepts: the chain, apiserver
// and gate APIs and /metrics answer readers only.
const readerToken = "integration-test-reader-token"

// readerTokenFile writes readerToken to a file in dir for --reader-token-file.
func readerTokenFile(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "reader.token")
	if err := os.WriteFile(p, []byte(readerToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bearer adds the reader token to every request through rt that has no Authorization of its
// own.
type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.rt.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+readerToken)
	return b.rt.RoundTrip(r)
}

// readerClient reads peertrail's API over plain HTTP as a reader.
var readerClient = &http.Client{Transport: bearer{http.DefaultTransport}}
