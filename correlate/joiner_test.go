package correlate

import (
	"fmt"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/spool"
)

// TestSafePositionIsTheOldestOpenChain checks the position the correlator commits as chains
// open, close, reopen and watch.
func TestSafePositionIsTheOldestOpenChain(t *testing.T) {
	j := NewJoiner(DefaultOptions())
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
	// c0..c2 close (the stream moved 35 s past c2), c3 and c4 stay open.
	j.Due(t0.Add(55 * time.Second).UnixNano())
	if p, _ := j.SafePosition(); p != 400 {
		t.Fatalf("after closing the oldest three: safe %d, want 400", p)
	}
	// A late record reopens c1: its first record is at 200 again.
	r := pods("c1", t0).local("kas-a", 200, "")[0]
	r.ReceivedAt = t0.Add(56 * time.Second)
	j.Add(&r, 900)
	if p, _ := j.SafePosition(); p != 200 {
		t.Fatalf("after reopening c1: safe %d, want 200", p)
	}
	// A running watch does not hold the position back.
	j.Due(t0.Add(3 * time.Minute).UnixNano())
	add("w", 1000, 3*time.Minute, "ResponseStarted")
	add("n", 1100, 3*time.Minute, "ResponseComplete")
	if p, _ := j.SafePosition(); p != 1100 {
		t.Fatalf("with a running watch first: safe %d, want 1100", p)
	}
}
