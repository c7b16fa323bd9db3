package simulate

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Faults are what can go wrong in a simulated upgrade, each independently.
type Faults struct {
	// DropPeerAudit is the share of forwarded requests whose peer's audit events are lost
	// (as when an apiserver dies before its webhook batch leaves).
	DropPeerAudit float64 `json:"drop_peer_audit"`
	// IdentityMismatch is the share of forwarded requests whose peer sees other groups than
	// the entry authenticated (a broken requestheader configuration).
	IdentityMismatch float64 `json:"identity_mismatch"`
	// Impersonation is the share of requests made by an admin impersonating the user.
	Impersonation float64 `json:"impersonation"`
	// KillPeer SIGKILLs the newest apiserver an eighth into the run for KillFor: its last
	// second of audit is lost, entries keep forwarding to it for PeerLeaseGrace (503s), then
	// answer misleading 404s for what only it served.
	KillPeer bool          `json:"kill_peer"`
	KillFor  time.Duration `json:"kill_for"`
	// MVPOff runs the first old apiserver without the Mixed Version Proxy gate: it answers 404
	// for what only its newer peers serve.
	MVPOff bool `json:"mvp_off"`
	// LateBatches and DuplicateBatches are shares of webhook batches held back by LateBy, or
	// delivered twice, on their way to the receiver.
	LateBatches      float64       `json:"late_batches"`
	LateBy           time.Duration `json:"late_by"`
	DuplicateBatches float64       `json:"duplicate_batches"`
}

// UpgradeConfig describes a simulated rolling upgrade of an HA control plane.
type UpgradeConfig struct {
	// APIServers is how many there are; all but the last start at From, the last at To, and
	// the old ones are replaced by To one at a time.
	APIServers int
	From, To   string
	// Rate is client requests per second over all apiservers; Duration the whole run.
	Rate     float64
	Duration time.Duration
	// RestartTime is how long a replaced apiserver is down; DiscoverySync how long after its
	// start its peers take to forward to it.
	RestartTime   time.Duration
	DiscoverySync time.Duration
	// PeerLeaseGrace is how long entries keep forwarding to a killed peer.
	PeerLeaseGrace time.Duration
	// Resources are what clients request (DefaultResources when empty); Mix weighs the verbs
	// (all of Verbs equally when empty).
	Resources []Resource
	Mix       map[string]float64
	Faults    Faults
	Seed      uint64
}

// DefaultUpgrade is a three-apiserver 1.35 -> 1.36 upgrade over two minutes.
func DefaultUpgrade() UpgradeConfig {
	return UpgradeConfig{
		APIServers: 3, From: "v1.35.4", To: "v1.36.3", Rate: 100, Duration: 2 * time.Minute,
		RestartTime: 3 * time.Second, DiscoverySync: time.Second, PeerLeaseGrace: 8 * time.Second, Seed: 1,
		Faults: Faults{KillFor: 15 * time.Second, LateBy: 20 * time.Second},
	}
}

// Truth is what really happened to one simulated request, in peertrail's terms.
type Truth struct {
	AuditID  string    `json:"audit_id"`
	Class    string    `json:"class"`
	Findings []string  `json:"findings"`
	Entry    string    `json:"entry,omitempty"`
	Peer     string    `json:"peer,omitempty"`
	Verb     string    `json:"verb"`
	Resource string    `json:"resource"`
	At       time.Time `json:"at"`
	// Faults names the injected faults that shaped this request.
	Faults []string `json:"faults,omitempty"`
}

// Sink receives each apiserver's audit events, as its audit backend would.
type Sink interface {
	Send(apiserver string, events ...*auditinternal.Event)
}

// gvr is a resource and who serves it.
type gvr struct {
	group, version, resource, namespace string
	// servedBy lists the versions that serve it ("" = every version).
	servedBy []string
	weight   float64
}

func (g gvr) servedAt(version string) bool {
	return len(g.servedBy) == 0 || slices.Contains(g.servedBy, version)
}

type server struct {
	name, version, addr string
	mvp                 bool
	up                  bool
	startedAt           time.Time
	killedAt            time.Time // zero unless killed and not yet back
	stoppedAt           time.Time
}

// Upgrade runs the simulation in real time, sending every apiserver's audit events to sink,
// and returns the truth of every request that left at least one audit record.
type Upgrade struct {
	cfg         UpgradeConfig
	sink        Sink
	rng         *rand.Rand
	servers     []*server
	gvrs        []gvr
	verbs       []string
	verbWeights []float64
	seq         uint64

	mu     sync.Mutex
	truths []Truth
	// lost holds, per apiserver, events withheld for a second in case it is killed.
	pending map[string][]pendingEvent
	// lastSent is, per apiserver, the latest time (request or stage) among the events it
	// delivered: where its stream falls silent when it is killed.
	lastSent map[string]time.Time
	// Progress is called after every request with the elapsed share of the run (may be nil).
	Progress func(done float64)
}

type pendingEvent struct {
	at time.Time
	ev *auditinternal.Event
}

// NewUpgrade prepares a simulation.
func NewUpgrade(cfg UpgradeConfig, sink Sink) *Upgrade {
	u := &Upgrade{cfg: cfg, sink: sink, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed*7919)), pending: map[string][]pendingEvent{}, lastSent: map[string]time.Time{}}
	for i := range cfg.APIServers {
		v := cfg.From
		if i == cfg.APIServers-1 {
			v = cfg.To
		}
		u.servers = append(u.servers, &server{
			name: fmt.Sprintf("kas-%d", i+1), version: v, addr: fmt.Sprintf("10.0.0.%d", 11+i),
			mvp: !(cfg.Faults.MVPOff && i == 0), up: true,
		})
	}
	resources := cfg.Resources
	if len(resources) == 0 {
		resources = DefaultResources()
	}
	for _, r := range resources {
		g := gvr{group: r.Group, version: r.Version, resource: r.Resource, namespace: r.Namespace, weight: r.Weight}
		if g.weight <= 0 { // unset (ParseResource refuses a negative one)
			g.weight = 1
		}
		for _, v := range r.ServedBy {
			switch v {
			case "from":
				v = cfg.From
			case "to":
				v = cfg.To
			}
			g.servedBy = append(g.servedBy, v)
		}
		u.gvrs = append(u.gvrs, g)
	}
	// A mix that weighs none of Verbs (ParseMix refuses it, a caller may not) counts as none.
	weighed := slices.ContainsFunc(Verbs, func(v string) bool { return cfg.Mix[v] > 0 })
	for _, v := range Verbs {
		w := 1.0
		if weighed {
			w = cfg.Mix[v]
		}
		if w > 0 {
			u.verbs, u.verbWeights = append(u.verbs, v), append(u.verbWeights, w)
		}
	}
	return u
}

// Truths returns the truth of every request so far.
func (u *Upgrade) Truths() []Truth {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.truths)
}

// Servers names the simulated apiservers with their addresses and final versions.
func (u *Upgrade) Servers() map[string]string {
	out := map[string]string{}
	for _, s := range u.servers {
		out[s.name] = s.addr
	}
	return out
}

// Run runs the whole upgrade, returning when it is done or ctx ends.
func (u *Upgrade) Run(ctx context.Context) error {
	start := time.Now()
	end := start.Add(u.cfg.Duration)
	old := len(u.servers) - 1
	// Replace each old apiserver in turn, evenly spread over the first 80% of the run; the
	// kill comes early, while the victim is the only apiserver of the new version, so that
	// entries forward to it.
	steps := make([]time.Time, old)
	for i := range steps {
		steps[i] = start.Add(u.cfg.Duration * 8 / 10 * time.Duration(i+1) / time.Duration(old+1))
	}
	killAt := start.Add(u.cfg.Duration / 8)
	killed := false
	interval := time.Duration(float64(time.Second) / u.cfg.Rate)
	for s := range u.servers {
		u.servers[s].startedAt = start.Add(-time.Hour)
	}
	// The simulation runs on its own clock: request i happens at start + i*interval, and the
	// upgrade steps, the kill and the apiservers' housekeeping happen at fixed points of that
	// clock, whatever the machine's load. Only the pacing waits for the wall clock. So the same
	// seed makes the same requests with the same truth in every run.
	requests := int(u.cfg.Duration / interval)
	nextHousekeeping := start
	for i := range requests {
		now := start.Add(time.Duration(i) * interval)
		if d := time.Until(now); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
		u.lifecycle(now, steps, &killed, killAt)
		for !now.Before(nextHousekeeping) {
			u.housekeeping(nextHousekeeping)
			nextHousekeeping = nextHousekeeping.Add(time.Second)
		}
		u.request(now)
		u.flush(now, false)
		if u.Progress != nil {
			u.Progress(float64(now.Sub(start)) / float64(u.cfg.Duration))
		}
	}
	u.flush(end, true)
	return nil
}

// lifecycle applies upgrade steps and the kill fault due at now.
func (u *Upgrade) lifecycle(now time.Time, steps []time.Time, killed *bool, killAt time.Time) {
	for i, at := range steps {
		s := u.servers[i]
		switch {
		case s.version == u.cfg.From && s.up && !now.Before(at):
			s.up, s.stoppedAt = false, now // graceful stop: its lease is deleted at once
		case s.version == u.cfg.From && !s.up && !now.Before(at.Add(u.cfg.RestartTime)):
			s.up, s.version, s.startedAt, s.mvp = true, u.cfg.To, now, true
			u.selfCall(s, now) // a starting apiserver calls itself before it serves anyone
		}
	}
	if u.cfg.Faults.KillPeer && !*killed && !now.Before(killAt) {
		*killed = true
		victim := u.servers[len(u.servers)-1]
		victim.up, victim.killedAt = false, now
		// Its webhook buffer dies with it: the last second of its audit never leaves.
		u.mu.Lock()
		lostStart := map[string]bool{}
		for _, p := range u.pending[victim.name] {
			if p.ev.Stage == auditinternal.StageRequestReceived {
				lostStart[string(p.ev.AuditID)] = true
			}
			u.forget(p.ev)
		}
		u.pending[victim.name] = nil
		// Forwards to the victim whose peer record was already lost (dropped_peer_audit) in
		// that last second look the same in the streams: served just before the victim's
		// stream fell silent.
		u.silenced(victim, lostStart)
		u.mu.Unlock()
	}
	for _, s := range u.servers {
		if !s.killedAt.IsZero() && !now.Before(s.killedAt.Add(u.cfg.Faults.KillFor)) {
			s.up, s.killedAt, s.startedAt = true, time.Time{}, now
			u.selfCall(s, now)
		}
	}
}

// silenced marks what peertrail sees when s's stream falls silent because it was killed
// (peer_down, restart noise), on the forwards to s that lost s's record: one whose record s
// started but could not finish (lostStart does not name it) shows its start right before the
// silence; one whose record is wholly missing (lost with the kill, or dropped_peer_audit) lies
// in the silence when its request came after the last event s's webhook delivered. Called
// with u.mu held.
func (u *Upgrade) silenced(s *server, lostStart map[string]bool) {
	last := u.lastSent[s.name]
	for i := range u.truths {
		t := &u.truths[i]
		if t.Class == "broken" && slices.Contains(t.Faults, "entry_killed") && t.At.After(last) && !slices.Contains(t.Findings, "entry_down") {
			// The forward's entry record died with the killed entry: the request lies in its
			// silence (entry_down).
			t.Findings = append(t.Findings, "entry_down")
			continue
		}
		if t.Class != "broken" || t.Peer != s.name || slices.Contains(t.Findings, "peer_down") {
			continue
		}
		started := slices.Contains(t.Faults, "peer_killed") && !lostStart[t.AuditID]
		if started || t.At.After(last) {
			t.Findings = append(t.Findings, "peer_down")
		}
	}
}

// forget takes a lost event's record out of the truth: its request lost a side, or every record.
func (u *Upgrade) forget(ev *auditinternal.Event) {
	if ev.Stage != auditinternal.StageResponseComplete {
		return
	}
	lost := ev.Annotations[annServer]
	for i := len(u.truths) - 1; i >= 0; i-- {
		t := &u.truths[i]
		if t.AuditID != string(ev.AuditID) {
			continue
		}
		switch {
		case t.Class == "proxied" && t.Peer == lost:
			// Whether peertrail can put it down to the kill (peer_down): see silenced.
			t.Class, t.Findings = "broken", []string{"peer_audit_missing"}
			t.Faults = append(t.Faults, "peer_killed")
		case t.Class == "proxied" && t.Entry == lost:
			t.Class, t.Findings, t.Entry = "broken", []string{"entry_audit_missing"}, ""
			t.Faults = append(t.Faults, "entry_killed")
		default:
			// A request only the lost apiserver recorded, or a forwarding already missing its
			// other side: nothing of it reaches peertrail.
			u.truths = slices.Delete(u.truths, i, i+1)
		}
		return
	}
}

// annServer tags events with the apiserver that wrote them inside the simulator only; it is
// removed before an event is sent.
const annServer = "simulate.peertrail.dev/apiserver"

// knows reports whether entry forwards to peer at now: the peer is up (or killed but its lease
// still alive) and discovered.
func (u *Upgrade) knows(peer *server, now time.Time) (reachable, known bool) {
	if peer.up {
		return true, now.Sub(peer.startedAt) >= u.cfg.DiscoverySync
	}
	if !peer.killedAt.IsZero() && now.Sub(peer.killedAt) < u.cfg.PeerLeaseGrace {
		return false, true
	}
	return false, false
}

func (u *Upgrade) request(now time.Time) {
	var up []*server
	for _, s := range u.servers {
		if s.up {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		return
	}
	entry := up[u.rng.IntN(len(up))]
	// New resources get a fair share of traffic so that forwarding is visible.
	g := u.gvrs[u.pick(len(u.gvrs), func(i int) float64 { return u.gvrs[i].weight })]
	a := actors[u.rng.IntN(len(actors))]
	verb := u.verbs[u.pick(len(u.verbs), func(i int) float64 { return u.verbWeights[i] })]
	u.seq++
	id := fmt.Sprintf("%08x-5e1a-4c2b-9d3e-%012x", uint32(u.cfg.Seed), u.seq)
	req := simReq{id: id, verb: verb, g: g, user: a.user, groups: a.groups, agent: a.agent,
		client: fmt.Sprintf("10.1.%d.%d", u.rng.IntN(8), 1+u.rng.IntN(250)), at: now}
	if u.rng.Float64() < u.cfg.Faults.Impersonation {
		req.impersonator = "admin"
	}
	truth := Truth{AuditID: id, Verb: verb, Resource: g.resource, At: now, Entry: entry.name, Findings: []string{}}

	if g.servedAt(entry.version) {
		code := int32(200)
		if verb == "create" {
			code = 201
		}
		truth.Class = "local"
		u.emit(entry, req.side(entry, nil, code, "", 0, time.Duration(1+u.rng.IntN(20))*time.Millisecond))
		u.record(truth)
		return
	}
	// The entry does not serve it: forward to a peer that does, if it knows one.
	var peers, unreachable []*server
	servedElsewhere := false
	for _, s := range u.servers {
		if s == entry || !g.servedAt(s.version) {
			continue
		}
		servedElsewhere = true
		reachable, known := u.knows(s, now)
		switch {
		case known && reachable:
			peers = append(peers, s)
		case known:
			unreachable = append(unreachable, s)
		}
	}
	if !entry.mvp || len(peers)+len(unreachable) == 0 {
		if servedElsewhere {
			truth.Class = "misleading_404"
			if !entry.mvp {
				truth.Faults = append(truth.Faults, "mvp_off")
			}
		} else {
			truth.Class = "local"
		}
		u.emit(entry, req.side(entry, nil, 404, "the server could not find the requested resource", 0, time.Millisecond))
		u.record(truth)
		return
	}
	candidates := append(peers, unreachable...)
	peer := candidates[u.rng.IntN(len(candidates))]
	if slices.Contains(unreachable, peer) {
		// The killed peer's stream is silent meanwhile: restart noise (peer_down).
		truth.Class, truth.Faults = "proxy_failed", []string{"peer_killed"}
		truth.Findings = []string{"peer_down"}
		u.emit(entry, req.side(entry, nil, 503, "", 0, 2*time.Millisecond))
		u.record(truth)
		return
	}
	truth.Class, truth.Peer = "proxied", peer.name
	peerDur := time.Duration(1+u.rng.IntN(20)) * time.Millisecond
	overhead := time.Duration(300+u.rng.IntN(2000)) * time.Microsecond
	code := int32(200)
	if verb == "create" {
		code = 201
	}
	peerReq := req
	if req.impersonator != "" {
		truth.Findings = append(truth.Findings, "impersonation_flattened")
	}
	if u.rng.Float64() < u.cfg.Faults.IdentityMismatch {
		// A group no simulated user has, so the peer's identity always differs.
		peerReq.groups = append(slices.Clone(req.groups), "system:injected-by-a-broken-proxy")
		truth.Findings = append(truth.Findings, "identity_mismatch")
		truth.Faults = append(truth.Faults, "identity_mismatch")
	}
	u.emit(entry, req.side(entry, nil, code, "", 0, peerDur+overhead))
	if u.rng.Float64() < u.cfg.Faults.DropPeerAudit {
		truth.Class, truth.Findings = "broken", []string{"peer_audit_missing"}
		truth.Faults = append(truth.Faults, "dropped_peer_audit")
	} else {
		u.emit(peer, peerReq.side(peer, entry, code, "", overhead/2, peerDur))
	}
	u.record(truth)
}

func (u *Upgrade) record(t Truth) {
	u.mu.Lock()
	u.truths = append(u.truths, t)
	u.mu.Unlock()
}

// housekeeping emits the apiservers' own traffic: each calls itself (its version in the user
// agent, from its own address) and fetches its peers' discovery documents.
func (u *Upgrade) housekeeping(now time.Time) {
	for _, s := range u.servers {
		if !s.up {
			continue
		}
		u.selfCall(s, now)
		for _, p := range u.servers {
			if p == s || !p.up {
				continue
			}
			u.seq++
			disc := simReq{id: fmt.Sprintf("%08x-5e1a-4c2b-9d3e-%012x", uint32(u.cfg.Seed), u.seq), verb: "get", uri: "/apis",
				user: "system:apiserver", groups: []string{"system:authenticated"}, client: s.addr, at: now}
			u.emit(p, disc.side(p, nil, 200, "", 0, time.Millisecond))
			u.record(Truth{AuditID: disc.id, Class: "internal", Entry: p.name, Verb: "get", At: now, Findings: []string{}})
		}
	}
}

// selfCall is an apiserver's loopback request to itself: its own user agent names its version,
// and it comes from its own address.
func (u *Upgrade) selfCall(s *server, now time.Time) {
	u.seq++
	self := simReq{id: fmt.Sprintf("%08x-5e1a-4c2b-9d3e-%012x", uint32(u.cfg.Seed), u.seq), verb: "get",
		g: gvr{group: "coordination.k8s.io", version: "v1", resource: "leases", namespace: "kube-system"}, name: "apiserver-" + s.name,
		user: "system:apiserver", groups: []string{"system:masters"}, agent: "kube-apiserver/" + s.version + " (linux/amd64) kubernetes/unknown",
		client: s.addr, at: now}
	u.emit(s, self.side(s, nil, 200, "", 0, time.Millisecond))
	u.record(Truth{AuditID: self.id, Class: "local", Entry: s.name, Verb: "get", Resource: "leases", At: now, Findings: []string{}})
}

// emit queues a server's events; they leave after a second (a webhook batch), so that a kill
// can still lose them.
func (u *Upgrade) emit(s *server, evs []*auditinternal.Event) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, ev := range evs {
		u.pending[s.name] = append(u.pending[s.name], pendingEvent{at: ev.StageTimestamp.Time, ev: ev})
	}
}

// flush sends the events older than a second (all with force).
func (u *Upgrade) flush(now time.Time, force bool) {
	u.mu.Lock()
	out := map[string][]*auditinternal.Event{}
	for name, evs := range u.pending {
		i := 0
		for ; i < len(evs) && (force || now.Sub(evs[i].at) >= time.Second); i++ {
			delete(evs[i].ev.Annotations, annServer)
			for _, at := range []time.Time{evs[i].ev.RequestReceivedTimestamp.Time, evs[i].ev.StageTimestamp.Time} {
				if at.After(u.lastSent[name]) {
					u.lastSent[name] = at
				}
			}
			out[name] = append(out[name], evs[i].ev)
		}
		u.pending[name] = evs[i:]
	}
	u.mu.Unlock()
	for name, evs := range out {
		u.sink.Send(name, evs...)
	}
}

// simReq is one client request.
type simReq struct {
	id, verb, uri, name string
	g                   gvr
	user                string
	groups              []string
	impersonator        string
	agent               string
	client              string
	at                  time.Time
}

func (r simReq) path() string {
	if r.uri != "" {
		return r.uri
	}
	p := "/api/" + r.g.version
	if r.g.group != "" {
		p = "/apis/" + r.g.group + "/" + r.g.version
	}
	if r.g.namespace != "" {
		p += "/namespaces/" + r.g.namespace
	}
	p += "/" + r.g.resource
	if r.name != "" {
		p += "/" + r.name
	} else if r.verb != "list" && r.verb != "create" {
		p += "/" + r.g.resource + "-1"
	}
	if r.verb == "list" {
		p += "?limit=500&labelSelector=app%3Dweb"
	}
	return p
}

// side is the RequestReceived and ResponseComplete events one apiserver writes. from is the
// entry when s is the peer of a forwarded request; the peer records one more hop, the entry's
// query string re-sorted, and the response status in full; the entry of a forwarded request
// records only the code.
func (r simReq) side(s, from *server, code int32, message string, start, dur time.Duration) []*auditinternal.Event {
	path := r.path()
	ips := []string{r.client}
	if from != nil {
		ips = append(ips, from.addr)
		if p, q, ok := strings.Cut(path, "?"); ok {
			parts := strings.Split(q, "&")
			slices.Sort(parts)
			path = p + "?" + strings.Join(parts, "&")
		}
	}
	user := authnv1.UserInfo{Username: r.user, Groups: r.groups}
	var imp *authnv1.UserInfo
	if r.impersonator != "" && from == nil {
		// Only the entry sees the impersonation; the peer gets the impersonated user.
		impersonated := user
		imp = &impersonated
		user = authnv1.UserInfo{Username: r.impersonator, Groups: []string{"system:masters", "system:authenticated"}}
	}
	received := r.at.Add(start)
	v1 := auditv1.Event{
		Level: auditv1.LevelMetadata, AuditID: types.UID(r.id), Stage: auditv1.StageRequestReceived,
		RequestURI: path, Verb: r.verb, User: user, SourceIPs: ips, UserAgent: r.agent,
		RequestReceivedTimestamp: metav1.NewMicroTime(received), StageTimestamp: metav1.NewMicroTime(received),
	}
	if r.g.resource != "" {
		v1.ObjectRef = &auditv1.ObjectReference{Resource: r.g.resource, Namespace: r.g.namespace, APIGroup: r.g.group, APIVersion: r.g.version}
	}
	done := v1
	done.Stage = auditv1.StageResponseComplete
	done.StageTimestamp = metav1.NewMicroTime(received.Add(dur))
	done.ImpersonatedUser = imp // resolved after RequestReceived was written
	done.ResponseStatus = &metav1.Status{Code: code}
	if message != "" {
		done.ResponseStatus.Status, done.ResponseStatus.Message, done.ResponseStatus.Reason = "Failure", message, metav1.StatusReasonNotFound
	}
	var out []*auditinternal.Event
	for _, e := range []*auditv1.Event{&v1, &done} {
		var ev auditinternal.Event
		if err := auditv1.Convert_v1_Event_To_audit_Event(e, &ev, nil); err != nil {
			panic(fmt.Sprintf("converting a generated audit event: %v", err)) // generated here; cannot fail
		}
		ev.Annotations = map[string]string{annServer: s.name, "authorization.k8s.io/decision": "allow"}
		out = append(out, &ev)
	}
	return out
}
