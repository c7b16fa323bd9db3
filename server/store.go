package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/store"
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
		emb, err = store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: filepath.Join(cfg.DataDir, "clickhouse"), LibPath: cfg.Store.LibPath})
		if err != nil {
			return nil, nil, fmt.Errorf("embedded store: %w (or run with --store none, or --store clickhouse and --clickhouse-dsn)", err)
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
	if err := store.Migrate(ctx, st, store.SchemaOptions{Retention: time.Duration(cfg.Store.Retention), Cluster: cfg.Store.Cluster}, s.log); err != nil {
		st.Close()
		return nil, nil, err
	}
	s.log.Info("store ready", "engine", cfg.Store.Engine, "schema_took", time.Since(started).Round(time.Millisecond))
	return st, emb, nil
}

// sqlServer serves the ClickHouse HTTP interface of the embedded engine, read-only.
func (s *Server) sqlServer(cfg config.File, emb *store.Embedded) (*http.Server, net.Listener, error) {
	if emb == nil || cfg.Store.SQLListen == "" {
		return nil, nil, nil
	}
	opts := store.HTTPOptions{User: cfg.Store.SQLUser, Logger: s.log}
	if cfg.Store.SQLPasswordFile != "" {
		b, err := os.ReadFile(cfg.Store.SQLPasswordFile)
		if err != nil {
			return nil, nil, fmt.Errorf("SQL password file: %w", err)
		}
		opts.Password = strings.TrimSpace(string(b))
	}
	ln, err := net.Listen("tcp", cfg.Store.SQLListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen for SQL on %s: %w", cfg.Store.SQLListen, err)
	}
	if !isLoopback(ln.Addr()) && opts.Password == "" {
		ln.Close()
		return nil, nil, fmt.Errorf("the SQL interface on %s is not loopback: set --sql-password-file (or listen on 127.0.0.1)", cfg.Store.SQLListen)
	}
	h := store.NewHTTPHandler(emb, opts)
	s.registry.MustRegister(h.Collectors()...)
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// chainLookup finds a final chain the correlator no longer holds in the store's chains table.
func chainLookup(st store.Store) correlate.Lookup {
	return func(ctx context.Context, auditID string) (*correlate.Chain, error) {
		q, err := store.QueryNamed("audit_id_chain")
		if err != nil {
			return nil, err
		}
		res, err := q.Run(ctx, st, map[string]string{"audit_id": auditID})
		if err != nil {
			return nil, err
		}
		if len(res.Rows) == 0 {
			return nil, nil
		}
		i := len(res.Rows) - 1 // the most recent request with the auditID
		v := func(name string) string { return res.Value(i, name) }
		num := func(name string) int32 { n, _ := strconv.Atoi(v(name)); return int32(n) }
		secs := func(name string) float64 { f, _ := strconv.ParseFloat(v(name), 64); return f / 1000 }
		c := &correlate.Chain{
			ID: v("id"), AuditID: auditID, State: correlate.State(v("state")), Class: correlate.Class(v("class")),
			Findings: []correlate.Finding{}, Explanation: v("explanation"), Verb: v("verb"), RequestURI: v("request_uri"),
			User: v("user"), RealUser: v("real_user"), Code: num("code"),
			EntryDurationSeconds: secs("entry_ms"), PeerDurationSeconds: secs("peer_ms"),
		}
		if c.Class == correlate.ClassProxied {
			c.ForwardingOverheadSeconds = c.EntryDurationSeconds - c.PeerDurationSeconds
		}
		for _, f := range strings.Split(v("finding_list"), ",") {
			if f != "" {
				c.Findings = append(c.Findings, correlate.Finding(f))
			}
		}
		if a := v("entry_apiserver"); a != "" {
			c.Entry = &correlate.Side{APIServer: a, Code: num("entry_code")}
		}
		if a := v("peer_apiserver"); a != "" {
			c.Peer = &correlate.Side{APIServer: a, Code: num("peer_code")}
		}
		return c, nil
	}
}
