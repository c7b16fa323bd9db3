package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/peertrail/peertrail/store/sqltext"
)

// The schema is a sequence of migrations, store/migrations/NNNN_name.sql, applied in order and
// recorded in peertrail.schema_migrations. Each file is a text/template (see schemaFuncs) so
// that the same history renders for a single server (and the embedded engine) and for a
// cluster, and with the configured retention. A migration is a list of statements separated by
// ';' that are each idempotent (IF NOT EXISTS), so one interrupted half-way is simply run again.
// Applied migrations are never edited: their checksum is recorded and checked.

//go:embed migrations/*.sql
var migrationFiles embed.FS

// SchemaOptions shape the rendered DDL.
type SchemaOptions struct {
	// Retention is how long events, chains and the auditID lookup are kept (TTL), in whole
	// days; 0 means DefaultRetention.
	Retention time.Duration
	// RollupRetention is how long the per-minute rollups are kept; 0 means
	// DefaultRollupRetention.
	RollupRetention time.Duration
	// Cluster, when set, renders replicated tables ON CLUSTER with Distributed tables in
	// front, named as the single-server tables are, so queries are the same.
	Cluster string
	// Deduplicate makes the events table and the tables its materialized views fill remember
	// the last DedupWindow inserts, so that an insert carrying an insert_deduplication_token
	// seen already is dropped, from the table and from what its views fill (the writer's
	// WriterOptions.Deduplicate: two aggregators sharing one server). A setting of the tables,
	// set at every Migrate; turning it off leaves it.
	Deduplicate bool
}

// DedupWindow is how many inserts of each table a server remembers for deduplication under
// SchemaOptions.Deduplicate (non_replicated_deduplication_window): at one insert per agent
// frame, 25 a second at 10,000 events/s, over an hour of them.
const DedupWindow = 100_000

// dedupTables are the events table and the tables its materialized views fill: an insert of
// events that is dropped must be dropped from them too.
var dedupTables = []string{"events", "audit_ids", "events_per_minute", "request_latency_per_minute", "apiserver_versions_per_minute",
	"apiserver_latency_per_minute", "errors_per_minute"}

// Defaults and limits of SchemaOptions.
const (
	DefaultRetention       = 30 * 24 * time.Hour
	DefaultRollupRetention = 400 * 24 * time.Hour
	// MaxRetention keeps TTL expressions inside DateTime's range (it ends in 2106): a TTL
	// past it wraps around into the past and expires every row at once.
	MaxRetention = 30 * 365 * 24 * time.Hour
)

func (o SchemaOptions) check() error {
	if o.Retention > MaxRetention || o.RollupRetention > MaxRetention {
		return fmt.Errorf("store: retention longer than %d days overflows ClickHouse's DateTime in the TTL", days(MaxRetention))
	}
	return nil
}

func (o SchemaOptions) withDefaults() SchemaOptions {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.RollupRetention <= 0 {
		o.RollupRetention = DefaultRollupRetention
	}
	return o
}

func days(d time.Duration) int {
	n := int((d + 24*time.Hour - 1) / (24 * time.Hour))
	return max(n, 1)
}

// Migration is one step of the schema.
type Migration struct {
	Version int
	Name    string
	// Checksum is the SHA-256 of the template (not of the rendered text, which varies with
	// SchemaOptions).
	Checksum string
	template string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// Migrations returns the schema's migrations in order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("store: migration file %s is not named NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		v, _ := strconv.Atoi(m[1])
		sum := sha256.Sum256(b)
		out = append(out, Migration{Version: v, Name: m[2], Checksum: hex.EncodeToString(sum[:]), template: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("store: migrations must be numbered 1, 2, 3...; found %04d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// Statements renders the migration for opts and splits it into statements.
func (m Migration) Statements(opts SchemaOptions) ([]string, error) {
	text, err := render(m.template, opts.withDefaults())
	if err != nil {
		return nil, fmt.Errorf("store: migration %04d_%s: %w", m.Version, m.Name, err)
	}
	return SplitStatements(text)
}

// render executes a migration template.
func render(tmpl string, opts SchemaOptions) (string, error) {
	t, err := template.New("").Funcs(schemaFuncs(opts.Cluster)).Option("missingkey=error").Parse(tmpl)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = t.Execute(&b, struct {
		Retention, RollupRetention int
	}{days(opts.Retention), days(opts.RollupRetention)})
	// An empty {{on_cluster}} leaves a trailing space.
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n"), err
}

// schemaFuncs are the template functions of migrations:
//
//	{{table "events"}}       the table that stores data: peertrail.events, or on a cluster
//	                         the local replicated peertrail.events_local
//	{{on_cluster}}           "" or ON CLUSTER `name`
//	{{engine "ReplacingMergeTree" "events" "version"}}
//	                         the engine, Replicated* with a ZooKeeper path on a cluster; the
//	                         third argument is the engine's own argument (may be "")
//	{{distributed "events" "cityHash64(audit_id)"}}
//	                         on a cluster, the Distributed table peertrail.events in front of
//	                         peertrail.events_local, sharded by the expression; else nothing
//	{{if cluster}}...{{end}} statements for a cluster only (e.g. altering a Distributed table)
//	{{Database}}             peertrail
func schemaFuncs(cluster string) template.FuncMap {
	return template.FuncMap{
		"table": func(name string) string {
			if cluster != "" {
				return Database + "." + name + "_local"
			}
			return Database + "." + name
		},
		"on_cluster": func() string {
			if cluster == "" {
				return ""
			}
			return "ON CLUSTER " + quoteIdent(cluster)
		},
		"engine": func(kind, table, arg string) string {
			if cluster == "" {
				if arg == "" {
					return kind
				}
				return kind + "(" + arg + ")"
			}
			args := "'/clickhouse/tables/{shard}/" + Database + "/" + table + "', '{replica}'"
			if arg != "" {
				args += ", " + arg
			}
			return "Replicated" + kind + "(" + args + ")"
		},
		"cluster":  func() bool { return cluster != "" },
		"Database": func() string { return Database },
		"distributed": func(table, shardKey string) string {
			if cluster == "" {
				return ""
			}
			return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s ON CLUSTER %s AS %s.%s_local\nENGINE = Distributed(%s, %s, %s_local, %s)",
				Database, table, quoteIdent(cluster), Database, table, QuoteString(cluster), Database, table, shardKey)
		},
	}
}

// DDL returns the whole schema for opts as SQL text, each statement ending in ";".
func DDL(opts SchemaOptions) (string, error) {
	if err := opts.check(); err != nil {
		return "", err
	}
	ms, err := Migrations()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range bootstrapStatements(opts) {
		b.WriteString(s + ";\n\n")
	}
	for _, m := range ms {
		stmts, err := m.Statements(opts)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "-- migration %04d_%s\n\n", m.Version, m.Name)
		for _, s := range stmts {
			b.WriteString(s + ";\n\n")
		}
	}
	return b.String(), nil
}

// migrationsTable records applied migrations.
const migrationsTable = Database + ".schema_migrations"

func bootstrapStatements(opts SchemaOptions) []string {
	f := schemaFuncs(opts.Cluster)
	onCluster := f["on_cluster"].(func() string)()
	engine := f["engine"].(func(string, string, string) string)("ReplacingMergeTree", "schema_migrations", "")
	return []string{
		strings.TrimSpace("CREATE DATABASE IF NOT EXISTS " + Database + " " + onCluster),
		strings.TrimSpace("CREATE TABLE IF NOT EXISTS "+migrationsTable+" "+onCluster) + ` (
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC')
)
ENGINE = ` + engine + `
ORDER BY version`,
	}
}

// Migrate brings the schema of s up to date: it creates the database, applies every
// migration not yet recorded, in order, and sets the tables' retention to opts. It is safe to
// call at every start. It fails with ErrSchemaChanged when an applied migration differs from
// this binary's and with ErrSchemaTooNew when the database is ahead of it. Only one process
// should migrate a database at a time.
func Migrate(ctx context.Context, s Store, opts SchemaOptions, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := opts.check(); err != nil {
		return err
	}
	opts = opts.withDefaults()
	ms, err := Migrations()
	if err != nil {
		return err
	}
	for _, stmt := range bootstrapStatements(opts) {
		if err := s.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("store: create the schema bookkeeping: %w", err)
		}
	}
	res, err := s.Query(ctx, "SELECT version, any(checksum) AS checksum FROM "+migrationsTable+" FINAL GROUP BY version ORDER BY version", nil)
	if err != nil {
		return fmt.Errorf("store: read applied migrations: %w", err)
	}
	applied := map[int]string{}
	for _, row := range res.Rows {
		v, err := strconv.Atoi(row[0])
		if err != nil {
			return fmt.Errorf("store: bad migration version %q", row[0])
		}
		applied[v] = row[1]
	}
	for v := range applied {
		if v > len(ms) {
			return fmt.Errorf("%w: it has migration %04d, this binary knows %d", ErrSchemaTooNew, v, len(ms))
		}
	}
	for _, m := range ms {
		if sum, ok := applied[m.Version]; ok {
			if sum != m.Checksum {
				return fmt.Errorf("%w: %04d_%s", ErrSchemaChanged, m.Version, m.Name)
			}
			continue
		}
		stmts, err := m.Statements(opts)
		if err != nil {
			return err
		}
		start := time.Now()
		for _, stmt := range stmts {
			if err := s.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("store: migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		err = s.Insert(ctx, migrationsTable,
			[]Column{{"version", "UInt32"}, {"name", "String"}, {"checksum", "String"}, {"applied_at", "DateTime64(3, 'UTC')"}},
			[][]any{{uint32(m.Version), m.Name, m.Checksum, time.Now().UTC()}})
		if err != nil {
			return fmt.Errorf("store: record migration %04d_%s: %w", m.Version, m.Name, err)
		}
		log.Info("store: applied schema migration", "version", m.Version, "name", m.Name, "took", time.Since(start).Round(time.Millisecond))
	}
	if err := setRetention(ctx, s, opts, log); err != nil {
		return err
	}
	if opts.Deduplicate {
		return setDedupWindow(ctx, s, opts)
	}
	return nil
}

// setDedupWindow makes the events table and the tables its views fill remember DedupWindow
// inserts (SchemaOptions.Deduplicate).
func setDedupWindow(ctx context.Context, s Store, opts SchemaOptions) error {
	for _, t := range dedupTables {
		name := t
		if opts.Cluster != "" {
			name += "_local"
		}
		stmt := fmt.Sprintf("ALTER TABLE %s.%s %s MODIFY SETTING non_replicated_deduplication_window = %d", Database, name,
			schemaFuncs(opts.Cluster)["on_cluster"].(func() string)(), DedupWindow)
		if err := s.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("store: let %s deduplicate inserts: %w", name, err)
		}
	}
	return nil
}

// retentionTTL lists the tables with a TTL and the expression it is built from.
var retentionTTL = []struct {
	table, expr string
	rollup      bool
}{
	{"events", "toDateTime(received_at)", false},
	{"audit_ids", "received_day", false},
	{"chains", "toDateTime(first_received)", false},
	{"report_chains", "toDateTime(first_received)", false},
	{"events_per_minute", "minute", true},
	{"request_latency_per_minute", "minute", true},
	{"apiserver_latency_per_minute", "minute", true},
	{"errors_per_minute", "minute", true},
	{"forwarding_overhead_per_minute", "minute", true},
	{"apiserver_versions_per_minute", "minute", true},
	{"chains_per_minute", "minute", true},
	{"chain_latency_per_minute", "minute", true},
}

// setRetention changes the tables' TTL when the configured retention differs from the one
// they were created (or last altered) with.
func setRetention(ctx context.Context, s Store, opts SchemaOptions, log *slog.Logger) error {
	res, err := s.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = {db:String}", map[string]string{"db": Database})
	if err != nil {
		return fmt.Errorf("store: read table definitions: %w", err)
	}
	engines := map[string]string{}
	for _, row := range res.Rows {
		engines[row[0]] = row[1]
	}
	for _, t := range retentionTTL {
		d := days(opts.Retention)
		if t.rollup {
			d = days(opts.RollupRetention)
		}
		name := t.table
		if opts.Cluster != "" {
			name += "_local"
		}
		want := fmt.Sprintf("TTL %s + toIntervalDay(%d)", t.expr, d)
		engine, ok := engines[name]
		if !ok || strings.Contains(engine, want) {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s.%s %s MODIFY %s", Database, name, schemaFuncs(opts.Cluster)["on_cluster"].(func() string)(), want)
		if err := s.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("store: change the retention of %s: %w", name, err)
		}
		log.Info("store: changed retention", "table", name, "days", d)
	}
	return nil
}

// SplitStatements splits SQL text into statements at top-level semicolons, dropping empty
// ones (and ones that are only comments); see package sqltext.
func SplitStatements(s string) ([]string, error) { return sqltext.SplitStatements(s) }
