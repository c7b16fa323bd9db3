// Package correlate rebuilds what happened to each request during a mixed-version window: it
// joins the records that every apiserver wrote of one request (same auditID, same request,
// close in time) into a chain, decides which apiserver got the client's call (the entry) and
// which served it (the peer), classifies the chain (local, proxied, proxy_failed,
// misleading_404, broken, loop, internal) and notes findings (identity mismatch, flattened
// impersonation, status mismatch, a missing side).
//
// Data flow: the spool delivers frames to the Correlator (a spool.Consumer), which feeds their
// records to the Joiner; chains whose window has passed are classified by the Classifier,
// counted in metrics and handed to the Sink (the store), and traced once their verdict is settled
// (when they leave memory, a late window later).
package correlate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
	"github.com/peertrail/peertrail/metrics"
)

// ConsumerName is the correlator's spool consumer name.
const ConsumerName = "correlate"

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
	WriteChains(ctx context.Context, chains []Chain) error
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
	freeSides []*Side
	sidesOut  []*Side // takeSides' list (under flushMu)
	// versionErrors counts, per apiserver, its loopback requests without a parseable version;
	// reportedAgents are the (apiserver, user agent) pairs already logged.
	versionErrors  *prometheus.CounterVec
	reportedAgents map[string]struct{}

	stateFile    string
	lastSave     time.Time
	savedChanges uint64
	savedSafe    spool.Position

	// flushMu serialises the hand-over of final chains to the sink, which runs without mu
	// (see flush); it is taken before mu, never while holding it.
	flushMu sync.Mutex

	mu sync.Mutex
	j  *Joiner
	// pending are final chains not yet handed to the sink; pendFirst is the lowest spool
	// position of their first records (meaningful while pending is not empty).
	pending   []Chain
	pendFirst spool.Position
	// spare is the memory of a batch the sink took, for the next pending chains: grown anew
	// for every second's batch, pending was a quarter of what the process allocated.
	spare []Chain
	// due are chains Due finalised that are still to be classified (finishDueLocked).
	due []*chainState
	// inflight chains are with the sink now (flush): until it answers, the committed position
	// stays before inflightFirst.
	inflight      int
	inflightFirst spool.Position
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
	// StateFile keeps the capability view across restarts ("" keeps it in memory only).
	StateFile string
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
	co := &Correlator{
		opts: cfg.Join, codec: cfg.Codec, classifier: cfg.Classifier, caps: cfg.Caps, sink: cfg.Sink,
		tracer: cfg.Tracer, log: cfg.Log, m: newCorrelateMetrics(), now: time.Now, maxPending: cfg.MaxPending, flushBatch: defaultFlushBatch, flushEvery: defaultFlushEvery,
		j: NewJoiner(cfg.Join), stateFile: cfg.StateFile, intern: record.NewInterner(),
		versionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.APIServerVersionUnparseableTotal,
			Help: "Loopback requests of the apiserver whose user agent named no version peertrail could parse.",
		}, []string{metrics.LabelAPIServer}),
		reportedAgents: map[string]struct{}{},
	}
	co.j.leaving = co.traceLeaving
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
	}
	return co
}

// flushDue reports whether Consume should hand the pending chains to the sink now: when asked
// to (the spool is idle, or a burst's chains are being closed a flushBatch at a time), when a
// batch is full, or flushEvery after the last time. Each insert makes a part of the chains
// table and of every view on it for the engine to merge: handing over at every Consume made
// eleven inserts a second of 400 chains at 10,000 events/s, which took the engine 75% of the
// wall time, against 20% for the events' one insert a second of twice as many rows.
func (co *Correlator) flushDue(now bool) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	n := len(co.pending)
	if n == 0 {
		return false
	}
	t := co.now()
	if now || n >= co.flushBatch || n >= co.maxPending || t.Sub(co.lastFlush) >= co.flushEvery || t.Before(co.lastFlush) ||
		co.j.now-co.lastFlushStream >= co.flushEvery.Nanoseconds() {
		// Stream time counts too: a replay runs through minutes of it in a second, and a
		// chain must reach the store before the late window lets it leave memory.
		co.lastFlush, co.lastFlushStream = t, co.j.now
		return true
	}
	return false
}

// defaultFlushEvery is Correlator.flushEvery: how long final chains may wait for the sink while
// records keep coming (the chain API and the gate read them from memory meanwhile).
const defaultFlushEvery = time.Second

// defaultFlushBatch is Correlator.flushBatch: 50,000 chains are about 65 MB as Chain values,
// and one insert of the store. Each insert costs the store about a second beside its rows
// (measured in peertrail bench: 10,000 a batch wrote a burst's chains at half the rate of
// one insert of them all).
const defaultFlushBatch = 50_000

// maxSpareChains bounds the batch whose memory is kept for the next (520 bytes a chain): a
// second's chains at tens of thousands of events a second, not a burst's.
const maxSpareChains = 16_384

// saveEvery bounds how often the capability view is written.
const saveEvery = time.Second

// checkpointLocked returns the position the spool may commit, saving the capability view when
// it changed: a committed position must never run ahead of the saved view, or a crash would
// lose what the skipped records taught.
func (co *Correlator) checkpointLocked(safe spool.Position, force bool) spool.Position {
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
	return err
}

// Consume implements spool.Consumer. It joins and classifies under co.mu, then hands the
// chains that became final to the sink without it (flush), and returns the position the
// spool may commit: before the first record of every open chain and of every chain the sink
// has not taken.
func (co *Correlator) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	idle := len(entries) == 0
	co.mu.Lock()
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
			if ev := co.j.Add(r, e.Pos); ev != nil {
				co.finishLocked(ctx, ev)
			}
		}
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
		if cs == nil || !cs.final || !cs.res.set || slices.Contains(co.j.verdicts.get(cs.res.verdict).findings, FindingAuditIDReused) {
			continue
		}
		prev := co.prevResult(cs)
		ch := co.view(cs)
		ch.Findings = append(ch.Findings, FindingAuditIDReused)
		ch.Explanation += fmt.Sprintf("; other requests carried its auditID too (a client may set its own Audit-ID): every chain of the auditID is listed with it (%s)", FindingAuditIDReused)
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

// noteServer learns an apiserver's version, process and address from its own loopback
// requests (isLoopback), whatever its binary is called: the version from the user agent
// (AgentVersion), the process from the loopback identity's UID, which a real apiserver makes
// up afresh at every start (measured: in test/testdata/real/peer-stopped, kas-c restarted into
// the same v1.36.3 and its loopback UID went from 63b0c382-... to 423d4b6a-...). Every stage
// counts, at the time the request was received: a new process's first requests are its
// informers' initial watches, before it serves anyone, and a policy may omit any stage but
// ResponseComplete. A user agent without a version that parses is counted and logged, once
// per apiserver and agent, never silently skipped.
func (co *Correlator) noteServer(r *record.Record) {
	if !isLoopback(r) {
		return
	}
	at := r.RequestReceivedTimestamp
	if at.IsZero() {
		at = r.StageTimestamp
	}
	v, err := AgentVersion(r.UserAgent)
	if err != nil {
		co.reportAgent(r, err)
	}
	addr := ""
	if len(r.SourceIPs) > 0 {
		addr = r.SourceIPs[0]
	}
	co.caps.Note(r.APIServer, Sighting{Version: v, Process: r.UserUID, Address: addr, At: at})
}

// noteActivity records the stretch of time a frame's records cover in their apiserver's
// stream (a frame is one webhook batch, from one apiserver), by the records' own times: the
// gaps between such stretches are when the apiserver was down (peer_down). It also notes the
// earliest successful answer to anyone but the apiserver itself, overall and since its
// current process started: when a restarted process began to serve (entry_starting).
func (co *Correlator) noteActivity(recs []record.Record) {
	var from, to, served, servedNow time.Time
	var current, written, last time.Time
	name := ""
	flush := func() {
		if name == "" {
			return
		}
		co.caps.NoteDelivered(name, written, last)
		// Late is judged by when the records were written: a long request's (a watch's)
		// record is received as it ends, its RequestReceived minutes old in a stream on time.
		if !written.IsZero() && written.UnixNano() < co.j.now-co.opts.Window.Nanoseconds() {
			co.lateActivity = true
		}
		co.caps.NoteActivity(name, from, to)
		co.caps.NoteServing(name, served)
		if !servedNow.IsZero() && !servedNow.Equal(served) {
			co.caps.NoteServing(name, servedNow)
		}
	}
	for i := range recs {
		r := &recs[i]
		if r.APIServer != name {
			flush()
			from, to, served, servedNow, written, last = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
			name = r.APIServer
			current, _ = co.caps.StartedAt(name, r.StageTimestamp)
		}
		if at := r.StageTimestamp; !at.IsZero() && (written.IsZero() || at.Before(written)) {
			written = at
		}
		if r.StageTimestamp.After(last) {
			last = r.StageTimestamp
		}
		for _, at := range []time.Time{r.RequestReceivedTimestamp, r.StageTimestamp} {
			if at.IsZero() {
				continue
			}
			if from.IsZero() || at.Before(from) {
				from = at
			}
			if at.After(to) {
				to = at
			}
		}
		if r.Code >= 200 && r.Code < 300 && r.UserName != userAPIServer && !r.RequestReceivedTimestamp.IsZero() {
			at := r.RequestReceivedTimestamp
			if served.IsZero() || at.Before(served) {
				served = at
			}
			if !at.Before(current) && (servedNow.IsZero() || at.Before(servedNow)) {
				servedNow = at
			}
		}
	}
	flush()
}

// maxReportedAgents bounds the (apiserver, user agent) pairs logged as unparseable; past it
// they are only counted.
const maxReportedAgents = 64

// reportAgent counts a loopback request whose user agent gave no version (once per request:
// at its final stage) and logs each apiserver's such agent the first time.
func (co *Correlator) reportAgent(r *record.Record, err error) {
	if r.Stage == "RequestReceived" || r.Stage == "ResponseStarted" {
		return
	}
	co.versionErrors.WithLabelValues(r.APIServer).Inc()
	key := r.APIServer + "\x00" + r.UserAgent
	if _, done := co.reportedAgents[key]; done || len(co.reportedAgents) > maxReportedAgents {
		return
	}
	co.reportedAgents[key] = struct{}{}
	msg := "correlate: an apiserver's own request names no version peertrail can parse; its version and the skew check do not follow it (its restarts still do, by its loopback UID)"
	if len(co.reportedAgents) > maxReportedAgents {
		msg += " (further such user agents are only counted in " + metrics.APIServerVersionUnparseableTotal + ")"
	}
	co.log.Warn(msg, "apiserver", r.APIServer, "user_agent", r.UserAgent, "uid", r.UserUID, "err", err)
}

// safeLocked is the position before which nothing is needed any more: neither by an open
// chain, nor by a final chain still to be classified or waiting for the sink, nor by one the
// sink has not answered for.
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
	prev := co.prevResult(cs)
	// Of the Chain only apply's copy outlives this call (the classifier's holds for the call),
	// so one Chain's memory serves every chain finished; a new one each was about a ninth of all
	// the process allocated at a steady rate.
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

// maxUndecided bounds the final chains kept to be judged again on new evidence.
const maxUndecided = 100_000

// reevaluateLocked judges again the final chains that were decided without the evidence
// they waited for (draft.undecided), now that the capability view has learned more: a
// whole apiserver's stream can arrive later than the wait (its webhook backing off), and
// what it teaches (who serves a resource, whose address an IP is) may change their verdict.
// A chain whose verdict changes is emitted again with a higher revision, and the window and
// metrics follow, as for a chain a late record reopened. A chain leaves the list once its
// evidence is complete, once it is open again (a late record reopened it), or once it is
// older than the late window.
func (co *Correlator) reevaluateLocked(ctx context.Context, list []chainRef) []chainRef {
	late := co.opts.LateWindow.Nanoseconds()
	keep := list[:0]
	for _, cr := range list {
		cs := co.j.slab.live(cr.r, cr.gen)
		if cs == nil {
			continue // it has left memory
		}
		if !cs.final || !cs.res.set || cs.last < co.j.now-late {
			cs.waiting = false
			continue
		}
		ch := co.build(cs)
		co.classifier.Classify(ch)
		if v := co.j.verdicts.get(cs.res.verdict); len(ch.apart) == 0 && (ch.Class != v.class || !slices.Equal(ch.Findings, v.findings)) {
			cs.emitted++
			ch.Revision = int(cs.emitted)
			co.m.reevaluated.Inc()
			co.classifier.Learn(ch)
			co.apply(ctx, cs, ch, co.prevResult(cs))
		}
		if ch.undecided == "" {
			cs.waiting = false
			continue
		}
		keep = append(keep, cr)
	}
	return keep
}

// recheckRecentLocked judges again every recent final chain recorded by one apiserver
// alone (within the late window): their verdicts rest on what the view knows of the others,
// which a late stream changes. Only while a stream is late (recheckUntil), so the common case
// costs nothing.
func (co *Correlator) recheckRecentLocked(ctx context.Context) {
	late := co.opts.LateWindow.Nanoseconds()
	for r := co.j.done.head; r != 0; {
		cs := co.j.at(r)
		r = cs.next
		if cs.nsides != 1 || !cs.res.set || cs.last < co.j.now-late {
			continue
		}
		ch := co.build(cs)
		co.classifier.Classify(ch)
		if v := co.j.verdicts.get(cs.res.verdict); ch.Class != v.class || !slices.Equal(ch.Findings, v.findings) {
			cs.emitted++
			ch.Revision = int(cs.emitted)
			co.m.reevaluated.Inc()
			co.classifier.Learn(ch)
			co.apply(ctx, cs, ch, co.prevResult(cs))
		}
	}
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
		if co.pending == nil {
			co.pending, co.spare = co.spare, nil
		}
		co.pending = append(co.pending, ch.Chain)
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

// flush hands the pending chains to the sink, flushBatch at a time. co.mu is not held while
// the sink writes, so a slow store holds up only the goroutine that calls Consume (and so the
// spool, whose lag shows it), never the chain API or /metrics; the chains stay counted in
// safeLocked (inflight) until the sink has taken them. A failed batch goes back in front of
// what became pending meanwhile and is offered again by the next flush.
func (co *Correlator) flush(ctx context.Context) error {
	if co.sink == nil {
		return nil
	}
	co.flushMu.Lock()
	defer co.flushMu.Unlock()
	for {
		if done, err := co.flushBatchOf(ctx); done || err != nil {
			return err
		}
	}
}

// flushBatchOf hands the first flushBatch pending chains to the sink; done says nothing was
// pending. While some stay pending, pendFirst is left as it was (the lowest of them all, so
// at most too low: the committed position only lags).
func (co *Correlator) flushBatchOf(ctx context.Context) (done bool, err error) {
	co.mu.Lock()
	n := min(len(co.pending), co.flushBatch)
	if n == 0 {
		co.mu.Unlock()
		return true, nil
	}
	batch, first := co.pending[:n:n], co.pendFirst
	// whole is the pending chains' memory when the batch takes all of them: kept for the next
	// whole, rather than just the batch's length of it, so that a second with a few more
	// chains than the last does not grow a new slice (a sixth of what serve allocated).
	var whole []Chain
	if all := co.pending; len(all) == n {
		whole = all[:0]
	}
	if co.pending = co.pending[n:]; len(co.pending) == 0 {
		co.pending = nil
	}
	co.inflight, co.inflightFirst = n, first
	co.m.pending.Set(float64(n + len(co.pending)))
	co.mu.Unlock()

	err = co.sink.WriteChains(ctx, batch)
	keep := err == nil && n <= maxSpareChains
	var sides []*Side
	if keep {
		// The sink is done with them: the sides serve the next chains, the rest is garbage.
		sides = co.takeSides(batch)
		clear(batch)
	}

	co.mu.Lock()
	defer co.mu.Unlock()
	co.inflight = 0
	if keep {
		mem := batch[:0]
		if whole != nil && cap(whole) <= maxSpareChains {
			mem = whole[:0]
		}
		if cap(co.spare) < cap(mem) {
			co.spare = mem
		}
	}
	if room := maxFreeSides - len(co.freeSides); room > 0 {
		co.freeSides = append(co.freeSides, sides[:min(room, len(sides))]...)
	}
	clear(sides)
	if err != nil {
		co.m.sinkErrors.Inc()
		if len(co.pending) > 0 {
			first = min(first, co.pendFirst)
		}
		co.pending, co.pendFirst = append(batch, co.pending...), first
	}
	co.m.pending.Set(float64(len(co.pending)))
	return false, err
}

// maxFreeSides bounds the sides kept to build chains in (Correlator.freeSides): two flushes'
// worth at a steady 10,000 events a second, 5 MB.
const maxFreeSides = 16_384

// takeSides returns the sides of the chains (which the sink has taken), cleared, in a list
// whose memory is reused: every side a chain was built with has a role (Entry, Peer or one of
// Others) once it is final. It runs without co.mu: only the flush that holds the chains sees
// them.
func (co *Correlator) takeSides(chains []Chain) []*Side {
	out := co.sidesOut[:0]
	take := func(s *Side) bool {
		if s == nil {
			return true
		}
		if len(out) == maxFreeSides {
			return false
		}
		*s = Side{}
		out = append(out, s)
		return true
	}
all:
	for i := range chains {
		c := &chains[i]
		if !take(c.Entry) || c.Peer != c.Entry && !take(c.Peer) {
			break
		}
		for _, s := range c.Others {
			if !take(s) {
				break all
			}
		}
	}
	co.sidesOut = out
	return out
}

// counted is what the window counted of cs when it got r.
func (co *Correlator) counted(cs *chainState, r *result) tally {
	v := co.j.verdicts.get(r.verdict)
	return tally{class: v.class, findings: v.findings, code: r.code, resource: r.resource, noise: r.noise,
		first: time.Unix(0, cs.first).Unix()}
}

// build turns a chain's state into a draft with its sides in arrival order and no roles.
// The draft is the classifier's and the API's own: its slices and maps are shared with the
// joiner's tables, and nobody changes them.
func (co *Correlator) build(cs *chainState) *draft {
	ch := new(draft)
	co.buildInto(ch, cs, false)
	return ch
}

// buildInto is build into ch's memory, all of which it sets; with recycled, its sides are
// built in freeSides while there are any (only for a chain that goes nowhere but the sink).
func (co *Correlator) buildInto(ch *draft, cs *chainState, recycled bool) {
	j := co.j
	t := j.targetOf(cs)
	*ch = draft{
		Chain: Chain{
			ID: j.chainID(cs), AuditID: j.auditID(cs), State: StateOpen,
			Verb: t.verb, RequestURI: j.text(cs.uri), Group: t.group, Version: t.version, Resource: t.resource,
			Subresource: t.subres, Namespace: t.ns, Name: j.chainName(cs),
			FirstReceived: time.Unix(0, cs.first).UTC(), LastReceived: time.Unix(0, cs.last).UTC(),
			Records: int(cs.records), Revision: int(cs.emitted), Evicted: cs.evicted,
		},
		reused: cs.reuse&reuseDropped != 0, shared: cs.reuse&reuseShared != 0, split: cs.reuse&reuseSplit != 0,
		streamNow: time.Unix(0, j.now).UTC(),
	}
	if cs.final {
		ch.State = StateFinal
	}
	sides := j.sidesOf(cs)
	ch.sides = make([]*Side, 0, len(sides))
	for i := range sides {
		s := &sides[i]
		var side *Side
		if n := len(co.freeSides); recycled && n > 0 {
			side, co.freeSides[n-1] = co.freeSides[n-1], nil
			co.freeSides = co.freeSides[:n-1]
		} else {
			side = new(Side)
		}
		*side = Side{
			APIServer: j.text(s.apiserver), Code: s.code, SourceIPs: *j.addrs.get(s.sourceIPs), UserAgent: j.text(s.userAgent),
			HasObjects: s.hasObjects, Stages: stageSets[s.stages&stageAll],
			Message: j.text(s.message), Reason: j.text(s.reason),
			RequestReceived: microTime(s.rr), Completed: microTime(s.done),
		}
		if s.user != 0 {
			u := j.ids.get(s.user)
			side.User, side.UID, side.Groups, side.Extra = u.name, u.uid, u.groups, u.extra
		}
		if s.imp != 0 {
			u := j.ids.get(s.imp)
			side.ImpersonatedUser, side.ImpersonatedGroups, side.ImpersonatedExtra = u.name, u.groups, u.extra
		}
		// The version of the process that received the request, so that the store credits
		// what each version served or forwarded to it, also in the minute of a restart.
		at := side.RequestReceived
		if at.IsZero() {
			at = side.Completed
		}
		if at.IsZero() {
			at = ch.FirstReceived
		}
		side.APIServerVersion = co.caps.VersionAt(side.APIServer, at)
		ch.sides = append(ch.sides, side)
	}
	if cs.reuse&reuseShared != 0 {
		// The apiservers that recorded its auditID in its other chains: a peer or an entry
		// with a record of the ID is not one whose stream shows it had none.
		id := j.auditID(cs)
		for at := j.chains.get(&j.slab, cs.key); at != 0; {
			o := j.at(at)
			at = o.sameID
			// A part split from this one was judged no side of its request.
			if o == cs || !j.sameAudit(o, id, cs.uuid) || cs.reuse&reuseSplit != 0 && o.reuse&reuseSplit != 0 {
				continue
			}
			for _, s := range j.sidesOf(o) {
				if name := j.text(s.apiserver); !slices.Contains(ch.elsewhere, name) {
					ch.elsewhere = append(ch.elsewhere, name)
				}
			}
		}
	}
}

func microTime(us int64) time.Time {
	if us <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// stageSets are the stage lists of every set of stage bits, made once: a Side's list is
// shared with every other of the same stages (nobody changes a chain's lists).
var stageSets = func() (sets [stageAll + 1][]string) {
	for bits := range sets {
		sets[bits] = stageNames(uint8(bits))
	}
	return sets
}()

func stageNames(bits uint8) []string {
	var out []string
	for _, s := range []struct {
		bit  uint8
		name string
	}{{stageReceived, "RequestReceived"}, {stageStarted, "ResponseStarted"}, {stageComplete, "ResponseComplete"}, {stagePanic, "Panic"}, {stageOther, "Other"}} {
		if bits&s.bit != 0 {
			out = append(out, s.name)
		}
	}
	return out
}

// view returns the chain as the API shows it: final chains as they were classified, open ones
// classified provisionally with what is known now.
func (co *Correlator) view(cs *chainState) *draft {
	ch := co.build(cs)
	res := &cs.res
	if !res.set || !cs.final {
		co.classifier.Classify(ch)
		return ch
	}
	v := co.j.verdicts.get(res.verdict)
	ch.Class, ch.Findings, ch.Explanation = v.class, slices.Clone(v.findings), v.explanation
	sides := co.j.sidesOf(cs)
	for i, s := range ch.sides {
		s.APIServerVersion = co.j.text(sides[i].version) // as given to the sink (apply)
		switch int8(i) {
		case res.entry:
			ch.Entry = s
		case res.peer:
			ch.Peer = s
		default:
			ch.Others = append(ch.Others, s)
		}
	}
	fillDerived(&ch.Chain)
	return ch
}

// views returns cs as the API shows it (view): one chain, or, for an open chain whose records
// are more than one request (draft.apart), the chains the correlator will split it into.
func (co *Correlator) views(cs *chainState) []*draft {
	ch := co.view(cs)
	if len(ch.apart) == 0 {
		return []*draft{ch}
	}
	moved := map[int]bool{}
	for _, g := range ch.apart {
		for _, i := range g {
			moved[i] = true
		}
	}
	var first []int
	for i := range ch.sides {
		if !moved[i] {
			first = append(first, i)
		}
	}
	sides := co.j.sidesOf(cs)
	out := make([]*draft, 0, 1+len(ch.apart))
	for _, g := range append([][]int{first}, ch.apart...) {
		part := co.build(cs)
		own := make([]*Side, 0, len(g))
		for _, i := range g {
			own = append(own, part.sides[i])
		}
		part.sides, part.ID = own, co.j.chainIDOf(cs, &sides[g[0]])
		part.split, part.shared = true, true
		co.classifier.Classify(part)
		out = append(out, part)
	}
	return out
}

// Chain returns the most recent chain with auditID, open or recently final (see Chains).
func (co *Correlator) Chain(auditID string) (*Chain, bool) {
	all := co.Chains(auditID)
	if len(all) == 0 {
		return nil, false
	}
	return all[len(all)-1], true
}

// Chains returns every chain with auditID in memory, open or recently final, oldest first (by
// first receipt, then request time, then ID; the store's order): more than one when clients
// gave one Audit-ID to several requests.
func (co *Correlator) Chains(auditID string) []*Chain {
	co.mu.Lock()
	defer co.mu.Unlock()
	var out []*Chain
	for _, cs := range co.j.lookup(auditID) {
		for _, d := range co.views(cs) {
			out = append(out, &d.Chain)
		}
	}
	SortChains(out)
	return out
}

// SortChains orders chains oldest first: by first receipt, then request time, then ID.
func SortChains(chains []*Chain) {
	slices.SortStableFunc(chains, func(a, b *Chain) int {
		if c := a.FirstReceived.Compare(b.FirstReceived); c != 0 {
			return c
		}
		if c := a.requestTime().Compare(b.requestTime()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Filter selects chains for List.
type Filter struct {
	Class     Class
	Finding   Finding
	APIServer string // entry or peer
	Since     time.Time
	Limit     int
}

// List returns the chains in memory (open, then recently final, newest first) that match f.
func (co *Correlator) List(f Filter) []*Chain {
	co.mu.Lock()
	defer co.mu.Unlock()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var out []*Chain
	co.j.each(func(cs *chainState) bool {
		if !f.Since.IsZero() && cs.last < f.Since.UnixNano() {
			return true
		}
		if f.APIServer != "" && co.j.side(cs, f.APIServer) == nil {
			return true
		}
		for _, ch := range co.views(cs) {
			if f.Class != "" && ch.Class != f.Class || f.Finding != "" && !ch.HasFinding(f.Finding) ||
				f.APIServer != "" && !hasSide(ch, f.APIServer) {
				continue
			}
			if out = append(out, &ch.Chain); len(out) == f.Limit {
				return false
			}
		}
		return true
	})
	return out
}

// hasSide reports whether apiserver recorded ch's request.
func hasSide(ch *draft, apiserver string) bool {
	for _, s := range ch.sides {
		if s.APIServer == apiserver {
			return true
		}
	}
	return false
}

// Capabilities returns the capability view the correlator learns into.
func (co *Correlator) Capabilities() *Capabilities { return co.caps }
