package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/loadgen"
	"github.com/peertrail/peertrail/simulate"
)

// Traffic is what the apiservers of a run send: every webhook batch holds exactly Batch events,
// the sender's own requests (local ones, and its side of those it forwards to the next
// apiserver) and the peer's side of the requests the previous apiserver forwarded to it in
// the batch with the same number. Events are shaped as the real captures show
// (test/testdata/real/README.md): Metadata level, ResponseComplete for every request and
// RequestReceived too for writes (deploy/control-plane/audit-policy.yaml keeps it for writes
// only); the entry's record of a forwarded request has the bare status {code} and one source
// IP, the peer's adds the entry's address to sourceIPs, re-sorts the query, nests its
// timestamps inside the entry's and writes the whole status on failure.
type Traffic struct {
	// APIServers are the senders' names; forwarding needs two or more.
	APIServers []string
	// Batch is events per webhook batch.
	Batch int
	// ProxiedFraction is the share of requests that are forwarded to a peer (0..1).
	ProxiedFraction float64
	// Seed makes the events and the auditIDs' fixed part: a run on a data directory that an
	// earlier run filled needs another seed, or its events are recognised as resent.
	Seed uint64

	// per batch, the same for every sender
	requests, forwarded int
	bodies              []*pairTemplate
	dates               *batchDates
}

// batchDates gives every sender's batch of one number the same date: when the first of them
// is rendered. The two sides of a forwarded request are in two senders' batches, rendered
// apart; one date keeps the peer's times inside the entry's.
type batchDates struct {
	newest time.Time        // the newest time in any sender's template
	now    func() time.Time // the clock; tests move it
	mu     sync.Mutex
	ring   [4096]struct {
		seq   int
		shift time.Duration
		set   bool
	}
}

// shift is how far batch seq's times move from the templates'.
func (d *batchDates) shift(seq int) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := &d.ring[seq%len(d.ring)]
	if !e.set || e.seq != seq {
		e.seq, e.shift, e.set = seq, d.now().Sub(d.newest), true
	}
	return e.shift
}

// NewTraffic renders every sender's batch template.
func NewTraffic(apiservers []string, batch int, proxied float64, seed uint64) (*Traffic, error) {
	n := len(apiservers)
	switch {
	case n == 0 || n > 4096:
		return nil, fmt.Errorf("traffic: 1 to 4096 apiservers, not %d", n)
	case batch <= 0 || batch > 0xffff:
		return nil, fmt.Errorf("traffic: batch of 1 to 65535 events, not %d", batch)
	case proxied < 0 || proxied > 1:
		return nil, fmt.Errorf("traffic: the proxied fraction %v is not within 0..1", proxied)
	case proxied > 0 && n < 2:
		return nil, fmt.Errorf("traffic: forwarded requests need two apiservers or more")
	}
	t := &Traffic{APIServers: apiservers, Batch: batch, ProxiedFraction: proxied, Seed: seed}
	plan := t.plan()
	// Every sender's own requests first (their entry sides), then the peer sides of its
	// predecessor's: the peer side is built from the predecessor's entry event, so that both
	// agree on the request, as the two records of one forwarded request do.
	base := make([][]auditv1.Event, n)
	for si := range n {
		g := simulate.NewEvents(seed+uint64(si)*7919, nil)
		base[si] = make([]auditv1.Event, len(plan))
		for r, p := range plan {
			ev := g.Next()
			ev.Verb = p.verb(ev.Verb)
			if p.forwarded {
				unserved(si, n).request(&ev)
			}
			base[si][r] = ev
		}
	}
	for si := range n {
		prev := (si + n - 1) % n
		var items []auditv1.Event
		var slots []slot
		for r, p := range plan {
			for _, ev := range p.entrySide(base[si][r]) {
				items = append(items, ev)
				slots = append(slots, slot{own: true, req: r})
			}
		}
		for r, p := range plan {
			if p.forwarded {
				for _, ev := range p.peerSide(base[prev][r], apiserverAddress(prev)) {
					items = append(items, ev)
					slots = append(slots, slot{own: false, req: r})
				}
			}
		}
		if len(items) != batch {
			return nil, fmt.Errorf("traffic: sender %d's batch has %d events, want %d", si, len(items), batch)
		}
		tmpl, err := newPairTemplate(items, slots, si, n)
		if err != nil {
			return nil, err
		}
		t.bodies = append(t.bodies, tmpl)
	}
	t.dates = &batchDates{now: time.Now}
	for _, b := range t.bodies {
		if nw := b.stamps.Newest(); nw.After(t.dates.newest) {
			t.dates.newest = nw
		}
		b.dates = t.dates
	}
	for _, p := range plan {
		t.requests++
		if p.forwarded {
			t.forwarded++
		}
	}
	return t, nil
}

// Requests is how many requests (chains) one batch of each sender starts; Forwarded how many
// of them are forwarded.
func (t *Traffic) Requests() int  { return t.requests }
func (t *Traffic) Forwarded() int { return t.forwarded }

// Body is sender si's batch template, for loadgen.Options.Bodies.
func (t *Traffic) Body(si int) (loadgen.Body, error) {
	if si < 0 || si >= len(t.bodies) {
		return nil, fmt.Errorf("traffic: no sender %d", si)
	}
	return t.bodies[si], nil
}

// apiserverAddress is the address apiserver i forwards from: apart from the clients'
// 10.0.0.0/16 that simulate uses.
func apiserverAddress(i int) string {
	return netip.AddrFrom4([4]byte{192, 168, byte(100 + i/250), byte(1 + i%250)}).String()
}

// resource is a group/version/resource the traffic forwards.
type resource struct{ group, version, resource, namespace string }

// Each apiserver forwards requests for one resource it does not serve to the next apiserver,
// which serves it, as in an upgrade where a resource is served by one version only; its own
// resource differs from the next one's, so that what the correlator learns each apiserver
// serves stays true (simulate's local requests use none of these). An even count alternates
// two; an odd count gives the last apiserver a third.
var forwardedResources = []resource{
	{"scheduling.k8s.io", "v1alpha2", "workloads", "training"},
	{"storage.k8s.io", "v1alpha1", "volumeattributesclasses", ""},
	{"coordination.k8s.io", "v1alpha2", "leasecandidates", "kube-system"},
}

func unserved(si, n int) resource {
	if n%2 == 1 && si == n-1 && n > 1 {
		return forwardedResources[2]
	}
	return forwardedResources[si%2]
}

// request rewrites ev's objectRef and URI to r, keeping its verb and name; a list's query is
// written unsorted, as a client may, so that the peer's re-sorted one differs.
func (r resource) request(ev *auditv1.Event) {
	name := ""
	if ev.Verb != "list" && ev.Verb != "watch" && ev.Verb != "create" {
		id := string(ev.AuditID)
		name = r.resource + "-" + id[len(id)-5:]
	}
	ev.ObjectRef = &auditv1.ObjectReference{Resource: r.resource, Namespace: r.namespace, Name: name, APIGroup: r.group, APIVersion: r.version}
	uri := "/apis/" + r.group + "/" + r.version
	if r.namespace != "" {
		uri += "/namespaces/" + r.namespace
	}
	uri += "/" + r.resource
	if name != "" {
		uri += "/" + name
	}
	if ev.Verb == "list" {
		uri += "?resourceVersion=0&limit=500"
	}
	ev.RequestURI = uri
}

// request is one request of the plan: which events it makes on each side.
type request struct {
	forwarded, write bool
}

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "update", "patch", "delete"}
)

func isWrite(verb string) bool { return slices.Contains(writeVerbs, verb) }

// verb keeps the generator's verb when it is of the planned kind, else picks one that is.
func (p request) verb(v string) string {
	switch {
	case p.write == isWrite(v):
		return v
	case p.write:
		return writeVerbs[len(v)%len(writeVerbs)]
	}
	return readVerbs[len(v)%len(readVerbs)]
}

// events is what the request puts into the batches: per side, 2 for a write (RequestReceived
// and ResponseComplete), 1 for a read.
func (p request) events() int {
	n := 1
	if p.write {
		n = 2
	}
	if p.forwarded {
		n *= 2
	}
	return n
}

// plan lays out one batch's requests so that their events fill it exactly: about
// ProxiedFraction of them forwarded and, as simulate's verbs come, four in seven writes; the
// last ones shrink to local reads where a larger request would not fit.
func (t *Traffic) plan() []request {
	var (
		out       []request
		acc       float64
		remaining = t.Batch
	)
	for i := 0; remaining > 0; i++ {
		acc += t.ProxiedFraction
		p := request{write: i%7 >= 3}
		if acc >= 1 {
			acc--
			p.forwarded = true
		}
		if p.events() > remaining {
			p = request{}
		}
		out = append(out, p)
		remaining -= p.events()
	}
	return out
}

// entrySide is the events the entry apiserver writes: the whole request when it is local, the
// forwarding entry's record (bare status, no objectRef name on create) when forwarded.
func (p request) entrySide(ev auditv1.Event) []auditv1.Event {
	rc := ev
	rc.Stage = auditv1.StageResponseComplete
	if p.forwarded {
		rc.ResponseStatus = &metav1.Status{Code: ev.ResponseStatus.Code}
		// The entry took longer than the peer: the peer's timestamps nest inside.
		rc.StageTimestamp = metav1.NewMicroTime(ev.StageTimestamp.Add(2 * time.Millisecond))
	}
	return p.stages(rc)
}

// peerSide is the events the peer writes of a request ev's entry forwarded from entryAddr.
func (p request) peerSide(ev auditv1.Event, entryAddr string) []auditv1.Event {
	rc := ev
	rc.Stage = auditv1.StageResponseComplete
	rc.SourceIPs = append(slices.Clone(ev.SourceIPs), entryAddr)
	if path, query, ok := strings.Cut(ev.RequestURI, "?"); ok {
		parts := strings.Split(query, "&")
		slices.Sort(parts)
		rc.RequestURI = path + "?" + strings.Join(parts, "&")
	}
	rc.RequestReceivedTimestamp = metav1.NewMicroTime(ev.RequestReceivedTimestamp.Add(500 * time.Microsecond))
	rc.StageTimestamp = metav1.NewMicroTime(ev.StageTimestamp.Add(time.Millisecond))
	if code := ev.ResponseStatus.Code; code >= 400 {
		rc.ResponseStatus = &metav1.Status{Code: code, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound,
			Message: "the server could not find the requested resource"}
	}
	return p.stages(rc)
}

// stages adds a write's RequestReceived record before its ResponseComplete.
func (p request) stages(rc auditv1.Event) []auditv1.Event {
	if !p.write {
		return []auditv1.Event{rc}
	}
	rr := rc
	rr.Stage = auditv1.StageRequestReceived
	rr.StageTimestamp = rc.RequestReceivedTimestamp
	rr.ResponseStatus = nil
	return []auditv1.Event{rr, rc}
}

// slot says whose request an event's auditID names: the sender's own (own) or its
// predecessor's, and which request of the batch.
type slot struct {
	own bool
	req int
}

// pairTemplate is one sender's EventList whose auditIDs are rewritten per batch: the last 12
// hex digits of each name the request's owner, the batch number and the request, so that the
// peer side of a forwarded request carries its entry's auditID. Its times are rewritten too,
// to when the batch is sent (batchDates).
type pairTemplate struct {
	body    []byte
	offsets []int
	stamps  simulate.Stamps
	dates   *batchDates
	slots   []slot
	self, n int
}

func newPairTemplate(items []auditv1.Event, slots []slot, self, n int) (*pairTemplate, error) {
	list := auditv1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: auditv1.SchemeGroupVersion.String()}, Items: items}
	body, err := json.Marshal(&list)
	if err != nil {
		return nil, fmt.Errorf("traffic: encode a batch: %w", err)
	}
	stamps, err := simulate.FindStamps(body)
	if err != nil {
		return nil, fmt.Errorf("traffic: %w", err)
	}
	t := &pairTemplate{body: body, stamps: stamps, slots: slots, self: self, n: n}
	from := 0
	for _, it := range items {
		id := []byte(`"auditID":"` + string(it.AuditID) + `"`)
		i := bytes.Index(body[from:], id)
		if i < 0 {
			return nil, fmt.Errorf("traffic: auditID %s not found in the batch", it.AuditID)
		}
		start := from + i + len(id) - 1 - 12
		t.offsets = append(t.offsets, start)
		from = start
	}
	return t, nil
}

// AppendRender implements loadgen.Body. The sender argument is ignored: the template knows
// whose it is.
func (t *pairTemplate) AppendRender(dst []byte, _, seq int) []byte {
	b := append(dst[:0], t.body...)
	prev := (t.self + t.n - 1) % t.n
	for i, off := range t.offsets {
		owner := prev
		if t.slots[i].own {
			owner = t.self
		}
		_ = fmt.Appendf(b[:off], "%03x%05x%04x", owner&0xfff, seq&0xfffff, t.slots[i].req&0xffff) // overwrites in place
	}
	t.stamps.Move(b, t.dates.shift(seq))
	return b
}
