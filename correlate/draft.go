package correlate

import (
	"slices"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// draft is a chain as the correlator builds and judges it: the Chain it hands on (to the sink,
// the API, the tracer) and the working state the classifier and the correlator share, which
// never leaves the package. A draft is the caller's, valid for one call (see Classifier).
type draft struct {
	chain.Chain

	// sides are every apiserver's view in arrival order, before roles are assigned.
	sides []*chain.Side
	// reused: records of the chain's auditID were dropped against it; shared: other
	// requests' chains had its auditID; split: it was split from another apiserver's records
	// of its auditID that were no forward of it, and teaches nothing (all FindingAuditIDReused).
	reused, shared, split bool
	// elsewhere are the apiservers that recorded its auditID in its other chains in memory.
	elsewhere []string
	// apart, when Classify sets it, lists the sides (indexes into sides) that are other
	// requests than the first side's: no evidence of a forward joins them to it. The
	// correlator splits them off (Joiner.split).
	apart [][]int
	// collapsed says that its entry's and its peer's sourceIPs are the same: the client's
	// address is the entry's own (a client on the entry's host), a shape such a client can
	// give two requests of its own with one Audit-ID.
	collapsed bool
	// remark says that the chain is its verdict as given, with a finding added
	// (Correlator.markSharedLocked): the window counts its restart noise as before.
	remark bool
	// streamNow is the correlator's stream time when the chain was classified (for DownAt).
	streamNow time.Time
	// undecided names, when Classify set it, the fact the verdict waits for: the class is
	// the one that claims no fault, taken if the fact is still unknown when the wait ends.
	undecided string
	// noiseOf and noiseSince name the apiserver and the start of the restart (its process
	// start, or its silence) that a noise finding blames.
	noiseOf    string
	noiseSince time.Time
}

// gvr is the draft's group/version/resource.
func (d *draft) gvr() chain.GVR {
	return chain.GVR{Group: d.Group, Version: d.Version, Resource: d.Resource}
}

// when is the time the draft's request was made, for capability lookups: the first side in
// arrival order that has one.
func (d *draft) when() time.Time {
	for _, s := range d.sides {
		if !s.RequestReceived.IsZero() {
			return s.RequestReceived
		}
	}
	return d.RequestTime()
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
		Chain: chain.Chain{
			ID: j.chainID(cs), AuditID: j.auditID(cs), State: chain.StateOpen,
			Verb: t.verb, RequestURI: j.text(cs.uri), Group: t.group, Version: t.version, Resource: t.resource,
			Subresource: t.subres, Namespace: t.ns, Name: j.chainName(cs),
			FirstReceived: time.Unix(0, cs.first).UTC(), LastReceived: time.Unix(0, cs.last).UTC(),
			Records: int(cs.records), Revision: int(cs.emitted), Evicted: cs.evicted,
		},
		reused: cs.reuse&reuseDropped != 0, shared: cs.reuse&reuseShared != 0, split: cs.reuse&reuseSplit != 0,
		streamNow: time.Unix(0, j.now).UTC(),
	}
	if cs.final {
		ch.State = chain.StateFinal
	}
	sides := j.sidesOf(cs)
	ch.sides = make([]*chain.Side, 0, len(sides))
	for i := range sides {
		s := &sides[i]
		var side *chain.Side
		if n := len(co.freeSides); recycled && n > 0 {
			side, co.freeSides[n-1] = co.freeSides[n-1], nil
			co.freeSides = co.freeSides[:n-1]
		} else {
			side = new(chain.Side)
		}
		*side = chain.Side{
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
