package correlate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/chainapi"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/metrics"
)

// What an ordinary client can bend (issue 39): its Audit-ID, its path, X-Forwarded-For. Two
// records sharing an auditID are one forwarded request only on what no client supplies: the
// peer's last sourceIP is the entry's address, and the peer's time lies within the entry's. A
// missing side is judged against the other apiserver's delivered stream.

// configmaps is a get of a ConfigMap, served by every apiserver.
func configmaps(id string, at time.Time) req {
	return req{id: id, verb: "get", uri: "/api/v1/namespaces/team/configmaps/cm", version: "v1", resource: "configmaps", name: "cm",
		user: "mallory", groups: []string{"system:authenticated"}, at: at}
}

// chains returns every final chain of id the sink holds, each in its latest revision, by ID.
func (h *harness) chains(id string) map[string]chain.Chain {
	h.t.Helper()
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	out := map[string]chain.Chain{}
	for _, c := range h.sink.chains {
		if c.AuditID == id && c.Revision >= out[c.ID].Revision {
			out[c.ID] = c
		}
	}
	return out
}

// tick moves the stream's time to at with a bystander's request on kas-b: chains whose window
// has passed become final, and stay in memory for the late window.
func (h *harness) tick(at time.Time) {
	h.t.Helper()
	r := pods(fmt.Sprintf("tick-%d", at.UnixNano()), at)
	h.feed(r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: at}))
}

// background makes kas-a and kas-b up and delivering their audit from from to to, and has
// their clients get configmaps from each (Metadata level: bare answers) every few seconds.
func background(h *harness, from, to time.Time) []string {
	var ids []string
	for at := from; !at.After(to); at = at.Add(time.Second) {
		h.feed(loopback("kas-a", addrA, "uid-a", "v1.35.4", at, fmt.Sprintf("lb-a-%d", at.UnixMilli())),
			loopback("kas-b", addrB, "uid-b", "v1.35.4", at, fmt.Sprintf("lb-b-%d", at.UnixMilli())))
		if at.Sub(from)%(3*time.Second) == 0 {
			for _, a := range []string{"kas-a", "kas-b"} {
				r := configmaps(fmt.Sprintf("bg-%s-%d", a, at.UnixMilli()), at.Add(300*time.Millisecond))
				r.user = "alice"
				h.feed(r.records(sideOpts{apiserver: a, sourceIPs: []string{client}, code: 200, end: 3 * time.Millisecond, received: at.Add(time.Second)}))
				ids = append(ids, r.id)
			}
		}
	}
	return ids
}

// TestSharedAuditIDIsTwoRequests: the same GET answered by kas-a and by kas-b, one Audit-ID,
// no hop in either record (issue 39, item 1), in either arrival order and under one identity
// or two: two chains, both audit_id_reused, judged alone, nothing learned from them, and every
// other user's chain as it would be without them.
func TestSharedAuditIDIsTwoRequests(t *testing.T) {
	for _, tc := range []struct {
		name      string
		otherUser bool
		bFirst    bool
	}{{"kas-a first", false, false}, {"kas-b first", false, true}, {"two identities", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, DefaultJoinOptions())
			ids := background(h, t0, t0.Add(40*time.Second))
			r := configmaps("mallory-1", t0.Add(20*time.Second))
			a := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: t0.Add(21 * time.Second)})
			b := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, start: 2 * time.Millisecond, end: 10 * time.Millisecond, received: t0.Add(21 * time.Second)})
			if tc.otherUser {
				for i := range b {
					b[i].UserName = "eve"
				}
			}
			if tc.bFirst {
				h.feed(b, a)
			} else {
				h.feed(a, b)
			}
			h.settle()
			got := h.chains("mallory-1")
			if len(got) != 2 {
				t.Fatalf("%d chains for the two requests, want 2: %v", len(got), got)
			}
			seen := map[string]bool{}
			for _, c := range got {
				expect(t, c, chain.ClassLocal, chain.FindingAuditIDReused)
				if c.Entry == nil || c.Peer != nil {
					t.Errorf("%s: entry %v peer %v, want an entry alone", c.ID, c.Entry, c.Peer)
					continue
				}
				seen[c.Entry.APIServer] = true
			}
			if !seen["kas-a"] || !seen["kas-b"] {
				t.Errorf("the chains are of %v, want one of kas-a and one of kas-b", seen)
			}
			// Nothing learned: neither apiserver forwards configmaps, nor is known not to serve them.
			g := chain.GVR{Version: "v1", Resource: "configmaps"}
			for _, s := range []string{"kas-a", "kas-b"} {
				if h.co.caps.ProxiedRecently(s, g, r.at) {
					t.Errorf("%s is believed to forward configmaps", s)
				}
				if served, known := h.co.caps.Serves(s, g, r.at); known && !served {
					t.Errorf("%s is believed not to serve configmaps", s)
				}
			}
			for _, id := range ids {
				expect(t, h.chain(id), chain.ClassLocal)
			}
			if n := h.co.Recent(24 * time.Hour).Chains[chain.ClassBroken]; n != 0 {
				t.Errorf("%d broken chains in the window", n)
			}
		})
	}
}

// TestForwardNeedsTheEntrysAddressAndTime: records that look like a forward but whose peer
// side came from no address of the other apiserver, or lies outside its time, are two
// requests; a real forward in the same shape is one.
func TestForwardNeedsTheEntrysAddressAndTime(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	background(h, t0, t0.Add(90*time.Second))
	at := t0.Add(10 * time.Second)
	// The client reached kas-b through a proxy of its own that set X-Forwarded-For: one hop
	// more, from an address of no apiserver.
	xff := configmaps("xff", at)
	h.feed(xff.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond}),
		xff.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, "192.0.2.7"}, code: 200, start: 2 * time.Millisecond, end: 10 * time.Millisecond}))
	// From kas-a's address, but seconds after kas-a answered: another request.
	later := configmaps("later", at.Add(10*time.Second))
	h.feed(later.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond}),
		later.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, addrA}, code: 200, start: 5 * time.Second, end: 5*time.Second + 10*time.Millisecond}))
	// A forward: from kas-a's address, within kas-a's time.
	fw := podgroups("forward", at.Add(20*time.Second))
	h.feed(fw.entry("kas-a", 200), fw.peer("kas-c", addrA, 200))
	h.settle()
	for _, id := range []string{"xff", "later"} {
		got := h.chains(id)
		if len(got) != 2 {
			t.Errorf("%s: %d chains, want 2", id, len(got))
		}
		for _, c := range got {
			if !c.HasFinding(chain.FindingAuditIDReused) || c.Class == chain.ClassProxied || c.Class == chain.ClassBroken {
				t.Errorf("%s: %s %v (%s)", id, c.Class, c.Findings, c.Explanation)
			}
		}
	}
	c := h.chain("forward")
	expect(t, c, chain.ClassProxied)
	if c.Entry.APIServer != "kas-a" || c.Peer.APIServer != "kas-c" {
		t.Errorf("roles %s -> %s", c.Entry.APIServer, c.Peer.APIServer)
	}
}

// TestReusedAuditIDKeepsEveryChain: a DELETE of a Secret with Audit-ID X, then a harmless GET
// with X (issue 39, item 2): both chains stay, both say audit_id_reused (the DELETE's, final
// first, in a new revision with its class unchanged), and the API lists both.
func TestReusedAuditIDKeepsEveryChain(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	del := req{id: "x", verb: "delete", uri: "/api/v1/namespaces/team/secrets/db", version: "v1", resource: "secrets", name: "db",
		user: "mallory", groups: []string{"system:authenticated"}, at: t0}
	h.feed(del.local("kas-a", 200, ""))
	h.tick(t0.Add(40 * time.Second))
	first := h.chain("x")
	expect(t, first, chain.ClassLocal)
	get := configmaps("x", t0.Add(2*time.Minute))
	h.feed(get.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: time.Millisecond, received: t0.Add(2 * time.Minute)}))
	h.tick(t0.Add(3 * time.Minute)) // both in memory still (the late window)
	got := h.chains("x")
	if len(got) != 2 {
		t.Fatalf("%d chains, want the DELETE's and the GET's", len(got))
	}
	d := got[first.ID]
	expect(t, d, chain.ClassLocal, chain.FindingAuditIDReused)
	if d.Revision != first.Revision+1 || d.Verb != "delete" {
		t.Errorf("the DELETE's chain: %s revision %d, want delete in revision %d", d.Verb, d.Revision, first.Revision+1)
	}

	srv := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		chainapi.New(h.co, h.co.Capabilities(), chainapi.Stores{}).Register(mux)
		return mux
	}())
	defer srv.Close()
	read := func(path string) chain.ChainAnswer {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		var a chain.ChainAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := read("/api/v1/chains/x")
	if a.Chain == nil || a.Verb != "get" || a.ChainsWithAuditID != 2 || len(a.OtherChains) != 1 || a.OtherChains[0].Verb != "delete" {
		t.Fatalf("answer: %+v", a)
	}
	for _, c := range append([]*chain.Chain{a.Chain}, a.OtherChains...) {
		if !c.HasFinding(chain.FindingAuditIDReused) {
			t.Errorf("%s %s without audit_id_reused", c.Verb, c.ID)
		}
	}
	if b := read("/api/v1/chains/x?chain=" + first.ID); b.Verb != "delete" || len(b.OtherChains) != 1 || b.OtherChains[0].Verb != "get" {
		t.Errorf("?chain= the DELETE's: %s, others %v", b.Verb, b.OtherChains)
	}
	// The old shape still decodes: the chain's own fields at the top level.
	resp, err := http.Get(srv.URL + "/api/v1/chains/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var old chain.Chain
	if err := json.NewDecoder(resp.Body).Decode(&old); err != nil || old.Verb != "get" || old.AuditID != "x" {
		t.Errorf("as a Chain: %+v %v", old, err)
	}
}

// TestLonePeerShapedRecordFromAControlPlaneHost: a request reaching kas-b from kas-a's address
// with one X-Forwarded-For header (a proxy or a host-network pod on kas-a's node; issue 39,
// item 3) while kas-a delivers its audit without a record of it: kas-b served it, no forward
// whose entry record is missing. The same record while kas-a is silent (killed) is a forward
// whose entry record died with it.
func TestLonePeerShapedRecordFromAControlPlaneHost(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	background(h, t0, t0.Add(30*time.Second))
	r := configmaps("from-a-host", t0.Add(10*time.Second))
	h.feed(r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{"203.0.113.9", addrA}, code: 200, end: 5 * time.Millisecond}))
	h.settle()
	c := h.chain("from-a-host")
	expect(t, c, chain.ClassLocal)
	if c.Entry == nil || c.Entry.APIServer != "kas-b" || !strings.Contains(c.Explanation, "kas-a delivered its audit") {
		t.Errorf("entry %v: %s", c.Entry, c.Explanation)
	}
	if n := h.co.Recent(24 * time.Hour).Chains[chain.ClassBroken]; n != 0 {
		t.Errorf("%d broken chains in the window", n)
	}

	// kas-a is killed at +31 s: its stream is silent when the record's request came.
	lost := podgroups("entry-died", t0.Add(33*time.Second))
	h.feed(lost.peer("kas-c", addrA, 200))
	for at := t0.Add(31 * time.Second); at.Before(t0.Add(40 * time.Second)); at = at.Add(time.Second) {
		h.feed(loopback("kas-b", addrB, "uid-b", "v1.35.4", at, fmt.Sprintf("lb-b2-%d", at.UnixMilli())))
	}
	h.settle()
	expect(t, h.chain("entry-died"), chain.ClassBroken, chain.FindingEntryAuditMissing, chain.FindingEntryDown)
}

// TestBareNotFoundBeforeDiscoveryIsMisleading: the real capture of issue 39 in records. kas-c
// (batch/v1 off) forwards jobs to kas-a once its peer discovery synced, and answered a list of
// jobs a bare 404 before (its not-found handler's, whose record holds only the code). kas-a
// and kas-b delivered their audit across that time without a record of it: the request was
// not forwarded, the client got a misleading 404. peertrail saw kas-c's first start only (no
// restart, so no entry_starting).
func TestBareNotFoundBeforeDiscoveryIsMisleading(t *testing.T) {
	for _, order := range []string{"in order", "404 last"} {
		t.Run(order, func(t *testing.T) {
			h := newHarness(t, DefaultJoinOptions())
			jobs := func(id string, at time.Time) req {
				return req{id: id, verb: "list", uri: "/apis/batch/v1/namespaces/capture/jobs", group: "batch", version: "v1", resource: "jobs",
					user: "admin", groups: []string{"system:masters"}, at: at}
			}
			nf := jobs("early", t0.Add(2*time.Second))
			nfRecs := nf.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client}, code: 404, end: time.Millisecond, received: t0.Add(3 * time.Second)})
			if order == "in order" {
				h.feed(nfRecs)
			}
			background(h, t0, t0.Add(20*time.Second))
			for at := t0; !at.After(t0.Add(20 * time.Second)); at = at.Add(time.Second) {
				h.feed(loopback("kas-c", addrC, "uid-c", "v1.36.3", at, fmt.Sprintf("lb-c-%d", at.UnixMilli())))
			}
			fw := jobs("synced", t0.Add(5*time.Second))
			h.feed(fw.entry("kas-c", 200), fw.peer("kas-a", addrC, 200))
			if order != "in order" {
				h.feed(nfRecs)
			}
			h.settle()
			c := h.chain("early")
			expect(t, c, chain.ClassMisleading404)
			if !strings.Contains(c.Explanation, "without its auditID") {
				t.Errorf("the explanation does not say why: %s", c.Explanation)
			}
			expect(t, h.chain("synced"), chain.ClassProxied)
		})
	}
}

// TestChainMetricsNameOnlyServedResources: 2,000 refused requests to made-up groups add one
// series, not 2,000; a resource an apiserver serves keeps its labels (issue 39, item 5).
func TestChainMetricsNameOnlyServedResources(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	var recs []record.Record
	for i := range 2000 {
		r := req{id: fmt.Sprintf("made-up-%d", i), verb: "list", uri: fmt.Sprintf("/apis/g%d.example/v1/r%d", i, i), group: fmt.Sprintf("g%d.example", i),
			version: "v1", resource: fmt.Sprintf("r%d", i), user: "mallory", at: t0.Add(time.Duration(i) * time.Millisecond)}
		recs = append(recs, r.local("kas-a", 403, fmt.Sprintf(`r%d.g%d.example is forbidden`, i, i))...)
	}
	h.feed(recs)
	learnPodgroupsOnC(h)
	h.settle()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.co.m.chains)
	if n := testutil.CollectAndCount(reg, metrics.CorrelateChainsTotal); n > 3 {
		t.Errorf("%d series of %s after 2,000 made-up resources", n, metrics.CorrelateChainsTotal)
	}
	if v := testutil.ToFloat64(h.co.m.chains.WithLabelValues(string(chain.ClassLocal), "kas-a", "", metrics.GroupResourceOther, metrics.GroupResourceOther)); v != 2000 {
		t.Errorf("%v chains under %q, want 2000", v, metrics.GroupResourceOther)
	}
	if v := testutil.ToFloat64(h.co.m.chains.WithLabelValues(string(chain.ClassProxied), "kas-a", "kas-c", "scheduling.k8s.io", "podgroups")); v != 1 {
		t.Errorf("%v proxied podgroups chains under their own labels, want 1", v)
	}
	if !h.co.caps.KnownResource("scheduling.k8s.io", "podgroups") || h.co.caps.KnownResource("g1.example", "r1") {
		t.Error("KnownResource")
	}
}

// TestSplitPartsFindTheirOwnRecords: once a pair without a forward's evidence is split, each
// apiserver's late records join its own part, and the parts are not joined again.
func TestSplitPartsFindTheirOwnRecords(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	r := configmaps("late-stage", t0)
	a := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond})
	b := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, end: 10 * time.Millisecond})
	h.feed(a[:1], b[:1]) // RequestReceived of each
	h.tick(t0.Add(40 * time.Second))
	if n := len(h.chains("late-stage")); n != 2 {
		t.Fatalf("%d chains after the split, want 2", n)
	}
	late := b[1:]
	for i := range late {
		late[i].ReceivedAt = t0.Add(2 * time.Minute)
	}
	h.feed(late)
	h.tick(t0.Add(3 * time.Minute))
	got := h.chains("late-stage")
	if len(got) != 2 {
		t.Fatalf("%d chains after kas-b's late record, want 2", len(got))
	}
	for _, c := range got {
		if c.Entry == nil || c.Peer != nil {
			t.Fatalf("%s: entry %v peer %v", c.ID, c.Entry, c.Peer)
		}
		want := []string{"RequestReceived"}
		if c.Entry.APIServer == "kas-b" {
			want = []string{"RequestReceived", "ResponseComplete"}
		}
		if !slices.Equal(c.Entry.Stages, want) {
			t.Errorf("%s's part: stages %v, want %v", c.Entry.APIServer, c.Entry.Stages, want)
		}
	}
	if n := len(h.co.j.lookup("late-stage")); n != 2 {
		t.Errorf("%d chains of the auditID in memory, want 2", n)
	}
}

// TestClientOnTheEntrysHost: a client on kas-a's host sends one GET to kas-a and, with the
// same Audit-ID and another identity, one to kas-b within the first's time: both records show
// kas-a's address, the shape of a forward whose client ran on its entry's host. It may be
// shown as one, but it pauses nothing (no identity_mismatch: a broken requestheader setup
// shows on every forward) and teaches nothing of kas-a, whose own configmaps answers stay local.
func TestClientOnTheEntrysHost(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	background(h, t0, t0.Add(40*time.Second))
	r := configmaps("host-pair", t0.Add(10*time.Second))
	a := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrA}, code: 200, end: 20 * time.Millisecond})
	b := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{addrA}, code: 200, start: 2 * time.Millisecond, end: 10 * time.Millisecond})
	for i := range b {
		b[i].UserName = "eve"
	}
	h.feed(a, b)
	later := configmaps("later-own", t0.Add(20*time.Second))
	h.feed(later.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 3 * time.Millisecond}))
	h.settle()
	for _, c := range h.chains("host-pair") {
		if c.HasFinding(chain.FindingIdentityMismatch) || c.Class == chain.ClassBroken {
			t.Errorf("%s: %s %v (%s)", c.ID, c.Class, c.Findings, c.Explanation)
		}
	}
	g := chain.GVR{Version: "v1", Resource: "configmaps"}
	if h.co.caps.ProxiedRecently("kas-a", g, r.at) {
		t.Error("kas-a is believed to forward configmaps")
	}
	if served, known := h.co.caps.Serves("kas-a", g, r.at); known && !served {
		t.Error("kas-a is believed not to serve configmaps")
	}
	expect(t, h.chain("later-own"), chain.ClassLocal)
	if tot := h.co.Recent(24 * time.Hour); tot.Chains[chain.ClassBroken] != 0 || tot.Findings[chain.FindingIdentityMismatch] != 0 {
		t.Errorf("window: %v %v", tot.Chains, tot.Findings)
	}
}

// TestRoutelessPathOfAServedResource: GET /api/v1/configmaps/NAME (a namespaced resource by a
// path it has no route for) gets the same 404 "could not find the requested resource" as a
// resource the apiserver does not serve, with objectRef configmaps. kas-a was seen to serve
// configmaps: the 404s are its own and honest, not misleading, and they do not teach that it
// stopped serving them.
func TestRoutelessPathOfAServedResource(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	background(h, t0, t0.Add(40*time.Second))
	for i := range 3 {
		r := configmaps(fmt.Sprintf("routeless-%d", i), t0.Add(time.Duration(10+i)*time.Second))
		r.uri, r.name = "/api/v1/configmaps/cm", "cm"
		h.feed(r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 404, message: msgResourceNotFound, end: time.Millisecond}))
	}
	h.settle()
	for i := range 3 {
		expect(t, h.chain(fmt.Sprintf("routeless-%d", i)), chain.ClassLocal)
	}
	if served, known := h.co.caps.Serves("kas-a", chain.GVR{Version: "v1", Resource: "configmaps"}, t0.Add(12*time.Second)); !known || !served {
		t.Errorf("kas-a serves configmaps: %v %v", served, known)
	}
	if n := h.co.Recent(24 * time.Hour).Chains[chain.ClassMisleading404]; n != 0 {
		t.Errorf("%d misleading 404s", n)
	}
}
