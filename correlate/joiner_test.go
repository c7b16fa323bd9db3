package correlate

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// TestSafePositionIsTheOldestChainInMemory checks the position the correlator commits as chains
// open, close, reopen, leave memory and watch: a final chain holds it until it leaves memory,
// since a late record can reopen it and a restart must then be able to rebuild it.
func TestSafePositionIsTheOldestChainInMemory(t *testing.T) {
	j := NewJoiner(DefaultJoinOptions())
	add := func(id string, pos spool.Position, at time.Duration, stage string) {
		r := pods(id, t0).local("kas-a", 200, "")[1]
		r.Stage, r.ReceivedAt = stage, t0.Add(at)
		if stage == "ResponseStarted" {
			r.Verb = "watch"
		}
		j.Add(&r, pos)
	}
	if _, ok := j.SafePosition(); ok {
		t.Fatal("a position with nothing open")
	}
	for i := range 5 {
		add(fmt.Sprintf("c%d", i), spool.Position(100*(i+1)), time.Duration(i)*10*time.Second, "ResponseComplete")
	}
	if p, _ := j.SafePosition(); p != 100 {
		t.Fatalf("safe %d, want 100", p)
	}
	// c0..c2 close (the stream moved 35 s past c2), c3 and c4 stay open: the final ones
	// still hold the position, for the late window.
	j.Due(t0.Add(55 * time.Second).UnixNano())
	if p, _ := j.SafePosition(); p != 100 {
		t.Fatalf("after closing the oldest three: safe %d, want 100", p)
	}
	// A late record reopens c1: its first record is at 200, before which nothing moved.
	r := pods("c1", t0).local("kas-a", 200, "")[0]
	r.ReceivedAt = t0.Add(56 * time.Second)
	j.Add(&r, 900)
	if p, _ := j.SafePosition(); p != 100 {
		t.Fatalf("after reopening c1: safe %d, want 100", p)
	}
	// Past the late window (5m) the final chains leave memory, and the position moves on.
	j.Due(t0.Add(6 * time.Minute).UnixNano())
	j.Due(t0.Add(12 * time.Minute).UnixNano())
	if _, ok := j.SafePosition(); ok {
		t.Fatalf("a position with every chain gone: %d", j.Open())
	}
	// A running watch does not hold the position back.
	add("w", 1000, 12*time.Minute, "ResponseStarted")
	add("n", 1100, 12*time.Minute, "ResponseComplete")
	if p, _ := j.SafePosition(); p != 1100 {
		t.Fatalf("with a running watch first: safe %d, want 1100", p)
	}
}

// TestReusedAuditIDIsBounded floods one auditID, as a client that sets its own Audit-ID can:
// 65 and 60k distinct requests, then many records of one request. Every record costs bounded work
// (the flood took 155 CPU-seconds before the cap), at most MaxChainRecords chains and records are
// kept, the excess is counted, every chain of the auditID has FindingAuditIDReused (it names
// more than one request), and a normal request beside the flood is classified as without it.
func TestReusedAuditIDIsBounded(t *testing.T) {
	// One request more than an auditID keeps chains for, and a flood.
	for _, n := range []int{MaxChainRecords + 1, 60_000} {
		h := newHarness(t, DefaultJoinOptions())
		for i := 0; i < n; i += 1000 {
			batch := make([]record.Record, 0, 1000)
			for k := i; k < min(i+1000, n); k++ {
				r := pods("flood", t0.Add(time.Duration(k)*time.Microsecond))
				r.uri = fmt.Sprintf("/api/v1/namespaces/default/pods?limit=%d&a=b", k) // a distinct request each
				batch = append(batch, r.local("kas-a", 200, "")[1])
			}
			h.feed(batch)
		}
		normal := pods("normal", t0.Add(time.Millisecond))
		h.feed(normal.local("kas-a", 200, ""))
		if got := len(h.co.j.lookup("flood")); got != MaxChainRecords {
			t.Errorf("n=%d: %d chains of one auditID in memory, want %d", n, got, MaxChainRecords)
		}
		if d := h.co.j.Dropped; d != int64(n-MaxChainRecords) {
			t.Errorf("n=%d: dropped %d, want %d", n, d, n-MaxChainRecords)
		}
		h.settle()
		// Every chain of the auditID has the finding (an auditID of more than one request);
		// the one that took the drops counts them.
		final := map[string]chain.Chain{}
		for _, c := range h.sink.chains {
			if c.AuditID == "flood" && c.Revision >= final[c.ID].Revision {
				final[c.ID] = c
			}
		}
		var flagged, counting int
		for _, c := range final {
			if c.HasFinding(chain.FindingAuditIDReused) {
				flagged++
			}
			if c.Records > 1 {
				counting++
				if c.Records != 1+n-MaxChainRecords {
					t.Errorf("n=%d: the chain that took the drops counts %d records, want its own and every dropped one", n, c.Records)
				}
			}
		}
		if len(final) != MaxChainRecords || flagged != MaxChainRecords || counting != 1 {
			t.Errorf("n=%d: %d flood chains written (%d flagged, %d counting drops), want %d, all flagged, one counting", n, len(final), flagged, counting, MaxChainRecords)
		}
		expect(t, h.chain("normal"), chain.ClassLocal)
	}

	// One request, many records (distinct stage times, so none is a duplicate at ingest).
	h2 := newHarness(t, DefaultJoinOptions())
	one := pods("one", t0)
	var recs []record.Record
	for k := range 1000 {
		r := one.local("kas-a", 200, "")[1]
		r.StageTimestamp = r.StageTimestamp.Add(time.Duration(k) * time.Microsecond)
		recs = append(recs, r)
	}
	h2.feed(recs)
	h2.settle()
	c := h2.chain("one")
	expect(t, c, chain.ClassLocal, chain.FindingAuditIDReused)
	if c.Records != 1000 || h2.co.j.Dropped != 1000-MaxChainRecords {
		t.Errorf("records %d, dropped %d", c.Records, h2.co.j.Dropped)
	}
}

// TestDropReclassifiesAFinalChainOnce: the first record a final chain has no room for gives it
// the finding (re-emitted once); later ones change nothing and do not keep reopening it.
func TestDropReclassifiesAFinalChainOnce(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	one := pods("full", t0)
	rec := func(k int, at time.Duration) record.Record {
		r := one.local("kas-a", 200, "")[1]
		r.StageTimestamp = r.StageTimestamp.Add(time.Duration(k) * time.Microsecond)
		r.ReceivedAt = t0.Add(at)
		return r
	}
	var recs []record.Record
	for k := range MaxChainRecords {
		recs = append(recs, rec(k, time.Second))
	}
	h.feed(recs)
	h.feed(pods("tick", t0.Add(40*time.Second)).records(sideOpts{apiserver: "kas-b", code: 200, received: t0.Add(41 * time.Second)}))
	if c := h.chain("full"); c.Revision != 1 || c.HasFinding(chain.FindingAuditIDReused) {
		t.Fatalf("full chain before the excess: revision %d, findings %v", c.Revision, c.Findings)
	}
	for k := range 5 {
		h.feed([]record.Record{rec(MaxChainRecords+k, time.Minute)})
	}
	h.settle()
	c := h.chain("full")
	if c.Revision != 2 || !c.HasFinding(chain.FindingAuditIDReused) || c.Records != MaxChainRecords+5 {
		t.Fatalf("after the excess: revision %d, records %d, findings %v", c.Revision, c.Records, c.Findings)
	}
	if h.co.j.Reopened != 1 {
		t.Fatalf("reopened %d times", h.co.j.Reopened)
	}
}

// TestSafePositionWithChainsOpenedAgain drives the joiner with new chains, closes, holds and
// late records that reopen final chains, in a random order, and checks SafePosition against
// the oldest chain in memory found by walking every open and final one.
func TestSafePositionWithChainsOpenedAgain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	j := NewJoiner(DefaultJoinOptions())
	pos, at := spool.Position(0), time.Duration(0)
	var ids []string
	heldByFinal := 0 // steps at which a final chain was the oldest in memory
	oldest := func() (spool.Position, bool) {
		var p spool.Position
		ok := false
		for _, l := range []list{j.lru, j.done} {
			for r := l.head; r != 0; r = j.at(r).next {
				if c := j.at(r); !j.watching(c) && (!ok || c.firstPos < p) {
					p, ok = c.firstPos, true
				}
			}
		}
		return p, ok
	}
	for step := range 20_000 {
		pos += spool.Position(1 + rng.IntN(100))
		at += time.Duration(rng.IntN(20)) * time.Millisecond
		switch op := rng.IntN(10); {
		case op < 6 || len(ids) == 0: // a new request
			id := fmt.Sprintf("r%d", step)
			ids = append(ids, id)
			r := pods(id, t0).local("kas-a", 200, "")[rng.IntN(2)]
			r.ReceivedAt = t0.Add(at)
			if rng.IntN(50) == 0 {
				r.Stage, r.Verb = "ResponseStarted", "watch"
			}
			j.Add(&r, pos)
		case op < 8: // a later record of an earlier request: it joins, or reopens a final chain
			r := pods(ids[rng.IntN(len(ids))], t0).local("kas-a", 200, "")[1]
			r.ReceivedAt = t0.Add(at)
			j.Add(&r, pos)
		default: // the stream moves on; some of the chains it closes are held for evidence
			at += time.Duration(rng.IntN(40)) * time.Second
			for _, c := range j.Due(t0.Add(at).UnixNano()) {
				if rng.IntN(3) == 0 {
					j.hold(c)
				}
			}
		}
		got, gok := j.SafePosition()
		want, wok := oldest()
		if j.lru.head == 0 || wok && want < j.at(j.lru.head).firstPos {
			heldByFinal++
		}
		if got != want || gok != wok {
			t.Fatalf("step %d: safe %d %v, the oldest chain in memory is at %d %v", step, got, gok, want, wok)
		}
	}
	if heldByFinal < 100 {
		t.Fatalf("a final chain was the oldest in memory at %d steps: the test did not exercise them", heldByFinal)
	}
	t.Logf("a final chain held the position at %d of 20,000 steps", heldByFinal)
}
