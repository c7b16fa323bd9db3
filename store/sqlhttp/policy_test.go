package sqlhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/queries"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

var (
	poolOnce sync.Once
	poolRead *sqlhttp.ReadPool
	poolErr  error
)

// pool is a ReadPool over the shared engine.
func pool(t *testing.T) *sqlhttp.ReadPool {
	t.Helper()
	s := engine(t)
	poolOnce.Do(func() {
		poolRead, poolErr = sqlhttp.NewReadPool(context.Background(), s, sqlhttp.ReadLimits{MaxConcurrent: 2})
	})
	if poolErr != nil {
		t.Fatal(poolErr)
	}
	return poolRead
}

func read(t *testing.T, q sqlhttp.ReadQuery) (*sqlhttp.ReadResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return pool(t).Run(ctx, q)
}

// What the SQL interface's users ask must pass: every named query (the chain API, `peertrail
// report` and the dashboards ask them), and what Grafana's ClickHouse data source (v4) asks to
// browse the schema and suggest functions.
func TestShippedAndGrafanaQueriesAreAllowed(t *testing.T) {
	loadScenario(t)
	all, err := queries.All()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, q := range all {
		params := map[string]string{}
		for k, v := range q.Defaults {
			params[k] = v
		}
		for k, v := range store.Window(now, 24*time.Hour) {
			params[k] = v
		}
		for _, p := range q.Params {
			if _, ok := params[p]; !ok {
				params[p] = "x" // the IDs and names the API fills in
			}
		}
		if _, err := read(t, sqlhttp.ReadQuery{Text: q.SQL, Format: "Native", Params: params}); err != nil {
			t.Errorf("named query %s: %v", q.Name, err)
		}
	}
	for _, q := range []string{
		"SHOW DATABASES",
		"SHOW TABLES",
		"SHOW TABLES FROM system LIKE 'stack%' LIMIT 3",
		"SHOW TABLES FORMAT JSON",
		`SHOW TABLES FROM "peertrail"`,
		`DESC TABLE "peertrail"."events"`,
		"SELECT database, name FROM system.tables ORDER BY database, name",
		"SELECT database, table, name, type, comment FROM system.columns WHERE (database, table) IN (('peertrail', 'events')) ORDER BY database, table, position",
		"SELECT name, type, table FROM system.columns WHERE database IN ('peertrail')",
		"SELECT name, is_aggregate, case_insensitive, alias_to, origin, description, syntax, arguments, returned_value, examples, categories FROM system.functions LIMIT 10000",
		"SELECT version()",
		"SELECT currentDatabase()",
		"SELECT DISTINCT verb FROM peertrail.events LIMIT 1000",
		"SELECT toStartOfInterval(received_at, INTERVAL 60 second) AS time, count() FROM events WHERE received_at >= toDateTime(1700000000) AND received_at <= toDateTime(1800000000) GROUP BY time ORDER BY time",
		// The syntax investigators reach for.
		"WITH x AS (SELECT audit_id, count() AS n FROM events GROUP BY audit_id) SELECT * FROM x WHERE n > 1 ORDER BY n DESC LIMIT 5",
		"SELECT countIf(verb = 'get'), uniqExact(audit_id), quantiles(0.5, 0.99)(1), argMax(verb, received_at), sumIf(1, 1), groupArray(3)(verb) FROM events",
		"SELECT e.audit_id, c.class FROM events AS e LEFT JOIN chains AS c ON e.audit_id = c.audit_id LIMIT 3",
		"SELECT audit_id FROM events WHERE audit_id IN (SELECT audit_id FROM chains) AND verb NOT IN ('watch') LIMIT 1",
		"SELECT arrayMap(x -> x * 2, [1, 2]), CAST(1 AS String), 1::Int8, CASE WHEN 1 THEN 'a' ELSE 'b' END, now() - INTERVAL 1 DAY, lcase('A'), SUBSTRING('abc', 1, 2), 'a' || 'b', 1 BETWEEN 0 AND 2, EXTRACT(DAY FROM now()), row_number() OVER (ORDER BY 1)",
		"SELECT 1 UNION ALL SELECT 2",
		"EXPLAIN SELECT count() FROM events",
		"EXPLAIN SYNTAX SELECT count() FROM events",
		"SELECT * FROM events LIMIT 1 FORMAT JSON",
	} {
		if _, err := read(t, sqlhttp.ReadQuery{Text: q}); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

// Each way around the allowlist that the issue found or that its rules exist for is refused
// before it runs, as not allowed (or not a read).
func TestPolicyRefuses(t *testing.T) {
	for _, c := range []struct {
		q      string
		params map[string]string
	}{
		{q: "SELECT file('/etc/passwd')"},
		{q: "SELECT FILE('/etc/passwd')"},
		{q: "SELECT `file`('/etc/passwd')"},
		{q: "SELECT length(file('/proc/self/cmdline'))"},
		{q: "SELECT count(), countIf(length(trace) > 0) FROM system.stack_trace"},
		{q: "SELECT count() FROM `system`.`stack_trace`"},
		{q: "SELECT 1 WHERE 1 IN system.stack_trace"},
		{q: "SELECT 1 WHERE 'x' GLOBAL IN system.processes"},
		{q: "SELECT * FROM system.processes"},
		{q: "SELECT * FROM system.parts"},
		{q: "SELECT * FROM INFORMATION_SCHEMA.TABLES"},
		{q: "SELECT * FROM events, system.stack_trace"},
		{q: "SELECT * FROM events AS e JOIN system.stack_trace AS s ON 1"},
		{q: "SELECT (SELECT count() FROM system.stack_trace)"},
		{q: "WITH s AS (SELECT * FROM system.stack_trace) SELECT * FROM s"},
		{q: "SELECT * FROM {t:Identifier}", params: map[string]string{"t": "system.stack_trace"}},
		{q: "SELECT * FROM numbers(10)"},
		{q: "SELECT * FROM format(JSONEachRow, '{\"a\":1}')"},
		{q: "SELECT * FROM view(SELECT 1)"},
		{q: "SELECT * FROM merge('system', 'stack')"},
		{q: "SELECT * FROM events AS e JOIN url('http://127.0.0.1:1/', 'LineAsString') AS u ON 1"},
		{q: "DESCRIBE file('/etc/passwd')"},
		{q: "DESCRIBE TABLE system.stack_trace"},
		{q: "SELECT addressToSymbol(1)"},
		{q: "SELECT sleep(3)"},
		{q: "SELECT arrayReduce('flameGraph', [[1]])"},
		{q: "SELECT flameGraphMerge(x) FROM (SELECT 1 AS x)"},
		{q: "SELECT fileIf(x, 1) FROM (SELECT 1 AS x)"},
		{q: "SELECT joinGet('x', 'y', 1)"},
		{q: "SELECT dictGet('d', 'a', 1)"},
		{q: "SELECT getServerSetting('path')"},
		{q: "SELECT hostName()"},
		{q: "SELECT formatRow('Protobuf', 1)"},
		{q: "SELECT * APPLY(toString) FROM events LIMIT 1"},
		{q: "SELECT 1 FORMAT Protobuf"},
		{q: "SELECT 1 FORMAT Template"},
		{q: "SELECT 1 FORMAT CustomSeparated"},
		{q: "SELECT 1 FORMAT Parquet"},
		{q: "SELECT 1 SETTINGS max_threads = 1"},
		{q: "SELECT 1 INTO OUTFILE '/tmp/x'"},
		{q: "SHOW PROCESSLIST"},
		{q: "SHOW SETTINGS LIKE '%'"},
		{q: "SHOW MERGES"},
		{q: "SHOW CLUSTERS"},
		{q: "SHOW CREATE TABLE system.stack_trace"},
		{q: "SHOW FILESYSTEM CACHES"},
		{q: "SHOW DICTIONARIES"},
		{q: "SHOW CHANGED SETTINGS LIKE '%'"},
		{q: "SHOW CLUSTER 'default'"},
		{q: "SHOW USERS"},
		{q: "SHOW GRANTS"},
		{q: "SHOW ENGINES"},
		{q: "SHOW FUNCTIONS"},
		{q: "SHOW TABLES FROM system LIMIT (SELECT count() FROM system.stack_trace)"},
		{q: "EXISTS TABLE system.stack_trace"},
		{q: "EXPLAIN QUERY TREE SELECT 1"},
		{q: "EXPLAIN indexes = 1 SELECT 1"},
		{q: "SELECT 1 AS `a\nFunction numbers`, file('/etc/passwd')"},
	} {
		_, err := read(t, sqlhttp.ReadQuery{Text: c.q, Params: c.params})
		if !errors.Is(err, sqlhttp.ErrNotAllowed) && !errors.Is(err, sqlhttp.ErrNotARead) {
			var se *store.Error
			if !errors.As(err, &se) || (se.Code != 164 && se.Code != 62) {
				t.Errorf("%q: got %v, want a refusal", c.q, err)
			}
		}
	}
	// default_format is held to the same list, and the database to peertrail.
	for _, q := range []sqlhttp.ReadQuery{
		{Text: "SELECT 1", Format: "Protobuf"},
		{Text: "SELECT 1", Format: "Template"},
		{Text: "SELECT 1", Database: "system"},
		{Text: "SELECT 1", Settings: [][2]string{{"output_format_schema", "/tmp/x"}}},
		{Text: "SELECT 1", Settings: [][2]string{{"format_template_resultset", "/etc/passwd"}}},
		{Text: "SELECT 1", Settings: [][2]string{{"output_format_pretty_max_column_pad_width", "1000000"}}},
		{Text: "SELECT 1", Settings: [][2]string{{"max_threads", "1000"}}},
	} {
		if _, err := read(t, q); !errors.Is(err, sqlhttp.ErrNotAllowed) {
			t.Errorf("%+v: got %v, want ErrNotAllowed", q, err)
		}
	}
}

// Every output format the interface allows gives what the engine writes for the whole
// statement, whatever the chunks it streams it in: the rows once, a header once, one JSON
// document with the same meta and rows.
func TestFormatsJoinTheEnginesChunks(t *testing.T) {
	loadScenario(t)
	s := engine(t)
	ctx := context.Background()
	// Several of the engine's blocks, a column name a header must escape, and a value of each
	// kind a format writes differently.
	const q = "SELECT i AS `n\"q\tx`, audit_id, toDateTime64(received_at, 6) AS t, [i, 1] AS arr FROM peertrail.events ARRAY JOIN range(100) AS i ORDER BY audit_id, i"
	n := scalar(t, s, "SELECT count() * 100 FROM peertrail.events", nil)
	if rows, _ := strconv.Atoi(n); rows < 70000 {
		t.Fatalf("the scenario makes %s rows: too few for several chunks", n)
	}
	for _, f := range sqlhttp.AllowedFormats() {
		got, err := read(t, sqlhttp.ReadQuery{Text: q, Format: f})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if got.Format != f {
			t.Errorf("%s: answered as %s", f, got.Format)
		}
		want, err := s.Engine().Exec(ctx, q, f, nil)
		if err != nil {
			t.Fatalf("%s: the engine: %v", f, err)
		}
		switch {
		case strings.HasPrefix(f, "JSON") && !strings.Contains(f, "EachRow") && f != "JSONLines":
			var g, w struct {
				Meta []map[string]string
				Data []json.RawMessage
				Rows int
			}
			if err := json.Unmarshal(got.Data, &g); err != nil {
				t.Errorf("%s: not one JSON document: %v\n%.300s", f, err, got.Data)
				continue
			}
			json.Unmarshal(want.Data, &w)
			if !reflect.DeepEqual(g.Meta, w.Meta) || g.Rows != w.Rows || len(g.Data) != len(w.Data) {
				t.Errorf("%s: meta %v rows %d (%d); the engine's: %v rows %d (%d)", f, g.Meta, g.Rows, len(g.Data), w.Meta, w.Rows, len(w.Data))
				continue
			}
			for i := range g.Data {
				var gv, wv any
				json.Unmarshal(g.Data[i], &gv)
				json.Unmarshal(w.Data[i], &wv)
				if !reflect.DeepEqual(gv, wv) {
					t.Errorf("%s: row %d is %s, the engine's %s", f, i, g.Data[i], w.Data[i])
					break
				}
			}
		case strings.HasPrefix(f, "Pretty"):
			// A screenful: the first and the last rows of the first chunks, where the
			// engine shows the first and the last of the whole result.
			half := len(want.Data) / 3
			if len(got.Data) < half || !bytes.Equal(got.Data[:half], want.Data[:half]) || !bytes.Contains(got.Data, []byte("Showed ")) {
				t.Errorf("%s: %d bytes, the engine's %d\n%.300s", f, len(got.Data), len(want.Data), got.Data)
			}
		default:
			if !bytes.Equal(got.Data, want.Data) {
				i := 0
				for i < min(len(got.Data), len(want.Data)) && got.Data[i] == want.Data[i] {
					i++
				}
				t.Errorf("%s: %d bytes differ from the engine's %d at %d: %q, the engine's %q", f, len(got.Data), len(want.Data),
					i, got.Data[max(0, i-40):min(len(got.Data), i+40)], want.Data[max(0, i-40):min(len(want.Data), i+40)])
			}
		}
	}
}

// A result is bounded as it would be sent, whatever the format multiplies the engine's block
// by: a long column name repeated in every JSON row, Pretty's padding.
func TestResultBytesAreBoundedAsSent(t *testing.T) {
	s := engine(t)
	p, err := sqlhttp.NewReadPool(context.Background(), s, sqlhttp.ReadLimits{MaxResultBytes: 4 << 20, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	long := strings.Repeat("x", 1000)
	for _, c := range []sqlhttp.ReadQuery{
		{Text: "SELECT 1 AS " + long + " FROM (SELECT arrayJoin(range(100000)))", Format: "JSON"},
		{Text: "SELECT 1 AS " + long + " FROM (SELECT arrayJoin(range(100000)))", Format: "JSONEachRow"},
		{Text: "SELECT toString(number) FROM (SELECT arrayJoin(range(3000000)) AS number)", Format: "PrettyCompact"},
		{Text: "SELECT arrayJoin(range(3000000))", Format: "TabSeparated"},
	} {
		// The engine's own limit on the block passes each of these.
		_, err := p.Run(context.Background(), c)
		var se *store.Error
		if !errors.Is(err, sqlhttp.ErrResultTooLarge) && !(errors.As(err, &se) && se.Code == 396) {
			t.Errorf("%s as %s: got %v, want ErrResultTooLarge", c.Text[:40], c.Format, err)
		}
	}
	r, err := p.Run(context.Background(), sqlhttp.ReadQuery{Text: "SELECT 'small'"})
	if err != nil || string(r.Data) != "small\n" {
		t.Errorf("the next read: %v %q", err, r.Data)
	}
}
