package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// frames makes n spool entries of per events each, received every 10 s from start, at
// consecutive positions from pos, and returns them with their keys.
func frames(t *testing.T, start time.Time, pos spool.Position, n, per int) ([]spool.Entry, []record.Key) {
	t.Helper()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer codec.Close()
	var entries []spool.Entry
	var all []record.Key
	for f := range n {
		at := start.Add(time.Duration(f) * 10 * time.Second)
		var recs []record.Record
		var keys []record.Key
		for e := range per {
			rec := record.Record{APIServer: "kas-a", AuditID: fmt.Sprintf("%d-%d-%d", pos, f, e), Stage: "ResponseComplete", StageTimestamp: at}
			recs, keys = append(recs, rec), append(keys, rec.Key())
		}
		frame, err := codec.AppendFrame(nil, "kas-a", at, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, spool.Entry{Pos: pos, End: pos + spool.Position(len(frame)), Payload: frame})
		pos += spool.Position(len(frame))
		all = append(all, keys...)
	}
	return entries, all
}

func keyFilesIn(t *testing.T, dir string) (keys map[string][]record.Key, parts []string) {
	t.Helper()
	files, err := listFiles(dir, keyFileName)
	if err != nil {
		t.Fatal(err)
	}
	keys = map[string][]record.Key{}
	for _, f := range files {
		k, err := readKeyFile(f.path)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		keys[filepath.Base(f.path)] = k
	}
	ps, err := listFiles(dir, partFileName)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		parts = append(parts, filepath.Base(p.path))
	}
	return keys, parts
}

func sameKeys(a, b []record.Key) bool {
	cmp := func(x, y record.Key) int { return slices.Compare(x[:], y[:]) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// TestPersisterWritesKeysAsTheyCome: the minute being gathered is on disk call by call, not in
// the Persister's memory, and becomes one key file with every key once when the minute ends;
// Consume returns the minute's first position until then.
func TestPersisterWritesKeysAsTheyCome(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := start
	p := &Persister{Dir: dir, Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}
	entries, keys := frames(t, start, 100, 6, 400) // one minute: 0, 10, ... 50 s
	for i, e := range entries {
		clock = start.Add(time.Duration(i)*10*time.Second + time.Second)
		safe, err := p.Consume(context.Background(), []spool.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		if safe != entries[0].Pos {
			t.Fatalf("after frame %d Consume returned %d, want the minute's first position %d", i, safe, entries[0].Pos)
		}
		// Bounded by one call's keys (twice, for append's growth), not by the minute's.
		if len(p.buf) != 0 || cap(p.buf) > 2*(400*16+len(fileMagic)) {
			t.Fatalf("after frame %d the Persister holds %d bytes of keys (capacity %d): more than one call's", i, len(p.buf), cap(p.buf))
		}
		st, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%d.keys.part", minuteOf(start))))
		if err != nil {
			t.Fatalf("after frame %d: %v", i, err)
		}
		if want := int64(len(fileMagic) + 16*400*(i+1)); st.Size() != want {
			t.Fatalf("after frame %d the part file has %d bytes, want %d", i, st.Size(), want)
		}
	}
	clock = start.Add(61 * time.Second)
	safe, err := p.Consume(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	last := entries[len(entries)-1].End
	if safe != last {
		t.Fatalf("after the minute Consume returned %d, want %d", safe, last)
	}
	files, parts := keyFilesIn(t, dir)
	name := fmt.Sprintf("%d-%d.keys", minuteOf(start), uint64(last))
	if len(files) != 1 || len(parts) != 0 || !sameKeys(files[name], keys) {
		t.Fatalf("files %v, parts %v: want %s with the minute's %d keys once", len(files), parts, name, len(keys))
	}
}

// TestPersisterRestartMidMinute: a crash leaves a part file; the next process consumes the
// minute again from the returned position and writes each key once, and the part file never
// counts as a key file.
func TestPersisterRestartMidMinute(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := start.Add(35 * time.Second)
	now := func() time.Time { return clock }
	entries, keys := frames(t, start, 100, 6, 50)
	p := &Persister{Dir: dir, Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: now}
	safe, err := p.Consume(context.Background(), entries[:4])
	if err != nil {
		t.Fatal(err)
	}
	if files, parts := keyFilesIn(t, dir); len(files) != 0 || len(parts) != 1 {
		t.Fatalf("mid-minute: key files %d, part files %v; want none and one", len(files), parts)
	}
	// The crash: a new Persister, fed from the position the first returned.
	p = &Persister{Dir: dir, Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: now}
	i := slices.IndexFunc(entries, func(e spool.Entry) bool { return e.Pos == safe })
	if i < 0 {
		t.Fatalf("Consume returned %d, not the start of a frame", safe)
	}
	if _, err := p.Consume(context.Background(), entries[i:]); err != nil {
		t.Fatal(err)
	}
	clock = start.Add(70 * time.Second)
	if _, err := p.Consume(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	files, parts := keyFilesIn(t, dir)
	if len(files) != 1 || len(parts) != 0 {
		t.Fatalf("key files %d, part files %v; want one and none", len(files), parts)
	}
	for _, got := range files {
		if len(got) != len(keys) || !sameKeys(got, keys) {
			t.Fatalf("the key file holds %d keys, want the minute's %d once", len(got), len(keys))
		}
	}
}

// TestPersisterCutsBackAFailedWrite: a write that failed part way (here: bytes appended after
// the last good length) is cut off before the same entries are passed again, so no key is
// in the file twice and nothing else is in it.
func TestPersisterCutsBackAFailedWrite(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := start.Add(55 * time.Second)
	p := &Persister{Dir: dir, Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}
	entries, keys := frames(t, start, 100, 4, 30)
	if _, err := p.Consume(context.Background(), entries[:2]); err != nil {
		t.Fatal(err)
	}
	// What a torn write of entries[2:] leaves: part of its keys, and a failed call.
	_, torn := frames(t, start, 100, 4, 30)
	f, err := os.OpenFile(p.partPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(torn[60][:9]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p.failed = true
	if _, err := p.Consume(context.Background(), entries[2:]); err != nil {
		t.Fatal(err)
	}
	clock = start.Add(61 * time.Second)
	if _, err := p.Consume(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	files, _ := keyFilesIn(t, dir)
	for _, got := range files {
		if !sameKeys(got, keys) {
			t.Fatalf("the key file holds %d keys, want the %d of the minute once", len(got), len(keys))
		}
	}
	if len(files) != 1 {
		t.Fatalf("%d key files, want 1", len(files))
	}
}

// TestLoadReadsVersion1KeyFiles: key files written before the part files (with their count
// after the magic) still load after an upgrade.
func TestLoadReadsVersion1KeyFiles(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	_, keys := frames(t, start, 100, 2, 25)
	b := append([]byte(fileMagicV1), binary.AppendUvarint(nil, uint64(len(keys)))...)
	for _, k := range keys {
		b = append(b, k[:]...)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%d.keys", minuteOf(start), 100)), b, 0o640); err != nil {
		t.Fatal(err)
	}
	// A damaged version 1 file (its count says more than it holds) is skipped, not misread.
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%d.keys", minuteOf(start)+1, 200)), b[:len(b)-16], 0o640); err != nil {
		t.Fatal(err)
	}
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool"), MaxBytes: 1 << 30, Consumers: []string{ConsumerName}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ix, fromFiles, _, err := Load(context.Background(), slog.New(slog.DiscardHandler), dir, 10*time.Minute, sp, start.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if fromFiles != len(keys) {
		t.Fatalf("%d keys from files, want %d (the damaged file skipped)", fromFiles, len(keys))
	}
	for _, k := range keys {
		if !ix.Contains(k) {
			t.Fatal("a key of a version 1 file is not remembered")
		}
	}
	if ix.dir != dir {
		t.Fatalf("Load's index spills to %q, want %q", ix.dir, dir)
	}
}

// TestPersisterRetriesAFailedFinish: a call that wrote its keys and then failed to make the
// minute a key file (here the name is taken by a directory) is passed again, and the key file
// it makes then holds each key once.
func TestPersisterRetriesAFailedFinish(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := start.Add(55 * time.Second)
	p := &Persister{Dir: dir, Horizon: 10 * time.Minute, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }}
	entries, keys := frames(t, start, 100, 4, 30)
	if _, err := p.Consume(context.Background(), entries[:2]); err != nil {
		t.Fatal(err)
	}
	clock = start.Add(61 * time.Second)
	end := entries[3].End
	blocker := filepath.Join(dir, fmt.Sprintf("%d-%d.keys", minuteOf(start), uint64(end)), "x")
	if err := os.MkdirAll(blocker, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Consume(context.Background(), entries[2:]); err == nil {
		t.Fatal("the minute became a key file over a directory")
	}
	if err := os.RemoveAll(filepath.Dir(blocker)); err != nil {
		t.Fatal(err)
	}
	pos, err := p.Consume(context.Background(), entries[2:])
	if err != nil {
		t.Fatal(err)
	}
	if pos != end {
		t.Fatalf("after the retry Consume returned %d, want %d", pos, end)
	}
	files, parts := keyFilesIn(t, dir)
	if len(files) != 1 || len(parts) != 0 {
		t.Fatalf("%d key files and part files %v, want 1 and none", len(files), parts)
	}
	for _, got := range files {
		if len(got) != len(keys) || !sameKeys(got, keys) {
			t.Fatalf("the key file holds %d keys, want the %d of the minute once", len(got), len(keys))
		}
	}
}
