// Package storetest builds audit traffic and chains shaped like a real Mixed Version Proxy
// rolling upgrade, for the store's tests, benchmarks and demos: three apiservers (kas-a and
// kas-b on v1.35.4, kas-c on v1.36.3, which alone serves scheduling.k8s.io/v1alpha2
// podgroups), background traffic, forwarded requests with both audit records, and each failure
// the real captures show (test/testdata/real/README.md: misleading 404s, 503s from a killed
// peer, broken chains, identity lost on the hop, the apiservers' own peer discovery).
//
// The records are produced the way the receiver produces them: audit.k8s.io/v1 EventList JSON
// bodies decoded by record.Decode. The chains are what the correlator is specified to make of
// them; the store does not depend on how they were computed.
package storetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
)

// The apiservers of the scenario.
var (
	APIServers = []string{"kas-a", "kas-b", "kas-c"}
	Versions   = map[string]string{"kas-a": "v1.35.4", "kas-b": "v1.35.4", "kas-c": "v1.36.3"}
	addresses  = map[string]string{"kas-a": "10.0.0.11", "kas-b": "10.0.0.12", "kas-c": "10.0.0.13"}
	commits    = map[string]string{"v1.35.4": "6d6e9c5", "v1.36.3": "8b1a2c7"}
)

// Scenario is the traffic of one window.
type Scenario struct {
	// Records as the receiver would spool them, in receive order, and the same records as
	// the EventList bodies each apiserver posted.
	Records []record.Record
	Posts   []Post
	// Chains as the correlator would emit them (final).
	Chains []chain.Chain
	// Expect maps a class (or "finding:<f>") to the auditIDs that have it.
	Expect map[string][]string
}

// Post is one webhook POST body.
type Post struct {
	APIServer  string
	ReceivedAt time.Time
	Body       []byte
}

// Options size a scenario.
type Options struct {
	// Begin is when the window begins (default: Duration before now); requests are spread
	// over Duration (default 10 minutes).
	Begin    time.Time
	Duration time.Duration
	// Background is the number of ordinary local requests (default 300).
	Background int
	// Seed makes the scenario reproducible.
	Seed uint64
}

type builder struct {
	rng   *rand.Rand
	begin time.Time
	span  time.Duration
	// events per apiserver, in stage time order within the posts later
	events map[string][]auditv1.Event
	sc     *Scenario
	seq    int
}

// Build returns the scenario.
func Build(o Options) (*Scenario, error) {
	if o.Background == 0 {
		o.Background = 300
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	if o.Begin.IsZero() {
		o.Begin = time.Now().UTC().Add(-o.Duration)
	}
	b := &builder{
		rng:    rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed)),
		begin:  o.Begin.UTC(),
		span:   o.Duration,
		events: map[string][]auditv1.Event{},
		sc:     &Scenario{Expect: map[string][]string{}},
	}
	b.background(o.Background, o.Seed)
	for range 40 {
		b.proxied("kas-a", "kas-c", "alice@example.com", "", false)
	}
	for range 20 {
		b.proxied("kas-b", "kas-c", "system:serviceaccount:training:trainer", "", false)
	}
	for range 6 {
		b.proxied("kas-a", "kas-c", "admin", "alice@example.com", false) // impersonation flattened
	}
	for range 5 {
		b.proxied("kas-b", "kas-c", "bob@example.com", "", true) // the peer lost the UID
	}
	for range 12 {
		b.misleading404("kas-b")
	}
	for range 4 {
		b.misleading404("kas-a")
	}
	for range 8 {
		b.proxyFailed("kas-a", "error trying to reach service: dial tcp 10.0.0.13:6443: connect: connection refused")
	}
	for range 3 {
		b.proxyFailed("kas-b", "Error getting ip and port info of the remote server while proxying")
	}
	for range 3 {
		b.brokenPeerOnly("kas-a", "kas-c")
	}
	for range 2 {
		b.brokenEntryOnly("kas-b", "kas-c")
	}
	for _, a := range APIServers {
		b.ownRequests(a, 5)
	}
	b.discovery("kas-a", "kas-c")
	b.discovery("kas-c", "kas-b")
	if err := b.post(); err != nil {
		return nil, err
	}
	sort.Slice(b.sc.Chains, func(i, j int) bool { return b.sc.Chains[i].FirstReceived.Before(b.sc.Chains[j].FirstReceived) })
	return b.sc, nil
}

func (b *builder) at() time.Time {
	return b.begin.Add(time.Duration(b.rng.Int64N(int64(b.span - 5*time.Second))))
}

func (b *builder) auditID() string {
	b.seq++
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", b.rng.Uint32(), b.seq&0xffff, b.rng.IntN(0xfff), b.rng.IntN(0xfff), b.seq)
}

// background adds ordinary requests each apiserver served itself.
func (b *builder) background(n int, seed uint64) {
	g := simulate.NewEvents(seed+1, b.at)
	for i := range n {
		ev := g.Next()
		// podgroups exist on kas-c only; everything else anywhere.
		a := APIServers[i%len(APIServers)]
		if ev.ObjectRef != nil && ev.ObjectRef.Resource == "podgroups" {
			a = "kas-c"
		}
		received := ev
		received.Stage = auditv1.StageRequestReceived
		received.StageTimestamp = ev.RequestReceivedTimestamp
		received.ResponseStatus = nil
		b.add(a, received, ev)
		side := sideOf(a, ev)
		b.chain(chain.ClassLocal, nil, ev, side, nil, "served by its entry apiserver")
	}
}

// proxied adds a request forwarded from entry to peer with both records.
func (b *builder) proxied(entry, peer, user, impersonated string, loseUID bool) {
	start := b.at()
	id := b.auditID()
	name := fmt.Sprintf("pg-%04d", b.rng.IntN(10000))
	verb := []string{"get", "list", "create", "update"}[b.rng.IntN(4)]
	code := int32(200)
	if verb == "create" {
		code = 201
	}
	entryDur := time.Duration(3000+b.rng.IntN(20000)) * time.Microsecond
	peerDur := entryDur - time.Duration(800+b.rng.IntN(4000))*time.Microsecond
	if b.rng.IntN(20) == 0 {
		entryDur += 150 * time.Millisecond // an occasional slow hop
	}
	ev := b.event(id, verb, user, start, entryDur, code, name)
	ev.SourceIPs = []string{"192.168.7.20"}
	if impersonated != "" {
		ev.User.Groups = []string{"system:masters", "system:authenticated"}
		ev.ImpersonatedUser = &authnv1.UserInfo{Username: impersonated, Groups: []string{"dev", "system:authenticated"}}
	}
	entryEv := ev
	entryEv.ResponseStatus = &metav1.Status{Code: code} // the entry records only the code
	peerEv := ev
	peerEv.RequestReceivedTimestamp = metav1.NewMicroTime(start.Add((entryDur - peerDur) / 2))
	peerEv.StageTimestamp = metav1.NewMicroTime(peerEv.RequestReceivedTimestamp.Add(peerDur))
	peerEv.SourceIPs = []string{"192.168.7.20", addresses[entry]}
	peerEv.ResponseStatus = &metav1.Status{Code: code, Status: "Success"}
	peerEv.RequestObject = &runtime.Unknown{Raw: []byte(`{"kind":"PodGroup"}`)}
	peerEv.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"PodGroup","metadata":{"name":"` + name + `"}}`)}
	peerEv.Level = auditv1.LevelRequestResponse
	if impersonated != "" {
		peerEv.User = *ev.ImpersonatedUser
		peerEv.ImpersonatedUser = nil
	}
	if loseUID {
		peerEv.User.UID = ""
	}
	b.addStages(entry, entryEv)
	b.addStages(peer, peerEv)

	c := b.chain(chain.ClassProxied, nil, ev, sideOf(entry, entryEv), sideOf(peer, peerEv), "forwarded by "+entry+" to "+peer+", which served it")
	if impersonated != "" {
		c.Findings = append(c.Findings, chain.FindingImpersonationFlattened)
		c.User, c.RealUser = impersonated, user
		b.expect("finding:"+string(chain.FindingImpersonationFlattened), id)
	}
	if loseUID {
		c.Findings = append(c.Findings, chain.FindingIdentityMismatch)
		b.expect("finding:"+string(chain.FindingIdentityMismatch), id)
	}
}

// misleading404 adds a request for podgroups that entry answered 404 itself (kas-c gone).
func (b *builder) misleading404(entry string) {
	start := b.at()
	id := b.auditID()
	ev := b.event(id, "list", "system:serviceaccount:training:trainer", start, time.Duration(400+b.rng.IntN(900))*time.Microsecond, 404, "")
	// As measured: the apiserver's own not-found page, byte-identical to an honest one (a
	// bare {"code":404} is what the entry of a forward records).
	ev.ResponseStatus = &metav1.Status{Code: 404, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource"}
	b.addStages(entry, ev)
	b.chain(chain.ClassMisleading404, nil, ev, sideOf(entry, ev), nil,
		"404 from "+entry+", which does not serve scheduling.k8s.io/v1alpha2 podgroups; kas-c served it")
}

// proxyFailed adds a request the entry failed to forward (503).
func (b *builder) proxyFailed(entry, message string) {
	start := b.at()
	id := b.auditID()
	ev := b.event(id, "get", "alice@example.com", start, time.Duration(1000+b.rng.IntN(3000))*time.Microsecond, 503, fmt.Sprintf("pg-%04d", b.rng.IntN(10000)))
	ev.ResponseStatus = &metav1.Status{Code: 503, Message: message}
	b.addStages(entry, ev)
	b.chain(chain.ClassProxyFailed, nil, ev, sideOf(entry, ev), nil, entry+" could not reach its peer: "+message)
}

// brokenPeerOnly adds a forwarded request whose entry record was lost (the entry was
// SIGKILLed before it flushed its audit buffer).
func (b *builder) brokenPeerOnly(entry, peer string) {
	start := b.at()
	id := b.auditID()
	ev := b.event(id, "create", "alice@example.com", start, 4*time.Millisecond, 201, fmt.Sprintf("pg-%04d", b.rng.IntN(10000)))
	ev.SourceIPs = []string{"192.168.7.20", addresses[entry]}
	ev.ResponseStatus = &metav1.Status{Code: 201, Status: "Success"}
	b.addStages(peer, ev)
	c := b.chain(chain.ClassBroken, []chain.Finding{chain.FindingEntryAuditMissing}, ev, nil, sideOf(peer, ev),
		"only "+peer+" recorded it, forwarded from "+addresses[entry]+" ("+entry+"), whose record is missing")
	c.Code = 201
}

// brokenEntryOnly adds a forwarded success whose peer record was lost.
func (b *builder) brokenEntryOnly(entry, peer string) {
	start := b.at()
	id := b.auditID()
	ev := b.event(id, "create", "alice@example.com", start, 6*time.Millisecond, 201, "")
	ev.ResponseStatus = &metav1.Status{Code: 201}
	b.addStages(entry, ev)
	b.chain(chain.ClassBroken, []chain.Finding{chain.FindingPeerAuditMissing}, ev, sideOf(entry, ev), nil,
		entry+" answered 201 for podgroups, which it does not serve: "+peer+" served it but its record is missing")
}

// ownRequests adds the apiserver's own loopback requests, whose user agent tells its version.
func (b *builder) ownRequests(a string, n int) {
	v := Versions[a]
	for range n {
		start := b.at()
		ev := b.event(b.auditID(), "get", "system:apiserver", start, time.Millisecond, 200, "kube-apiserver-"+a)
		ev.ObjectRef = &auditv1.ObjectReference{Resource: "leases", Namespace: "kube-system", Name: "apiserver-" + a, APIGroup: "coordination.k8s.io", APIVersion: "v1"}
		ev.RequestURI = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/apiserver-" + a
		ev.UserAgent = fmt.Sprintf("kube-apiserver/%s (linux/amd64) kubernetes/%s", v, commits[v])
		ev.SourceIPs = []string{"127.0.0.1"}
		ev.User.Groups = []string{"system:masters"}
		b.addStages(a, ev)
		b.chain(chain.ClassLocal, nil, ev, sideOf(a, ev), nil, "served by its entry apiserver")
	}
}

// discovery adds from fetching peer's /apis (audited by the peer).
func (b *builder) discovery(from, peer string) {
	start := b.at()
	ev := b.event(b.auditID(), "get", "system:apiserver", start, 2*time.Millisecond, 200, "")
	ev.ObjectRef = nil
	ev.RequestURI = "/apis"
	ev.UserAgent = ""
	ev.SourceIPs = []string{addresses[from]}
	b.addStages(peer, ev)
	b.chain(chain.ClassInternal, nil, ev, nil, sideOf(peer, ev), peer+" answering "+from+"'s peer discovery")
}

// event returns a ResponseComplete event for podgroups.
func (b *builder) event(id, verb, user string, start time.Time, d time.Duration, code int32, name string) auditv1.Event {
	uri := "/apis/scheduling.k8s.io/v1alpha2/namespaces/training/podgroups"
	if name != "" && verb != "create" && verb != "list" {
		uri += "/" + name
	}
	return auditv1.Event{
		Level:      auditv1.LevelMetadata,
		AuditID:    types.UID(id),
		Stage:      auditv1.StageResponseComplete,
		RequestURI: uri,
		Verb:       verb,
		User: authnv1.UserInfo{
			Username: user,
			UID:      fmt.Sprintf("uid-%x", b.rng.Uint32()),
			Groups:   []string{"system:authenticated"},
		},
		SourceIPs:                []string{"192.168.7.20"},
		UserAgent:                "kubectl/v1.36.3 (linux/amd64) kubernetes/8b1a2c7",
		ObjectRef:                &auditv1.ObjectReference{Resource: "podgroups", Namespace: "training", Name: name, APIGroup: "scheduling.k8s.io", APIVersion: "v1alpha2"},
		ResponseStatus:           &metav1.Status{Code: code},
		RequestReceivedTimestamp: metav1.NewMicroTime(start),
		StageTimestamp:           metav1.NewMicroTime(start.Add(d)),
		Annotations:              map[string]string{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
	}
}

// addStages adds the RequestReceived and ResponseComplete events of ev at apiserver a.
func (b *builder) addStages(a string, ev auditv1.Event) {
	received := ev
	received.Stage = auditv1.StageRequestReceived
	received.StageTimestamp = ev.RequestReceivedTimestamp
	received.ResponseStatus = nil
	received.ResponseObject = nil
	b.add(a, received, ev)
}

func (b *builder) add(a string, evs ...auditv1.Event) {
	b.events[a] = append(b.events[a], evs...)
}

func (b *builder) expect(key, id string) {
	b.sc.Expect[key] = append(b.sc.Expect[key], id)
}

func sideOf(a string, ev auditv1.Event) *chain.Side {
	s := &chain.Side{
		APIServer:       a,
		User:            ev.User.Username,
		UID:             ev.User.UID,
		Groups:          ev.User.Groups,
		SourceIPs:       ev.SourceIPs,
		UserAgent:       ev.UserAgent,
		RequestReceived: ev.RequestReceivedTimestamp.UTC(),
		Completed:       ev.StageTimestamp.UTC(),
		Stages:          []string{string(auditv1.StageRequestReceived), string(auditv1.StageResponseComplete)},
		HasObjects:      ev.RequestObject != nil || ev.ResponseObject != nil,
	}
	if ev.ResponseStatus != nil {
		s.Code, s.Message, s.Reason = ev.ResponseStatus.Code, ev.ResponseStatus.Message, string(ev.ResponseStatus.Reason)
	}
	if ev.ImpersonatedUser != nil {
		s.ImpersonatedUser, s.ImpersonatedGroups = ev.ImpersonatedUser.Username, ev.ImpersonatedUser.Groups
	}
	return s
}

// chain records the chain of a request; ev is any of its events (for the request's fields).
func (b *builder) chain(class chain.Class, findings []chain.Finding, ev auditv1.Event, entry, peer *chain.Side, why string) *chain.Chain {
	first := entry
	if first == nil {
		first = peer
	}
	c := chain.Chain{
		ID:          fmt.Sprintf("%s/%s/%d", ev.AuditID, first.APIServer, first.RequestReceived.UnixMicro()),
		AuditID:     string(ev.AuditID),
		State:       chain.StateFinal,
		Class:       class,
		Findings:    append([]chain.Finding{}, findings...),
		Explanation: why,
		Entry:       entry,
		Peer:        peer,
		Verb:        ev.Verb,
		RequestURI:  ev.RequestURI,
		User:        ev.User.Username,
		Code:        first.Code,
		Records:     2,
		Revision:    1,
	}
	if o := ev.ObjectRef; o != nil {
		c.Group, c.Version, c.Resource, c.Namespace, c.Name = o.APIGroup, o.APIVersion, o.Resource, o.Namespace, o.Name
	}
	if entry != nil {
		c.EntryDurationSeconds = entry.Duration().Seconds()
	}
	if peer != nil {
		c.PeerDurationSeconds = peer.Duration().Seconds()
		if entry != nil {
			c.ForwardingOverheadSeconds = c.EntryDurationSeconds - c.PeerDurationSeconds
			c.Records = 4
		}
	}
	// Received when its last record's batch arrived: the webhook batches each second.
	last := first.Completed
	if peer != nil && peer.Completed.After(last) {
		last = peer.Completed
	}
	c.FirstReceived = first.RequestReceived.Truncate(time.Second).Add(time.Second)
	c.LastReceived = last.Truncate(time.Second).Add(time.Second)
	b.sc.Chains = append(b.sc.Chains, c)
	b.expect(string(class), c.AuditID)
	for _, f := range findings {
		b.expect("finding:"+string(f), c.AuditID)
	}
	return &b.sc.Chains[len(b.sc.Chains)-1]
}

// post batches each apiserver's events the way the webhook does (one POST per second of
// stage time) and decodes the bodies into records.
func (b *builder) post() error {
	for _, a := range APIServers {
		evs := b.events[a]
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].StageTimestamp.Before(&evs[j].StageTimestamp) })
		for len(evs) > 0 {
			sec := evs[0].StageTimestamp.Truncate(time.Second)
			n := 0
			for n < len(evs) && evs[n].StageTimestamp.Truncate(time.Second).Equal(sec) {
				n++
			}
			list := auditv1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: auditv1.SchemeGroupVersion.String()}, Items: evs[:n]}
			body, err := json.Marshal(&list)
			if err != nil {
				return err
			}
			b.sc.Posts = append(b.sc.Posts, Post{APIServer: a, ReceivedAt: sec.Add(time.Second), Body: body})
			evs = evs[n:]
		}
	}
	sort.SliceStable(b.sc.Posts, func(i, j int) bool { return b.sc.Posts[i].ReceivedAt.Before(b.sc.Posts[j].ReceivedAt) })
	for _, p := range b.sc.Posts {
		recs, invalid, err := record.Decode(p.Body, p.APIServer, p.ReceivedAt)
		if err != nil {
			return err
		}
		if len(invalid) > 0 {
			return fmt.Errorf("scenario produced an invalid event: %s", invalid[0].Reason)
		}
		b.sc.Records = append(b.sc.Records, recs...)
	}
	return nil
}
