package correlate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
)

// The rules for lone sides (see the comment above DefaultClassifier.single), one by one, with
// the evidence a real stream gives: each apiserver's own loopback calls (its process and
// version), its activity, and the chains that teach the capability view.

// loopback is one of apiserver's own loopback requests at at: user system:apiserver in
// system:masters, from its own address, with its process's UID and its version in the agent.
func loopback(apiserver, addr, uid, version string, at time.Time, id string) []record.Record {
	r := req{id: id, verb: "update", uri: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/apiserver-" + apiserver,
		group: "coordination.k8s.io", version: "v1", resource: "leases", user: userAPIServer,
		groups: []string{"system:authenticated", groupMasters}, at: at}
	recs := r.records(sideOpts{apiserver: apiserver, sourceIPs: []string{addr}, code: 200, end: time.Millisecond, received: at.Add(time.Second)})
	for i := range recs {
		recs[i].UserUID = uid
		recs[i].UserAgent = "kube-apiserver/" + version + " (linux/amd64) kubernetes/unknown"
	}
	return recs
}

// alive feeds apiserver's loopback calls every second from from to to: its stream is active.
func alive(h *harness, apiserver, addr, uid, version string, from, to time.Time) {
	for at := from; !at.After(to); at = at.Add(time.Second) {
		h.feed(loopback(apiserver, addr, uid, version, at, fmt.Sprintf("lb-%s-%s-%d", apiserver, uid, at.UnixMilli())))
	}
}

// forwards teaches the view that kas-a forwards podgroups to kas-c at at (a complete proxied chain).
func forwards(h *harness, id string, at time.Time) {
	r := podgroups(id, at)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
}

// metadataLocal is a local answer at Metadata level: no objects in the record.
func (r req) metadataLocal(apiserver string, code int32) []record.Record {
	return r.records(sideOpts{apiserver: apiserver, sourceIPs: []string{client}, code: code, end: 5 * time.Millisecond})
}

// TestRestartedEntryIsJudgedOnItsOwnEvidence: kas-a (1.35) forwarded podgroups; it restarts
// into 1.36, which serves them. Its first answers of its new process, bare (Metadata level,
// no objects) and with objects, are local: what the 1.35 process did is no evidence about the
// 1.36 process (measured: 13 such requests were reported broken before this rule).
func TestRestartedEntryIsJudgedOnItsOwnEvidence(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a1", "v1.35.4", t0, t0.Add(5*time.Second))
	forwards(h, "fw1", t0.Add(2*time.Second))
	forwards(h, "fw2", t0.Add(4*time.Second))
	restart := t0.Add(10 * time.Second)
	alive(h, "kas-a", addrA, "uid-a2", "v1.36.3", restart, restart.Add(5*time.Second))
	bare := podgroups("r1", restart.Add(3*time.Second))
	withObjects := podgroups("r2", restart.Add(4*time.Second))
	h.feed(bare.metadataLocal("kas-a", 200), withObjects.local("kas-a", 200, ""))
	h.settle()
	expect(t, h.chain("r1"), chain.ClassLocal)
	expect(t, h.chain("r2"), chain.ClassLocal)
	expect(t, h.chain("fw1"), chain.ClassProxied)
}

// TestReorderedBatchesOfANewProcess: the webhook sends batches concurrently, so a new
// process's later loopback call can arrive before its first. Its epoch begins at its first
// call all the same, and a request in between is judged as the new process's.
func TestReorderedBatchesOfANewProcess(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a1", "v1.35.4", t0, t0.Add(3*time.Second))
	forwards(h, "fw1", t0.Add(2*time.Second))
	restart := t0.Add(10 * time.Second)
	// The second batch of the new process first: its calls from restart+4s on.
	alive(h, "kas-a", addrA, "uid-a2", "v1.36.3", restart.Add(4*time.Second), restart.Add(6*time.Second))
	alive(h, "kas-a", addrA, "uid-a2", "v1.36.3", restart, restart.Add(3*time.Second))
	r := podgroups("between", restart.Add(2*time.Second))
	h.feed(r.metadataLocal("kas-a", 200))
	h.settle()
	expect(t, h.chain("between"), chain.ClassLocal)
	hist := serverInfo(h.co.caps, "kas-a").History
	if last := hist[len(hist)-1]; !last.Since.Equal(restart) || last.Process != "uid-a2" {
		t.Fatalf("the new process's epoch begins at %s, want its first call %s: %+v", last.Since, restart, hist)
	}
}

// TestBrokenNeedsTheEntrysOwnForwarding: a bare success from an apiserver the view says does
// not serve the resource is broken [peer_audit_missing] only when that process forwarded the
// resource; objects in the record make it local whatever the view says.
func TestBrokenNeedsTheEntrysOwnForwarding(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	at := t0.Add(time.Minute)
	alive(h, "kas-c", addrC, "uid-c", "v1.36.3", at, at.Add(10*time.Second)) // up all along: a lost record, not a restart
	forwards(h, "fw", at)
	gone := podgroups("gone", at.Add(time.Second)) // kas-a forwarded; the peer's record is lost
	served := podgroups("objects", at.Add(2*time.Second))
	h.feed(gone.entry("kas-a", 200), served.local("kas-a", 200, ""))
	// kas-b answered podgroups 404 "could not find" (MVP off): it does not serve them, but it
	// never forwards them either, so its bare 200 later is its own.
	m := podgroups("mvp-off", at.Add(3*time.Second))
	own := podgroups("own", at.Add(4*time.Second))
	h.feed(m.local("kas-b", 404, msgResourceNotFound), own.metadataLocal("kas-b", 200))
	h.settle()
	expect(t, h.chain("gone"), chain.ClassBroken, chain.FindingPeerAuditMissing)
	expect(t, h.chain("objects"), chain.ClassLocal)
	expect(t, h.chain("mvp-off"), chain.ClassMisleading404)
	expect(t, h.chain("own"), chain.ClassLocal)
}

// TestLonePeerRecordFromAnAddressOnTheSameHost: several apiservers on one host share its
// address, so the address a lone peer-side record came from can be the receiving apiserver's
// own. An apiserver never forwards to itself, and a plain client has one sourceIP: the entry's
// record is missing, whatever the view believes the receiving apiserver serves.
func TestLonePeerRecordFromAnAddressOnTheSameHost(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	const host = "127.0.0.1"
	h.co.caps.NoteServer("kas-x", "", host, time.Time{})
	h.co.caps.NoteServer("kas-y", "", host, time.Time{})
	at := t0.Add(time.Minute)
	// The view believes kas-y does not serve podgroups (it answered one 404 "could not find").
	nf := podgroups("nf", at)
	h.feed(nf.records(sideOpts{apiserver: "kas-y", sourceIPs: []string{"127.0.0.2"}, code: 404, message: msgResourceNotFound, end: time.Millisecond}))
	r := podgroups("lone", at.Add(time.Second))
	h.feed(r.records(sideOpts{apiserver: "kas-y", sourceIPs: []string{"127.0.0.2", host}, code: 200, objects: true, end: 10 * time.Millisecond}))
	h.settle()
	c := h.chain("lone")
	expect(t, c, chain.ClassBroken, chain.FindingEntryAuditMissing)
	if c.Peer == nil || c.Peer.APIServer != "kas-y" || c.Entry != nil {
		t.Fatalf("roles: entry %v peer %v", c.Entry, c.Peer)
	}
}

// TestUnknownAddressWaitsForEvidence: a lone record with two sourceIPs whose last address is
// nobody's known, while the recording apiserver's own address is not known yet (peertrail
// has not seen its loopback calls), waits one more window. If the address turns out to be
// an apiserver's (here its own host's, shared with another apiserver), the record is a
// peer's; if not, it is a client's behind a proxy that added X-Forwarded-For (local).
func TestUnknownAddressWaitsForEvidence(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	at := t0.Add(time.Minute)
	r := podgroups("later-known", at)
	h.feed(r.records(sideOpts{apiserver: "kas-d", sourceIPs: []string{client, "10.0.0.99"}, code: 200, objects: true, end: 10 * time.Millisecond}))
	p := pods("proxy", at)
	h.feed(p.records(sideOpts{apiserver: "kas-d", sourceIPs: []string{client, "10.9.9.9"}, code: 200, objects: true, end: 10 * time.Millisecond}))
	h.co.caps.NoteServer("kas-d", "", "", time.Time{}) // configured without an address
	// The stream moves past the chain window: both chains wait instead of closing.
	h.feed(pods("tick", at.Add(40*time.Second)).records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: at.Add(41 * time.Second)}))
	for _, c := range h.sink.chains {
		if c.AuditID == "later-known" || c.AuditID == "proxy" {
			t.Fatalf("%s became final on a guess: %s", c.AuditID, c.Class)
		}
	}
	// kas-d's loopback calls come from 10.0.0.99: the request was forwarded by an apiserver on its host.
	h.feed(loopback("kas-d", "10.0.0.99", "uid-d", "v1.36.3", at.Add(42*time.Second), "lb-d"))
	h.settle()
	expect(t, h.chain("later-known"), chain.ClassBroken, chain.FindingEntryAuditMissing)
	expect(t, h.chain("proxy"), chain.ClassLocal)

	// Once every apiserver's address is known, a client behind a proxy does not wait.
	q := pods("proxy-2", at.Add(2*time.Minute))
	h.feed(q.records(sideOpts{apiserver: "kas-d", sourceIPs: []string{client, "10.9.9.9"}, code: 200, objects: true, end: 10 * time.Millisecond, received: at.Add(2 * time.Minute)}))
	if _, err := h.co.Consume(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	expect(t, h.chain("proxy-2"), chain.ClassLocal)
}

// TestEarlyMisleading404WaitsForWhoServes: a 404 "could not find" that comes due before any
// chain taught the view who serves the resource waits for that evidence (the demo reported
// such a 404 local in some runs and misleading in others, by arrival order).
func TestEarlyMisleading404WaitsForWhoServes(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	at := t0.Add(time.Minute)
	m := podgroups("early-404", at)
	h.feed(m.local("kas-b", 404, msgResourceNotFound))
	// The chain window passes on the stream before kas-c's forwarded requests arrive (its
	// webhook was behind).
	h.feed(pods("tick", at.Add(40*time.Second)).records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: at.Add(41 * time.Second)}))
	r := podgroups("fw", at.Add(time.Second))
	e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: at.Add(42 * time.Second)})
	p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, objects: true, start: 2 * time.Millisecond, end: 15 * time.Millisecond, uri: sortedQuery(r.uri), received: at.Add(42 * time.Second)})
	h.feed(e, p)
	h.settle()
	expect(t, h.chain("early-404"), chain.ClassMisleading404)
	// Nobody ever serves widgets: after its wait, a plain local 404.
	w := podgroups("widgets", at)
	w.group, w.uri = "widgets.example.com", "/apis/widgets.example.com/v1/widgets"
	h.feed(w.local("kas-a", 404, msgResourceNotFound))
	h.settle()
	expect(t, h.chain("widgets"), chain.ClassLocal)
}

// TestRolesPreferRecordsOverBelief: when the view (out of date for a restarted server) says
// the other way round, the objects in the records decide who served the request.
func TestRolesPreferRecordsOverBelief(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	at := t0.Add(time.Minute)
	// The view: kas-a serves podgroups, kas-c does not (stale).
	a := podgroups("a-serves", at)
	c := podgroups("c-does-not", at)
	h.feed(a.local("kas-a", 200, ""), c.local("kas-c", 404, msgResourceNotFound))
	h.settle()
	// Client on kas-a's host: both records show one address; kas-c recorded the objects.
	r := podgroups("collapsed", at.Add(10*time.Second))
	e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrA}, code: 200, end: 20 * time.Millisecond})
	p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{addrA}, code: 200, objects: true, start: 2 * time.Millisecond, end: 15 * time.Millisecond})
	h.feed(e, p)
	h.settle()
	ch := h.chain("collapsed")
	expect(t, ch, chain.ClassProxied)
	if ch.Entry.APIServer != "kas-a" || ch.Peer.APIServer != "kas-c" {
		t.Fatalf("roles entry=%s peer=%s (%s)", ch.Entry.APIServer, ch.Peer.APIServer, ch.Explanation)
	}
}

// TestEntryStarting: a restarted apiserver's 403s in its first seconds (its authorizer's
// caches not synced) and its 404s before its peer discovery syncs are restart noise; the same
// answers later are not.
func TestEntryStarting(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	forwards(h, "fw", t0.Add(time.Second))
	alive(h, "kas-b", addrB, "uid-b1", "v1.35.4", t0, t0.Add(3*time.Second))
	restart := t0.Add(20 * time.Second)
	alive(h, "kas-b", addrB, "uid-b2", "v1.35.4", restart, restart.Add(5*time.Second))
	// Ready 3 s after its start: its first successful answer to a client.
	first := pods("first-served", restart.Add(3*time.Second))
	denied := pods("denied-early", restart.Add(4*time.Second))
	nf := podgroups("404-early", restart.Add(4*time.Second))
	late := pods("denied-late", restart.Add(3*time.Second+StartingWindow+time.Second))
	h.feed(first.local("kas-b", 200, ""), denied.local("kas-b", 403, `pods "web-1" is forbidden`), nf.local("kas-b", 404, msgResourceNotFound),
		late.local("kas-b", 403, `pods "web-1" is forbidden`))
	h.settle()
	expect(t, h.chain("denied-early"), chain.ClassLocal, chain.FindingEntryStarting)
	expect(t, h.chain("404-early"), chain.ClassMisleading404, chain.FindingEntryStarting)
	expect(t, h.chain("denied-late"), chain.ClassLocal)
	h.co.now = func() time.Time { return restart.Add(time.Minute) }
	tot := h.co.Recent(10 * time.Minute)
	if tot.Noise[chain.ClassMisleading404] != 1 || tot.Noise[chain.ClassLocal] != 1 || len(tot.Episodes) != 1 {
		t.Fatalf("window: noise %v episodes %+v", tot.Noise, tot.Episodes)
	}
	if e := tot.Episodes[0]; e.Finding != chain.FindingEntryStarting || e.APIServer != "kas-b" || !e.Since.Equal(restart) || e.Chains != 2 {
		t.Fatalf("episode %+v", e)
	}
}

// TestPeerDown: forwards fail 503 while the peer that serves the resource is silent in its
// stream (SIGKILLed, restarting): restart noise with the peer named. A 503 after the peer is
// back is not.
func TestPeerDown(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a", "v1.35.4", t0, t0.Add(40*time.Second))
	alive(h, "kas-c", addrC, "uid-c1", "v1.36.3", t0, t0.Add(10*time.Second))
	forwards(h, "fw", t0.Add(5*time.Second))
	// kas-c is killed at +10.5s and is back at +20s.
	during := podgroups("down-503", t0.Add(12*time.Second))
	refused := podgroups("down-refused", t0.Add(13*time.Second))
	h.feed(during.entry("kas-a", 503), refused.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 503,
		message: "error trying to reach service: dial tcp 10.0.0.13:6443: connect: connection refused", end: time.Millisecond}))
	alive(h, "kas-c", addrC, "uid-c2", "v1.36.3", t0.Add(20*time.Second), t0.Add(40*time.Second))
	after := podgroups("after-503", t0.Add(30*time.Second))
	h.feed(after.entry("kas-a", 503))
	h.settle()
	for _, id := range []string{"down-503", "down-refused"} {
		c := h.chain(id)
		expect(t, c, chain.ClassProxyFailed, chain.FindingPeerDown)
		if !strings.Contains(c.Explanation, "kas-c") {
			t.Errorf("%s: the explanation does not name the peer: %s", id, c.Explanation)
		}
	}
	expect(t, h.chain("after-503"), chain.ClassProxyFailed)
	h.co.now = func() time.Time { return t0.Add(2 * time.Minute) }
	tot := h.co.Recent(10 * time.Minute)
	if tot.Forwarded5xxNoise != 2 || len(tot.Episodes) != 1 || tot.Episodes[0].APIServer != "kas-c" || tot.Episodes[0].Duration() != time.Second {
		t.Fatalf("window: 5xx noise %d episodes %+v", tot.Forwarded5xxNoise, tot.Episodes)
	}
}

// TestEntryDownAndStopping: a forward's lone peer record while the apiserver it came from was
// silent (killed: its record died with it) is entry_down; an entry's 503 right before its own
// stream falls silent and comes back (a replacement) is entry_stopping. The same records
// while the apiservers stay up are not noise (and the lone peer-side record, while the
// apiserver it came from delivered its audit without it, is no forward at all).
func TestEntryDownAndStopping(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a1", "v1.35.4", t0, t0.Add(10*time.Second))
	alive(h, "kas-c", addrC, "uid-c1", "v1.36.3", t0, t0.Add(40*time.Second))
	forwards(h, "fw", t0.Add(time.Second))
	// kas-a answers 503 at +9.5 s, its stream stops after +10 s; it is back at +16 s.
	stopping := podgroups("stopping-503", t0.Add(9500*time.Millisecond))
	h.feed(stopping.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 503,
		message: "Error getting ip and port info of the remote server while proxying", end: time.Millisecond}))
	// kas-c served a request kas-a forwarded at +10.5 s: kas-a's record of it is lost.
	lost := podgroups("entry-lost", t0.Add(10500*time.Millisecond))
	h.feed(lost.peer("kas-c", addrA, 200))
	alive(h, "kas-a", addrA, "uid-a2", "v1.36.3", t0.Add(16*time.Second), t0.Add(40*time.Second))
	// The same while kas-a is up.
	early := podgroups("early-503", t0.Add(3*time.Second))
	h.feed(early.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 503,
		message: "Error getting ip and port info of the remote server while proxying", end: time.Millisecond}))
	lone := podgroups("lone-up", t0.Add(30*time.Second))
	h.feed(lone.peer("kas-c", addrA, 200))
	h.settle()
	expect(t, h.chain("stopping-503"), chain.ClassProxyFailed, chain.FindingEntryStopping)
	expect(t, h.chain("entry-lost"), chain.ClassBroken, chain.FindingEntryAuditMissing, chain.FindingEntryDown)
	expect(t, h.chain("early-503"), chain.ClassProxyFailed)
	// kas-a delivered its audit across the request without a record of it: no forward, but a
	// client on kas-a's host that set X-Forwarded-For (issue 39), served by kas-c itself.
	expect(t, h.chain("lone-up"), chain.ClassLocal)
	if c := h.chain("entry-lost"); !strings.Contains(c.Explanation, "kas-a") {
		t.Errorf("the explanation does not name the silent entry: %s", c.Explanation)
	}
}

// TestMisleading404WhilePeerStarts: the entries answer 404 for what a restarted peer serves
// until they have its new process's discovery: restart noise (peer_down) while it starts, a
// real misleading 404 while it is away.
func TestMisleading404WhilePeerStarts(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-b", addrB, "uid-b", "v1.35.4", t0, t0.Add(40*time.Second))
	alive(h, "kas-c", addrC, "uid-c1", "v1.36.3", t0, t0.Add(10*time.Second))
	forwards(h, "fw", t0.Add(time.Second))
	away := podgroups("while-away", t0.Add(15*time.Second))
	h.feed(away.local("kas-b", 404, msgResourceNotFound))
	alive(h, "kas-c", addrC, "uid-c2", "v1.36.3", t0.Add(20*time.Second), t0.Add(40*time.Second))
	starting := podgroups("while-starting", t0.Add(20500*time.Millisecond))
	h.feed(starting.local("kas-b", 404, msgResourceNotFound))
	// kas-c serves a client at +21 s; 10 s later it is long started.
	served := podgroups("c-serves", t0.Add(21*time.Second))
	later := podgroups("later", t0.Add(31*time.Second))
	h.feed(served.local("kas-c", 200, ""), later.local("kas-b", 404, msgResourceNotFound))
	h.settle()
	expect(t, h.chain("while-away"), chain.ClassMisleading404)
	expect(t, h.chain("while-starting"), chain.ClassMisleading404, chain.FindingPeerDown)
	expect(t, h.chain("later"), chain.ClassMisleading404)
}

// TestForwardsWhilePeerStartsOrDies: a restarted peer fails its entries' first forwards
// (the entry's bare 503, or the peer's own 5xx relayed) while it starts; a peer killed while it
// served a request fails it when it dies, after a start when it was alive. Both are restart
// noise (peer_down); the same failures long after the peer came back are not.
func TestForwardsWhilePeerStartsOrDies(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	alive(h, "kas-a", addrA, "uid-a", "v1.35.4", t0, t0.Add(50*time.Second))
	alive(h, "kas-c", addrC, "uid-c1", "v1.36.3", t0, t0.Add(10*time.Second))
	forwards(h, "fw", t0.Add(5*time.Second))
	// In flight when kas-c died: received at +9.8 s, failed at +10.6 s.
	inflight := podgroups("in-flight", t0.Add(9800*time.Millisecond))
	h.feed(inflight.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 502, end: 800 * time.Millisecond}))
	// kas-c's new process starts at +20 s and serves a client at +22 s.
	alive(h, "kas-c", addrC, "uid-c2", "v1.36.3", t0.Add(20*time.Second), t0.Add(50*time.Second))
	bare := podgroups("starting-bare-503", t0.Add(20500*time.Millisecond))
	relayed := podgroups("starting-relayed-503", t0.Add(21*time.Second))
	served := podgroups("c-serves", t0.Add(22*time.Second))
	h.feed(bare.entry("kas-a", 503), relayed.entry("kas-a", 503), relayed.peer("kas-c", addrA, 503), served.local("kas-c", 200, ""))
	// Long after: real faults.
	lateBare := podgroups("late-bare-503", t0.Add(40*time.Second))
	lateRelayed := podgroups("late-relayed-503", t0.Add(41*time.Second))
	h.feed(lateBare.entry("kas-a", 503), lateRelayed.entry("kas-a", 503), lateRelayed.peer("kas-c", addrA, 503))
	h.settle()
	expect(t, h.chain("in-flight"), chain.ClassProxyFailed, chain.FindingPeerDown)
	expect(t, h.chain("starting-bare-503"), chain.ClassProxyFailed, chain.FindingPeerDown)
	expect(t, h.chain("starting-relayed-503"), chain.ClassProxied, chain.FindingPeerDown)
	expect(t, h.chain("late-bare-503"), chain.ClassProxyFailed)
	expect(t, h.chain("late-relayed-503"), chain.ClassProxied)
	for _, id := range []string{"starting-bare-503", "starting-relayed-503"} {
		if c := h.chain(id); !strings.Contains(c.Explanation, "kas-c") || !strings.Contains(c.Explanation, "starting") {
			t.Errorf("%s: the explanation does not say the peer was starting: %s", id, c.Explanation)
		}
	}
}

// TestWatchEndingIsNoLateStream: a watch's record comes as it ends, its RequestReceived as old
// as the watch. That is a stream on time and must not set off the late-stream recheck, which
// judges every recent one-sided chain again whenever the view changes (in a steady run it took
// an eighth of the process's CPU). A record written longer ago than the chain window does.
func TestWatchEndingIsNoLateStream(t *testing.T) {
	h := newHarness(t, JoinOptions{Window: 30 * time.Second})
	now := t0.Add(10 * time.Minute)
	late := func() bool { return h.co.lateActivity || h.co.recheckUntil != 0 }
	h.feed(podgroups("on-time", now.Add(-time.Second)).metadataLocal("kas-b", 200)) // the stream's time is now
	w := req{id: "watch-1", verb: "watch", uri: "/api/v1/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: now.Add(-9 * time.Minute)}
	h.feed(w.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 9 * time.Minute,
		stages: []string{"ResponseComplete"}, received: now.Add(time.Second)}))
	if late() {
		t.Fatalf("a watch ending on time set off the late-stream recheck")
	}
	h.feed(podgroups("late-1", now.Add(-2*time.Minute)).metadataLocal("kas-b", 200))
	if !late() {
		t.Fatalf("a record written two minutes before the stream's time did not count as a late stream")
	}
}
