package correlate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
)

// Remnants of a replay. After a restart the spool is replayed from the first record of the
// oldest chain the last process held (SafePosition), but a frame holds records of many chains:
// those of a chain that had already left memory (final, stored, past the late window or beyond
// MaxRecent) whose other records lie before that position come again alone. Joined, they would
// make a chain of their own beside the stored one, often with another ID and a verdict of a
// missing side (the HA layout's aggregators disagreed after each one's restart). The last
// process saves, about once a second, how far it had joined (replayEnd: every record before it
// was joined by then) and a horizon: past the latest receipt of any chain that left memory, and
// before the receipts of every chain it still had to store (open, due, pending, with the sink).
// A chain of the replay whose every record lies before replayEnd and whose latest receipt is
// before the horizon was therefore stored whole already: it is kept unseen (silent: neither
// judged, counted, stored nor shown), in case a later record of the replay joins it (a chain the
// last process had stored and then reopened with a late record); then it is judged as any. A
// chain with any record from after replayEnd is new evidence and always judged,
// whatever its receipt times (an agent's backlog can be older than what was joined). A stale
// account only drops less.

// replayState is the file the account is kept in, beside the capability view.
type replayState struct {
	// End is a spool position before which every record was joined when it was saved.
	End spool.Position `json:"end"`
	// Horizon (Unix ns): every chain with all its records before End and its latest receipt
	// before it had been stored, or was still to be and had a later receipt.
	Horizon int64 `json:"horizon"`
}

// replayFileName is the account's file in the state file's directory.
const replayFileName = "replay.json"

// remnant reports whether c, a chain just finalised, is a replayed remnant of a chain stored
// whole by the last process. A watch still running is never (one the window ended is judged):
// the account does not wait for running watches, whose completion, when it comes, is new.
func (j *Joiner) remnant(c *chainState) bool {
	return !c.fresh && c.last < j.horizon && !j.watching(c)
}

// horizonLocked is the horizon of the account saved now: past every chain that left memory,
// before every chain not yet stored. Running watches, never remnants, do not hold it back (a
// running watch keeps its old receipt for as long as it runs), nor does a chain of this
// process's replay that the last account already found stored whole (a remnant still open).
// The chains in memory are walked at most every walkEvery unless forced; between walks the last
// walk's bound and the chains joined since stand for them: a chain's latest receipt only grows,
// and one that came or began to count since was joined a record, so the horizon is never later
// than a walk would find, at most walkEvery earlier.
func (co *Correlator) horizonLocked(force bool) int64 {
	if force || co.horizonWalkedAt.IsZero() || co.now().Sub(co.horizonWalkedAt) >= walkEvery {
		co.horizonWalked, co.horizonWalkedAt = co.walkHorizonLocked(), co.now()
		co.j.touchedLast = math.MaxInt64
	}
	return min(co.j.departedLast+1, co.horizonWalked, co.j.touchedLast)
}

// walkEvery bounds how often the account walks every chain in memory (about 150,000 at 10,000
// events/s: each a cache miss, the walk a few milliseconds).
const walkEvery = 10 * time.Second

// walkHorizonLocked is the earliest latest receipt of the chains in memory not yet stored that
// hold the horizon back (math.MaxInt64 when none does).
func (co *Correlator) walkHorizonLocked() int64 {
	h := int64(math.MaxInt64)
	counts := func(c *chainState) bool {
		return c != nil && !co.j.remnant(c) && !co.j.watching(c)
	}
	for r := co.j.lru.head; r != 0; {
		c := co.j.at(r)
		r = c.next
		if counts(c) {
			h = min(h, c.last)
		}
	}
	for _, c := range co.due {
		if counts(c) {
			h = min(h, c.last)
		}
	}
	for i := range co.pending {
		h = horizonBefore(h, &co.pending[i])
	}
	if co.inflight > 0 {
		h = min(h, co.inflightLast)
	}
	return h
}

// horizonBefore is h, lowered to before ch, a final chain not yet stored.
func horizonBefore(h int64, ch *chain.Chain) int64 {
	return min(h, ch.LastReceived.UnixNano())
}

// saveReplayLocked writes the account, at most once a second unless forced.
func (co *Correlator) saveReplayLocked(force bool) {
	if co.stateFile == "" || (!force && co.now().Sub(co.lastReplaySave) < saveEvery) {
		return
	}
	st := replayState{End: co.lastEnd, Horizon: co.horizonLocked(force)}
	if st.End < co.j.replayEnd {
		// This replay has not yet reached where the last account ended: that account holds for
		// what lies between, and this process knows nothing later of it.
		st.End, st.Horizon = co.j.replayEnd, min(st.Horizon, co.j.horizon)
	}
	b, err := json.Marshal(st)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(co.stateFile), 0o750)
	}
	if err == nil {
		err = fsutil.WriteFileAtomic(filepath.Join(filepath.Dir(co.stateFile), replayFileName), b)
	}
	if err != nil {
		co.log.Warn("correlate: saving the replay account (a replay after a restart may then judge remnants of stored chains again)", "err", err)
		return
	}
	co.lastReplaySave = co.now()
}

// loadReplay reads the last process's account; without one, or with one past spoolEnd (the
// spool was made anew), nothing is dropped.
func (co *Correlator) loadReplay(spoolEnd spool.Position) error {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(co.stateFile), replayFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var st replayState
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return fmt.Errorf("correlate: replay account: %w", err)
	}
	if st.End > spoolEnd {
		co.log.Warn("correlate: the replay account reaches past the spool's end: kept for another spool, ignored", "end", st.End, "spool_end", spoolEnd)
		return nil
	}
	co.j.replayEnd, co.j.horizon = st.End, st.Horizon
	// What the last account says was stored holds for this process's accounts too: restarts a
	// few seconds apart, before any chain of their own left memory, still drop the remnants.
	co.j.departedLast = max(co.j.departedLast, st.Horizon-1)
	if st.Horizon > 1 {
		co.log.Info("correlate: the replay leaves unseen the remnants of chains stored whole", "before_position", st.End, "last_received_before", time.Unix(0, st.Horizon).UTC())
	}
	return nil
}
