package chdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store/chdb"
)

func TestVersion(t *testing.T) {
	e := engine(t)
	if !strings.HasPrefix(e.Version(), "26.7") {
		t.Errorf("Version() = %q, want 26.7.x", e.Version())
	}
	if got := query(t, "SELECT version()", "TabSeparated"); !strings.HasPrefix(got, "26.7.") {
		t.Errorf("SELECT version() = %q", got)
	}
	if e.DataDir() != sharedDir || e.LibPath() == "" {
		t.Errorf("DataDir() = %q, LibPath() = %q", e.DataDir(), e.LibPath())
	}
}

func TestQueryFormats(t *testing.T) {
	const sql = "SELECT number AS n, toString(number * 10) AS s FROM numbers(3)"
	for _, tc := range []struct{ format, want string }{
		{"", "0\t0\n1\t10\n2\t20\n"},
		{"TabSeparatedWithNames", "n\ts\n0\t0\n1\t10\n2\t20\n"},
		{"CSVWithNames", "\"n\",\"s\"\n0,\"0\"\n1,\"10\"\n2,\"20\"\n"},
		// ClickHouse 26.7 no longer quotes 64-bit integers in JSON formats.
		{"JSONEachRow", "{\"n\":0,\"s\":\"0\"}\n{\"n\":1,\"s\":\"10\"}\n{\"n\":2,\"s\":\"20\"}\n"},
	} {
		if got := query(t, sql, tc.format); got != tc.want {
			t.Errorf("format %q: got %q, want %q", tc.format, got, tc.want)
		}
	}

	var doc struct {
		Rows int `json:"rows"`
		Data []struct {
			N uint64 `json:"n"`
			S string `json:"s"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(query(t, sql, "JSON")), &doc); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	if doc.Rows != 3 || doc.Data[2].S != "20" {
		t.Errorf("JSON: %+v", doc)
	}
	if got := query(t, sql, "Pretty"); !strings.Contains(got, "┃ n ┃ s  ┃") {
		t.Errorf("Pretty:\n%s", got)
	}
}

func TestExecStats(t *testing.T) {
	r, err := engine(t).Exec(context.Background(), "SELECT count() FROM numbers(1000000)", "CSV", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Data) != "1000000\n" || r.RowsRead != 1 || r.StorageRowsRead != 1000000 || r.Elapsed <= 0 {
		t.Errorf("result: %q rows=%d storageRows=%d elapsed=%v", r.Data, r.RowsRead, r.StorageRowsRead, r.Elapsed)
	}
}

func TestQueryError(t *testing.T) {
	_, err := engine(t).Query(context.Background(), "SELECT * FROM no_such_table", "CSV")
	var ee *chdb.EngineError
	if !errors.As(err, &ee) {
		t.Fatalf("got %v (%T), want *EngineError", err, err)
	}
	if !strings.Contains(ee.Message, "UNKNOWN_TABLE") || ee.Op != "query" || !strings.Contains(ee.Query, "no_such_table") {
		t.Errorf("error: %+v", ee)
	}
	// The engine is still usable.
	if got := query(t, "SELECT 1", "CSV"); got != "1\n" {
		t.Errorf("after an error: %q", got)
	}
}

func TestQueryWithParams(t *testing.T) {
	nasty := "x'); DROP TABLE t; --\\ \x00 \"q\""
	out, err := engine(t).QueryWithParams(context.Background(),
		"SELECT {s:String} AS s, {n:UInt64} + 1 AS n, {a:Array(String)} AS a, {ts:DateTime64(6, 'UTC')} AS ts",
		"JSONEachRow", map[string]string{
			"s": nasty, "n": "41", "a": "['a','b''c']", "ts": "2024-05-06 07:08:09.123456",
		})
	if err != nil {
		t.Fatal(err)
	}
	var row struct {
		S  string   `json:"s"`
		N  uint64   `json:"n"`
		A  []string `json:"a"`
		TS string   `json:"ts"`
	}
	if err := json.Unmarshal(out, &row); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if row.S != nasty || row.N != 42 || len(row.A) != 2 || row.A[1] != "b'c" || row.TS != "2024-05-06 07:08:09.123456" {
		t.Errorf("got %+v from %s", row, out)
	}

	_, err = engine(t).QueryWithParams(context.Background(), "SELECT {missing:UInt8}", "CSV", map[string]string{})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing parameter: got %v", err)
	}
}

func TestNULInQueryRefused(t *testing.T) {
	_, err := engine(t).Query(context.Background(), "INSERT INTO x FORMAT RowBinary\n\x01\x00\x00", "")
	if !errors.Is(err, chdb.ErrNULInQuery) {
		t.Fatalf("got %v, want ErrNULInQuery", err)
	}
}

func TestContextCancelledBeforeQuery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := engine(t).Query(ctx, "SELECT 1", "CSV"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// A caller waiting for the engine's lock gives up when its ctx expires.
func TestContextWhileWaitingForLock(t *testing.T) {
	e := engine(t)
	done := make(chan error, 1)
	go func() {
		_, err := e.Query(context.Background(), "SELECT sleep(1.5)", "CSV")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // let it take the lock
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Query(ctx, "SELECT 1", "CSV")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %v for the lock despite a 100ms deadline", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentUse(t *testing.T) {
	e := engine(t)
	run(t, "CREATE DATABASE IF NOT EXISTS conc",
		"CREATE TABLE conc.t (g UInt32, v UInt64) ENGINE = MergeTree ORDER BY g")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range 10 {
				var data strings.Builder
				for j := range 100 {
					data.WriteString(`{"g":` + itoa(g) + `,"v":` + itoa(i*100+j) + "}\n")
				}
				if _, err := e.Insert(ctx, "INSERT INTO conc.t", "JSONEachRow", strings.NewReader(data.String())); err != nil {
					errs <- err
					return
				}
				want := itoa(g*1000+i) + "\n"
				out, err := e.QueryWithParams(ctx, "SELECT {x:UInt64}", "CSV", map[string]string{"x": want[:len(want)-1]})
				if err != nil || string(out) != want {
					errs <- errors.New("got " + string(out) + " want " + want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := query(t, "SELECT count(), sum(v), uniqExact(g) FROM conc.t", "CSV"); got != "8000,3996000,8\n" {
		t.Errorf("after concurrent inserts: %q", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
