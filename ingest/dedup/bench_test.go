package dedup

import (
	"log/slog"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
)

// fullHorizon is an index holding ten minutes of 10,000 events/s (6 million keys), filled as
// the receiver fills it, in batches of 400: left as maps ("maps"), sealed into runs in memory
// ("sealed") or into spilled runs as serve does, without stamps ("spilled") and with the
// stamps of events received as they happened ("stamped", as the receiver gives them). It
// returns the time after the last minute and every 40th batch, to send again.
func fullHorizon(b *testing.B, kind string, rng *rand.Rand) (ix *Index, now time.Time, batches [][]record.Key) {
	const perMinute = 600_000
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ix = NewIndex(10 * time.Minute)
	if kind == "spilled" || kind == "stamped" {
		ix = newSpillingIndex(10*time.Minute, b.TempDir(), slog.New(slog.DiscardHandler))
	}
	for m := range 10 {
		at := start.Add(time.Duration(m) * time.Minute)
		keys := randomKeys(rng, perMinute)
		for i := 0; i < len(keys); i += 400 {
			var ts []int64
			if kind == "stamped" {
				ts = nowStamps(at.Add(time.Duration(i)*time.Minute/perMinute), 400)
			}
			ix.Filter(at, keys[i:i+400], ts)
			if i%(40*400) == 0 {
				batches = append(batches, keys[i:i+400])
			}
		}
		if kind != "maps" {
			ix.Seal(at.Add(time.Minute))
		}
	}
	return ix, start.Add(10 * time.Minute), batches
}

// BenchmarkFilter is the receiver's lookup of a batch of 400 fresh keys against a full horizon
// (fullHorizon): sealed into runs in memory and into spilled runs, against the same minutes
// left as maps (the index before runs; the baseline); and spilled with stamps, the keys
// looked up stamped now, as serve does.
//
//	go test ./ingest/dedup -run '^$' -bench Filter -count 3
func BenchmarkFilter(b *testing.B) {
	for _, kind := range []string{"maps", "sealed", "spilled", "stamped"} {
		b.Run(kind, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(7, 8))
			ix, now, _ := fullHorizon(b, kind, rng)
			batches := make([][]record.Key, 64)
			for i := range batches {
				batches[i] = randomKeys(rng, 400)
			}
			b.ResetTimer()
			for i := range b.N {
				keys := batches[i%len(batches)]
				var ts []int64
				if kind == "stamped" {
					ts = nowStamps(now, len(keys))
				}
				dup, _ := ix.Filter(now, keys, ts)
				b.StopTimer()
				ix.Forget(keys, dup) // the next round's keys are fresh again
				b.StartTimer()
			}
			b.ReportMetric(float64(ix.Bytes())/float64(ix.Len()), "bytes/key")
		})
	}
}

// nowStamps is n events' stamps when they are received at t: their stageTimestamps up to a
// second before.
func nowStamps(t time.Time, n int) []int64 {
	ts := make([]int64, n)
	for i := range ts {
		ts[i] = t.Add(-time.Duration(i%2) * time.Second).Unix()
	}
	return ts
}

// BenchmarkFilterResent is a batch the apiserver sends again a few minutes later (all 400 keys
// duplicates in a sealed minute of a full horizon): in memory, and spilled, where each key is
// read back from its run's file.
//
//	go test ./ingest/dedup -run '^$' -bench FilterResent -count 3
func BenchmarkFilterResent(b *testing.B) {
	for _, kind := range []string{"sealed", "spilled"} {
		b.Run(kind, func(b *testing.B) {
			ix, now, batches := fullHorizon(b, kind, rand.New(rand.NewPCG(9, 10)))
			b.ResetTimer()
			for i := range b.N {
				if _, n := ix.Filter(now, batches[i%len(batches)], nil); n != 400 {
					b.Fatalf("%d of 400 recognised", n)
				}
			}
		})
	}
}

// BenchmarkSealMinute is a minute of 10,000 events/s (600,000 keys in batches of 400) taken in
// and sealed into a spilled run: sealed once, after the minute (the index before it sealed the
// current minute; the baseline), and every 10 s as serve does. Each op is a whole minute;
// live-MB is the most the index held live just before a Seal (measured after a collection,
// outside the timer).
//
//	go test ./ingest/dedup -run '^$' -bench SealMinute -benchmem -count 3
func BenchmarkSealMinute(b *testing.B) {
	const perMinute = 600_000
	for _, every := range []time.Duration{time.Minute, 10 * time.Second} {
		b.Run("every-"+every.String(), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(11, 12))
			keys := randomKeys(rng, perMinute)
			dir := b.TempDir()
			live := func() uint64 {
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				return ms.HeapAlloc
			}
			var peak uint64
			b.ReportAllocs()
			for i := range b.N {
				b.StopTimer()
				base := live()
				b.StartTimer()
				ix := newSpillingIndex(10*time.Minute, dir, slog.New(slog.DiscardHandler))
				start := time.Date(2026, 12, 1, 10, i%60, 0, 0, time.UTC)
				const batches = perMinute / 400
				for j := range batches {
					at := start.Add(time.Duration(j) * time.Minute / batches)
					ix.Filter(at, keys[j*400:(j+1)*400], nil)
					if next := start.Add(time.Duration(j+1) * time.Minute / batches); next.Truncate(every) != at.Truncate(every) {
						b.StopTimer()
						peak = max(peak, live()-base)
						b.StartTimer()
						ix.Seal(next)
					}
				}
				if ix.Len() != perMinute || len(ix.runs) != 1 || ix.runs[0].f == nil {
					b.Fatalf("%d keys in %d runs", ix.Len(), len(ix.runs))
				}
			}
			b.ReportMetric(float64(peak)/1e6, "live-MB")
		})
	}
}
