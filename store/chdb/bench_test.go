package chdb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
)

const benchRows = 1_000_000

// rowBinaryRows encodes the auditTable columns as RowBinary.
func rowBinaryRows(n int) []byte {
	var b []byte
	for i := range n {
		user := fmt.Sprintf("system:serviceaccount:ns-%d:sa-%d", i%97, i%13)
		verb := verbs[i%len(verbs)]
		b = binary.LittleEndian.AppendUint64(b, uint64(i)*2654435761%1_000_000_007+1)
		b = binary.AppendUvarint(b, uint64(len(user)))
		b = append(b, user...)
		b = binary.AppendUvarint(b, uint64(len(verb)))
		b = append(b, verb...)
		b = binary.LittleEndian.AppendUint64(b, uint64(1_767_323_045_000+i)) // DateTime64(3): milliseconds
		b = binary.LittleEndian.AppendUint32(b, uint32(i%500))
	}
	return b
}

var benchData = sync.OnceValues(func() (jsonRows, rowBinary []byte) {
	j, _, _ := auditRows(benchRows)
	return j, rowBinaryRows(benchRows)
})

// BenchmarkInsert streams 1M audit rows per iteration into an empty MergeTree
// table with Insert and reports rows/s, in a text and a binary format. The
// time is mostly the engine writing the part (sort, LowCardinality encoding,
// compression, disk), not parsing: the same data into ENGINE = Null is
// several times faster.
func BenchmarkInsert(b *testing.B) {
	e := engine(b)
	jsonRows, rowBinary := benchData()
	for _, tc := range []struct {
		format string
		data   []byte
	}{{"JSONEachRow", jsonRows}, {"RowBinary", rowBinary}} {
		b.Run(tc.format, func(b *testing.B) {
			run(b, "CREATE DATABASE IF NOT EXISTS bench",
				"DROP TABLE IF EXISTS bench.insert_"+tc.format,
				"CREATE TABLE bench.insert_"+tc.format+" "+auditTable)
			ctx := context.Background()
			b.SetBytes(int64(len(tc.data)))
			b.ResetTimer()
			for range b.N {
				// An empty table each time: background merges of earlier
				// iterations' parts would otherwise compete with the insert.
				b.StopTimer()
				run(b, "TRUNCATE TABLE bench.insert_"+tc.format)
				b.StartTimer()
				r, err := e.Insert(ctx, "INSERT INTO bench.insert_"+tc.format, tc.format, bytes.NewReader(tc.data))
				if err != nil {
					b.Fatal(err)
				}
				if r.RowsWritten != benchRows {
					b.Fatalf("RowsWritten = %d", r.RowsWritten)
				}
			}
			b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkGroupBy aggregates 1M audit rows: per verb counts, distinct users
// and latency quantiles.
func BenchmarkGroupBy(b *testing.B) {
	e := engine(b)
	jsonRows, _ := benchData()
	run(b, "CREATE DATABASE IF NOT EXISTS bench",
		"DROP TABLE IF EXISTS bench.groupby",
		"CREATE TABLE bench.groupby "+auditTable)
	ctx := context.Background()
	if _, err := e.Insert(ctx, "INSERT INTO bench.groupby", "JSONEachRow", bytes.NewReader(jsonRows)); err != nil {
		b.Fatal(err)
	}
	const sql = `SELECT verb, count() AS events, uniq(user) AS users,
		quantiles(0.5, 0.9, 0.99)(latency_ms) AS latency, max(ts) AS last
		FROM bench.groupby GROUP BY verb ORDER BY events DESC`
	b.ResetTimer()
	for b.Loop() {
		out, err := e.Query(ctx, sql, "JSONEachRow")
		if err != nil {
			b.Fatal(err)
		}
		if bytes.Count(out, []byte("\n")) != len(verbs) {
			b.Fatalf("unexpected result:\n%s", out)
		}
	}
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
