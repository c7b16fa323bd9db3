package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClientsPresentTheReaderToken: --token, --token-file and $PEERTRAIL_TOKEN, in that order,
// and a refusal says how to present one.
func TestClientsPresentTheReaderToken(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		if got == "" {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Setenv(tokenEnv, "from-env")
	for _, c := range []struct {
		flags serverFlags
		want  string
	}{
		{serverFlags{server: srv.URL}, "Bearer from-env"},
		{serverFlags{server: srv.URL, tokenFile: file}, "Bearer from-file"},
		{serverFlags{server: srv.URL, token: "from-flag"}, "Bearer from-flag"},
	} {
		if _, err := c.flags.get(ctx, "/api/v1/gate"); err != nil || got != c.want {
			t.Errorf("%+v: sent %q (%v), want %q", c.flags, got, err, c.want)
		}
	}
	if _, err := (&serverFlags{server: srv.URL, token: "a", tokenFile: file}).get(ctx, "/"); err == nil {
		t.Error("--token and --token-file together were accepted")
	}
	t.Setenv(tokenEnv, "")
	_, err := (&serverFlags{server: srv.URL}).get(ctx, "/api/v1/gate")
	if err == nil || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), tokenEnv) {
		t.Errorf("a refused read: %v, want an error naming --token-file and $%s", err, tokenEnv)
	}
}

// TestBearerLeavesAnAuthorizationAlone: a request that carries its own credentials (the SQL
// interface's user and password in its URL) keeps them.
func TestBearerLeavesAnAuthorizationAlone(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Header.Get("Authorization") }))
	defer srv.Close()
	c := &http.Client{Transport: withBearer(nil, "reader")}
	resp, err := c.Get(strings.Replace(srv.URL, "http://", "http://grafana:secret@", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(got, "Basic ") {
		t.Fatalf("Authorization %q, want the URL's Basic credentials", got)
	}
}
