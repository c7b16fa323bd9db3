package correlate

import (
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// TestEntryStartingJustBeforeItsFirstLoopbackRequest: a replaced apiserver can answer a client
// a moment before its new process's first loopback request reaches its audit stream (measured:
// a 404 18 ms before). That answer is the new process's start too; an answer a few seconds
// before the restart is the old process's and is not noise.
func TestEntryStartingJustBeforeItsFirstLoopbackRequest(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	forwards(h, "fw", t0.Add(time.Second))
	alive(h, "kas-b", addrB, "uid-b1", "v1.35.4", t0, t0.Add(3*time.Second))
	restart := t0.Add(20 * time.Second)
	alive(h, "kas-b", addrB, "uid-b2", "v1.36.3", restart, restart.Add(5*time.Second))
	early := podgroups("404-just-before", restart.Add(-18*time.Millisecond))
	old := podgroups("404-old-process", restart.Add(-5*time.Second))
	h.feed(early.local("kas-b", 404, msgResourceNotFound), old.local("kas-b", 404, msgResourceNotFound))
	h.settle()
	expect(t, h.chain("404-just-before"), chain.ClassMisleading404, chain.FindingEntryStarting)
	expect(t, h.chain("404-old-process"), chain.ClassMisleading404)
}

// TestBareNotFoundWhileStartingIsTheEntrysOwn: an apiserver that does not serve a resource
// and forwards it restarts. In its first second, before its peer discovery lists a server of
// the resource, it answers a list 404 itself: its record holds only the code, like a forward's
// entry record, and no peer record comes (measured in the replacement test: a restarted 1.36
// kas-c, batch/v1 off, answered a list of jobs 404 with one Audit-Id 0.24 s after its
// restart). That is a misleading 404 explained by the restart, not a forward whose peer record
// was lost. The same bare 404 once the process has been serving for longer than
// StartingWindow stays a forward whose peer record is missing.
func TestBareNotFoundWhileStartingIsTheEntrysOwn(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a1", "v1.35.4", t0, t0.Add(3*time.Second))
	alive(h, "kas-c", addrC, "uid-c", "v1.36.3", t0, t0.Add(40*time.Second))
	forwards(h, "fw-old-process", t0.Add(time.Second))
	restart := t0.Add(10 * time.Second)
	alive(h, "kas-a", addrA, "uid-a2", "v1.35.4", restart, restart.Add(20*time.Second))
	// Its new process forwards podgroups again a second after its start.
	forwards(h, "fw-new-process", restart.Add(time.Second))
	early := podgroups("bare-404-starting", restart.Add(240*time.Millisecond))
	late := podgroups("bare-404-serving", restart.Add(time.Second+StartingWindow+2*time.Second))
	h.feed(early.entry("kas-a", 404), late.entry("kas-a", 404))
	h.settle()
	expect(t, h.chain("bare-404-starting"), chain.ClassMisleading404, chain.FindingEntryStarting)
	expect(t, h.chain("bare-404-serving"), chain.ClassBroken, chain.FindingPeerAuditMissing)
}
