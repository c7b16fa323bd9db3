package correlate

import "time"

// draft is a chain as the correlator builds and judges it: the Chain it hands on (to the sink,
// the API, the tracer) and the working state the classifier and the correlator share, which
// never leaves the package. A draft is the caller's, valid for one call (see Classifier).
type draft struct {
	Chain

	// sides are every apiserver's view in arrival order, before roles are assigned.
	sides []*Side
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

// when is the time the draft's request was made, for capability lookups: the first side in
// arrival order that has one.
func (d *draft) when() time.Time {
	for _, s := range d.sides {
		if !s.RequestReceived.IsZero() {
			return s.RequestReceived
		}
	}
	return d.requestTime()
}
