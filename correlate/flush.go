package correlate

import (
	"context"
	"math"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// Handing final chains to the sink: in batches, at most once a second while records come,
// outside the correlator's lock.

// flushDue reports whether Consume should hand the pending chains to the sink now: when asked
// to (the spool is idle, or a burst's chains are being closed a flushBatch at a time), when a
// batch is full, when the pending chains fill the memory a flush keeps for the next
// (maxSpareChains: at high rates every flush reuses it, rather than wait flushEvery for more
// and allocate it anew), or flushEvery after the last time. Few large inserts, not one per Consume:
// each makes a part of the chains table and of every view on it for the engine to merge
// (BENCHMARKS.md, "The chains went to the store at every Consume").
func (co *Correlator) flushDue(now bool) bool {
	co.mu.Lock()
	defer co.mu.Unlock()
	n := len(co.pending)
	if n == 0 {
		return false
	}
	t := co.now()
	if now || n >= co.flushBatch || n >= flushAtChains || n >= co.maxPending || t.Sub(co.lastFlush) >= co.flushEvery || t.Before(co.lastFlush) ||
		co.j.now-co.lastFlushStream >= co.flushEvery.Nanoseconds() {
		// Stream time counts too: a replay runs through minutes of it in a second, and a
		// chain must reach the store before the late window lets it leave memory.
		co.lastFlush, co.lastFlushStream = t, co.j.now
		return true
	}
	return false
}

// defaultFlushEvery is Correlator.flushEvery unless Config.FlushEvery: how long final chains
// may wait for the sink while records keep coming (the chain API and the gate read them from
// memory meanwhile). Fifteen seconds, as the events writer's flush: each insert makes a part of
// the chains table and of its five views for the engine to merge (store migration 0013).
const defaultFlushEvery = 15 * time.Second

// defaultFlushBatch is Correlator.flushBatch: as many chains as one insert of the store takes
// (each insert costs the engine a fixed time beside its rows) while a burst's chains never
// wait all together as Chain values (BENCHMARKS.md, "correlate").
const defaultFlushBatch = 50_000

// flushAtChains is how many pending chains make a flush due, however long before flushEvery:
// at 10,000 events/s about every seven seconds.
const flushAtChains = 32_768

// maxSpareChains bounds the batch whose memory is kept for the next (520 bytes a chain), 21
// MB. A larger batch's memory goes back to the collector rather than stay, and a burst's never
// stays. It is a quarter above flushAtChains because flushDue looks once a Consume has closed
// its chains, so a batch passes the count by what one Consume closed (at 10,000 events/s a few
// thousand): with the two equal, nearly every batch passed the bound and the next grew its
// slice from nothing, half of all the bytes serve allocated (BENCHMARKS.md, "A twenty-third
// session"). With 16,384, at 10,000 events/s every flush grew its slice from nothing again;
// flushes of fifteen seconds' chains did the same (BENCHMARKS.md, "the events and chains
// reach the engine as Native blocks", "A twenty-second session").
const maxSpareChains = flushAtChains + flushAtChains/4

// appendPending adds a final chain to pending, in the memory the last flush kept if it is free.
func (co *Correlator) appendPending(ch *chain.Chain) {
	if co.pending == nil {
		co.pending, co.spare = co.spare, nil
	}
	co.pending = append(co.pending, *ch)
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
	// chains than the last does not grow a new slice.
	var whole []chain.Chain
	if all := co.pending; len(all) == n {
		whole = all[:0]
	}
	if co.pending = co.pending[n:]; len(co.pending) == 0 {
		co.pending = nil
	}
	co.inflight, co.inflightFirst, co.inflightLast = n, first, math.MaxInt64
	for i := range batch {
		co.inflightLast = horizonBefore(co.inflightLast, &batch[i])
	}
	co.m.pending.Set(float64(n + len(co.pending)))
	co.mu.Unlock()

	err = co.sink.WriteChains(ctx, batch)
	keep := err == nil && n <= maxSpareChains
	var sides []*chain.Side
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

// maxFreeSides bounds the sides kept to build chains in (Correlator.freeSides): a flush's worth
// of flushAtChains chains (two sides a chain), 21 MB.
const maxFreeSides = 2 * flushAtChains

// takeSides returns the sides of the chains (which the sink has taken), cleared, in a list
// whose memory is reused. A chain's sides are its roles (Entry, Peer, Others; a side without
// one is left to the collector), each a side of its own. It runs without co.mu: only the
// flush that holds the chains sees them.
func (co *Correlator) takeSides(chains []chain.Chain) []*chain.Side {
	out := co.sidesOut[:0]
	take := func(s *chain.Side) bool {
		if s == nil {
			return true
		}
		if len(out) == maxFreeSides {
			return false
		}
		*s = chain.Side{}
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
