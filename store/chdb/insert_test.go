package chdb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/store/chdb"
)

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// auditRows generates n JSONEachRow rows and the checksums the engine must
// reproduce: sum(id) and sum(CRC32(user)) (ClickHouse's CRC32 is IEEE, like
// hash/crc32).
func auditRows(n int) (data []byte, sumID, sumCRC uint64) {
	var b bytes.Buffer
	for i := range n {
		id := uint64(i)*2654435761%1_000_000_007 + 1
		user := fmt.Sprintf("system:serviceaccount:ns-%d:sa-%d", i%97, i%13)
		fmt.Fprintf(&b, `{"id":%d,"user":%q,"verb":%q,"ts":"2026-01-02 03:04:%02d.%03d","latency_ms":%d}`+"\n",
			id, user, verbs[i%len(verbs)], i%60, i%1000, i%500)
		sumID += id
		sumCRC += uint64(crc32.ChecksumIEEE([]byte(user)))
	}
	return b.Bytes(), sumID, sumCRC
}

const auditTable = `(
	id UInt64,
	user String,
	verb LowCardinality(String),
	ts DateTime64(3, 'UTC'),
	latency_ms UInt32
) ENGINE = MergeTree ORDER BY (verb, ts, id)`

func TestLargeInsertMergeTree(t *testing.T) {
	e := engine(t)
	run(t, "CREATE DATABASE IF NOT EXISTS big", "CREATE TABLE big.events "+auditTable)

	const n = 150_000
	data, sumID, sumCRC := auditRows(n)
	if len(data) < 1<<20 {
		t.Fatalf("test data is only %d bytes; it must be far above the ~30-64 KB inline limits", len(data))
	}
	r, err := e.Insert(context.Background(), "INSERT INTO big.events", "JSONEachRow", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if r.RowsWritten != n {
		t.Errorf("RowsWritten = %d, want %d", r.RowsWritten, n)
	}
	t.Logf("inserted %d rows (%d bytes JSONEachRow) in %v", n, len(data), r.Elapsed)

	want := fmt.Sprintf("%d\t%d\t%d\t%d\n", n, sumID, sumCRC, len(verbs))
	if got := query(t, "SELECT count(), sum(id), sum(CRC32(user)), uniqExact(verb) FROM big.events", ""); got != want {
		t.Fatalf("count/checksums: got %q, want %q", got, want)
	}
	// Spot-check one row read back in full.
	got := query(t, "SELECT id, user, verb, ts, latency_ms FROM big.events WHERE id = 1", "JSONEachRow")
	if got != `{"id":1,"user":"system:serviceaccount:ns-0:sa-0","verb":"get","ts":"2026-01-02 03:04:00.000","latency_ms":0}`+"\n" {
		t.Errorf("row 0: %s", got)
	}
}

// The binary path: RowBinary (full of NUL bytes) streamed through Insert.
func TestLargeInsertRowBinary(t *testing.T) {
	e := engine(t)
	run(t, "CREATE DATABASE IF NOT EXISTS big",
		"CREATE TABLE big.bin (id UInt64, s String, ts DateTime64(9, 'UTC')) ENGINE = MergeTree ORDER BY id")
	const n = 200_000
	var b bytes.Buffer
	var sumID, sumCRC uint64
	for i := range n {
		s := fmt.Sprintf("r%d", i%1000)
		b.Write(binary.LittleEndian.AppendUint64(nil, uint64(i)))
		b.Write(binary.AppendUvarint(nil, uint64(len(s))))
		b.WriteString(s)
		b.Write(binary.LittleEndian.AppendUint64(nil, uint64(1_767_323_045_000_000_000+i)))
		sumID += uint64(i)
		sumCRC += uint64(crc32.ChecksumIEEE([]byte(s)))
	}
	r, err := e.Insert(context.Background(), "INSERT INTO big.bin (id, s, ts)", "RowBinary", &b)
	if err != nil {
		t.Fatal(err)
	}
	if r.RowsWritten != n {
		t.Errorf("RowsWritten = %d, want %d", r.RowsWritten, n)
	}
	want := fmt.Sprintf("%d\t%d\t%d\t2026-01-02 03:04:05.000199999\n", n, sumID, sumCRC)
	if got := query(t, "SELECT count(), sum(id), sum(CRC32(s)), max(ts) FROM big.bin", ""); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestReplacingMergeTreeFinal(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	run(t, "CREATE DATABASE IF NOT EXISTS rmt",
		"CREATE TABLE rmt.objects (uid String, rv UInt64, phase LowCardinality(String)) ENGINE = ReplacingMergeTree(rv) ORDER BY uid")
	var v1, v2 strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&v1, "pod-%d\t1\tPending\n", i)
		if i%2 == 0 {
			fmt.Fprintf(&v2, "pod-%d\t2\tRunning\n", i)
		}
	}
	// Newer versions first, in a separate insert (a separate part).
	for _, data := range []string{v2.String(), v1.String()} {
		if _, err := e.Insert(ctx, "INSERT INTO rmt.objects", "TabSeparated", strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if got := query(t, "SELECT count() FROM rmt.objects", "CSV"); got != "1500\n" {
		t.Errorf("before FINAL (two unmerged parts): %q", got)
	}
	got := query(t, "SELECT count(), countIf(phase = 'Running'), countIf(rv = 2), max(rv) FROM rmt.objects FINAL", "CSV")
	if got != "1000,500,500,2\n" {
		t.Errorf("FINAL: got %q, want 1000,500,500,2", got)
	}
	run(t, "OPTIMIZE TABLE rmt.objects FINAL")
	if got := query(t, "SELECT count() FROM rmt.objects", "CSV"); got != "1000\n" {
		t.Errorf("after OPTIMIZE FINAL: %q", got)
	}
}

func TestMaterializedView(t *testing.T) {
	e := engine(t)
	run(t, "CREATE DATABASE IF NOT EXISTS mv",
		"CREATE TABLE mv.events "+auditTable,
		`CREATE TABLE mv.by_verb (verb LowCardinality(String), events UInt64, latency_sum UInt64)
			ENGINE = SummingMergeTree ORDER BY verb`,
		`CREATE MATERIALIZED VIEW mv.by_verb_mv TO mv.by_verb AS
			SELECT verb, count() AS events, sum(latency_ms) AS latency_sum FROM mv.events GROUP BY verb`)
	const n = 20_000
	data, _, _ := auditRows(n)
	for range 2 { // two inserts, two parts in the target, summed on read
		r, err := e.Insert(context.Background(), "INSERT INTO mv.events", "JSONEachRow", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if r.RowsWritten != n+uint64(len(verbs)) {
			t.Errorf("RowsWritten = %d, want %d source rows + %d view rows", r.RowsWritten, n, len(verbs))
		}
	}
	want := query(t, "SELECT verb, count(), sum(latency_ms) FROM mv.events GROUP BY verb ORDER BY verb", "CSV")
	got := query(t, "SELECT verb, sum(events), sum(latency_sum) FROM mv.by_verb GROUP BY verb ORDER BY verb", "CSV")
	if got != want || strings.Count(got, "\n") != len(verbs) || !strings.Contains(got, `"get",5716,`) {
		t.Errorf("view: got\n%swant\n%s", got, want)
	}
}

func TestDateTime64AndMap(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	run(t, "CREATE DATABASE IF NOT EXISTS types",
		`CREATE TABLE types.t (
			ts DateTime64(9, 'UTC'),
			labels Map(LowCardinality(String), String),
			annotations Map(String, String)
		) ENGINE = MergeTree ORDER BY ts`)
	rows := `{"ts":"2026-03-04 05:06:07.123456789","labels":{"app":"api","tier":"web"},"annotations":{}}
{"ts":"2026-03-04 05:06:07.123456790","labels":{"app":"db"},"annotations":{"k8s.io/x":"y"}}
`
	if _, err := e.Insert(ctx, "INSERT INTO types.t", "JSONEachRow", strings.NewReader(rows)); err != nil {
		t.Fatal(err)
	}
	// Parameters bind DateTime64 and Map values too.
	if _, err := e.QueryWithParams(ctx, "INSERT INTO types.t VALUES ({ts:DateTime64(9, 'UTC')}, {l:Map(String, String)}, map())",
		"", map[string]string{"ts": "2026-03-04 05:06:07.000000001", "l": "{'app':'api','team':'audit'}"}); err != nil {
		t.Fatal(err)
	}
	got := query(t, `SELECT toUnixTimestamp64Nano(ts) AS ns, labels['app'] AS app, mapKeys(labels) AS keys, annotations
		FROM types.t ORDER BY ts`, "JSONEachRow")
	// JSON output escapes '/' by default (output_format_json_escape_forward_slashes).
	want := `{"ns":1772600767000000001,"app":"api","keys":["app","team"],"annotations":{}}
{"ns":1772600767123456789,"app":"api","keys":["app","tier"],"annotations":{}}
{"ns":1772600767123456790,"app":"db","keys":["app"],"annotations":{"k8s.io\/x":"y"}}
`
	if got != want {
		t.Errorf("got\n%swant\n%s", got, want)
	}
	out, err := e.QueryWithParams(ctx, "SELECT count() FROM types.t WHERE labels[{k:String}] = {v:String} AND ts >= {since:DateTime64(9, 'UTC')}",
		"CSV", map[string]string{"k": "app", "v": "api", "since": "2026-03-04 05:06:07.1"})
	if err != nil || string(out) != "1\n" {
		t.Errorf("filter on Map and DateTime64: %q, %v", out, err)
	}
}

func TestInsertErrors(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	run(t, "CREATE DATABASE IF NOT EXISTS ierr",
		"CREATE TABLE ierr.t (a UInt64, s String) ENGINE = MergeTree ORDER BY a")

	var ee *chdb.EngineError
	_, err := e.Insert(ctx, "INSERT INTO ierr.nope", "JSONEachRow", strings.NewReader(`{"a":1}`))
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "UNKNOWN_TABLE") {
		t.Errorf("unknown table: %v", err)
	}
	_, err = e.Insert(ctx, "INSERT INTO ierr.t", "JSONEachRow", strings.NewReader("{\"a\":1,\"s\":\"x\"}\n{\"a\":\"zz\"}\n"))
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "CANNOT_PARSE") {
		t.Errorf("bad data: %v", err)
	}
	_, err = e.Insert(ctx, "INSERT INTO ierr.t", "NoSuchFormat", strings.NewReader("x"))
	if !errors.As(err, &ee) || !strings.Contains(ee.Message, "UNKNOWN_FORMAT") {
		t.Errorf("bad format: %v", err)
	}
	readErr := errors.New("reader broke")
	_, err = e.Insert(ctx, "INSERT INTO ierr.t", "JSONEachRow", io.MultiReader(strings.NewReader(`{"a":1,"s":"x"}`+"\n"), errReader{readErr}))
	if !errors.Is(err, readErr) {
		t.Errorf("reader error: got %v", err)
	}

	r, err := e.Insert(ctx, "INSERT INTO ierr.t", "JSONEachRow", strings.NewReader(""))
	if err != nil || r.RowsWritten != 0 {
		t.Errorf("empty insert: %+v, %v", r, err)
	}
	if got := query(t, "SELECT count() FROM ierr.t", "CSV"); got != "0\n" {
		t.Errorf("failed inserts left rows: %q", got)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// cancelAfter cancels its context once more than limit bytes were read.
type cancelAfter struct {
	r      io.Reader
	n      int
	limit  int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n > c.limit {
		c.cancel()
	}
	return n, err
}

func TestInsertCancelled(t *testing.T) {
	e := engine(t)
	run(t, "CREATE DATABASE IF NOT EXISTS icancel", "CREATE TABLE icancel.events "+auditTable)
	data, _, _ := auditRows(60_000) // several 1 MiB chunks

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Insert(ctx, "INSERT INTO icancel.events", "JSONEachRow", bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled before: got %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	_, err := e.Insert(ctx, "INSERT INTO icancel.events", "JSONEachRow", &cancelAfter{r: bytes.NewReader(data), limit: 1 << 20, cancel: cancel})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled midway: got %v", err)
	}
	if got := query(t, "SELECT count() < 60000 FROM icancel.events", "CSV"); got != "1\n" {
		t.Errorf("a cancelled insert must not be complete: %q", got)
	}
	// The engine is usable afterwards.
	if _, err := e.Insert(context.Background(), "INSERT INTO icancel.events", "JSONEachRow", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(query(t, "SELECT count() AS c FROM icancel.events", "JSONEachRow")), &row); err != nil || row["c"] == "0" {
		t.Errorf("after cancel: %v %v", row, err)
	}
}
