// Package correlate rebuilds what happened to each request during a mixed-version window: it
// joins the records that every apiserver wrote of one request (same auditID, same request,
// close in time) into a chain, decides which apiserver got the client's call (the entry) and
// which served it (the peer), classifies the chain (local, proxied, proxy_failed,
// misleading_404, broken, loop, internal) and notes findings (identity mismatch, flattened
// impersonation, status mismatch, a missing side).
//
// Data flow: the spool delivers frames to the Correlator (a spool.Consumer), which feeds their
// records to the Joiner; chains whose window has passed are classified by the Classifier,
// counted in metrics and handed to the Sink (the store; the correlator's only way there), and
// traced once their verdict is settled (when they leave memory, a late window later). Readers
// (the chain API, package chainapi) ask it for the chains it holds (Chains, List). The chains
// are package chain's; the correlator's working state on one is a draft, never handed out.
package correlate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
	"github.com/peertrail/peertrail/metrics"
)

// ConsumerName is the correlator's spool consumer name.
const ConsumerName = metrics.ConsumerCorrelate

// Sink receives final chains, in batches. WriteChains is called from the goroutine that calls
// Consume (or Close), one batch at a time, and without the correlator's lock held: the chain
// API, the gate's window and /metrics keep answering while the store is slow. WriteChains must
// be idempotent by Chain.ID: the same chain can come again after a restart (the spool is
// replayed from the oldest open chain) or with a higher Revision after a late record reopened
// it, and then the later one wins. The slice and its chains, their sides included, are the
// sink's until WriteChains returns; the correlator then reuses the slice and the sides (a sink
// that keeps a chain keeps its Chain.Clone). An error means
// nothing of the batch may be assumed written: it is offered again, and until the sink has
// taken a chain the spool position the correlator commits stays before the chain's first
// record, so a crash meanwhile replays it.
type Sink interface {
	WriteChains(ctx context.Context, chains []chain.Chain) error
}

// ErrBacklog is returned (wrapped) by Consume when too many final chains wait for the sink
// (Config.MaxPending) and the sink still fails: Consume takes no entries until it succeeds,
// so the backlog waits in the spool, not in memory.
var ErrBacklog = errors.New("too many chains waiting for the store")

// Correlator is the spool consumer that joins records into chains. Its methods are safe for
// concurrent use: the spool's runner calls Consume while API handlers read chains.
type Correlator struct {
	opts       JoinOptions
	codec      *record.Codec
	classifier Classifier
	caps       *Capabilities
	sink       Sink
	tracer     *Tracer
	log        *slog.Logger
	m          *correlateMetrics
	now        func() time.Time
	// maxPending bounds the final chains waiting for the sink before Consume pushes back.
	maxPending int
	// flushEvery is how often Consume hands pending chains to the sink while records keep
	// coming (flushDue); lastFlush and lastFlushStream when it last did, by the wall clock and
	// by stream time.
	flushEvery      time.Duration
	lastFlush       time.Time
	lastFlushStream int64
	// flushBatch is the most chains one WriteChains gets, and the chunk in which Consume
	// classifies the chains a Due closed (finishDueLocked).
	flushBatch int
	recs       []record.Record  // the last frame's records; their memory decodes the next
	intern     *record.Interner // the recurring values of records, shared rather than decoded afresh
	finishing  draft            // the memory finishLocked builds each chain in
	// freeSides are the sides of chains the sink has taken (WriteChains returned: they are the
	// correlator's again), for finishLocked to build the next chains' in.
	freeSides []*chain.Side
	sidesOut  []*chain.Side // takeSides' list (under flushMu)
	// versionErrors counts, per apiserver, its loopback requests without a parseable version;
	// reportedAgents are the (apiserver, user agent) pairs already logged.
	versionErrors  *prometheus.CounterVec
	reportedAgents map[string]struct{}

	stateFile    string
	lastSave     time.Time
	savedChanges uint64
	savedSafe    spool.Position
	// lastReplaySave is when the replay account was last saved, horizonWalked the bound its last
	// walk of the chains in memory found and horizonWalkedAt when (remnant.go).
	lastReplaySave  time.Time
	horizonWalked   int64
	horizonWalkedAt time.Time

	// flushMu serialises the hand-over of final chains to the sink, which runs without mu
	// (see flush); it is taken before mu, never while holding it.
	flushMu sync.Mutex

	mu sync.Mutex
	j  *Joiner
	// pending are final chains not yet handed to the sink; pendFirst is the lowest spool
	// position of their first records (meaningful while pending is not empty).
	pending   []chain.Chain
	pendFirst spool.Position
	// spare is the memory of a batch the sink took, for the next pending chains, so that a
	// second's batch does not grow a slice anew.
	spare []chain.Chain
	// due are chains Due finalised that are still to be classified (finishDueLocked).
	due []*chainState
	// inflight chains are with the sink now (flush): until it answers, the committed position
	// stays before inflightFirst.
	inflight      int
	inflightFirst spool.Position
	inflightLast  int64 // the earliest latest receipt of the chains with the sink, Unix ns
	win           window
	noise         noiseEpisodes
	// undecided are final chains decided without the evidence they waited for; reevaluatedAt
	// is the capability view's change and delivery count when they were last judged again.
	undecided     []chainRef
	reevaluatedAt uint64
	// lateActivity says that a frame brought an apiserver's records of a time the chain
	// window has passed: its stream is late.
	lateActivity bool
	// recheckUntil is the stream time until which recent one-sided final chains are judged
	// again whenever the view changed or a stream delivered more (recheckedAt: its change and
	// delivery count when last done).
	recheckUntil int64
	recheckedAt  uint64
	lastEnd      spool.Position
	// wl journals watches' chains (nil without a state file); rebuilt says the chains it held
	// at the start have been joined again (at the first Consume, before the replay).
	wl      *watchLog
	rebuilt bool
	// watchRecs are the records of watches' chains in the frame being joined.
	watchRecs []watchRec
}

type watchRec struct {
	c *chainState
	r *record.Record
}

// Config assembles a Correlator.
type Config struct {
	Join       JoinOptions // the joiner's windows and bounds
	Codec      *record.Codec
	Caps       *Capabilities
	Classifier Classifier // nil: NewClassifier(Caps)
	Sink       Sink       // nil: chains are only counted and served by the API
	Tracer     *Tracer    // nil: no traces
	Log        *slog.Logger
	MaxPending int
	// FlushEvery is how long final chains may wait for the sink while records keep coming
	// (0: defaultFlushEvery); the store writer's FlushInterval, so that both tables take
	// their inserts at the same pace.
	FlushEvery time.Duration
	// StateFile keeps the capability view across restarts ("" keeps it in memory only), and
	// beside it the account of what was joined, for the replay (remnant.go).
	StateFile string
	// SpoolEnd is the spool's end when the process started: an account that reaches past it
	// was kept for another spool (one made anew) and is ignored.
	SpoolEnd spool.Position
}

// New returns a Correlator. A state file that cannot be read is reported and ignored: the view
// is relearned from traffic.
func New(cfg Config) *Correlator {
	if cfg.Classifier == nil {
		cfg.Classifier = NewClassifier(cfg.Caps)
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 50_000
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.FlushEvery <= 0 {
		cfg.FlushEvery = defaultFlushEvery
	}
	co := &Correlator{
		opts: cfg.Join, codec: cfg.Codec, classifier: cfg.Classifier, caps: cfg.Caps, sink: cfg.Sink,
		tracer: cfg.Tracer, log: cfg.Log, m: newCorrelateMetrics(), now: time.Now, maxPending: cfg.MaxPending, flushBatch: defaultFlushBatch, flushEvery: cfg.FlushEvery,
		j: NewJoiner(cfg.Join), stateFile: cfg.StateFile, intern: record.NewInterner(),
		versionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.APIServerVersionUnparseableTotal,
			Help: "Loopback requests of the apiserver whose user agent named no version peertrail could parse.",
		}, []string{metrics.LabelAPIServer}),
		reportedAgents: map[string]struct{}{},
	}
	co.j.leaving = co.leaving
	if cfg.Caps != nil {
		co.m.known = cfg.Caps.KnownResource
	}
	if cfg.StateFile != "" {
		b, err := os.ReadFile(cfg.StateFile)
		if err == nil {
			err = json.Unmarshal(b, cfg.Caps)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			cfg.Log.Warn("correlate: capability state unreadable; relearning from traffic", "file", cfg.StateFile, "err", err)
		}
		if err := co.loadReplay(cfg.SpoolEnd); err != nil {
			cfg.Log.Warn("correlate: the replay account is unreadable; a replay may judge remnants of stored chains again", "err", err)
		}
		wl, err := openWatchLog(filepath.Join(filepath.Dir(cfg.StateFile), watchLogName), cfg.Codec, cfg.SpoolEnd, cfg.Log)
		if err != nil {
			cfg.Log.Warn("correlate: the watch journal cannot be kept; watches' chains hold the spool while they run, and a restart joins their completion alone", "err", err)
		} else {
			co.wl, co.j.journaled = wl, true
		}
	}
	return co
}

// leaving is the joiner's hook for a final chain leaving memory for good: it is traced, and
// gone from the watch journal.
func (co *Correlator) leaving(cs *chainState) {
	co.traceLeaving(cs)
	if co.wl != nil {
		co.wl.gone(cs)
	}
}

// rebuildLocked joins again, once, the chains the watch journal held at the start: their
// records before from, where the replay begins.
func (co *Correlator) rebuildLocked(ctx context.Context, from spool.Position) {
	co.rebuilt = true
	if co.wl == nil {
		return
	}
	if n := co.wl.rebuild(co.j, from, func(c *chainState) { co.finishLocked(ctx, c) }); n > 0 {
		co.log.Info("correlate: rebuilt watches' chains from the journal", "chains", n, "before_position", from)
	}
}

// StreamTime is how far the correlator has joined: the latest receipt time of the records it
// was given, or the wall clock when the spool was idle (zero before either). An aggregator whose
// stored frames are newer than this has not joined them yet. Safe for concurrent use.
func (co *Correlator) StreamTime() time.Time {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.j.now == 0 {
		return time.Time{}
	}
	return time.Unix(0, co.j.now)
}

// saveEvery bounds how often the capability view is written.
const saveEvery = time.Second

// checkpointLocked returns the position the spool may commit, saving the capability view when
// it changed: a committed position must never run ahead of the saved view, or a crash would
// lose what the skipped records taught.
func (co *Correlator) checkpointLocked(safe spool.Position, force bool) spool.Position {
	if co.wl != nil {
		co.wl.sync(co.j, co.now(), force)
	}
	co.saveReplayLocked(force)
	if co.stateFile == "" {
		return safe
	}
	changes := co.caps.Changes()
	if changes == co.savedChanges {
		co.savedSafe = safe
		return safe
	}
	if !force && co.now().Sub(co.lastSave) < saveEvery {
		return min(safe, co.savedSafe)
	}
	b, err := json.Marshal(co.caps)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(co.stateFile), 0o750)
	}
	if err == nil {
		err = fsutil.WriteFileAtomic(co.stateFile, b)
	}
	if err != nil {
		co.log.Warn("correlate: saving the capability view", "file", co.stateFile, "err", err)
		return min(safe, co.savedSafe)
	}
	co.lastSave, co.savedChanges, co.savedSafe = co.now(), changes, safe
	return safe
}

// Close saves the capability view, offers pending chains to the sink once more and stops the
// tracer. Call it after the spool consumer has stopped.
func (co *Correlator) Close(ctx context.Context) error {
	co.mu.Lock()
	co.checkpointLocked(co.safeLocked(), true)
	co.mu.Unlock()
	err := co.flush(ctx)
	if err != nil {
		co.mu.Lock()
		n := len(co.pending)
		co.mu.Unlock()
		err = fmt.Errorf("correlate: %d chains not written to the store (they are rebuilt from the spool on the next start): %w", n, err)
	}
	if co.tracer != nil {
		// The final chains still held could yet be reclassified by a late record; this process
		// will not see one, so they are traced as they stand.
		co.mu.Lock()
		for r := co.j.done.head; r != 0; {
			cs := co.j.at(r)
			r = cs.next
			co.traceLeaving(cs)
		}
		co.mu.Unlock()
		if terr := co.tracer.Shutdown(ctx); terr != nil && err == nil {
			err = fmt.Errorf("correlate: flushing traces: %w", terr)
		}
	}
	if co.wl != nil {
		co.mu.Lock()
		werr := co.wl.close(co.j, co.now())
		co.mu.Unlock()
		if werr != nil && err == nil {
			err = fmt.Errorf("correlate: closing the watch journal: %w", werr)
		}
	}
	return err
}

// Consume implements spool.Consumer. It joins and classifies under co.mu, then hands the
// chains that became final to the sink without it (flush), and returns the position the
// spool may commit: before the first record of every open chain and of every chain the sink
// has not taken.
func (co *Correlator) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	idle := len(entries) == 0
	co.mu.Lock()
	if !co.rebuilt {
		from := spool.Position(math.MaxUint64)
		if !idle {
			from = entries[0].Pos
		}
		co.rebuildLocked(ctx, from)
	}
	backlog := len(co.pending) >= co.maxPending
	co.mu.Unlock()
	if backlog {
		// The store is behind: take no more entries until it catches up (the spool holds them).
		if err := co.flush(ctx); err != nil {
			co.mu.Lock()
			defer co.mu.Unlock()
			return co.safeLocked(), errors.Join(ErrBacklog, err)
		}
	}
	// The records are joined a few frames at a time, the lock let go in between: one Consume
	// brings up to 256 frames (100,000 records), over a second of work on a busy machine,
	// and the chain API and /metrics must not wait that long.
	for len(entries) > 0 {
		n := min(len(entries), joinEntries)
		co.mu.Lock()
		co.joinLocked(ctx, entries[:n])
		co.mu.Unlock()
		entries = entries[n:]
	}
	co.mu.Lock()
	more := co.closeDueLocked(ctx, idle)
	co.mu.Unlock()
	for {
		var err error
		if co.flushDue(idle || more) {
			err = co.flush(ctx)
		}
		if err != nil {
			co.mu.Lock()
			n := len(co.pending)
			co.mu.Unlock()
			co.log.Warn("correlate: writing chains to the store failed; they stay pending", "pending", n, "err", err)
		}
		if !more {
			break
		}
		if ctx.Err() != nil {
			// Stopping: the rest of a burst's chains would take minutes to classify and
			// store. The spool commits no position of this call, so the next start
			// replays their records and closes them again.
			co.mu.Lock()
			clear(co.due)
			co.due = nil
			co.mu.Unlock()
			return 0, fmt.Errorf("correlate: stopped with chains still to classify: %w", ctx.Err())
		}
		co.mu.Lock()
		if err != nil {
			// The store refuses: classify the rest now, to wait in pending, rather than
			// leave chains final but unclassified.
			more = co.finishDueLocked(ctx, len(co.due))
		} else {
			more = co.finishDueLocked(ctx, co.flushBatch)
		}
		co.mu.Unlock()
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	co.m.pending.Set(float64(len(co.pending)))
	return co.checkpointLocked(co.safeLocked(), false), nil
}

// joinEntries is how many spool entries (webhook batches, up to 400 records each) Consume
// joins per hold of the lock.
const joinEntries = 16

// joinLocked joins the entries' records into chains (chains evicted to stay within MaxOpen
// are classified and queued for the sink at once).
func (co *Correlator) joinLocked(ctx context.Context, entries []spool.Entry) {
	for _, e := range entries {
		// The records' memory serves every frame: what the joiner keeps of a record is the
		// record's own strings, lists and maps (never changed), not the Records.
		b, err := co.codec.DecodeFrameWithoutRaw(co.recs, e.Payload, co.intern)
		if err != nil {
			co.m.badFrames.Inc()
			co.log.Error("correlate: undecodable spool frame skipped", "position", e.Pos, "err", err)
			co.lastEnd = e.End
			continue
		}
		// The processes first: a late batch may hold an older process's first calls, whose
		// epoch its answers then count in (Capabilities.notePastLocked).
		for i := range b.Records {
			co.noteServer(&b.Records[i])
		}
		co.noteActivity(b.Records)
		for i := range b.Records {
			r := &b.Records[i]
			c, ev := co.j.Add(r, e.Pos)
			if co.wl != nil && co.j.targetOf(c).verb == "watch" {
				co.watchRecs = append(co.watchRecs, watchRec{c, r})
			}
			if ev != nil {
				co.finishLocked(ctx, ev)
			}
		}
		// Journaled as the whole batch leaves their chains: a watch that ended in the batch it
		// began in never ran.
		for _, w := range co.watchRecs {
			co.wl.note(co.j, w.c, w.r, e.Pos)
		}
		clear(co.watchRecs)
		co.watchRecs = co.watchRecs[:0]
		co.recs = b.Records
		co.m.records.Add(float64(len(b.Records)))
		co.lastEnd = e.End
	}
	co.markSharedLocked(ctx)
}

// markSharedLocked gives the final chains that another request's chain of their auditID
// has just joined in memory (Joiner.share) the finding audit_id_reused: their verdict as
// given, with the finding added, emitted again with a higher revision. Nothing else of it
// changes: what another request shows is no evidence about this one.
func (co *Correlator) markSharedLocked(ctx context.Context) {
	for _, r := range co.j.shared {
		cs := co.j.slab.live(r.r, r.gen)
		if cs == nil || !cs.final || !cs.res.set || slices.Contains(co.j.verdicts.get(cs.res.verdict).findings, chain.FindingAuditIDReused) {
			continue
		}
		prev := co.prevResult(cs)
		ch := co.view(cs)
		ch.Findings = append(ch.Findings, chain.FindingAuditIDReused)
		ch.Explanation += fmt.Sprintf("; other requests carried its auditID too (a client may set its own Audit-ID): every chain of the auditID is listed with it (%s)", chain.FindingAuditIDReused)
		cs.emitted++
		ch.Revision, ch.remark = int(cs.emitted), true
		co.apply(ctx, cs, ch, prev)
	}
	clear(co.j.shared)
	co.j.shared = co.j.shared[:0]
}

// closeDueLocked finalises the chains whose window has passed, classifies the first
// flushBatch of them and queues them for the sink; it reports whether more are left to
// classify (finishDueLocked). With entries, time is the stream's (replays after a restart
// rebuild the same chains); when the spool is idle, the wall clock moves it on.
func (co *Correlator) closeDueLocked(ctx context.Context, idle bool) bool {
	now := int64(0)
	if idle {
		now = co.now().UnixNano()
	}
	due := co.j.Due(now)
	// Chains recorded by two or more apiservers teach who serves what without needing that
	// knowledge themselves; classify them first so that the single-sided chains closing at
	// the same moment (a misleading 404 next to the forwards that preceded it) can use it.
	slices.SortStableFunc(due, func(a, b *chainState) int { return min(int(b.nsides), 2) - min(int(a.nsides), 2) })
	co.due = due
	return co.finishDueLocked(ctx, co.flushBatch)
}

// finishDueLocked classifies up to n of the chains the last Due finalised (co.due), in their
// order; once none is left, it judges again what new evidence may change, and reports false.
// Consume hands each chunk to the sink before it classifies the next, so that the hundreds of
// thousands of chains a burst closes at once never wait for the store as Chain values all
// together (about 1.3 KB each). co.due is empty whenever Consume returns: its chains are
// final in the joiner, and only the next Due may let them go.
func (co *Correlator) finishDueLocked(ctx context.Context, n int) bool {
	k := min(n, len(co.due))
	for _, c := range co.due[:k] {
		co.finishLocked(ctx, c)
	}
	clear(co.due[:k])
	if co.due = co.due[k:]; len(co.due) > 0 {
		return true
	}
	co.due = nil
	if changes := co.caps.Changes() + co.caps.DeliveredChanges(); len(co.undecided) > 0 && changes != co.reevaluatedAt {
		co.reevaluatedAt = changes
		co.undecided = co.reevaluateLocked(ctx, co.undecided)
	}
	if co.lateActivity {
		// An apiserver's stream is late: for the next windows, what its records teach may
		// change verdicts already given without them.
		co.recheckUntil = co.j.now + 3*co.opts.Window.Nanoseconds()
		co.lateActivity = false
	}
	if co.j.now <= co.recheckUntil && co.caps.Changes()+co.caps.DeliveredChanges() != co.recheckedAt {
		co.recheckedAt = co.caps.Changes() + co.caps.DeliveredChanges()
		co.recheckRecentLocked(ctx)
	}
	co.m.open.Set(float64(co.j.Open()))
	co.m.pending.Set(float64(len(co.pending)))
	return false
}

// safeLocked is the position before which nothing is needed any more: neither by a chain in
// memory (open, or final and still amendable by a late record), nor by a final chain still to
// be classified or waiting for the sink, nor by one the sink has not answered for.
func (co *Correlator) safeLocked() spool.Position {
	safe := co.lastEnd
	if p, ok := co.j.SafePosition(); ok && p < safe {
		safe = p
	}
	if len(co.pending) > 0 && co.pendFirst < safe {
		safe = co.pendFirst
	}
	if co.inflight > 0 && co.inflightFirst < safe {
		safe = co.inflightFirst
	}
	// Between the chunks of a Consume, chains Due finalised wait to be classified: neither open
	// nor pending, they still need their records.
	for _, c := range co.due {
		safe = min(safe, c.firstPos)
	}
	return safe
}

func (co *Correlator) finishLocked(ctx context.Context, cs *chainState) {
	if co.j.remnant(cs) {
		cs.silent = true
		return
	}
	prev := co.prevResult(cs)
	// Of the draft only apply's copy of its Chain outlives this call (the classifier's holds
	// for the call), so one draft's memory serves every chain finished.
	ch := &co.finishing
	co.buildInto(ch, cs, true)
	co.classifier.Classify(ch)
	if ch.undecided != "" && co.j.hold(cs) {
		// The verdict waits for evidence: the chain stays open one more window.
		co.m.held.Inc()
		return
	}
	if len(ch.apart) > 0 && cs.final {
		// Records of its auditID that are other requests (no forward joins them): each
		// becomes a chain of its own, judged alone.
		parts := co.j.split(cs, ch.apart)
		co.finishLocked(ctx, cs)
		for _, p := range parts {
			co.finishLocked(ctx, p)
		}
		return
	}
	co.classifier.Learn(ch)
	co.apply(ctx, cs, ch, prev)
	if ch.undecided != "" && !cs.evicted && !cs.waiting {
		// Decided without the evidence it waited for: judged again when the view learns more.
		cs.waiting = true
		co.undecided = append(co.undecided, chainRef{cs.self, cs.gen})
		if len(co.undecided) > maxUndecided {
			if c := co.j.slab.live(co.undecided[0].r, co.undecided[0].gen); c != nil {
				c.waiting = false
			}
			co.undecided = co.undecided[1:]
		}
	}
}

// chainRef names a chain kept beyond the call that found it: its slot, and the slot's
// generation then (a slot is reused once its chain leaves memory).
type chainRef struct {
	r   ref
	gen uint32
}

// prevResult is a copy of the result cs was last finalised with, or nil.
func (co *Correlator) prevResult(cs *chainState) *result {
	if !cs.res.set {
		return nil
	}
	r := cs.res
	return &r
}

// apply makes ch, the classification of cs, its result: counted in the metrics and the
// window (taking back prev, its earlier result, if any) and handed to the sink. It is traced
// when it leaves memory (traceLeaving).
func (co *Correlator) apply(ctx context.Context, cs *chainState, ch *draft, prev *result) {
	// What the window counted of prev is read before its verdict is let go.
	var old tally
	if prev != nil {
		old = co.counted(cs, prev)
	}
	v := verdict{class: ch.Class, findings: ch.Findings, explanation: ch.Explanation}
	counted := tallyOf(ch)
	if ch.remark && prev != nil {
		// The verdict as given, with a finding added: restart noise as it was counted.
		counted.noise = prev.noise
	}
	res := result{verdict: co.j.verdicts.add(hashVerdict(&co.j.h, &v), v), code: ch.Code, entry: -1, peer: -1,
		set: true, resource: counted.resource, noise: counted.noise}
	sides := co.j.sidesOf(cs)
	for i, s := range ch.sides {
		switch s {
		case ch.Entry:
			res.entry = int8(i)
		case ch.Peer:
			res.peer = int8(i)
		}
		// The versions go to the sink with the chain: the API shows the same of it later,
		// whatever the version history learns meanwhile.
		if i < len(sides) {
			v := co.j.str(s.APIServerVersion)
			co.j.strs.release(sides[i].version)
			sides[i].version = v
		}
	}
	// The new verdict is taken before the old is let go, so that an unchanged one stays.
	co.j.verdicts.release(cs.res.verdict)
	cs.res = res
	if prev == nil {
		co.m.count(&ch.Chain)
	} else {
		// Counters cannot take a count back; the reclassification is counted on its own, while
		// the window the gate reads is corrected.
		co.win.count(&old, -1)
		if old.class != ch.Class {
			co.m.reclassified.WithLabelValues(string(old.class), string(ch.Class)).Inc()
		}
	}
	co.win.count(&counted, 1)
	if ch.noiseOf != "" && !ch.remark {
		co.noise.add(ch)
	}
	if cs.evicted {
		co.m.evictions.WithLabelValues(string(ch.Class)).Inc()
	}
	if co.sink != nil {
		if len(co.pending) == 0 || cs.firstPos < co.pendFirst {
			co.pendFirst = cs.firstPos
		}
		co.appendPending(&ch.Chain)
	}
}

// traceLeaving traces a final chain as it leaves memory (Joiner.leaving, and Close for those
// still held): only then is its verdict settled. Tracing it when it first became final would
// give a chain that a late record reclassifies two sets of spans under one trace ID, the
// entry's twice, each with another class; so every chain is traced once, in its final class
// and revision, a late window after it became final. co.mu is held.
func (co *Correlator) traceLeaving(cs *chainState) {
	if co.tracer == nil || !cs.final || !cs.res.set {
		return
	}
	co.tracer.Emit(context.Background(), &co.view(cs).Chain)
}

// counted is what the window counted of cs when it got r.
func (co *Correlator) counted(cs *chainState, r *result) tally {
	v := co.j.verdicts.get(r.verdict)
	return tally{class: v.class, findings: v.findings, code: r.code, resource: r.resource, noise: r.noise,
		first: time.Unix(0, cs.first).Unix()}
}

// Capabilities returns the capability view the correlator learns into.
func (co *Correlator) Capabilities() *Capabilities { return co.caps }
