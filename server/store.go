package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// storeConsumer is the spool consumer name of the store writer.
const storeConsumer = "store"

// openStore opens the configured engine and brings its schema up to date. It returns a nil
// Store for engine "none".
func (s *Server) openStore(ctx context.Context, cfg config.File) (store.Store, *store.Embedded, error) {
	var (
		st  store.Store
		emb *store.Embedded
		err error
	)
	switch cfg.Store.Engine {
	case "none":
		return nil, nil, nil
	case "", "embedded":
		emb, err = store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: filepath.Join(cfg.DataDir, "clickhouse"), LibPath: cfg.Store.LibPath, MaxMemory: s.budget.Engine,
			DirtyPageDecay: s.budget.EngineDecay, Confine: !cfg.Store.Unconfined})
		if err != nil {
			return nil, nil, fmt.Errorf("embedded store: %w (or run with --store none, or --store clickhouse and --clickhouse-dsn)", err)
		}
		switch {
		case emb.Confined():
			s.log.Info("embedded store: the engine's threads are confined (Landlock) to its directory and the system files it reads", "dir", filepath.Join(cfg.DataDir, "clickhouse"))
		case cfg.Store.Unconfined:
			s.log.Warn("embedded store: the engine's threads are not confined (--unconfined-engine): a fault in the engine can reach every file the process can")
		default:
			s.log.Warn("embedded store: this kernel has no Landlock, so the engine's threads are not confined: the SQL interface's allowlist is the only guard of the files the process can reach")
		}
		st = emb
	case "clickhouse":
		c := cfg.Store
		st, err = store.OpenServer(ctx, store.ServerOptions{DSN: c.DSN, User: c.User, PasswordFile: c.PasswordFile,
			CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, Cluster: c.Cluster})
		if err != nil {
			return nil, nil, fmt.Errorf("ClickHouse store: %w", err)
		}
	}
	started := time.Now()
	if err := store.Migrate(ctx, st, store.SchemaOptions{Retention: time.Duration(cfg.Store.Retention), Cluster: cfg.Store.Cluster, Deduplicate: cfg.Store.Deduplicate}, s.log); err != nil {
		st.Close()
		return nil, nil, err
	}
	s.log.Info("store ready", "engine", cfg.Store.Engine, "schema_took", time.Since(started).Round(time.Millisecond))
	return st, emb, nil
}

// sqlServer serves the ClickHouse HTTP interface of the embedded engine, read-only. It
// always asks for a password (made up and kept in the data directory when none is
// configured), and off loopback it serves TLS only, with the serving certificate.
func (s *Server) sqlServer(ctx context.Context, cfg config.File, emb *store.Embedded) (*http.Server, net.Listener, error) {
	if emb == nil || cfg.Store.SQLListen == "" {
		return nil, nil, nil
	}
	opts := sqlhttp.Options{User: cfg.Store.SQLUser, Logger: s.log, Limits: sqlhttp.ReadLimits{
		MaxConcurrent:    cfg.Store.SQLMaxConcurrentQueries,
		MaxMemory:        int64(cfg.Store.SQLMaxQueryMemory),
		EngineMemory:     s.budget.Engine,
		MaxExecutionTime: time.Duration(cfg.Store.SQLMaxExecutionTime),
	}}
	var err error
	if opts.Password, err = sqlPassword(cfg); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.Store.SQLListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for SQL on %s: %w (another program, e.g. a ClickHouse server, may hold the port: choose another with --sql-listen, or turn SQL off with --sql-listen '')", cfg.Store.SQLListen, err)
	}
	tlsOn := sqlTLS(cfg)
	if !isLoopback(ln.Addr()) && !tlsOn {
		ln.Close()
		return nil, nil, fmt.Errorf("the SQL interface on %s is not loopback, and off loopback it is served over TLS only: give --tls-cert-file and --tls-key-file (or listen on 127.0.0.1)", cfg.Store.SQLListen)
	}
	h, err := sqlhttp.NewHandler(ctx, emb, opts)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	s.registry.MustRegister(h.Collectors()...)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	if tlsOn {
		tc, err := ingest.ServerTLS(cfg.TLS.CertFile, cfg.TLS.KeyFile, "")
		if err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("SQL interface: %w", err)
		}
		srv.TLSConfig = tc
		ln = tls.NewListener(ln, tc)
	}
	return srv, ln, nil
}

// sqlTLS says whether the SQL interface serves TLS: with the serving certificate, when there is
// one.
func sqlTLS(cfg config.File) bool { return cfg.TLS.CertFile != "" && !cfg.InsecureHTTP }

// SQLPasswordFileName is where serve keeps the SQL interface's password when none is
// configured, under the data directory.
const SQLPasswordFileName = "sql-password"

// sqlPassword reads the configured password file, or the one serve made up earlier, or makes
// one up (and keeps it, mode 0600, so that peertrail sql and people with access to the data
// directory can use it).
func sqlPassword(cfg config.File) (string, error) {
	if f := cfg.Store.SQLPasswordFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("SQL password file: %w", err)
		}
		pw := strings.TrimSpace(string(b))
		if pw == "" {
			return "", fmt.Errorf("SQL password file %s is empty", f)
		}
		return pw, nil
	}
	path := filepath.Join(cfg.DataDir, SQLPasswordFileName)
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	var raw [18]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("make up a SQL password: %w", err)
	}
	pw := base64.RawURLEncoding.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep the SQL password in %s: %w", path, err)
	}
	return pw, nil
}
