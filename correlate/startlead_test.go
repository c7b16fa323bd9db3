package correlate

import (
	"testing"
	"time"
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
	expect(t, h.chain("404-just-before"), ClassMisleading404, FindingEntryStarting)
	expect(t, h.chain("404-old-process"), ClassMisleading404)
}
