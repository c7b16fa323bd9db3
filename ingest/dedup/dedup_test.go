package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

func key(i int) record.Key {
	return record.KeyOf("kas-a", fmt.Sprintf("id-%d", i), "ResponseComplete", time.Unix(int64(i), 0))
}

func TestFilterRecognisesRememberedAndRepeatedKeys(t *testing.T) {
	ix := NewIndex(10 * time.Minute)
	now := time.Now()
	dup, n := ix.Filter(now, []record.Key{key(1), key(2), key(1)}, nil)
	if n != 1 || dup[0] || dup[1] || !dup[2] {
		t.Fatalf("first batch: dup=%v n=%d", dup, n)
	}
	dup, n = ix.Filter(now.Add(time.Minute), []record.Key{key(2), key(3)}, nil)
	if n != 1 || !dup[0] || dup[1] {
		t.Fatalf("second batch: dup=%v n=%d", dup, n)
	}
	ix.Forget([]record.Key{key(2), key(3)}, dup)
	if !ix.Contains(key(2)) || ix.Contains(key(3)) {
		t.Fatalf("Forget must drop only the keys its batch added")
	}
	if ix.Len() != 2 {
		t.Fatalf("Len %d, want 2", ix.Len())
	}
	ix.Expire(now.Add(11 * time.Minute))
	if !ix.Contains(key(1)) {
		t.Fatalf("forgot a key before the horizon had passed")
	}
	ix.Expire(now.Add(13 * time.Minute))
	if ix.Contains(key(1)) || ix.Len() != 0 {
		t.Fatalf("kept keys past the horizon: %d", ix.Len())
	}
}

// TestIndexSurvivesRestartAfterSegmentsAreGone appends frames over several minutes, lets the
// persister and a second consumer pass them so that the segments are deleted, and checks that
// Load still knows every key younger than the horizon.
func TestIndexSurvivesRestartAfterSegmentsAreGone(t *testing.T) {
	dir := t.TempDir()
	opts := spool.Options{Dir: filepath.Join(dir, "spool"), SegmentBytes: 2 << 10, MaxBytes: 1 << 30, Consumers: []string{ConsumerName, "store"}}
	sp, err := spool.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer codec.Close()

	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	clock := start
	p := &Persister{Dir: filepath.Join(dir, "dedup"), Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}
	r := sp.NewReader(0)
	var all []record.Key
	// 15 minutes, 4 frames a minute of 5 events each.
	for m := range 15 {
		for f := range 4 {
			clock = start.Add(time.Duration(m)*time.Minute + time.Duration(f)*10*time.Second)
			var recs []record.Record
			var keys []record.Key
			for e := range 5 {
				rec := record.Record{APIServer: "kas-a", AuditID: fmt.Sprintf("%d-%d-%d", m, f, e), Stage: "ResponseComplete", StageTimestamp: clock}
				recs, keys = append(recs, rec), append(keys, rec.Key())
			}
			all = append(all, keys...)
			frame, err := codec.AppendFrame(nil, "kas-a", clock, recs, keys)
			if err != nil {
				t.Fatal(err)
			}
			end, err := sp.Append(frame)
			if err != nil {
				t.Fatal(err)
			}
			if err := sp.Wait(context.Background(), end); err != nil {
				t.Fatal(err)
			}
			e, ok, err := r.TryNext()
			if err != nil || !ok {
				t.Fatalf("read back: %v %v", ok, err)
			}
			safe, err := p.Consume(context.Background(), []spool.Entry{e})
			if err != nil {
				t.Fatal(err)
			}
			if err := sp.Commit(ConsumerName, safe); err != nil {
				t.Fatal(err)
			}
			if err := sp.Commit("store", e.End); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.Close()
	clock = start.Add(15 * time.Minute)
	if st := sp.Stats(); st.Oldest == 0 {
		t.Fatalf("no segment was deleted; the test would not show that key files stand in for them")
	}
	sp.Close()

	sp, err = spool.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ix, fromFiles, fromSpool, err := Load(context.Background(), slog.New(slog.DiscardHandler), p.Dir, p.Horizon, sp, clock)
	if err != nil {
		t.Fatal(err)
	}
	if fromFiles == 0 || fromSpool == 0 {
		t.Fatalf("keys from files %d, from spool %d: both sources should contribute", fromFiles, fromSpool)
	}
	// Minutes 4..14 are within 10 minutes (plus the bucket in progress) of the end.
	for i, k := range all {
		minute := i / 20
		if minute >= 4 && !ix.Contains(k) {
			t.Fatalf("key of minute %d forgotten across the restart", minute)
		}
		if minute < 3 && ix.Contains(k) {
			t.Fatalf("key of minute %d remembered past the horizon", minute)
		}
	}
}

func randomKeys(rng *rand.Rand, n int) []record.Key {
	keys := make([]record.Key, n)
	for i := range keys {
		binary.LittleEndian.PutUint64(keys[i][:8], rng.Uint64())
		binary.LittleEndian.PutUint64(keys[i][8:], rng.Uint64())
	}
	return keys
}

// kinds runs f with an index in memory (NewIndex) and with one whose runs spill to files (as
// Load makes them).
func kinds(t *testing.T, horizon time.Duration, f func(t *testing.T, ix *Index)) {
	t.Run("memory", func(t *testing.T) { f(t, NewIndex(horizon)) })
	t.Run("spilled", func(t *testing.T) {
		ix := newSpillingIndex(horizon, t.TempDir(), slog.New(slog.DiscardHandler))
		f(t, ix)
		if ix.FileErrors() != 0 {
			t.Errorf("%d file errors", ix.FileErrors())
		}
	})
}

// TestSealedMinutesAnswerAsMapsDid fills minutes, seals them, and checks every key is still
// found, keys never added are not, and keys crafted to share their leading bytes (a sender
// choosing auditIDs) are found among them too.
func TestSealedMinutesAnswerAsMapsDid(t *testing.T) {
	kinds(t, 10*time.Minute, func(t *testing.T, ix *Index) {
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		var added []record.Key
		for m := range 5 {
			keys := randomKeys(rng, 1000+m*3000)
			if m == 2 {
				for i := range keys[:500] {
					copy(keys[i][:8], make([]byte, 8)) // 500 keys in one directory slot
				}
			}
			if _, n := ix.Filter(start.Add(time.Duration(m)*time.Minute), keys, nil); n != 0 {
				t.Fatalf("minute %d: %d fresh keys taken for duplicates", m, n)
			}
			added = append(added, keys...)
		}
		before := ix.Len()
		ix.Expire(start.Add(5 * time.Minute))
		if len(ix.open) != 0 || len(ix.runs) != 5 {
			t.Fatalf("after Seal: %d minutes open, %d sealed; want 0 and 5", len(ix.open), len(ix.runs))
		}
		if ix.Len() != before {
			t.Fatalf("Len %d after sealing, %d before", ix.Len(), before)
		}
		for i, k := range added {
			if !ix.Contains(k) {
				t.Fatalf("key %d lost by sealing", i)
			}
		}
		for _, k := range randomKeys(rng, 20000) {
			if ix.Contains(k) {
				t.Fatalf("a key never added is found")
			}
		}
		dup, n := ix.Filter(start.Add(5*time.Minute), added[100:110], nil)
		if n != 10 || !dup[0] {
			t.Fatalf("sealed keys sent again: %d of 10 recognised", n)
		}
	})
}

// TestForgetAfterSeal: the minute of a batch that fails after Filter can be sealed before its
// Forget; the keys must still be forgotten, and accepted (and remembered) when sent again.
func TestForgetAfterSeal(t *testing.T) {
	kinds(t, 10*time.Minute, func(t *testing.T, ix *Index) {
		rng := rand.New(rand.NewPCG(3, 4))
		start := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
		keys := randomKeys(rng, 50)
		dup, _ := ix.Filter(start, keys, nil)
		ix.Expire(start.Add(time.Minute)) // seals the batch's minute
		ix.Forget(keys, dup)
		for i, k := range keys {
			if ix.Contains(k) {
				t.Fatalf("key %d still remembered after Forget", i)
			}
		}
		if ix.Len() != 0 {
			t.Fatalf("Len %d after forgetting every key", ix.Len())
		}
		_, n := ix.Filter(start.Add(time.Minute), keys, nil)
		if n != 0 {
			t.Fatalf("resent batch: %d of %d taken for duplicates", n, len(keys))
		}
		ix.Expire(start.Add(2 * time.Minute))
		for i, k := range keys {
			if !ix.Contains(k) {
				t.Fatalf("key %d of the resent batch not remembered", i)
			}
		}
		if _, n := ix.Filter(start.Add(2*time.Minute), keys, nil); n != len(keys) {
			t.Fatalf("third copy: %d of %d recognised", n, len(keys))
		}
		// The forgotten marks go with their minute.
		ix.Expire(start.Add(13 * time.Minute))
		if len(ix.forgotten) != 0 || ix.Len() != 0 {
			t.Fatalf("after the horizon: %d marks, %d keys", len(ix.forgotten), ix.Len())
		}
	})
}

// TestFilterWhileSealing runs batches against the index while it seals (go test -race).
func TestFilterWhileSealing(t *testing.T) {
	kinds(t, 10*time.Minute, func(t *testing.T, ix *Index) {
		start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		var seen [4][][]record.Key
		for w := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 9))
				for i := range 200 {
					keys := randomKeys(rng, 50)
					at := start.Add(time.Duration(i) * time.Second)
					if _, n := ix.Filter(at, keys, nil); n != 0 {
						t.Errorf("fresh keys taken for duplicates")
					}
					if i%7 == 0 {
						ix.Forget(keys, nil)
						continue
					}
					seen[w] = append(seen[w], keys)
				}
			})
		}
		wg.Go(func() {
			for i := range 200 {
				ix.Expire(start.Add(time.Duration(i) * time.Second))
			}
		})
		wg.Wait()
		ix.Expire(start.Add(5 * time.Minute))
		for w := range seen {
			for _, keys := range seen[w] {
				for _, k := range keys {
					if !ix.Contains(k) {
						t.Fatal("a key added while sealing is lost")
					}
				}
			}
		}
	})
}

// TestBytesPerKey measures what a remembered key costs, in a minute still written, in a sealed
// one and in a spilled one, and holds the sealed minute under 9 bytes, the spilled under 3,
// and Bytes to what is measured.
func TestBytesPerKey(t *testing.T) {
	const n = 300_000
	rng := rand.New(rand.NewPCG(5, 6))
	keys := randomKeys(rng, n)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	measure := func(ix *Index) (perOpen, perSealed, estimate float64) {
		base := heap()
		for i := 0; i < n; i += 400 {
			ix.Filter(start, keys[i:min(i+400, n)], nil)
		}
		perOpen = float64(heap()-base) / n
		ix.Expire(start.Add(time.Minute))
		perSealed = float64(heap()-base) / n
		estimate = float64(ix.Bytes()) / n
		runtime.KeepAlive(ix)
		return perOpen, perSealed, estimate
	}
	perOpen, perSealed, estimate := measure(NewIndex(10 * time.Minute))
	spilled := newSpillingIndex(10*time.Minute, t.TempDir(), slog.New(slog.DiscardHandler))
	_, perSpilled, spilledEstimate := measure(spilled)
	runtime.KeepAlive(keys) // held from before base: not part of what is measured
	t.Logf("bytes per key: %.1f in a map, %.1f sealed (Bytes says %.1f), %.1f spilled (Bytes says %.1f)",
		perOpen, perSealed, estimate, perSpilled, spilledEstimate)
	if perSealed > 9 {
		t.Errorf("%.1f bytes per sealed key, over 9", perSealed)
	}
	if perSpilled > 3 || spilled.runs[0].f == nil {
		t.Errorf("%.1f bytes per spilled key, over 3 (spilled: %v)", perSpilled, spilled.runs[0].f != nil)
	}
	if perOpen < 1.4*perSealed {
		t.Errorf("a map (%.1f bytes a key) should cost well over a sealed run (%.1f): is the test measuring the index?", perOpen, perSealed)
	}
	for _, m := range [][2]float64{{estimate, perSealed}, {spilledEstimate, perSpilled}} {
		if m[0] < 0.9*m[1] || m[0] > 1.1*m[1] {
			t.Errorf("Bytes estimates %.1f bytes a key, measured %.1f", m[0], m[1])
		}
	}
}

// TestMinuteSealedTwice: a batch whose request began in a minute already sealed adds to that
// minute again; the next seal merges both into the minute's one run.
func TestMinuteSealedTwice(t *testing.T) {
	kinds(t, 10*time.Minute, func(t *testing.T, ix *Index) {
		rng := rand.New(rand.NewPCG(11, 12))
		start := time.Date(2026, 12, 1, 10, 0, 50, 0, time.UTC)
		first, late := randomKeys(rng, 6000), randomKeys(rng, 40) // first spills
		ix.Filter(start, first, nil)
		ix.Expire(start.Add(15 * time.Second))
		if _, n := ix.Filter(start.Add(5*time.Second), late, nil); n != 0 {
			t.Fatalf("%d fresh keys of the late batch taken for duplicates", n)
		}
		ix.Expire(start.Add(25 * time.Second))
		if len(ix.runs) != 1 || len(ix.open) != 0 || ix.Len() != len(first)+len(late) {
			t.Fatalf("%d runs, %d open minutes, %d keys; want the minute's one run of %d", len(ix.runs), len(ix.open), ix.Len(), len(first)+len(late))
		}
		for _, k := range append(first, late...) {
			if !ix.Contains(k) {
				t.Fatal("a key lost in the merge")
			}
		}
		if ix.dir != "" && ix.runs[0].f == nil {
			t.Fatal("the merged run did not spill")
		}
	})
}

// TestRunsOfOneMinuteMerge: a minute read from two key files of different sizes is merged into
// one run, whose directory can only have as many bits as the smaller run's (its keys keep no
// more of their leading bits). Every key of both must still be found, in either order.
func TestRunsOfOneMinuteMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	small, big := randomKeys(rng, 40), randomKeys(rng, 50_000)
	for _, order := range [][2][]record.Key{{small, big}, {big, small}} {
		a, b := newRun(7, order[0], 0), newRun(7, order[1], 0)
		if a.bits == b.bits {
			t.Fatalf("both runs have %d bits: the merge is not what this test is about", a.bits)
		}
		m := newRun(7, nil, 0, &a, &b)
		if want := min(a.bits, b.bits); m.bits != want {
			t.Errorf("merged directory has %d bits, want %d", m.bits, want)
		}
		if len(m.lo) != len(small)+len(big) {
			t.Fatalf("merged run holds %d keys, want %d", len(m.lo), len(small)+len(big))
		}
		for _, k := range append(append([]record.Key(nil), small...), big...) {
			if !has(t, &m, k) {
				t.Fatal("a key lost in the merge")
			}
		}
		for _, k := range randomKeys(rng, 20000) {
			if has(t, &m, k) {
				t.Fatal("a key never added is found")
			}
		}
	}
}

func has(t *testing.T, r *run, k record.Key) bool {
	t.Helper()
	found, err := r.contains(k)
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestSpilledRunsConfirmFromTheirFile: a spilled run keeps 2 of each key's 8 low bytes in
// memory, so keys that share them with a remembered key (the same slot and tag: crafted here,
// one new key in 8,000 by chance) must be told apart by the file. The files are unlinked, so
// the directory stays empty, and Load's index spills too.
func TestSpilledRunsConfirmFromTheirFile(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(21, 22))
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ix := newSpillingIndex(10*time.Minute, dir, slog.New(slog.DiscardHandler))
	var added []record.Key
	for m := range 3 {
		keys := randomKeys(rng, 20_000)
		ix.Filter(start.Add(time.Duration(m)*time.Minute), keys, nil)
		added = append(added, keys...)
	}
	ix.Expire(start.Add(3 * time.Minute))
	if len(ix.runs) != 3 {
		t.Fatalf("%d runs, want 3", len(ix.runs))
	}
	for _, r := range ix.runs {
		if r.f == nil || r.lo != nil || len(r.tags) != 20_000 {
			t.Fatalf("run of minute %d not spilled: %d low words, %d tags", r.minute, len(r.lo), len(r.tags))
		}
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
		t.Fatalf("the directory holds %v (%v); spilled runs' files are unlinked", names, err)
	}
	for i, k := range added {
		if !ix.Contains(k) {
			t.Fatalf("key %d lost by spilling", i)
		}
	}
	for i, k := range added[:5000] {
		near := k
		near[15] ^= 1 // same slot, same tag: only the file tells it apart
		if ix.Contains(near) {
			t.Fatalf("key %d with its last bit changed is taken for it", i)
		}
		near = k
		near[9] ^= 1 // another tag
		if ix.Contains(near) {
			t.Fatalf("key %d with its tag changed is taken for it", i)
		}
	}
	if dup, n := ix.Filter(start.Add(3*time.Minute), added[:400], nil); n != 400 || !dup[399] {
		t.Fatalf("a resent batch: %d of 400 recognised", n)
	}
	if ix.FileErrors() != 0 {
		t.Fatalf("%d file errors", ix.FileErrors())
	}
}

// TestSpillFailureKeepsTheRunInMemory: when the file cannot be written (here the directory is
// a file), the run stays in memory whole, and is counted.
func TestSpillFailureKeepsTheRunInMemory(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(23, 24))
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ix := newSpillingIndex(10*time.Minute, notDir, slog.New(slog.DiscardHandler))
	keys := randomKeys(rng, 10_000)
	ix.Filter(start, keys, nil)
	ix.Expire(start.Add(time.Minute))
	if len(ix.runs) != 1 || ix.runs[0].f != nil || len(ix.runs[0].lo) != len(keys) {
		t.Fatalf("want one run in memory, have %d runs", len(ix.runs))
	}
	if ix.FileErrors() != 1 {
		t.Fatalf("%d file errors, want 1", ix.FileErrors())
	}
	for _, k := range keys {
		if !ix.Contains(k) {
			t.Fatal("a key lost")
		}
	}
}

// TestUnreadableRunTakesKeysAsNew: a spilled run whose file cannot be read does not make the
// receiver drop events it cannot show it has seen: they are taken as new (the events table
// folds a second copy) and the failure is counted.
func TestUnreadableRunTakesKeysAsNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ix := newSpillingIndex(10*time.Minute, t.TempDir(), slog.New(slog.DiscardHandler))
	keys := randomKeys(rng, 10_000)
	ix.Filter(start, keys, nil)
	ix.Expire(start.Add(time.Minute))
	if ix.runs[0].f == nil {
		t.Fatal("not spilled")
	}
	ix.runs[0].f.Close()
	if _, n := ix.Filter(start.Add(time.Minute), keys[:100], nil); n != 0 {
		t.Fatalf("%d of 100 keys dropped as duplicates on an unreadable file", n)
	}
	if ix.FileErrors() != 100 {
		t.Fatalf("%d file errors, want 100", ix.FileErrors())
	}
	// Remembered again, in the open minute: the next copy is recognised.
	if _, n := ix.Filter(start.Add(time.Minute), keys[:100], nil); n != 100 {
		t.Fatalf("%d of 100 recognised the second time", n)
	}
}

// TestCurrentMinuteSealsAsItGoes: every Seal turns the current minute's map into the minute's
// one run, in memory, merging what came since; the run keeps the directory its first Seal sized
// for the minute, and spills once the minute is over. Nothing is lost or taken for a duplicate
// on the way, and a batch forgotten after its keys were sealed is accepted when resent.
func TestCurrentMinuteSealsAsItGoes(t *testing.T) {
	kinds(t, 10*time.Minute, func(t *testing.T, ix *Index) {
		rng := rand.New(rand.NewPCG(31, 32))
		start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		var added []record.Key
		var bits uint
		for s := range 6 {
			at := start.Add(time.Duration(s)*10*time.Second + time.Second)
			keys := randomKeys(rng, 2000)
			if _, n := ix.Filter(at, keys, nil); n != 0 {
				t.Fatalf("step %d: %d fresh keys taken for duplicates", s, n)
			}
			added = append(added, keys...)
			ix.Expire(at.Add(4 * time.Second))
			if len(ix.open) != 0 || len(ix.runs) != 1 {
				t.Fatalf("step %d: %d maps and %d runs; want the minute's one run", s, len(ix.open), len(ix.runs))
			}
			r := ix.runs[0]
			if !r.partial || r.f != nil || len(r.lo) != len(added) || ix.Len() != len(added) {
				t.Fatalf("step %d: run partial %v, spilled %v, %d keys (Len %d); want %d in memory", s, r.partial, r.f != nil, len(r.lo), ix.Len(), len(added))
			}
			if s == 0 {
				// 2,000 keys in the minute's first 5 s: sized for 24,000.
				if bits = r.bits; bits != 12 {
					t.Fatalf("first Seal of the minute: a directory of %d bits, want 12", bits)
				}
			} else if r.bits != bits {
				t.Fatalf("step %d: the directory went from %d to %d bits", s, bits, r.bits)
			}
		}
		for i, k := range added {
			if !ix.Contains(k) {
				t.Fatalf("key %d lost", i)
			}
		}
		for _, k := range randomKeys(rng, 20000) {
			if ix.Contains(k) {
				t.Fatal("a key never added is found")
			}
		}

		// A batch whose keys a Seal took before the batch failed.
		failed := randomKeys(rng, 300)
		dup, _ := ix.Filter(start.Add(57*time.Second), failed, nil)
		ix.Expire(start.Add(58 * time.Second))
		ix.Forget(failed, dup)
		if _, n := ix.Filter(start.Add(59*time.Second), failed, nil); n != 0 {
			t.Fatalf("the resent batch: %d of %d taken for duplicates", n, len(failed))
		}
		added = append(added, failed...)

		ix.Expire(start.Add(65 * time.Second))
		if len(ix.runs) != 1 || ix.runs[0].partial || ix.Len() != len(added) {
			t.Fatalf("after the minute: %d runs (partial %v), Len %d; want one final run of %d", len(ix.runs), ix.runs[0].partial, ix.Len(), len(added))
		}
		if ix.dir != "" && ix.runs[0].f == nil {
			t.Fatal("the minute is over and its run did not spill")
		}
		if dup, n := ix.Filter(start.Add(66*time.Second), added, nil); n != len(added) || !dup[len(dup)-1] {
			t.Fatalf("every key sent again: %d of %d recognised", n, len(added))
		}
	})
}

// TestMergeInOrderIsTheSortedRun: merging keys into a run with the same directory (one pass)
// gives exactly the run sorted from all the keys at once, shared keys kept once.
func TestMergeInOrderIsTheSortedRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	first, more := randomKeys(rng, 30_000), randomKeys(rng, 7_000)
	more = append(more, first[:500]...) // also in the run: a forgotten key added again
	for i := range more[:200] {
		copy(more[i][:8], first[i][:8]) // the same slot as a key of the run
	}
	const expect = 100_000
	a := newRun(3, first, expect)
	merged := newRun(3, more, 0, &a)
	whole := newRun(3, append(append([]record.Key(nil), first...), more[:7000]...), expect)
	if merged.bits != a.bits || whole.bits != a.bits {
		t.Fatalf("directories of %d, %d and %d bits", a.bits, merged.bits, whole.bits)
	}
	if !slices.Equal(merged.lo, whole.lo) || !slices.Equal(merged.dir, whole.dir) {
		t.Fatalf("merged run (%d keys) differs from the run sorted whole (%d keys)", len(merged.lo), len(whole.lo))
	}
}

// TestStampsChooseWhereToLook: with stamps, a key is looked for only in the minutes whose
// stamps surround its own, and still found wherever it is. Five sealed minutes, each of keys
// stamped with its own seconds; the first minute's file is then closed, so that every lookup
// that reads it counts a file error. Fresh keys stamped now never read it (without stamps
// they do); keys resent from every minute with their stamps are all found; a key whose stamp
// is far off (a wrong clock) is found again after its minute is sealed; and keys added
// without stamps, as Load adds them, are found by stamped lookups.
func TestStampsChooseWhereToLook(t *testing.T) {
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	ix := newSpillingIndex(10*time.Minute, t.TempDir(), slog.New(slog.DiscardHandler))
	// The first half of a minute's keys stamped with its first 30 seconds, the rest with the
	// others.
	stampsFor := func(m, n int) []int64 {
		ts := make([]int64, n)
		for i := range ts {
			ts[i] = start.Unix() + int64(60*m+60*i/n)
		}
		return ts
	}
	var sent [][]record.Key
	for m := range 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		keys, ts := randomKeys(rng, 20_000), stampsFor(m, 20_000)
		// Sealed in the middle of the minute too, as Expire does every 10 s: the minute's run
		// takes the second half's stamps with its keys.
		for _, half := range [][2]int{{0, 10_000}, {10_000, 20_000}} {
			if _, n := ix.Filter(at.Add(time.Duration(half[0])*time.Millisecond), keys[half[0]:half[1]], ts[half[0]:half[1]]); n != 0 {
				t.Fatalf("minute %d: %d fresh keys taken for duplicates", m, n)
			}
			ix.Seal(at.Add(time.Duration(half[1]) * time.Millisecond))
		}
		sent = append(sent, keys)
		ix.Seal(at.Add(time.Minute))
	}
	first := slices.IndexFunc(ix.runs, func(r run) bool { return r.minute == minuteOf(start) })
	if first < 0 || ix.runs[first].f == nil {
		t.Fatalf("the first minute is not a spilled run")
	}
	ix.runs[first].f.Close()

	now := start.Add(5 * time.Minute)
	fresh := randomKeys(rng, 200_000)
	dup, n := ix.Filter(now, fresh, stampsFor(5, len(fresh)))
	if n != 0 || ix.FileErrors() != 0 {
		t.Fatalf("fresh keys stamped now: %d taken for duplicates, %d reads of the first minute's file", n, ix.FileErrors())
	}
	ix.Forget(fresh, dup)
	if _, n := ix.Filter(now, fresh, nil); n != 0 || ix.FileErrors() == 0 {
		t.Fatalf("the same keys without stamps: %d duplicates, %d reads of the first minute's file; want reads", n, ix.FileErrors())
	}

	for m := 1; m < 5; m++ {
		if _, n := ix.Filter(now, sent[m], stampsFor(m, len(sent[m]))); n != len(sent[m]) {
			t.Fatalf("minute %d resent with its stamps: %d of %d found", m, n, len(sent[m]))
		}
	}

	odd := randomKeys(rng, 3)
	far := []int64{start.Unix() - 10*365*86400, start.Unix() + 365*86400, start.Unix() + 90}
	if _, n := ix.Filter(now, odd, far); n != 0 {
		t.Fatalf("keys with odd stamps: %d duplicates", n)
	}
	ix.Seal(now.Add(time.Minute))
	if _, n := ix.Filter(now.Add(time.Minute), odd, far); n != len(odd) {
		t.Fatalf("keys with odd stamps resent after their minute was sealed: %d of %d found", n, len(odd))
	}

	loaded := randomKeys(rng, 500)
	ix.addSealed(minuteOf(now.Add(2*time.Minute)), loaded[:250])
	ix.Add(now.Add(2*time.Minute), loaded[250:]...)
	if _, n := ix.Filter(now.Add(2*time.Minute), loaded, stampsFor(7, len(loaded))); n != len(loaded) {
		t.Fatalf("keys added without stamps: %d of %d found by stamped lookups", n, len(loaded))
	}
}
