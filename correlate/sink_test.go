package correlate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// gateSink is a store that takes as long as the test wants: each WriteChains says it has the
// batch (entered) and waits for the test's answer (answer: nil takes the batch, an error
// refuses it).
type gateSink struct {
	entered chan int
	answer  chan error
	mu      sync.Mutex
	chains  []chain.Chain
}

func newGateSink() *gateSink {
	return &gateSink{entered: make(chan int), answer: make(chan error)}
}

func (s *gateSink) WriteChains(ctx context.Context, cs []chain.Chain) error {
	s.entered <- len(cs)
	select {
	case err := <-s.answer:
		if err == nil {
			s.mu.Lock()
			for i := range cs {
				s.chains = append(s.chains, cs[i].Clone())
			}
			s.mu.Unlock()
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gateHarness is a harness whose correlator writes to a gateSink.
func gateHarness(t *testing.T, maxPending int) (*harness, *gateSink) {
	t.Helper()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	caps := NewCapabilities(15 * time.Minute)
	for name, addr := range map[string]string{"kas-a": addrA, "kas-b": addrB, "kas-c": addrC} {
		caps.NoteServer(name, "", addr, t0)
	}
	sink := newGateSink()
	co := New(Config{Join: DefaultJoinOptions(), Codec: codec, Caps: caps, Sink: sink, MaxPending: maxPending})
	// Past the chain window of the test's records, within the late window: final chains stay
	// in memory.
	co.now = func() time.Time { return t0.Add(time.Minute) }
	return &harness{t: t, co: co}, sink
}

type consumed struct {
	pos spool.Position
	err error
}

// consumeAsync runs an idle Consume (the wall clock moves the stream past every chain window)
// on its own goroutine, as the spool's runner would.
func consumeAsync(co *Correlator) <-chan consumed {
	out := make(chan consumed, 1)
	go func() {
		pos, err := co.Consume(context.Background(), nil)
		out <- consumed{pos, err}
	}()
	return out
}

// stillAnswers runs f and fails the test if it has not returned while the sink holds a batch.
// The timeout only turns a deadlock (a reader waiting for the sink) into a failure instead of
// a hang; it bounds nothing about speed.
func stillAnswers(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s waited for the store", what)
	}
}

// TestReadersDoNotWaitForTheSink: while the store takes its time over a batch, the chain API,
// the gate's window and /metrics answer, and the position the spool may commit stays before
// the chains the store has not taken; a refused batch is offered again, and only its success
// (and the end of the late window) moves the position past them.
func TestReadersDoNotWaitForTheSink(t *testing.T) {
	h, sink := gateHarness(t, 0)
	co := h.co
	reg := prometheus.NewRegistry()
	reg.MustRegister(co.Collectors()...)
	for i := range 5 {
		r := pods(fmt.Sprintf("slow-%d", i), t0)
		h.feed(r.local("kas-a", 200, ""))
	}
	if got := len(sink.entered); got != 0 {
		t.Fatalf("open chains reached the sink")
	}

	res := consumeAsync(co)
	if n := <-sink.entered; n != 5 {
		t.Fatalf("the sink got %d chains, want 5", n)
	}
	// The store is busy with the batch: every reader answers meanwhile.
	stillAnswers(t, "Chain", func() {
		if c, ok := co.Chain("slow-0"); !ok || c.State != chain.StateFinal || c.Class != chain.ClassLocal {
			t.Errorf("chain API during a slow write: %+v %v", c, ok)
		}
	})
	stillAnswers(t, "List", func() {
		if got := co.List(chain.Filter{Limit: 10}); len(got) != 5 {
			t.Errorf("List during a slow write: %d chains", len(got))
		}
	})
	stillAnswers(t, "Recent", func() {
		if tot := co.Recent(time.Hour); tot.Chains[chain.ClassLocal] != 5 {
			t.Errorf("gate window during a slow write: %+v", tot.Chains)
		}
	})
	stillAnswers(t, "/metrics", func() {
		if _, err := reg.Gather(); err != nil {
			t.Error(err)
		}
	})
	stillAnswers(t, "the safe position", func() {
		co.mu.Lock()
		defer co.mu.Unlock()
		if safe := co.safeLocked(); safe != 0 {
			t.Errorf("safe position %d while the store has not taken chains from position 0", safe)
		}
	})

	// The store refuses the batch: nothing is committed past it, and it waits to be offered again.
	sink.answer <- errors.New("store down")
	if got := <-res; got.err != nil || got.pos != 0 {
		t.Fatalf("after a refused batch: position %d, %v; want 0, nil", got.pos, got.err)
	}
	co.mu.Lock()
	pending := len(co.pending)
	co.mu.Unlock()
	if pending != 5 {
		t.Fatalf("%d chains pending after a refused batch, want 5", pending)
	}

	res = consumeAsync(co)
	if n := <-sink.entered; n != 5 {
		t.Fatalf("offered again: %d chains, want 5", n)
	}
	sink.answer <- nil
	// Taken, but final chains stay amendable for the late window: a late record may reopen
	// them, and a restart must rebuild them from their records.
	if got := <-res; got.err != nil || got.pos != 0 {
		t.Fatalf("after the store took the batch: position %d, %v; want 0 within the late window", got.pos, got.err)
	}
	if len(sink.chains) != 5 {
		t.Fatalf("the store holds %d chains, want 5", len(sink.chains))
	}
	// Past the late window they leave memory, and only now the position moves past them.
	co.now = func() time.Time { return t0.Add(10 * time.Minute) }
	if got := <-consumeAsync(co); got.err != nil || got.pos != h.pos {
		t.Fatalf("past the late window: position %d, %v; want %d", got.pos, got.err, h.pos)
	}
}

// TestBacklogPushesBack: with MaxPending chains waiting and the store still refusing them,
// Consume takes no entries (ErrBacklog), so the backlog waits in the spool; Close offers the
// pending chains once more.
func TestBacklogPushesBack(t *testing.T) {
	h, sink := gateHarness(t, 3)
	co := h.co
	for i := range 4 {
		r := pods(fmt.Sprintf("b-%d", i), t0)
		h.feed(r.local("kas-a", 200, ""))
	}
	res := consumeAsync(co)
	<-sink.entered
	sink.answer <- errors.New("store down")
	if got := <-res; got.err != nil {
		t.Fatal(got.err)
	}
	// 4 pending >= 3: the next Consume first tries the store, which refuses again.
	r := pods("b-next", t0.Add(time.Second))
	keys := []record.Key{}
	recs := r.local("kas-a", 200, "")
	for i := range recs {
		keys = append(keys, recs[i].Key())
	}
	frame, err := co.codec.AppendFrame(nil, "kas-a", recs[0].ReceivedAt, recs, keys)
	if err != nil {
		t.Fatal(err)
	}
	entry := spool.Entry{Pos: h.pos, End: h.pos + spool.Position(len(frame)), Payload: frame}
	done := make(chan consumed, 1)
	go func() {
		pos, err := co.Consume(context.Background(), []spool.Entry{entry})
		done <- consumed{pos, err}
	}()
	<-sink.entered
	sink.answer <- errors.New("still down")
	got := <-done
	if !errors.Is(got.err, ErrBacklog) || got.pos != 0 {
		t.Fatalf("backlog: position %d, %v; want 0 and ErrBacklog", got.pos, got.err)
	}
	if _, ok := co.Chain("b-next"); ok {
		t.Fatal("an entry was taken while the store was behind")
	}
	closed := make(chan error, 1)
	go func() { closed <- co.Close(context.Background()) }()
	if n := <-sink.entered; n != 4 {
		t.Fatalf("Close offered %d chains, want the 4 pending", n)
	}
	sink.answer <- nil
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// batchSink records the size of every batch.
type batchSink struct {
	memSink
	sizes []int
}

func (s *batchSink) WriteChains(ctx context.Context, cs []chain.Chain) error {
	s.sizes = append(s.sizes, len(cs))
	return s.memSink.WriteChains(ctx, cs)
}

// TestChunksKeepVerdicts: the chains one Due closes are classified and handed to the store a
// chunk at a time (flushBatch), in the order they would be all at once, so the verdicts are
// the same: a misleading 404 closing with the forwards that teach who serves its resource.
func TestChunksKeepVerdicts(t *testing.T) {
	run := func(batch int) (map[string]chain.Class, []int) {
		h := newHarness(t, DefaultJoinOptions())
		sink := &batchSink{}
		h.co.sink = sink
		h.co.flushBatch = batch
		at := t0.Add(time.Minute)
		var recs [][]record.Record
		for i := range 3 {
			m := podgroups(fmt.Sprintf("404-%d", i), at.Add(time.Duration(i)*time.Millisecond))
			recs = append(recs, m.local("kas-b", 404, msgResourceNotFound))
		}
		for i := range 4 {
			r := podgroups(fmt.Sprintf("fw-%d", i), at.Add(time.Duration(i)*time.Millisecond))
			recs = append(recs, r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
		}
		h.feed(recs...)
		h.settle()
		out := map[string]chain.Class{}
		for _, c := range sink.chains {
			out[c.AuditID] = c.Class
		}
		for _, n := range sink.sizes {
			if n > batch {
				t.Errorf("a batch of %d chains, over flushBatch %d", n, batch)
			}
		}
		return out, sink.sizes
	}
	whole, _ := run(defaultFlushBatch)
	chunked, sizes := run(2)
	if len(whole) != 7 || len(sizes) < 4 {
		t.Fatalf("%d chains, batches %v", len(whole), sizes)
	}
	for id, c := range whole {
		if chunked[id] != c {
			t.Errorf("%s: %s in chunks of 2, %s at once", id, chunked[id], c)
		}
	}
	if whole["404-0"] != chain.ClassMisleading404 {
		t.Errorf("404-0 is %s, want misleading_404", whole["404-0"])
	}
}

// stoppingSink takes the first batch, then the process is stopped (cancel) and the store
// refuses what comes after, as an insert does once its context is cancelled.
type stoppingSink struct {
	memSink
	cancel  context.CancelFunc
	batches int
}

func (s *stoppingSink) WriteChains(ctx context.Context, cs []chain.Chain) error {
	s.batches++
	if s.batches > 1 {
		return ctx.Err()
	}
	s.cancel()
	return s.memSink.WriteChains(ctx, cs)
}

// TestStopLeavesTheRestToTheReplay: a stop in the middle of the chains one Due closed (after a
// burst, hundreds of thousands) ends Consume at once with the context's error, rather than
// classifying the rest only to find the store gone, so the spool commits nothing of it and
// the next start replays those chains.
func TestStopLeavesTheRestToTheReplay(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	ctx, cancel := context.WithCancel(context.Background())
	sink := &stoppingSink{cancel: cancel}
	h.co.sink, h.co.flushBatch = sink, 2
	for i := range 10 {
		h.feed(pods(fmt.Sprintf("s-%d", i), t0.Add(time.Duration(i)*time.Millisecond)).local("kas-a", 200, ""))
	}
	_, err := h.co.Consume(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume after the stop: %v, want context.Canceled", err)
	}
	if sink.batches > 2 || len(sink.chains) != 2 {
		t.Fatalf("%d batches offered, %d chains stored: the rest should be left to the replay", sink.batches, len(sink.chains))
	}
	h.co.mu.Lock()
	due, pending := len(h.co.due), len(h.co.pending)
	h.co.mu.Unlock()
	if due != 0 || pending > 2 {
		t.Fatalf("%d chains still due, %d pending after the stop", due, pending)
	}
}

// TestFlushDueAtTheSpareMemory: the pending chains go to the sink once they reach
// flushAtChains, however long before flushEvery, and a batch that passed the count by what one
// Consume closes keeps its memory for the next: at high rates every flush then reuses it
// instead of growing its slice anew.
func TestFlushDueAtTheSpareMemory(t *testing.T) {
	h := newHarness(t, JoinOptions{Window: time.Second})
	h.co.flushEvery = time.Hour
	h.co.lastFlush, h.co.lastFlushStream = h.co.now(), h.co.j.now
	for range flushAtChains - 1 {
		h.co.appendPending(&chain.Chain{})
	}
	if h.co.flushDue(false) {
		t.Fatalf("due at %d pending chains right after a flush, with an hour between flushes", len(h.co.pending))
	}
	// One Consume closes a few thousand chains past the count before flushDue looks.
	for range 5_000 {
		h.co.appendPending(&chain.Chain{})
	}
	if !h.co.flushDue(false) {
		t.Fatalf("not due at %d pending chains (flushAtChains %d)", len(h.co.pending), flushAtChains)
	}
	n, mem := len(h.co.pending), &h.co.pending[:1][0]
	if err := h.co.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.co.pending) != 0 || cap(h.co.spare) < n || &h.co.spare[:1][0] != mem {
		t.Fatalf("after a flush of %d chains: %d pending, a spare of capacity %d; want the batch's memory kept", n, len(h.co.pending), cap(h.co.spare))
	}
	h.co.appendPending(&chain.Chain{})
	if &h.co.pending[0] != mem {
		t.Fatal("the next pending chain is not in the kept memory")
	}
}

// TestChainsGoToTheSinkEveryFlush: while records keep coming, the chains that became final are
// handed to the sink together once every flushEvery of wall or stream time (each insert is a
// part for the store to merge), and all of them when the spool goes idle.
func TestChainsGoToTheSinkEveryFlush(t *testing.T) {
	h := newHarness(t, JoinOptions{Window: 500 * time.Millisecond})
	clock := t0.Add(time.Hour)
	h.co.now = func() time.Time { return clock }
	h.co.flushEvery = 2 * time.Second // several intervals in the span (serve's --store-flush-interval)
	const n = 120
	span := time.Duration(n) * 100 * time.Millisecond
	for i := range n {
		// A request every 100 ms, received a second later; as much wall time between frames.
		r := podgroups(fmt.Sprintf("r-%d", i), t0.Add(time.Duration(i)*100*time.Millisecond))
		h.feed(r.metadataLocal("kas-b", 200))
		clock = clock.Add(100 * time.Millisecond)
	}
	h.sink.mu.Lock()
	calls, written := h.sink.calls, len(h.sink.chains)
	h.sink.mu.Unlock()
	// A hand-over at the first final chain and one every flushEvery after that.
	if most := int(span/h.co.flushEvery) + 1; calls > most || calls < 2 || written < n/2 {
		t.Fatalf("while records came for %v: %d hand-overs of %d chains; want 2 to %d (flushEvery %v), of most chains", span, calls, written, most, h.co.flushEvery)
	}
	h.settle()
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	if len(h.sink.chains) != n {
		t.Fatalf("after the spool went idle: %d chains in the sink, want %d", len(h.sink.chains), n)
	}
}

// TestCloneOwnsItsSides: a sink that keeps a chain keeps its Clone, because the correlator
// reuses the sides of the chains it handed over; the clone's roles point to sides of its own.
func TestCloneOwnsItsSides(t *testing.T) {
	a, b, c := &chain.Side{APIServer: "kas-a", Code: 200}, &chain.Side{APIServer: "kas-b", Code: 200}, &chain.Side{APIServer: "kas-c"}
	ch := chain.Chain{ID: "x", Entry: a, Peer: b, Others: []*chain.Side{c}}
	cl := ch.Clone()
	*a, *b, *c = chain.Side{}, chain.Side{}, chain.Side{} // the correlator reusing them
	if cl.Entry.APIServer != "kas-a" || cl.Peer.APIServer != "kas-b" || cl.Others[0].APIServer != "kas-c" {
		t.Fatalf("the clone changed with the original's sides: %+v %+v %+v", cl.Entry, cl.Peer, cl.Others[0])
	}
	if cl.Entry == a || cl.Peer == b || cl.Others[0] == c {
		t.Fatal("the clone's roles point to the original's sides")
	}
}

// TestRestartAfterALateRecordRebuildsTheChain: a forwarded request whose entry's record came
// late (its apiserver's webhook retried after its receiver was restarted), after the peer's
// chain had become final and gone to the store. A correlator that then restarts replays the spool
// from the position it committed: that position must still lie before the peer's record, or the
// entry's record makes a chain of its own (broken, peer missing) beside the stored one (broken,
// entry missing), where the running correlator had joined them into one proxied chain. Found in
// TestHALayoutSurvivesEveryPeertrailProcess (test/e2e).
func TestRestartAfterALateRecordRebuildsTheChain(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	r := podgroups("late-entry", t0)
	var entries []spool.Entry
	frame := func(recs []record.Record) {
		keys := make([]record.Key, len(recs))
		for i := range recs {
			keys[i] = recs[i].Key()
		}
		b, err := h.co.codec.AppendFrame(nil, recs[0].APIServer, recs[0].ReceivedAt, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, spool.Entry{Pos: h.pos, End: h.pos + spool.Position(len(b)), Payload: b})
		h.pos += spool.Position(len(b))
	}
	peer := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, objects: true,
		start: 2 * time.Millisecond, end: 15 * time.Millisecond, received: t0.Add(time.Second)})
	frame(peer)
	// Other traffic moves the stream past the chain window: the peer's chain is final.
	for i := range 45 {
		o := pods(fmt.Sprintf("other-%d", i), t0.Add(time.Duration(i)*time.Second))
		frame(o.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, objects: true, end: 5 * time.Millisecond,
			received: t0.Add(time.Duration(i+1) * time.Second)}))
	}
	entry := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: t0.Add(50 * time.Second)})
	frame(entry)
	late := len(entries) - 1

	run := func(co *Correlator, es []spool.Entry) spool.Position {
		pos, err := co.Consume(context.Background(), es)
		if err != nil {
			t.Fatal(err)
		}
		return pos
	}
	committed := run(h.co, entries[:late])
	if c := h.chain("late-entry"); c.Class != chain.ClassBroken {
		t.Fatalf("before the late record: %s %v", c.Class, c.Findings)
	}
	committed = max(committed, run(h.co, entries[late:]))
	// A chain window later (within the late window), the reopened chain is final again.
	h.co.now = func() time.Time { return t0.Add(90 * time.Second) }
	committed = max(committed, run(h.co, nil))
	if c := h.chain("late-entry"); c.Class != chain.ClassProxied || c.Entry == nil || c.Entry.APIServer != "kas-a" {
		t.Fatalf("the running correlator: %s %v", c.Class, c.Findings)
	}
	if committed > entries[0].Pos {
		t.Fatalf("committed %d, past the peer's record at %d, which the final chain reopened by the late record holds", committed, entries[0].Pos)
	}

	// The restart: a new correlator, the spool replayed from the committed position.
	again := newHarness(t, DefaultJoinOptions())
	var replay []spool.Entry
	for _, e := range entries {
		if e.Pos >= committed {
			replay = append(replay, e)
		}
	}
	run(again.co, replay)
	again.settle()
	got := map[chain.Class]int{}
	for _, c := range again.sink.chains {
		if c.AuditID == "late-entry" && c.State == chain.StateFinal {
			got[c.Class]++
		}
	}
	if c := again.chain("late-entry"); c.Class != chain.ClassProxied || c.Entry == nil || c.Peer == nil {
		t.Fatalf("after the restart: %s %v (final chains of the auditID written: %v)", c.Class, c.Findings, got)
	}
}
