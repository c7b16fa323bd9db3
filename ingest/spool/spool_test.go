package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func open(t *testing.T, dir string, mod func(*Options)) *Spool {
	t.Helper()
	return openMode(t, dir, true, mod)
}

// opener opens a spool in dir; the tests that take one run with each of the two kinds of
// segment (see bothKinds).
type opener func(t *testing.T, dir string, mod func(*Options)) *Spool

// bothKinds runs test with segments made at full size ahead of use and with segments that
// grow as they are written (a filesystem without fallocate, or a disk too full to allocate).
func bothKinds(t *testing.T, test func(*testing.T, opener)) {
	for _, prealloc := range []bool{true, false} {
		t.Run(fmt.Sprintf("prealloc=%v", prealloc), func(t *testing.T) {
			test(t, func(t *testing.T, dir string, mod func(*Options)) *Spool {
				t.Helper()
				return openMode(t, dir, prealloc, mod)
			})
		})
	}
}

// openMode opens a spool whose segments are made at full size ahead of use (prealloc) or grow
// as they are written, as on a filesystem without fallocate.
func openMode(t *testing.T, dir string, prealloc bool, mod func(*Options)) *Spool {
	t.Helper()
	o := Options{Dir: dir, SegmentBytes: 4 << 10, MaxBytes: 1 << 20, Consumers: []string{"a", "b"}}
	if mod != nil {
		mod(&o)
	}
	s, err := openSpool(o, prealloc)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func payload(i int) []byte {
	// Varying sizes so frames straddle segment boundaries in different ways.
	return fmt.Appendf(nil, "frame-%06d-%s", i, make([]byte, (i*37)%700))
}

func appendWait(t *testing.T, s *Spool, p []byte) Position {
	t.Helper()
	end, err := s.Append(p)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	if err := s.Wait(context.Background(), end); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return end
}

func readAll(t *testing.T, s *Spool, from Position) []Entry {
	t.Helper()
	r := s.NewReader(from)
	defer r.Close()
	var out []Entry
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatalf("TryNext: %v", err)
		}
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

func TestAppendReadAcrossSegments(t *testing.T) { bothKinds(t, testAppendReadAcrossSegments) }

func testAppendReadAcrossSegments(t *testing.T, open opener) {
	s := open(t, t.TempDir(), nil)
	defer s.Close()
	var ends []Position
	for i := range 200 {
		ends = append(ends, appendWait(t, s, payload(i)))
	}
	if st := s.Stats(); st.Segments < 5 {
		t.Fatalf("expected rotation into several segments, got %d", st.Segments)
	}
	got := readAll(t, s, 0)
	if len(got) != 200 {
		t.Fatalf("read %d frames, want 200", len(got))
	}
	for i, e := range got {
		if string(e.Payload) != string(payload(i)) {
			t.Fatalf("frame %d: payload mismatch", i)
		}
		if e.End != ends[i] {
			t.Fatalf("frame %d: End %d, Append said %d", i, e.End, ends[i])
		}
		if i > 0 && e.Pos < got[i-1].End {
			t.Fatalf("frame %d starts at %d before previous end %d", i, e.Pos, got[i-1].End)
		}
	}
	// A reader started at any End continues with the next frame.
	rest := readAll(t, s, got[99].End)
	if len(rest) != 100 || string(rest[0].Payload) != string(payload(100)) {
		t.Fatalf("reader from End of frame 99: got %d frames", len(rest))
	}
}

func TestTornTailIsCutOnOpen(t *testing.T) { bothKinds(t, testTornTailIsCutOnOpen) }

func testTornTailIsCutOnOpen(t *testing.T, open opener) {
	dir := t.TempDir()
	mod := func(o *Options) { o.SegmentBytes = 1 << 20 }
	s := open(t, dir, mod)
	for i := range 10 {
		appendWait(t, s, payload(i))
	}
	end := s.Written()
	s.Close()

	// A crash in the middle of a write leaves a header promising more than was written, at
	// the end of the frames: the end of the file, or where the zeros of a full segment begin.
	seg := filepath.Join(dir, fmt.Sprintf("%020d.seg", 0))
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[:4], 1000)
	f.WriteAt(append(hdr[:], "partial"...), int64(end))
	f.Close()

	s = open(t, dir, mod)
	defer s.Close()
	if s.Written() != end {
		t.Fatalf("after recovery written=%d, want %d", s.Written(), end)
	}
	if st := s.Stats(); st.TruncatedBytes != 15 {
		t.Fatalf("truncated %d bytes, want 15", st.TruncatedBytes)
	}
	kept, _ := filepath.Glob(seg + ".*.corrupt")
	if len(kept) != 1 {
		t.Fatalf("the cut tail was not kept: %v", kept)
	}
	if b, _ := os.ReadFile(kept[0]); len(b) != 15 || string(b[8:]) != "partial" {
		t.Fatalf("kept tail %q", b)
	}
	appendWait(t, s, payload(10))
	got := readAll(t, s, 0)
	if len(got) != 11 || string(got[10].Payload) != string(payload(10)) {
		t.Fatalf("read %d frames after recovery and one more append, want 11", len(got))
	}
}

func TestSegmentsDeletedOnlyWhenEveryConsumerPassed(t *testing.T) {
	bothKinds(t, testSegmentsDeletedOnlyWhenEveryConsumerPassed)
}

func testSegmentsDeletedOnlyWhenEveryConsumerPassed(t *testing.T, open opener) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	for i := range 100 {
		appendWait(t, s, payload(i))
	}
	all := readAll(t, s, 0)
	segs := s.Stats().Segments
	if err := s.Commit("a", all[len(all)-1].End); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Segments; got != segs {
		t.Fatalf("segments %d -> %d although consumer b has not moved", segs, got)
	}
	if err := s.Commit("b", all[50].End); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Segments >= segs {
		t.Fatalf("no segment deleted after both consumers passed frame 50 (%d segments)", st.Segments)
	}
	if st.Oldest > all[51].Pos {
		t.Fatalf("deleted a segment b still needs: oldest %d > frame 51 at %d", st.Oldest, all[51].Pos)
	}
	if err := s.Commit("c", 1); !errors.Is(err, ErrUnknownConsumer) {
		t.Fatalf("commit of unregistered consumer: %v", err)
	}
	s.Close()

	// Positions survive a restart and b resumes at frame 51.
	s = open(t, dir, nil)
	defer s.Close()
	from, err := s.Committed("b")
	if err != nil {
		t.Fatal(err)
	}
	rest := readAll(t, s, from)
	if len(rest) != 49 || string(rest[0].Payload) != string(payload(51)) {
		t.Fatalf("b resumed with %d frames, first %q", len(rest), rest[0].Payload[:12])
	}
}

func TestFullUntilConsumersCatchUp(t *testing.T) { bothKinds(t, testFullUntilConsumersCatchUp) }

func testFullUntilConsumersCatchUp(t *testing.T, open opener) {
	s := open(t, t.TempDir(), func(o *Options) { o.MaxBytes = 16 << 10; o.SegmentBytes = 4 << 10 })
	defer s.Close()
	var err error
	n := 0
	for ; n < 1000; n++ {
		var end Position
		if end, err = s.Append(payload(n)); err != nil {
			break
		}
		s.Wait(context.Background(), end)
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("appending until full: err=%v after %d frames", err, n)
	}
	if st := s.Stats(); st.Bytes > st.MaxBytes {
		t.Fatalf("spool holds %d bytes over its %d limit", st.Bytes, st.MaxBytes)
	}
	all := readAll(t, s, 0)
	if len(all) != n {
		t.Fatalf("%d frames readable, %d appended", len(all), n)
	}
	for _, c := range []string{"a", "b"} {
		if err := s.Commit(c, all[len(all)-1].End); err != nil {
			t.Fatal(err)
		}
	}
	// Only the active segment is left, and it counts its header and frames.
	if st := s.Stats(); st.Segments != 1 || st.Bytes != int64(s.Written()-st.Oldest) {
		t.Fatalf("after every consumer passed all: %d segments counting %d bytes, %d written from %d", st.Segments, st.Bytes, s.Written(), st.Oldest)
	}
	if _, err := s.Append(payload(n)); err != nil {
		t.Fatalf("append after consumers caught up: %v", err)
	}
}

func TestConcurrentAppendsGroupCommit(t *testing.T) { bothKinds(t, testConcurrentAppendsGroupCommit) }

func testConcurrentAppendsGroupCommit(t *testing.T, open opener) {
	s := open(t, t.TempDir(), func(o *Options) { o.SegmentBytes = 64 << 10; o.MaxBytes = 64 << 20 })
	defer s.Close()
	const writers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				end, err := s.Append(fmt.Appendf(nil, "w%d-%d", w, i))
				if err == nil {
					err = s.Wait(context.Background(), end)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range readAll(t, s, 0) {
		if seen[string(e.Payload)] {
			t.Fatalf("frame %q read twice", e.Payload)
		}
		seen[string(e.Payload)] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("read %d distinct frames, want %d", len(seen), writers*each)
	}
}

func TestCorruptFrameSkipsSegmentAndCounts(t *testing.T) {
	bothKinds(t, testCorruptFrameSkipsSegmentAndCounts)
}

func testCorruptFrameSkipsSegmentAndCounts(t *testing.T, open opener) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	for i := range 60 {
		appendWait(t, s, payload(i))
	}
	s.Close()
	// Flip a byte in the payload of the first frame of the first segment.
	seg := filepath.Join(dir, fmt.Sprintf("%020d.seg", 0))
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[headerLen+frameOverhead+2] ^= 0xff
	if err := os.WriteFile(seg, b, 0o640); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, nil)
	defer s.Close()
	r := s.NewReader(0)
	defer r.Close()
	_, _, err = r.TryNext()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("first read: %v, want ErrCorrupt", err)
	}
	n := 0
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if n == 0 && e.Pos != Position(len(b)+headerLen) {
			t.Fatalf("after corruption the reader resumed at %d, want the next segment's first frame at %d", e.Pos, len(b)+headerLen)
		}
		n++
	}
	if n == 0 || n >= 60 {
		t.Fatalf("read %d frames after the corrupt segment", n)
	}
	if s.Stats().CorruptFrames != 1 {
		t.Fatalf("corrupt frames counted: %d", s.Stats().CorruptFrames)
	}
}

// recorder is a Consumer that keeps every payload and acknowledges as it goes, failing a
// configurable number of times first.
type recorder struct {
	mu       sync.Mutex
	got      []string
	failures int
	calls    int
}

func (r *recorder) Consume(_ context.Context, es []Entry) (Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if len(es) > 0 && r.failures > 0 {
		r.failures--
		return 0, errors.New("store unavailable")
	}
	var end Position
	for _, e := range es {
		r.got = append(r.got, string(e.Payload))
		end = e.End
	}
	return end, nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func TestRunDeliversInOrderRetriesAndResumes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, func(o *Options) { o.Consumers = []string{"a"} })
	for i := range 30 {
		appendWait(t, s, payload(i))
	}
	rec := &recorder{failures: 3}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var errCount int
	go func() {
		done <- s.Run(ctx, "a", rec, RunOptions{Idle: 10 * time.Millisecond, RetryMin: time.Millisecond, OnError: func(error) { errCount++ }})
	}()
	waitFor(t, func() bool { return rec.count() >= 30 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if errCount != 3 {
		t.Fatalf("OnError called %d times, want 3", errCount)
	}
	for i, p := range rec.got[:30] {
		if p != string(payload(i)) {
			t.Fatalf("delivery %d out of order", i)
		}
	}
	if pos, _ := s.Committed("a"); pos != s.Written() {
		t.Fatalf("committed %d after consuming everything, written %d", pos, s.Written())
	}
	s.Close()

	s = open(t, dir, func(o *Options) { o.Consumers = []string{"a"} })
	defer s.Close()
	for i := 30; i < 40; i++ {
		appendWait(t, s, payload(i))
	}
	rec2 := &recorder{}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- s.Run(ctx, "a", rec2, RunOptions{Idle: 10 * time.Millisecond}) }()
	waitFor(t, func() bool { return rec2.count() >= 10 })
	cancel()
	<-done
	if len(rec2.got) != 10 || rec2.got[0] != string(payload(30)) {
		t.Fatalf("after restart got %d entries starting %q, want the 10 new ones", len(rec2.got), rec2.got[0][:12])
	}
}

// passThenFail consumes its first batch, then fails every batch after it, as the agent's
// shipper does for an aggregator away once it has given up the frames it held.
type passThenFail struct {
	mu     sync.Mutex
	passed Position
}

func (c *passThenFail) Consume(_ context.Context, es []Entry) (Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passed == 0 && len(es) > 0 {
		c.passed = es[len(es)-1].End
		return c.passed, nil
	}
	return 0, errors.New("aggregator away")
}

// What a consumer passed is committed, and its segments freed, while its later batches fail:
// a commit due after a success must not wait for the next success (the first batch passes
// within CommitEvery of Run's start, so only a commit made while failing can record it).
func TestRunCommitsWhatPassedWhileTheConsumerFails(t *testing.T) {
	s := open(t, t.TempDir(), func(o *Options) { o.Consumers = []string{"a"} })
	defer s.Close()
	for i := range 10 {
		appendWait(t, s, payload(i))
	}
	c := &passThenFail{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, "a", c, RunOptions{Idle: 10 * time.Millisecond, RetryMin: time.Millisecond,
			RetryMax: 5 * time.Millisecond, CommitEvery: 50 * time.Millisecond})
	}()
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.passed > 0 })
	for i := 10; i < 20; i++ { // the batches that fail
		appendWait(t, s, payload(i))
	}
	waitFor(t, func() bool { pos, _ := s.Committed("a"); return pos > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if pos, _ := s.Committed("a"); pos != c.passed {
		t.Fatalf("committed %d, the consumer passed %d", pos, c.passed)
	}
}

// countFails fails every call and counts them.
type countFails struct {
	mu    sync.Mutex
	calls int
}

func (c *countFails) Consume(context.Context, []Entry) (Position, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return 0, errors.New("aggregator away")
}

func (c *countFails) n() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

// A failing consumer waiting out an hour's backoff is retried as soon as RetrySooner says so
// while the spool grows, and not before: an agent's shipper must act on a filling spool
// within its backoff.
func TestRunRetriesSoonerWhenAsked(t *testing.T) {
	s := open(t, t.TempDir(), func(o *Options) { o.Consumers = []string{"a"} })
	defer s.Close()
	appendWait(t, s, payload(0))
	c := &countFails{}
	var asked, sooner atomic.Int64 // sooner: the appends after which it says yes
	sooner.Store(-1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, "a", c, RunOptions{Idle: time.Hour, RetryMin: time.Hour, RetryMax: time.Hour,
			RetrySooner: func() bool { return asked.Add(1) == sooner.Load() }})
	}()
	waitFor(t, func() bool { return c.n() == 1 })
	for i := 1; i <= 3; i++ { // the spool grows; the consumer does not want to retry yet
		appendWait(t, s, payload(i))
		waitFor(t, func() bool { return asked.Load() >= int64(i) })
	}
	if n := c.n(); n != 1 {
		t.Fatalf("retried %d times before RetrySooner said so", n-1)
	}
	sooner.Store(4)
	appendWait(t, s, payload(4))
	waitFor(t, func() bool { return c.n() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestBlockedReaderReturnsOnClose(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	r := s.NewReader(0)
	done := make(chan error, 1)
	go func() { _, err := r.Next(context.Background()); done <- err }()
	time.Sleep(10 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Next after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked reader did not return when the spool closed")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checker verifies, when each call is handed over, that every payload of the call holds its
// frame: a reader that reads a call's frames into memory it grows must leave the earlier ones
// of the same call where they are.
type checker struct {
	next, calls, bad int
}

func (c *checker) Consume(_ context.Context, es []Entry) (Position, error) {
	if len(es) == 0 {
		return 0, nil
	}
	c.calls++
	for _, e := range es {
		if string(e.Payload) != string(bigPayload(c.next)) {
			c.bad++
		}
		c.next++
	}
	return es[len(es)-1].End, nil
}

func bigPayload(i int) []byte {
	return fmt.Appendf(nil, "frame-%06d-%s", i, make([]byte, 1000+(i*7919)%60000))
}

func TestRunLendsPayloadsWhole(t *testing.T) {
	s := open(t, t.TempDir(), func(o *Options) { o.Consumers = []string{"a"}; o.SegmentBytes = 1 << 20; o.MaxBytes = 64 << 20 })
	defer s.Close()
	const n = 600 // about 18 MB: several calls, each growing its reader's memory from small
	for i := range n {
		if _, err := s.Append(bigPayload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(context.Background(), s.Written()); err != nil {
		t.Fatal(err)
	}
	c := &checker{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, "a", c, RunOptions{Idle: 10 * time.Millisecond, MaxEntries: 1000, MaxBytes: 4 << 20})
	}()
	waitFor(t, func() bool {
		pos, _ := s.Committed("a")
		return pos == s.Written()
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c.next != n || c.bad != 0 || c.calls < 3 {
		t.Fatalf("%d frames in %d calls, %d of them not as written; want %d whole in several calls", c.next, c.calls, c.bad, n)
	}
}

// TestReaderSlabShrinksAfterCatchUp: the payload memory a catch-up grew is given back once
// calls have needed far less for a while, and a small call after that still reads whole.
func TestReaderSlabShrinksAfterCatchUp(t *testing.T) {
	s := open(t, t.TempDir(), func(o *Options) { o.Consumers = []string{"a"}; o.SegmentBytes = 1 << 20; o.MaxBytes = 64 << 20 })
	defer s.Close()
	const big = 200 // about 6 MB in one call
	for i := range big {
		if _, err := s.Append(bigPayload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(context.Background(), s.Written()); err != nil {
		t.Fatal(err)
	}
	r := s.NewReader(0)
	defer r.Close()
	r.recycle()
	for range big {
		if _, ok, err := r.TryNext(); err != nil || !ok {
			t.Fatalf("catch-up read: %v %v", ok, err)
		}
	}
	r.recycle()
	grown := cap(r.slab)
	if grown < 4<<20 {
		t.Fatalf("after the catch-up the slab holds %d bytes: the test needs it grown", grown)
	}
	for i := range shrinkAfter {
		p := payload(i)
		appendWait(t, s, p)
		e, ok, err := r.TryNext()
		if err != nil || !ok || string(e.Payload) != string(p) {
			t.Fatalf("call %d: read %v %v, payload intact %v", i, ok, err, ok && string(e.Payload) == string(p))
		}
		r.recycle()
	}
	if c := cap(r.slab); c > 2*len(payload(shrinkAfter)) && c > 2*700+64 {
		t.Fatalf("after %d small calls the slab still holds %d bytes (grown to %d)", shrinkAfter, c, grown)
	}
	p := bigPayload(big)
	appendWait(t, s, p)
	if e, ok, err := r.TryNext(); err != nil || !ok || string(e.Payload) != string(p) {
		t.Fatalf("a big frame after the shrink: %v %v", ok, err)
	}
}

// segmentFiles returns the segment files in dir: base position and size.
func segmentFiles(t *testing.T, dir string) []segment {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	var out []segment
	for _, n := range names {
		var base uint64
		if _, err := fmt.Sscanf(filepath.Base(n), "%020d.seg", &base); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, segment{base: Position(base), size: fi.Size()})
	}
	return out
}

// checkTiling fails unless each segment file begins where the one before it ends.
func checkTiling(t *testing.T, segs []segment) {
	t.Helper()
	for i := 1; i < len(segs); i++ {
		if segs[i-1].end() != segs[i].base {
			t.Fatalf("segment at %d of %d bytes is followed by one at %d: %v", segs[i-1].base, segs[i-1].size, segs[i].base, segs)
		}
	}
}

func TestSegmentsAreMadeAheadAtFullSize(t *testing.T) {
	dir := t.TempDir()
	const segBytes = 8 << 10
	s := open(t, dir, func(o *Options) { o.SegmentBytes = segBytes })
	defer s.Close()
	waitSpare := func(want int) []segment {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			files := segmentFiles(t, dir)
			if len(files) == want || time.Now().After(deadline) {
				return files
			}
		}
	}
	// Before the first frame: the active segment and the next one, both at full size.
	files := waitSpare(2)
	if len(files) != 2 || files[0].size != segBytes || files[1].size != segBytes || files[1].base != segBytes {
		t.Fatalf("an empty spool has segments %v, want two of %d bytes, the second at %d", files, segBytes, segBytes)
	}
	spare := waitAhead(t, s)
	var ends []Position
	rotations := 0
	for i := 0; rotations < 3; i++ {
		before := s.Stats().Segments
		ends = append(ends, appendWait(t, s, payload(i)))
		if s.Stats().Segments == before {
			continue
		}
		rotations++
		s.mu.Lock()
		active := s.active
		s.mu.Unlock()
		if active != spare {
			t.Fatalf("rotation %d made a segment rather than take the one made ahead", rotations)
		}
		// Moving on to the next segment took the one made ahead: no new file, no other size.
		// The one after it is made in the background.
		files := waitSpare(s.Stats().Segments + 1)
		checkTiling(t, files)
		for _, f := range files {
			if f.size != segBytes {
				t.Fatalf("segment at %d has %d bytes, want %d: %v", f.base, f.size, segBytes, files)
			}
		}
		last := files[len(files)-1]
		if last.base <= ends[len(ends)-1] {
			t.Fatalf("no segment made ahead of the active one: last file at %d, written to %d", last.base, ends[len(ends)-1])
		}
		spare = waitAhead(t, s)
	}
	// Every frame is read back across the zeros that end each full segment.
	got := readAll(t, s, 0)
	if len(got) != len(ends) {
		t.Fatalf("read %d frames, appended %d", len(got), len(ends))
	}
	for i, e := range got {
		if e.End != ends[i] || string(e.Payload) != string(payload(i)) {
			t.Fatalf("frame %d: end %d (appended to %d), payload %q", i, e.End, ends[i], e.Payload[:12])
		}
	}
	if c := s.Stats().CorruptFrames; c != 0 {
		t.Fatalf("%d frames counted corrupt in segments ending in zeros", c)
	}
}

// waitAhead waits until the segment after the active one has been made, and returns it.
func waitAhead(t *testing.T, s *Spool) *os.File {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		end := s.segs[len(s.segs)-1].end()
		s.mu.Unlock()
		s.spareMu.Lock()
		f, base := s.spare, s.spareBase
		s.spareMu.Unlock()
		if f != nil && base == end {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment was made ahead of the active one")
		}
	}
}

// TestCrashImageWithSpareRecovers opens what a crash leaves: full segments ending in zeros, the
// active one part written, and the one made ahead of use still empty after it.
func TestCrashImageWithSpareRecovers(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	defer s.Close()
	var ends []Position
	for i := range 60 {
		ends = append(ends, appendWait(t, s, payload(i)))
	}
	// The spool's files as they are on disk now, all of it synced: as if the power went.
	for deadline := time.Now().Add(10 * time.Second); len(segmentFiles(t, dir)) <= s.Stats().Segments; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no segment was made ahead of the active one")
		}
	}
	img := t.TempDir()
	if err := os.CopyFS(img, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	c := open(t, img, nil)
	defer c.Close()
	// The empty segment made ahead is dropped: writing goes on after the last frame.
	if c.Written() != ends[len(ends)-1] {
		t.Fatalf("recovered written end %d, want the last frame's end %d", c.Written(), ends[len(ends)-1])
	}
	if st := c.Stats(); st.TruncatedBytes != 0 {
		t.Fatalf("recovery cut %d bytes of zeros as a torn tail", st.TruncatedBytes)
	}
	ends = append(ends, appendWait(t, c, payload(60)))
	got := readAll(t, c, 0)
	if len(got) != len(ends) {
		t.Fatalf("read %d frames after recovery, want %d", len(got), len(ends))
	}
	for i, e := range got {
		if e.End != ends[i] || string(e.Payload) != string(payload(i)) {
			t.Fatalf("frame %d after recovery: end %d, want %d", i, e.End, ends[i])
		}
	}
	checkTiling(t, segmentFiles(t, img))
	// Consumers that passed everything let every segment but the active one go.
	for _, name := range []string{"a", "b"} {
		if err := c.Commit(name, got[len(got)-1].End); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Segments != 1 || st.Bytes != int64(got[len(got)-1].End-st.Oldest) {
		t.Fatalf("after every consumer passed all: %d segments counting %d bytes, oldest at %d, end %d", st.Segments, st.Bytes, st.Oldest, got[len(got)-1].End)
	}
}

// TestFrameLargerThanASegment grows the active segment over where the next one was made ahead:
// that one must go first, or a restart would find two segments claiming the same positions.
func TestFrameLargerThanASegment(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil) // 4 KiB segments
	big := append([]byte("big-"), make([]byte, 10<<10)...)
	// The first frame goes into the first segment, empty, with the next one made ahead.
	frames := [][]byte{big, payload(2), big, big, payload(3), big}
	var ends []Position
	for _, p := range frames {
		s.mu.Lock()
		fixed := s.segs[len(s.segs)-1].fixed
		s.mu.Unlock()
		if fixed {
			waitAhead(t, s)
		}
		ends = append(ends, appendWait(t, s, p))
		checkTiling(t, segmentFiles(t, dir))
	}
	s.Close()
	checkTiling(t, segmentFiles(t, dir))
	s = open(t, dir, nil)
	defer s.Close()
	got := readAll(t, s, 0)
	if len(got) != len(frames) {
		t.Fatalf("read %d frames, want %d", len(got), len(frames))
	}
	for i, e := range got {
		if e.End != ends[i] || string(e.Payload) != string(frames[i]) {
			t.Fatalf("frame %d: end %d, want %d", i, e.End, ends[i])
		}
	}
}

func TestIdentityIsKeptOnlyWhereFramesAreDurable(t *testing.T) {
	dir := t.TempDir()
	open := func(p SyncPolicy) string {
		t.Helper()
		s, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, Sync: p})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !identityRE.MatchString(s.Identity()) {
			t.Fatalf("identity %q", s.Identity())
		}
		return s.Identity()
	}
	first := open(SyncAlways)
	if again := open(SyncAlways); again != first {
		t.Fatalf("identity %s, then %s under fsync always", first, again)
	}
	// Under another policy a crash can write positions again with other frames: a new name.
	interval := open(SyncInterval)
	if interval == first {
		t.Fatal("the identity was kept under fsync interval")
	}
	if next := open(SyncInterval); next == interval {
		t.Fatal("the identity was kept across opens under fsync interval")
	}
	if always := open(SyncAlways); always == first {
		t.Fatal("an identity made under fsync interval was taken for the old one")
	}
}

// A reader that lends its payloads (Lend before each read) reads each frame whole into the
// memory of the last; without Lend every payload is memory of its own.
func TestReaderLendReusesThePayloadMemory(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	defer s.Close()
	for i := range 3 {
		if _, err := s.Append([]byte(fmt.Sprintf("frame %d of three", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Wait(context.Background(), s.Written()); err != nil {
		t.Fatal(err)
	}
	for _, lend := range []bool{false, true} {
		r := s.NewReader(0)
		var first *byte
		for i := range 3 {
			if lend {
				r.Lend()
			}
			e, ok, err := r.TryNext()
			if err != nil || !ok {
				t.Fatalf("frame %d: %v %v", i, ok, err)
			}
			if got, want := string(e.Payload), fmt.Sprintf("frame %d of three", i); got != want {
				t.Fatalf("lend %v: frame %d reads %q, want %q", lend, i, got, want)
			}
			if i == 0 {
				first = &e.Payload[0]
			} else if same := &e.Payload[0] == first; same != lend {
				t.Errorf("lend %v: frame %d in the first frame's memory: %v", lend, i, same)
			}
		}
		r.Close()
	}
}
