package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/internal/termsafe"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/store"
)

// DefaultSQLServer is where `peertrail serve` answers the ClickHouse HTTP interface by default.
const DefaultSQLServer = "http://127.0.0.1:8123"

// queryFlags are how sql and report reach the store.
type queryFlags struct {
	server string
	ch     store.ServerOptions
	format string
	params []string
}

func (f *queryFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.server, "sql-server", DefaultSQLServer, "`URL` of a running peertrail serve's SQL interface, its --sql-listen (not its API's --listen, which chain and gate take as --server), or of any ClickHouse HTTP interface")
	// The name this flag had before it got its own: kept working, not shown.
	fs.StringVar(&f.server, "server", DefaultSQLServer, "same as --sql-server")
	fs.MarkHidden("server")
	f.ch.AddFlags(fs)
	// Read-only commands create no tables.
	fs.MarkHidden("clickhouse-cluster")
	fs.StringVarP(&f.format, "output", "o", "table", "output format: table, json (one object per line), yaml, tsv or csv")
	fs.StringVar(&f.format, "format", "table", "same as --output")
	fs.MarkHidden("format")
	fs.StringArrayVar(&f.params, "param", nil, "query parameter `name=value` for a {name:Type} placeholder (repeatable)")
}

// defaultSQLPasswordFile is where `peertrail serve` keeps the SQL password it made up, with
// its default --data-dir.
var defaultSQLPasswordFile = filepath.Join(config.Defaults().DataDir, server.SQLPasswordFileName)

// open connects to --clickhouse-dsn, else to --sql-server, with the password of
// --clickhouse-password-file, $CLICKHOUSE_PASSWORD, or the one serve made up in ./data.
func (f *queryFlags) open(ctx context.Context) (store.Store, error) {
	o := f.ch
	if o.DSN == "" {
		o.DSN = f.server
		if o.Password == "" && o.PasswordFile == "" && os.Getenv("CLICKHOUSE_PASSWORD") == "" {
			if _, err := os.Stat(defaultSQLPasswordFile); err == nil {
				o.PasswordFile = defaultSQLPasswordFile
			}
		}
	}
	if f.ch.DSN == "" {
		if err := probeSQL(ctx, f.server, o); err != nil {
			return nil, err
		}
	}
	s, err := store.OpenServer(ctx, o)
	if err != nil {
		flag := "--clickhouse-dsn"
		if f.ch.DSN == "" {
			flag = "--sql-server"
		}
		if msg := err.Error(); strings.Contains(msg, "AUTHENTICATION_FAILED") || strings.Contains(msg, "REQUIRED_PASSWORD") ||
			strings.Contains(msg, "code: 194") || strings.Contains(msg, "code: 516") {
			return nil, errorf(exitRefused, "pass --clickhouse-password-file <serve's --data-dir>/"+server.SQLPasswordFileName+", or set $CLICKHOUSE_PASSWORD",
				"the SQL interface at %s refused the password", o.DSN)
		}
		if ue := unreachable(err, o.DSN, "a ClickHouse SQL interface", flag); ue != nil {
			return nil, ue
		}
		return nil, errorf(exitUnreachable, "is peertrail serve running with its SQL interface there? "+flag+" sets the address", "%s", oneLine(err.Error()))
	}
	return s, nil
}

// probeSQL asks base for /ping, which a ClickHouse HTTP interface answers "Ok.", so that a
// wrong address is recognised and explained before the driver's own error.
func probeSQL(ctx context.Context, base string, o store.ServerOptions) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errorf(exitUsage, "e.g. --sql-server http://127.0.0.1:8123", "--sql-server %q: want an http:// or https:// URL", base)
	}
	tc, err := clientTLS(o.CAFile, false, "", "")
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	get := func(path string) (*http.Response, string, error) {
		// The path goes on the URL's path: base may carry DSN parameters (?secure=true).
		p := *u
		p.Path, p.RawQuery = strings.TrimRight(u.Path, "/")+path, ""
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.String(), nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp, string(b), nil
	}
	resp, body, err := get("/ping")
	if err != nil {
		if ue := unreachable(err, base, "peertrail serve's SQL interface", "--sql-server"); ue != nil {
			return ue
		}
		return errorf(exitUnreachable, "--sql-server sets the address", "ask %s: %v", base, err)
	}
	if resp.StatusCode == http.StatusOK && strings.TrimSpace(body) == "Ok." {
		return nil
	}
	if r, b, err := get("/healthz"); err == nil && r.StatusCode == http.StatusOK && strings.TrimSpace(b) == "ok" {
		return errorf(exitUnreachable, "sql and report read serve's SQL interface, its --sql-listen address (default "+DefaultSQLServer+")",
			"%s is peertrail serve's API (its --listen), not its SQL interface", base)
	}
	return errorf(exitUnreachable, "--sql-server takes serve's --sql-listen address (default "+DefaultSQLServer+")",
		"%s answered %s to /ping: it is not a ClickHouse HTTP interface", base, resp.Status)
}

// paramMap returns the --param values as given. escape prepares them for Store.Query, which
// takes parameters as ClickHouse parses them: escaped as in TabSeparated (named queries escape
// their String parameters themselves).
func (f *queryFlags) paramMap(escape bool) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range f.params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want name=value", p)
		}
		if escape {
			v = store.EscapeTSV(v)
		}
		m[k] = v
	}
	return m, nil
}

func newSQLCommand(_ *globalFlags) *cobra.Command {
	f := &queryFlags{}
	cmd := &cobra.Command{
		Use:   "sql [flags] 'SELECT ...'",
		Short: "Run a SQL query on the store",
		Long: `sql runs one read query on peertrail's store and prints the result.

By default it asks a running ` + "`peertrail serve`" + ` through its ClickHouse HTTP interface
(--sql-server, http://127.0.0.1:8123): the embedded engine allows one process per data directory, so
the serving process answers. With --clickhouse-dsn it queries a ClickHouse server directly.

The interface asks for a password: --clickhouse-password-file, $CLICKHOUSE_PASSWORD, or by
default data/sql-password, which serve makes up when it is given none (its --data-dir). It runs
exactly one read statement (SELECT and WITH, DESCRIBE, EXPLAIN, SHOW DATABASES, SHOW TABLES) on a
read-only connection of the engine, within serve's memory, time, row and result-size limits, and
only what its allowlist admits: the tables of the peertrail database and system.tables, columns,
databases, functions and one; the functions reviewed in store/sqlhttp/functions.txt; no table
function and no SETTINGS clause (SECURITY.md).

The tables are in the database peertrail (the default database of the serve endpoint):
events, chains, audit_ids and the per-minute rollups events_per_minute, request_latency_per_minute,
apiserver_versions_per_minute, chains_per_minute and chain_latency_per_minute (see
store/COLUMNS.md). Read chains with FINAL. Placeholders {name:Type} take their values from
--param name=value. Without an argument the query is read from standard input.`,
		Example: `  peertrail sql 'SELECT class, count() FROM chains FINAL GROUP BY class'
  peertrail sql --sql-server http://127.0.0.1:8123 --clickhouse-password-file data/sql-password 'SELECT count() FROM events'
  echo 'SELECT version()' | peertrail sql
  peertrail sql -o json --param id=4a1b2c3d-... \
    'SELECT apiserver, stage, code FROM events WHERE audit_id = {id:String}'
  peertrail sql --clickhouse-dsn clickhouse://ch.example:9440?secure=true --clickhouse-password-file pw \
    'SELECT count() FROM peertrail.events'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(cmd, "sql takes one query, got %d arguments: quote the query as one argument", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(cmd, f.format); err != nil {
				return err
			}
			q := ""
			if len(args) == 1 && args[0] != "-" {
				q = args[0]
			} else {
				var err error
				if q, err = readQuery(cmd); err != nil {
					return err
				}
			}
			if strings.TrimSpace(q) == "" {
				return usageError(cmd, "no query: give it as the argument, or on standard input")
			}
			params, err := f.paramMap(true)
			if err != nil {
				return err
			}
			s, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			res, err := s.Query(cmd.Context(), q, params)
			if err != nil {
				return err
			}
			return render(cmd.OutOrStdout(), res, f.format)
		},
	}
	f.add(cmd.Flags())
	return cmd
}

// render prints a result in one of the output formats. table, tsv and csv are for reading
// and escape what a terminal could act on (the values are what clients chose: names, paths,
// user agents, auditIDs); json and yaml escape controls themselves and stay exact.
func render(w io.Writer, r *store.Result, format string) error {
	switch format {
	case "table":
		return renderTable(w, r)
	case "tsv":
		var b strings.Builder
		for i, c := range r.Columns {
			if i > 0 {
				b.WriteByte('\t')
			}
			b.WriteString(termsafe.String(store.EscapeTSV(c.Name)))
		}
		b.WriteByte('\n')
		for _, row := range r.Rows {
			for i, v := range row {
				if i > 0 {
					b.WriteByte('\t')
				}
				if v != store.Null {
					// After EscapeTSV, so that a \x1b written here came from an ESC and not
					// from a backslash (those are doubled), and a TabSeparated reader restores it.
					v = termsafe.String(store.EscapeTSV(v))
				}
				b.WriteString(v)
			}
			b.WriteByte('\n')
		}
		_, err := io.WriteString(w, b.String())
		return err
	case "csv":
		cw := csv.NewWriter(w)
		names := make([]string, len(r.Columns))
		for i, c := range r.Columns {
			names[i] = termsafe.String(c.Name)
		}
		cw.Write(names)
		safe := make([]string, len(r.Columns))
		for _, row := range r.Rows {
			for i, v := range row {
				safe[i] = termsafe.String(v)
			}
			cw.Write(safe[:len(row)])
		}
		cw.Flush()
		return cw.Error()
	case "yaml":
		rows := make([]orderedObject, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = make(orderedObject, len(row))
			for j, v := range row {
				rows[i][j] = field{r.Columns[j].Name, jsonValue(v, r.Columns[j].Type)}
			}
		}
		b, err := json.Marshal(rows)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	case "json":
		enc := json.NewEncoder(w)
		for _, row := range r.Rows {
			obj := make(orderedObject, len(row))
			for i, v := range row {
				obj[i] = field{r.Columns[i].Name, jsonValue(v, r.Columns[i].Type)}
			}
			if err := enc.Encode(obj); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("-o %q: want table, json, yaml, tsv or csv", format)
}

// checkFormat refuses an output format render does not know, before anything runs.
func checkFormat(cmd *cobra.Command, format string) error {
	switch format {
	case "table", "json", "yaml", "tsv", "csv":
		return nil
	}
	return usageError(cmd, "-o %q: want table, json, yaml, tsv or csv", format)
}

// readQuery reads the query from standard input. On a terminal it first says so, and Ctrl-C
// ends the wait (the context is cancelled).
func readQuery(cmd *cobra.Command) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintln(cmd.ErrOrStderr(), "peertrail sql: reading the query from standard input; end it with Ctrl-D (Ctrl-C cancels), or pass it as an argument: peertrail sql 'SELECT ...'")
	}
	type read struct {
		b   []byte
		err error
	}
	got := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(in, 16<<20))
		got <- read{b, err}
	}()
	select {
	case r := <-got:
		return string(r.b), r.err
	case <-cmd.Context().Done():
		return "", cmd.Context().Err()
	}
}

// jsonValue keeps numbers numbers and NULL null; everything else is a string in ClickHouse's
// text form.
func jsonValue(v, chType string) any {
	if v == store.Null {
		return nil
	}
	t := chType
	for _, wrap := range []string{"LowCardinality(", "Nullable("} {
		if strings.HasPrefix(t, wrap) {
			t = strings.TrimSuffix(strings.TrimPrefix(t, wrap), ")")
		}
	}
	switch {
	case strings.HasPrefix(t, "Int"), strings.HasPrefix(t, "UInt"), strings.HasPrefix(t, "Float"), strings.HasPrefix(t, "Decimal"):
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			return json.Number(v)
		}
	case t == "Bool":
		return v == "true"
	}
	return v
}

type field struct {
	name  string
	value any
}

// orderedObject is a JSON object that keeps the columns' order.
type orderedObject []field

func (o orderedObject) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, f := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(f.name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// maxCell bounds a table cell but the last column's, which needs no padding and is printed
// whole (an explanation, a message); longer values are cut with an ellipsis (use tsv or json
// for whole values).
const maxCell = 80

// renderTable prints an aligned text table, numbers right-aligned.
func renderTable(w io.Writer, r *store.Result) error {
	if len(r.Columns) == 0 {
		return nil
	}
	cells := make([][]string, len(r.Rows)+1)
	cells[0] = make([]string, len(r.Columns))
	for i, c := range r.Columns {
		cells[0][i] = termsafe.String(c.Name)
	}
	for i, row := range r.Rows {
		cells[i+1] = make([]string, len(row))
		for j, v := range row {
			v = termsafe.String(v)
			if j < len(row)-1 && utf8.RuneCountInString(v) > maxCell {
				v = string([]rune(v)[:maxCell-1]) + "…"
			}
			cells[i+1][j] = v
		}
	}
	width := make([]int, len(r.Columns))
	for _, row := range cells {
		for j, v := range row {
			width[j] = max(width[j], utf8.RuneCountInString(v))
		}
	}
	numeric := make([]bool, len(r.Columns))
	for j, c := range r.Columns {
		_, isNum := jsonValue("0", c.Type).(json.Number)
		numeric[j] = isNum
	}
	var b strings.Builder
	line := func(row []string) {
		for j, v := range row {
			if j > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[j]-utf8.RuneCountInString(v))
			switch {
			case numeric[j]:
				b.WriteString(pad + v)
			case j == len(row)-1:
				b.WriteString(v)
			default:
				b.WriteString(v + pad)
			}
		}
		b.WriteByte('\n')
	}
	line(cells[0])
	sep := make([]string, len(width))
	for j, n := range width {
		sep[j] = strings.Repeat("-", n)
	}
	line(sep)
	for _, row := range cells[1:] {
		line(row)
	}
	if len(r.Rows) == 0 {
		b.WriteString("(no rows)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
