package correlate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// Addresses of the test control plane: three apiservers and a client.
const (
	addrA  = "10.0.0.11"
	addrB  = "10.0.0.12"
	addrC  = "10.0.0.13"
	client = "10.1.2.3"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// req describes one client request; the helpers below turn it into the audit records real
// apiservers write (see test/testdata/real/README.md, "What the capture shows").
type req struct {
	id       string
	verb     string
	uri      string
	group    string
	version  string
	resource string
	name     string
	user     string
	groups   []string
	at       time.Time // when the entry received it
}

func podgroups(id string, at time.Time) req {
	return req{id: id, verb: "list", uri: "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups?limit=10&labelSelector=a%3Db",
		group: "scheduling.k8s.io", version: "v1alpha2", resource: "podgroups", user: "alice", groups: []string{"ml", "system:authenticated"}, at: at}
}

func pods(id string, at time.Time) req {
	return req{id: id, verb: "get", uri: "/api/v1/namespaces/default/pods/web-1", version: "v1", resource: "pods", name: "web-1",
		user: "alice", groups: []string{"ml", "system:authenticated"}, at: at}
}

// side is how one apiserver recorded the request.
type sideOpts struct {
	apiserver   string
	sourceIPs   []string
	code        int32
	message     string
	objects     bool
	impersonate string // the entry's authenticated user when impersonating r.user
	uri         string // as this side recorded it (peers re-sort the query)
	start, end  time.Duration
	stages      []string
	groups      []string // overrides r.groups on this side
	received    time.Time
}

func (r req) records(o sideOpts) []record.Record {
	uri := r.uri
	if o.uri != "" {
		uri = o.uri
	}
	stages := o.stages
	if stages == nil {
		stages = []string{"RequestReceived", "ResponseComplete"}
	}
	recv := o.received
	if recv.IsZero() {
		recv = r.at.Add(time.Second)
	}
	var out []record.Record
	for _, st := range stages {
		rec := record.Record{
			APIServer: o.apiserver, AuditID: r.id, Stage: st, Level: "RequestResponse", Verb: r.verb, RequestURI: uri,
			Group: r.group, Version: r.version, Resource: r.resource, Name: r.name,
			UserName: r.user, UserGroups: r.groups, SourceIPs: o.sourceIPs, UserAgent: "kubectl/v1.36.3",
			RequestReceivedTimestamp: r.at.Add(o.start), StageTimestamp: r.at.Add(o.start), ReceivedAt: recv,
		}
		if o.groups != nil {
			rec.UserGroups = o.groups
		}
		if o.impersonate != "" {
			rec.ImpersonatedUser, rec.ImpersonatedGroups = r.user, rec.UserGroups
			rec.UserName, rec.UserGroups = o.impersonate, []string{"system:masters", "system:authenticated"}
		}
		if st != "RequestReceived" {
			rec.StageTimestamp = r.at.Add(o.end)
			rec.Code, rec.Message = o.code, o.message
			if o.message != "" {
				rec.Status = "Failure"
			}
			rec.HasResponseObject = o.objects
		}
		out = append(out, rec)
	}
	return out
}

// entry: the apiserver that got the client's call and forwarded it (bare status, no objects).
func (r req) entry(apiserver string, code int32) []record.Record {
	return r.records(sideOpts{apiserver: apiserver, sourceIPs: []string{client}, code: code, end: 20 * time.Millisecond})
}

// peer: the apiserver that served the forwarded request; one more hop, objects, full status.
func (r req) peer(apiserver, from string, code int32) []record.Record {
	return r.records(sideOpts{apiserver: apiserver, sourceIPs: []string{client, from}, code: code, objects: true,
		start: 2 * time.Millisecond, end: 15 * time.Millisecond, uri: sortedQuery(r.uri)})
}

// local: the apiserver served the request itself.
func (r req) local(apiserver string, code int32, message string) []record.Record {
	return r.records(sideOpts{apiserver: apiserver, sourceIPs: []string{client}, code: code, message: message, objects: true, end: 5 * time.Millisecond})
}

func sortedQuery(uri string) string {
	if uri == "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups?limit=10&labelSelector=a%3Db" {
		return "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups?labelSelector=a%3Db&limit=10"
	}
	return uri
}

// harness feeds records through a real Correlator (frames encoded as the receiver does) and
// collects what it hands to its sink.
type harness struct {
	t    *testing.T
	co   *Correlator
	sink *memSink
	pos  spool.Position
}

type memSink struct {
	mu     sync.Mutex
	chains []chain.Chain
	fail   int
	calls  int
}

func (s *memSink) WriteChains(_ context.Context, cs []chain.Chain) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail > 0 {
		s.fail--
		return fmt.Errorf("store down")
	}
	for i := range cs {
		s.chains = append(s.chains, cs[i].Clone())
	}
	return nil
}

func newHarness(t *testing.T, opts JoinOptions) *harness {
	t.Helper()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	caps := NewCapabilities(15 * time.Minute)
	for name, addr := range map[string]string{"kas-a": addrA, "kas-b": addrB, "kas-c": addrC} {
		caps.NoteServer(name, "", addr, t0)
	}
	sink := &memSink{}
	co := New(Config{Join: opts, Codec: codec, Caps: caps, Sink: sink})
	co.now = func() time.Time { return t0.Add(time.Hour) }
	return &harness{t: t, co: co, sink: sink}
}

// feed delivers records as one frame per apiserver run, like webhook batches.
func (h *harness) feed(recs ...[]record.Record) {
	h.t.Helper()
	var entries []spool.Entry
	for _, rs := range recs {
		if len(rs) == 0 {
			continue
		}
		keys := make([]record.Key, len(rs))
		for i := range rs {
			keys[i] = rs[i].Key()
		}
		frame, err := h.co.codec.AppendFrame(nil, rs[0].APIServer, rs[0].ReceivedAt, rs, keys)
		if err != nil {
			h.t.Fatal(err)
		}
		entries = append(entries, spool.Entry{Pos: h.pos, End: h.pos + spool.Position(len(frame)), Payload: frame})
		h.pos += spool.Position(len(frame))
	}
	if _, err := h.co.Consume(context.Background(), entries); err != nil {
		h.t.Fatal(err)
	}
}

// settle closes every chain (the spool went idle long after the records), also those that
// waited one more window for evidence.
func (h *harness) settle() {
	h.t.Helper()
	for range 2 {
		if _, err := h.co.Consume(context.Background(), nil); err != nil {
			h.t.Fatal(err)
		}
		if h.co.j.Open() == 0 {
			return
		}
		next := h.co.now().Add(h.co.opts.Window + time.Second)
		h.co.now = func() time.Time { return next }
	}
}

func (h *harness) chain(id string) chain.Chain {
	h.t.Helper()
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	var found []chain.Chain
	for _, c := range h.sink.chains {
		if c.AuditID == id {
			found = append(found, c)
		}
	}
	if len(found) == 0 {
		h.t.Fatalf("no final chain for %s", id)
	}
	return found[len(found)-1]
}

func expect(t *testing.T, c chain.Chain, class chain.Class, findings ...chain.Finding) {
	t.Helper()
	if c.Class != class {
		t.Errorf("%s: class %s, want %s (%s)", c.AuditID, c.Class, class, c.Explanation)
	}
	got := slices.Clone(c.Findings)
	slices.Sort(got)
	want := slices.Clone(findings)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: findings %v, want %v (%s)", c.AuditID, c.Findings, findings, c.Explanation)
	}
	if c.State != chain.StateFinal {
		t.Errorf("%s: state %s", c.AuditID, c.State)
	}
}

// learnPodgroupsOnC gives the view its first evidence: kas-a forwards podgroups to kas-c.
func learnPodgroupsOnC(h *harness) {
	r := podgroups("seed", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
}

func TestClassesAndFindings(t *testing.T) {
	at := t0.Add(time.Minute)
	cases := []struct {
		name     string
		records  func(h *harness) string
		class    chain.Class
		findings []chain.Finding
		check    func(t *testing.T, c chain.Chain)
	}{{
		name:    "local",
		records: func(h *harness) string { r := pods("l1", at); h.feed(r.local("kas-a", 200, "")); return r.id },
		class:   chain.ClassLocal,
	}, {
		name: "proxied",
		records: func(h *harness) string {
			r := podgroups("p1", at)
			h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
			return r.id
		},
		class: chain.ClassProxied,
		check: func(t *testing.T, c chain.Chain) {
			if c.Entry.APIServer != "kas-a" || c.Peer.APIServer != "kas-c" {
				t.Errorf("roles entry=%s peer=%s", c.Entry.APIServer, c.Peer.APIServer)
			}
			if c.EntryDurationSeconds != 0.020 || c.PeerDurationSeconds != 0.013 {
				t.Errorf("durations entry %v peer %v", c.EntryDurationSeconds, c.PeerDurationSeconds)
			}
			if d := c.ForwardingOverheadSeconds - 0.007; d > 1e-9 || d < -1e-9 {
				t.Errorf("overhead %v, want 0.007", c.ForwardingOverheadSeconds)
			}
			if c.User != "alice" || c.Code != 200 || c.Resource != "podgroups" {
				t.Errorf("user %q code %d resource %q", c.User, c.Code, c.Resource)
			}
		},
	}, {
		name: "proxied, peer's records arrive first and the query string is re-sorted",
		records: func(h *harness) string {
			r := podgroups("p2", at)
			h.feed(r.peer("kas-c", addrB, 200)) // forwarded by kas-b: it comes from kas-b's address
			h.feed(r.entry("kas-b", 200))
			return r.id
		},
		class: chain.ClassProxied,
		check: func(t *testing.T, c chain.Chain) {
			if c.Entry.APIServer != "kas-b" || c.Peer.APIServer != "kas-c" {
				t.Errorf("roles entry=%s peer=%s", c.Entry.APIServer, c.Peer.APIServer)
			}
		},
	}, {
		name: "proxied, client on the entry's host so the peer's sourceIPs collapse",
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("p3", at)
			e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrA}, code: 200, end: 20 * time.Millisecond})
			p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{addrA}, code: 200, objects: true, start: 2 * time.Millisecond, end: 15 * time.Millisecond})
			h.feed(p, e)
			return r.id
		},
		class: chain.ClassProxied,
		check: func(t *testing.T, c chain.Chain) {
			if c.Entry.APIServer != "kas-a" {
				t.Errorf("entry %s, want kas-a from capability and objects", c.Entry.APIServer)
			}
		},
	}, {
		name: "proxy failed: bare 503 for a resource only the peer serves",
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("f1", at)
			h.feed(r.entry("kas-a", 503))
			return r.id
		},
		class: chain.ClassProxyFailed,
	}, {
		name: "proxy failed: the peer's endpoint is gone",
		records: func(h *harness) string {
			r := podgroups("f2", at)
			h.feed(r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 503, objects: true,
				message: "Error getting ip and port info of the remote server while proxying", end: time.Millisecond}))
			return r.id
		},
		class: chain.ClassProxyFailed,
	}, {
		name: "misleading 404: the only server of the resource is gone",
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("m1", at)
			h.feed(r.local("kas-a", 404, msgResourceNotFound))
			return r.id
		},
		class: chain.ClassMisleading404,
	}, {
		name: "local 404: nobody serves the resource",
		records: func(h *harness) string {
			r := podgroups("n1", at)
			r.group, r.uri = "widgets.example.com", "/apis/widgets.example.com/v1/widgets"
			h.feed(r.local("kas-a", 404, ""))
			return r.id
		},
		class: chain.ClassLocal,
	}, {
		name: "local 404: a missing object of a served resource",
		records: func(h *harness) string {
			r := pods("n2", at)
			h.feed(r.local("kas-a", 404, `pods "web-1" not found`))
			return r.id
		},
		class: chain.ClassLocal,
	}, {
		name: "broken: a peer record without its entry record",
		records: func(h *harness) string {
			r := podgroups("b1", at)
			h.feed(r.peer("kas-c", addrA, 201))
			return r.id
		},
		class:    chain.ClassBroken,
		findings: []chain.Finding{chain.FindingEntryAuditMissing},
		check: func(t *testing.T, c chain.Chain) {
			if c.Entry != nil || c.Peer == nil || c.Peer.APIServer != "kas-c" {
				t.Errorf("want only a peer side, got entry=%v peer=%v", c.Entry, c.Peer)
			}
		},
	}, {
		name: "broken: a success from an entry that does not serve the resource, no peer record",
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("b2", at)
			r.verb = "create"
			h.feed(r.entry("kas-a", 201))
			return r.id
		},
		class:    chain.ClassBroken,
		findings: []chain.Finding{chain.FindingPeerAuditMissing},
	}, {
		name: "broken: the peer recorded only RequestReceived (killed mid-request)",
		records: func(h *harness) string {
			r := podgroups("b3", at)
			p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, stages: []string{"RequestReceived"}, start: time.Millisecond})
			h.feed(r.entry("kas-a", 201), p)
			return r.id
		},
		// kas-c's stream falls silent right after (nothing more from it): restart noise.
		class:    chain.ClassBroken,
		findings: []chain.Finding{chain.FindingPeerAuditMissing, chain.FindingPeerDown},
	}, {
		name: "loop: three apiservers recorded one request",
		records: func(h *harness) string {
			r := podgroups("x1", at)
			second := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, addrA, addrC}, code: 200, objects: true, start: 3 * time.Millisecond, end: 10 * time.Millisecond})
			h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200), second)
			return r.id
		},
		class: chain.ClassLoop,
	}, {
		name: "loop: a lone record that proves a second hop",
		records: func(h *harness) string {
			r := podgroups("x2", at)
			h.feed(r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, addrA, addrC}, code: 200, objects: true, start: 3 * time.Millisecond, end: 10 * time.Millisecond}))
			return r.id
		},
		class:    chain.ClassLoop,
		findings: []chain.Finding{chain.FindingEntryAuditMissing},
	}, {
		name: "loop: the second and third hops recorded, the first hop's record missing",
		records: func(h *harness) string {
			r := podgroups("x3", at)
			third := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, addrA, addrC}, code: 200, objects: true, start: 3 * time.Millisecond, end: 10 * time.Millisecond})
			h.feed(r.peer("kas-c", addrA, 200), third)
			return r.id
		},
		class: chain.ClassLoop,
	}, {
		name: "proxied: the client runs on an apiserver's host (its address first), one hop",
		records: func(h *harness) string {
			r := podgroups("x4", at)
			entry := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrC}, code: 200, start: 0, end: 12 * time.Millisecond})
			peer := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{addrC, addrA}, code: 200, objects: true, start: 3 * time.Millisecond, end: 10 * time.Millisecond})
			h.feed(entry, peer)
			return r.id
		},
		class: chain.ClassProxied,
	}, {
		name: "internal: a peer's discovery fetch",
		records: func(h *harness) string {
			r := req{id: "i1", verb: "get", uri: "/apis", user: userAPIServer, groups: []string{"system:masters"}, at: at}
			recs := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrC}, code: 200, end: time.Millisecond})
			for i := range recs {
				recs[i].UserAgent = ""
			}
			h.feed(recs)
			return r.id
		},
		class: chain.ClassInternal,
	}, {
		name: "local: an apiserver's loopback call to itself",
		records: func(h *harness) string {
			r := req{id: "i2", verb: "get", uri: "/apis", user: userAPIServer, groups: []string{"system:masters"}, at: at}
			recs := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrA}, code: 200, end: time.Millisecond})
			for i := range recs {
				recs[i].UserAgent = "kube-apiserver/v1.35.4 (linux/amd64) kubernetes/6d6e9c5"
			}
			h.feed(recs)
			return r.id
		},
		class: chain.ClassLocal,
	}, {
		name: "identity mismatch: the peer saw other groups",
		records: func(h *harness) string {
			r := podgroups("id1", at)
			p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, objects: true, groups: []string{"system:authenticated"}, start: time.Millisecond, end: 10 * time.Millisecond})
			h.feed(r.entry("kas-a", 200), p)
			return r.id
		},
		class:    chain.ClassProxied,
		findings: []chain.Finding{chain.FindingIdentityMismatch},
	}, {
		name: "impersonation flattened: the peer sees only the impersonated user",
		records: func(h *harness) string {
			r := podgroups("im1", at)
			e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, impersonate: "admin", end: 20 * time.Millisecond})
			h.feed(e, r.peer("kas-c", addrA, 200))
			return r.id
		},
		class:    chain.ClassProxied,
		findings: []chain.Finding{chain.FindingImpersonationFlattened},
		check: func(t *testing.T, c chain.Chain) {
			if c.User != "alice" || c.RealUser != "admin" {
				t.Errorf("user %q real user %q, want alice acting through admin", c.User, c.RealUser)
			}
		},
	}, {
		name: "impersonation recorded only from the ResponseComplete stage on (as real apiservers do)",
		records: func(h *harness) string {
			r := podgroups("im2", at)
			e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, impersonate: "admin", end: 20 * time.Millisecond})
			e[0].ImpersonatedUser, e[0].ImpersonatedGroups = "", nil // RequestReceived
			h.feed(e, r.peer("kas-c", addrA, 200))
			return r.id
		},
		class:    chain.ClassProxied,
		findings: []chain.Finding{chain.FindingImpersonationFlattened},
	}, {
		name: "a watch the client cancelled: the entry records Panic after ResponseStarted",
		records: func(h *harness) string {
			r := podgroups("wc", at)
			r.verb = "watch"
			e := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"RequestReceived", "ResponseStarted", "Panic"}, end: 20 * time.Millisecond})
			e[2].Code, e[2].Message = 500, "APIServer panic'd: net/http: abort Handler"
			p := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, stages: []string{"RequestReceived", "ResponseStarted", "ResponseComplete"}, start: time.Millisecond, end: 19 * time.Millisecond})
			h.feed(e, p)
			return r.id
		},
		class: chain.ClassProxied,
	}, {
		name: "status mismatch: the entry answered other than the peer",
		records: func(h *harness) string {
			r := podgroups("s1", at)
			h.feed(r.entry("kas-a", 500), r.peer("kas-c", addrA, 200))
			return r.id
		},
		class:    chain.ClassProxied,
		findings: []chain.Finding{chain.FindingStatusMismatch},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, DefaultJoinOptions())
			id := c.records(h)
			h.settle()
			ch := h.chain(id)
			expect(t, ch, c.class, c.findings...)
			if c.check != nil {
				c.check(t, ch)
			}
		})
	}
}

func TestReusedAuditIDMakesSeparateChains(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	a := pods("same-id", t0)
	b := podgroups("same-id", t0.Add(2*time.Minute)) // another request with the client's own Audit-ID
	c := pods("same-id", t0.Add(10*time.Second))     // the same request again, a little later
	h.feed(a.local("kas-a", 200, ""), b.entry("kas-a", 200), b.peer("kas-c", addrA, 200), c.local("kas-a", 200, ""))
	h.settle()
	var n int
	for _, ch := range h.sink.chains {
		if ch.AuditID == "same-id" {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d chains for three requests sharing an Audit-ID", n)
	}
}

func TestLateRecordReopensAndReclassifies(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	r := podgroups("late", t0)
	h.feed(r.peer("kas-c", addrA, 200))
	// The chain window passes on the stream: other traffic 40 s later.
	other := pods("other", t0.Add(40*time.Second))
	h.feed(other.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: t0.Add(41 * time.Second)}))
	if c := h.chain("late"); c.Class != chain.ClassBroken || c.Revision != 1 {
		t.Fatalf("before the late record: %s revision %d", c.Class, c.Revision)
	}
	// kas-a's webhook was backing off; its record arrives two minutes late.
	late := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: t0.Add(2 * time.Minute)})
	h.feed(late)
	h.settle()
	c := h.chain("late")
	expect(t, c, chain.ClassProxied)
	if c.Revision != 2 || c.ID != h.sink.chains[0].ID {
		t.Fatalf("reopened chain: revision %d, id %s vs %s", c.Revision, c.ID, h.sink.chains[0].ID)
	}
	// What the gate reads counts the chain once, as it is now.
	h.co.now = func() time.Time { return t0.Add(3 * time.Minute) }
	if tot := h.co.Recent(10 * time.Minute); tot.Chains[chain.ClassBroken] != 0 || tot.Chains[chain.ClassProxied] != 1 || tot.Forwarded != 1 {
		t.Fatalf("window after reclassification: %+v", tot)
	}
}

func TestEvictionFinalisesOldestAndCountsIt(t *testing.T) {
	opts := DefaultJoinOptions()
	opts.MaxOpen = 2
	h := newHarness(t, opts)
	for i := range 3 {
		r := pods(fmt.Sprintf("e%d", i), t0.Add(time.Duration(i)*time.Millisecond))
		h.feed(r.local("kas-a", 200, ""))
	}
	if h.co.j.Open() != 2 {
		t.Fatalf("%d open chains with MaxOpen 2", h.co.j.Open())
	}
	c := h.chain("e0")
	if !c.Evicted || c.Class != chain.ClassLocal {
		t.Fatalf("evicted chain: %+v", c)
	}
	h.settle()
	if len(h.sink.chains) != 3 {
		t.Fatalf("%d chains written, want all 3 (none lost to eviction)", len(h.sink.chains))
	}
}

func TestRunningWatchStaysOpen(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	r := podgroups("w1", t0)
	r.verb, r.uri = "watch", "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups?watch=true"
	started := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"RequestReceived", "ResponseStarted"}, end: time.Millisecond})
	peerStarted := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, stages: []string{"RequestReceived", "ResponseStarted"}, start: time.Millisecond, end: time.Millisecond})
	h.feed(started, peerStarted)
	// Five minutes of other traffic: far past the chain window.
	other := pods("o", t0.Add(5*time.Minute))
	h.feed(other.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: t0.Add(5 * time.Minute)}))
	for _, c := range h.sink.chains {
		if c.AuditID == "w1" {
			t.Fatalf("a running watch was finalised: %s", c.Class)
		}
	}
	end := t0.Add(6 * time.Minute)
	done := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"ResponseComplete"}, end: 6 * time.Minute, received: end})
	peerDone := r.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, stages: []string{"ResponseComplete"}, start: time.Millisecond, end: 6 * time.Minute, received: end})
	h.feed(done, peerDone)
	h.settle()
	c := h.chain("w1")
	expect(t, c, chain.ClassProxied)
	if c.Records != 6 {
		t.Fatalf("watch chain holds %d records, want 6", c.Records)
	}
}

func TestSinkOutageLosesNoChain(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	h.sink.fail = 2
	for i := range 5 {
		r := pods(fmt.Sprintf("s%d", i), t0)
		h.feed(r.local("kas-a", 200, ""))
	}
	h.settle() // chains final, store still failing
	if len(h.co.pending) == 0 {
		t.Fatal("nothing pending while the store is down")
	}
	safe := h.co.safeLocked()
	if safe != 0 {
		t.Fatalf("safe position %d while chains from position 0 are unwritten", safe)
	}
	h.settle()
	h.settle()
	if len(h.sink.chains) != 5 || len(h.co.pending) != 0 {
		t.Fatalf("after the store came back: %d written, %d pending", len(h.sink.chains), len(h.co.pending))
	}
	if h.co.safeLocked() != h.pos {
		t.Fatalf("safe position %d, want the end %d", h.co.safeLocked(), h.pos)
	}
}
