package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/config"
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
	fs.StringVar(&f.server, "server", DefaultSQLServer, "a running `peertrail serve`'s ClickHouse HTTP interface (or any ClickHouse HTTP URL)")
	f.ch.AddFlags(fs)
	fs.StringVar(&f.format, "format", "table", "output format: table, tsv, csv or json (one object per line)")
	fs.StringArrayVar(&f.params, "param", nil, "query parameter name=value for a {name:Type} placeholder (repeatable)")
}

// defaultSQLPasswordFile is where `peertrail serve` keeps the SQL password it made up, with
// its default --data-dir.
var defaultSQLPasswordFile = filepath.Join(config.Defaults().DataDir, server.SQLPasswordFileName)

// open connects to --clickhouse-dsn, else to --server, with the password of
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
	s, err := store.OpenServer(ctx, o)
	if err != nil {
		if f.ch.DSN == "" {
			if msg := err.Error(); strings.Contains(msg, "AUTHENTICATION_FAILED") || strings.Contains(msg, "REQUIRED_PASSWORD") {
				return nil, fmt.Errorf("%w\n(the SQL interface asks for its password: pass --clickhouse-password-file <serve's --data-dir>/%s, or set $CLICKHOUSE_PASSWORD)", err, server.SQLPasswordFileName)
			}
			return nil, fmt.Errorf("%w\n(is `peertrail serve` running with its ClickHouse HTTP interface on %s? Or pass --clickhouse-dsn)", err, f.server)
		}
		return nil, err
	}
	return s, nil
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
(--server, http://127.0.0.1:8123): the embedded engine allows one process per data directory, so
the serving process answers. With --clickhouse-dsn it queries a ClickHouse server directly.

The interface asks for a password: --clickhouse-password-file, $CLICKHOUSE_PASSWORD, or by
default data/sql-password, which serve makes up when it is given none (its --data-dir). It runs
exactly one read statement (SELECT, WITH, SHOW, DESCRIBE, EXISTS, EXPLAIN) on a read-only
connection of the engine, within serve's memory, time and row limits; a SETTINGS clause that
changes a setting is refused.

The tables are in the database peertrail (the default database of the serve endpoint):
events, chains, audit_ids and the per-minute rollups events_per_minute, request_latency_per_minute,
apiserver_versions_per_minute, chains_per_minute and chain_latency_per_minute (see
store/COLUMNS.md). Read chains with FINAL. Placeholders {name:Type} take their values from
--param name=value. Without an argument the query is read from standard input.`,
		Example: `  peertrail sql 'SELECT class, count() FROM chains FINAL GROUP BY class'
  peertrail sql --format json --param id=4a1b2c3d-... \
    'SELECT apiserver, stage, code FROM events WHERE audit_id = {id:String}'
  peertrail sql --clickhouse-dsn clickhouse://ch.example:9440?secure=true --clickhouse-password-file pw \
    'SELECT count() FROM peertrail.events'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := ""
			if len(args) == 1 && args[0] != "-" {
				q = args[0]
			} else {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				q = string(b)
			}
			if strings.TrimSpace(q) == "" {
				return errors.New("no query")
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

// render prints a result in one of the output formats.
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
			b.WriteString(store.EscapeTSV(c.Name))
		}
		b.WriteByte('\n')
		for _, row := range r.Rows {
			for i, v := range row {
				if i > 0 {
					b.WriteByte('\t')
				}
				if v != store.Null {
					v = store.EscapeTSV(v)
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
			names[i] = c.Name
		}
		cw.Write(names)
		for _, row := range r.Rows {
			cw.Write(row)
		}
		cw.Flush()
		return cw.Error()
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
	return fmt.Errorf("--format %q: want table, tsv, csv or json", format)
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

// maxCell bounds a table cell; longer values are cut with an ellipsis (use tsv or json for
// whole values).
const maxCell = 80

// renderTable prints an aligned text table, numbers right-aligned.
func renderTable(w io.Writer, r *store.Result) error {
	if len(r.Columns) == 0 {
		return nil
	}
	cells := make([][]string, len(r.Rows)+1)
	cells[0] = make([]string, len(r.Columns))
	for i, c := range r.Columns {
		cells[0][i] = c.Name
	}
	for i, row := range r.Rows {
		cells[i+1] = make([]string, len(row))
		for j, v := range row {
			v = strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(v)
			if utf8.RuneCountInString(v) > maxCell {
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
