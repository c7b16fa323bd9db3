package dedup

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
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
	dup, n := ix.Filter(now, []record.Key{key(1), key(2), key(1)})
	if n != 1 || dup[0] || dup[1] || !dup[2] {
		t.Fatalf("first batch: dup=%v n=%d", dup, n)
	}
	dup, n = ix.Filter(now.Add(time.Minute), []record.Key{key(2), key(3)})
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
