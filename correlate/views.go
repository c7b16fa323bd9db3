package correlate

import (
	"slices"

	"github.com/peertrail/peertrail/chain"
)

// The chains in memory as the chain API reads them: open ones classified provisionally with
// what is known now, final ones as they were given.

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
	if cs.silent {
		return nil // a replayed remnant: the store has its chain
	}
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
		own := make([]*chain.Side, 0, len(g))
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
func (co *Correlator) Chain(auditID string) (*chain.Chain, bool) {
	all := co.Chains(auditID)
	if len(all) == 0 {
		return nil, false
	}
	return all[len(all)-1], true
}

// Chains returns every chain with auditID in memory, open or recently final, oldest first (by
// first receipt, then request time, then ID; the store's order): more than one when clients
// gave one Audit-ID to several requests.
func (co *Correlator) Chains(auditID string) []*chain.Chain {
	co.mu.Lock()
	defer co.mu.Unlock()
	var out []*chain.Chain
	for _, cs := range co.j.lookup(auditID) {
		for _, d := range co.views(cs) {
			out = append(out, &d.Chain)
		}
	}
	chain.SortChains(out)
	return out
}

// List returns the chains in memory (open, then recently final, newest first) that match f.
func (co *Correlator) List(f chain.Filter) []*chain.Chain {
	co.mu.Lock()
	defer co.mu.Unlock()
	if f.Limit <= 0 {
		f.Limit = 100
	}
	var out []*chain.Chain
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
