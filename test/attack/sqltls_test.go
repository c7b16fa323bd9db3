package attack

// Where the SQL interface listens and how it is reached: loopback by default, TLS with the
// serving certificate whenever there is one, never plain HTTP off loopback, and always a
// password, over TLS as over plain HTTP.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/testpki"
)

func TestSQLInterfaceIsLoopbackByDefaultAndTLSOffIt(t *testing.T) {
	host, _, err := net.SplitHostPort(config.Defaults().Store.SQLListen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Fatalf("the SQL interface's default address %q is not loopback", config.Defaults().Store.SQLListen)
	}

	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "peertrail")
	serving := ca.Server(t, "peertrail")
	base := func(name string) config.File {
		cfg := config.Defaults()
		cfg.Store.Unconfined = true // in-process servers share one engine's threads, which Landlock would bind to the first's directory; the binary runs confined in test/attack/sql_test.go
		cfg.Listen = "127.0.0.1:0"
		cfg.DataDir = filepath.Join(dir, name)
		cfg.AcceptUnknownAPIServers = true
		return cfg
	}

	// Plain HTTP off loopback: refused at startup, before anything listens.
	cfg := base("plain-off-loopback")
	cfg.InsecureHTTP = true
	cfg.Store.SQLListen = "0.0.0.0:0"
	if srv, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "not loopback") {
		if srv != nil {
			srv.Run(canceled())
		}
		t.Fatalf("plain HTTP SQL on 0.0.0.0: %v, want a refusal saying it is not loopback", err)
	}

	// With a serving certificate the SQL interface speaks TLS only, off loopback too.
	cfg = base("tls")
	cfg.TLS = config.TLS{CertFile: serving.CertFile, KeyFile: serving.KeyFile, ClientCAFile: ca.CertFile}
	cfg.Store.SQLListen = "0.0.0.0:0"
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sqlURL := srv.SQLURL()
	if !strings.HasPrefix(sqlURL, "https://") {
		t.Fatalf("SQL interface with a serving certificate at %s, want https", sqlURL)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(sqlURL, "https://"))
	sqlURL = "https://127.0.0.1:" + port
	pw, err := os.ReadFile(filepath.Join(cfg.DataDir, server.SQLPasswordFileName))
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(pw))

	// Plain HTTP to the TLS port gets no answer of the SQL interface.
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Post("http://127.0.0.1:"+port+"/", "text/plain", strings.NewReader("SELECT 1")); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || resp.Header.Get("X-ClickHouse-Exception-Code") != "" {
			t.Fatalf("plain HTTP to the SQL interface's TLS port: %d %q", resp.StatusCode, b)
		}
	}
	// A client that does not trust the serving certificate's CA stops at the handshake.
	other := testpki.NewCA(t, dir, "other")
	untrusting := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: other.Pool()}}}
	if resp, err := untrusting.Post(sqlURL+"/", "text/plain", strings.NewReader("SELECT 1")); err == nil {
		resp.Body.Close()
		t.Fatalf("a client trusting another CA was answered %d", resp.StatusCode)
	}
	// Over TLS: no credentials 401, a wrong password 403, the password 200.
	trusting := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	for _, c := range []struct {
		name, user, pass string
		want             int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"a wrong password", "default", "guess", http.StatusForbidden},
		{"the password", "default", password, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, sqlURL+"/", strings.NewReader("SELECT 1"))
		if c.user != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := trusting.Do(req)
		if err != nil {
			t.Fatalf("%s over TLS: %v", c.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || c.want == http.StatusOK && string(b) != "1\n" {
			t.Errorf("%s over TLS: %d %q, want %d", c.name, resp.StatusCode, b, c.want)
		}
	}
	// What peertrail sql and Grafana's ClickHouse source use: clickhouse-go over HTTPS with the
	// CA, the user and the password.
	pwFile := filepath.Join(dir, "sql-password")
	os.WriteFile(pwFile, []byte(password+"\n"), 0o600)
	db, err := store.OpenServer(context.Background(), store.ServerOptions{DSN: sqlURL, CAFile: ca.CertFile, PasswordFile: pwFile})
	if err != nil {
		t.Fatalf("clickhouse-go over HTTPS: %v", err)
	}
	defer db.Close()
	res, err := db.Query(context.Background(), "SELECT count() FROM events", nil)
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != "0" {
		t.Fatalf("clickhouse-go over HTTPS: %v %v", res, err)
	}
	// The engine's settings are out of a reader's reach...
	if _, err := db.Query(context.Background(), "SELECT value FROM system.server_settings WHERE name = 'max_server_memory_usage'", nil); err == nil {
		t.Error("a reader read system.server_settings")
	}
	// ...and without --store-max-memory the engine is capped at half of what the process may
	// use (the cgroup's limit, or the host's RAM), not at the engine's own 0.9 of the host's RAM.
	res, err = srv.Store().Query(context.Background(), "SELECT value FROM system.server_settings WHERE name = 'max_server_memory_usage'", nil)
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != fmt.Sprint(store.DefaultMaxMemory()) {
		t.Fatalf("the engine's max_server_memory_usage: %v %v, want %d", res, err, store.DefaultMaxMemory())
	}
}
