package dedup

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
)

// BenchmarkFilter is the receiver's lookup of a batch of 400 fresh keys against a full horizon:
// ten minutes of 10,000 events/s (6 million keys), sealed into runs as serve does, against the
// same minutes left as maps (the index before runs; the baseline).
//
//	go test ./ingest/dedup -run '^$' -bench Filter -count 3
func BenchmarkFilter(b *testing.B) {
	const perMinute = 600_000
	for _, sealed := range []bool{false, true} {
		name := "maps"
		if sealed {
			name = "sealed"
		}
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 8))
			start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			ix := NewIndex(10 * time.Minute)
			for m := range 10 {
				at := start.Add(time.Duration(m) * time.Minute)
				keys := randomKeys(rng, perMinute)
				for i := 0; i < len(keys); i += 400 {
					ix.Filter(at, keys[i:i+400])
				}
				if sealed {
					ix.Seal(at.Add(time.Minute))
				}
			}
			now := start.Add(10 * time.Minute)
			batches := make([][]record.Key, 64)
			for i := range batches {
				batches[i] = randomKeys(rng, 400)
			}
			b.ResetTimer()
			for i := range b.N {
				keys := batches[i%len(batches)]
				dup, _ := ix.Filter(now, keys)
				b.StopTimer()
				ix.Forget(keys, dup) // the next round's keys are fresh again
				b.StartTimer()
			}
			b.ReportMetric(float64(ix.Bytes())/float64(ix.Len()), "bytes/key")
		})
	}
}
