package correlate

import (
	"context"
	"slices"
)

// Judging final chains again when the capability view learns what their verdicts rested on.

// maxUndecided bounds the final chains kept to be judged again on new evidence.
const maxUndecided = 100_000

// reevaluateLocked judges again the final chains that were decided without the evidence
// they waited for (draft.undecided), now that the capability view has learned more: a
// whole apiserver's stream can arrive later than the wait (its webhook backing off), and
// what it teaches (who serves a resource, whose address an IP is) may change their verdict.
// A chain whose verdict changes is emitted again (rejudgeLocked). A chain leaves the list once
// its evidence is complete, once it is open again (a late record reopened it), or once it is
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
		if ch := co.rejudgeLocked(ctx, cs); ch.undecided == "" {
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
		co.rejudgeLocked(ctx, cs)
	}
}

// rejudgeLocked classifies the final chain cs again with what is known now and, when the
// verdict changes while its records are still one request's (a chain of one side always is),
// emits it again with a higher revision: the window and the metrics follow, as for a chain a
// late record reopened. It returns the new classification.
func (co *Correlator) rejudgeLocked(ctx context.Context, cs *chainState) *draft {
	ch := co.build(cs)
	co.classifier.Classify(ch)
	if v := co.j.verdicts.get(cs.res.verdict); len(ch.apart) == 0 && (ch.Class != v.class || !slices.Equal(ch.Findings, v.findings)) {
		cs.emitted++
		ch.Revision = int(cs.emitted)
		co.m.reevaluated.Inc()
		co.classifier.Learn(ch)
		co.apply(ctx, cs, ch, co.prevResult(cs))
	}
	return ch
}
