package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/internal/tlsconfig"
)

// ServerOptions say how to reach a ClickHouse server. They come from flags (AddFlags), the
// environment and files, resolved by ClickHouseOptions.
type ServerOptions struct {
	// DSN is clickhouse://host:9000 (native protocol, the default; clickhouses:// or
	// ?secure=true for TLS), or http://host:8123 / https://host:8443 (HTTP protocol). It may
	// carry user:password@ and clickhouse-go's DSN parameters (dial_timeout, compress, ...).
	DSN string
	// User and Password override the DSN's; when empty they are taken from $CLICKHOUSE_USER
	// and $CLICKHOUSE_PASSWORD. PasswordFile, when set, holds the password (first line).
	User, Password, PasswordFile string
	// CAFile verifies the server's certificate; CertFile and KeyFile are a client
	// certificate. Setting any of them turns TLS on.
	CAFile, CertFile, KeyFile string
	// InsecureSkipVerify turns off server certificate verification (tests only).
	InsecureSkipVerify bool
	// Cluster, when set, makes Migrate create replicated tables ON CLUSTER with Distributed
	// tables in front (see DDL).
	Cluster string
}

// AddFlags registers the options as --clickhouse-* flags.
func (o *ServerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.DSN, "clickhouse-dsn", o.DSN, "ClickHouse server to use: clickhouse://host:9000 (native protocol), http(s)://host:8123 (HTTP); ?secure=true for TLS")
	fs.StringVar(&o.User, "clickhouse-user", o.User, "ClickHouse user (default: the DSN's, or $CLICKHOUSE_USER)")
	fs.StringVar(&o.PasswordFile, "clickhouse-password-file", o.PasswordFile, "file holding the ClickHouse password (default: the DSN's, or $CLICKHOUSE_PASSWORD)")
	fs.StringVar(&o.CAFile, "clickhouse-ca-file", o.CAFile, "CA bundle that verifies the ClickHouse server's certificate (turns TLS on)")
	fs.StringVar(&o.CertFile, "clickhouse-cert-file", o.CertFile, "client certificate for ClickHouse (PEM; turns TLS on)")
	fs.StringVar(&o.KeyFile, "clickhouse-key-file", o.KeyFile, "client certificate key for ClickHouse (PEM)")
	fs.StringVar(&o.Cluster, "clickhouse-cluster", o.Cluster, "ClickHouse cluster name: create replicated tables ON CLUSTER with Distributed tables in front")
}

// ClickHouseOptions resolves o into clickhouse-go options: the DSN, then the environment,
// then explicit fields and files, later ones winning.
func (o *ServerOptions) ClickHouseOptions() (*clickhouse.Options, error) {
	if o.DSN == "" {
		return nil, errors.New("store: no ClickHouse DSN")
	}
	dsn := o.DSN
	if strings.HasPrefix(dsn, "clickhouses://") {
		dsn = "clickhouse://" + strings.TrimPrefix(dsn, "clickhouses://")
		if strings.Contains(dsn, "?") {
			dsn += "&secure=true"
		} else {
			dsn += "?secure=true"
		}
	}
	// https:// says TLS by itself; clickhouse-go also wants secure=true, and refuses the DSN
	// without it ("https without TLS"), which is how peertrail sql and report name a TLS SQL
	// interface (serve's off loopback).
	if u, err := url.Parse(dsn); err == nil && u.Scheme == "https" && !u.Query().Has("secure") {
		q := u.Query()
		q.Set("secure", "true")
		u.RawQuery = q.Encode()
		dsn = u.String()
	}
	opts, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: --clickhouse-dsn: %w", err)
	}
	if opts.Auth.Username == "" {
		opts.Auth.Username = os.Getenv("CLICKHOUSE_USER")
	}
	if opts.Auth.Password == "" {
		opts.Auth.Password = os.Getenv("CLICKHOUSE_PASSWORD")
	}
	if o.User != "" {
		opts.Auth.Username = o.User
	}
	if o.Password != "" {
		opts.Auth.Password = o.Password
	}
	if o.PasswordFile != "" {
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("store: ClickHouse password file: %w", err)
		}
		opts.Auth.Password = strings.TrimRight(strings.SplitN(string(b), "\n", 2)[0], "\r")
	}
	// The schema qualifies every table with its database; the connection's own default
	// database stays what the DSN says (or the server's default).
	if o.CAFile != "" || o.CertFile != "" || o.InsecureSkipVerify {
		tc, err := tlsconfig.Client(o.CAFile, o.InsecureSkipVerify, o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store: ClickHouse TLS: %w", err)
		}
		if opts.TLS != nil {
			// The DSN asked for TLS (secure=true) with settings of its own: keep them.
			tc.ServerName = opts.TLS.ServerName
		}
		opts.TLS = tc
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	opts.ClientInfo.Products = append(opts.ClientInfo.Products, struct{ Name, Version string }{"peertrail", "0"})
	return opts, nil
}

// Server is the Store backed by a ClickHouse server through clickhouse-go.
type Server struct {
	conn    driver.Conn
	cluster string
	closed  atomic.Bool
}

// OpenServer connects to the server o describes and checks that it answers.
func OpenServer(ctx context.Context, o ServerOptions) (*Server, error) {
	opts, err := o.ClickHouseOptions()
	if err != nil {
		return nil, err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("store: connect to ClickHouse %v: %w", opts.Addr, err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("store: ClickHouse %v does not answer: %w", opts.Addr, serverError("ping", err))
	}
	return &Server{conn: conn, cluster: o.Cluster}, nil
}

// Cluster is the cluster the schema is created on ("" for a single server).
func (s *Server) Cluster() string { return s.cluster }

// Exec implements Store.
func (s *Server) Exec(ctx context.Context, stmt string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return serverError("exec", s.conn.Exec(ctx, stmt))
}

// Query implements Store.
func (s *Server) Query(ctx context.Context, query string, params map[string]string) (*Result, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if len(params) > 0 {
		ctx = clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters(params)))
	}
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, serverError("query", err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	r := &Result{Columns: make([]Column, len(types))}
	dest := make([]any, len(types))
	for i, t := range types {
		r.Columns[i] = Column{Name: t.Name(), Type: t.DatabaseTypeName()}
		dest[i] = reflect.New(t.ScanType()).Interface()
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, serverError("query", err)
		}
		row := make([]string, len(dest))
		for i, d := range dest {
			row[i] = formatValue(reflect.ValueOf(d).Elem().Interface(), r.Columns[i].Type)
		}
		r.Rows = append(r.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, serverError("query", err)
	}
	return r, nil
}

// Insert implements Store with one clickhouse-go batch: one INSERT statement.
func (s *Server) Insert(ctx context.Context, table string, columns []Column, rows [][]any) error {
	if s.closed.Load() {
		return ErrClosed
	}
	batch, err := s.conn.PrepareBatch(ctx, insertStatement(table, columns))
	if err != nil {
		return serverError("insert", err)
	}
	defer batch.Close()
	for i, row := range rows {
		if err := batch.Append(row...); err != nil {
			return fmt.Errorf("store: insert into %s: row %d: %w", table, i, serverError("insert", err))
		}
	}
	return serverError("insert", batch.Send())
}

// InsertDeduplicated is Insert with insert_deduplication_token = token: the server drops an
// insert whose token it has seen within the table's non_replicated_deduplication_window (or,
// replicated, replicated_deduplication_window), from the table and, with
// deduplicate_blocks_in_dependent_materialized_views, from what its views fill.
func (s *Server) InsertDeduplicated(ctx context.Context, table string, columns []Column, rows [][]any, token string) error {
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"insert_deduplication_token":                         token,
		"deduplicate_blocks_in_dependent_materialized_views": 1,
	}))
	return s.Insert(ctx, table, columns, rows)
}

// Close implements Store.
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.conn.Close()
}

// serverError turns clickhouse-go's exceptions into *Error.
func serverError(op string, err error) error {
	if err == nil {
		return nil
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		e := &Error{Op: op, Code: int(ex.Code), Name: ex.CodeName, Message: ex.Message}
		if e.Name == "" {
			if m := nameRE.FindStringSubmatch(ex.Message); m != nil {
				e.Name = m[1]
			}
		}
		return e
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
