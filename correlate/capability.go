package correlate

import (
	"encoding/json"
	"math"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"
)

// GVR names a group/version/resource ("" group is the core group).
type GVR struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

func (g GVR) String() string {
	if g.Group == "" {
		return g.Version + "/" + g.Resource
	}
	return g.Group + "/" + g.Version + "/" + g.Resource
}

// run is a stretch of time over which every piece of evidence agreed.
type run struct {
	served      bool
	first, last time.Time
}

// maxRuns bounds the history kept per (apiserver, GVR): a rolling upgrade changes what a server
// serves once or twice, not hundreds of times.
const maxRuns = 16

// Capabilities is peertrail's view of which apiserver serves which group/version/resource, and
// when, learned from the chains themselves: a request an apiserver answered locally with a
// resource-level outcome shows it serves the resource; a request it forwarded, or answered
// "could not find the requested resource", shows it does not. Keeping the time of the evidence
// lets the view follow a rolling upgrade, where what a server serves changes when it restarts
// into a new version. It is safe for concurrent use.
type Capabilities struct {
	// horizon bounds how old evidence may be and still count.
	horizon time.Duration

	mu      sync.RWMutex
	changes uint64 // counts mutations, so that savers know when to save
	// deliveredChanges counts the batches NoteDelivered took (not saved: a restart replays them).
	deliveredChanges uint64
	// epochs are, per apiserver, the times a new process or a new version of it was first
	// seen: evidence from before a restart says nothing about after it (the new process may
	// run other flags, feature gates or runtime-config even with the same version).
	epochs   map[string][]time.Time
	evidence map[string]map[GVR][]run // apiserver -> GVR -> runs by time
	// assumed holds, like evidence, when an apiserver answered a request for a GVR with a
	// success that could also have been a forward's entry record (no objects, a bare status:
	// measured, the entry of a forward records only {"code":N}, and at Metadata level a local
	// answer looks the same). It says "serves" only where evidence says nothing in the
	// epoch: a process either serves a built-in resource or not for its whole life, so one
	// observed forward outranks any number of such answers, in whatever order they arrive.
	assumed map[string]map[GVR][]run
	// proxied holds, like evidence, when each apiserver was seen to forward requests for a
	// GVR (every run served=true), kept per epoch: that a process forwarded a resource is
	// evidence about that process only.
	proxied map[string]map[GVR][]run
	seen    map[string]*ServerInfo
	// active are, per apiserver, the stretches of time its audit stream covered (records'
	// own times, merged across gaps up to activityGap), oldest first: where they have a gap,
	// the apiserver was down or restarting (see DownAt).
	active map[string][]span
	// delivered are, per apiserver, the stretches of time its delivered webhook batches
	// cover by the stages' own times (each batch whole, merged across gaps up to
	// activityGap), oldest first: an event the apiserver wrote inside one was delivered
	// with it (see Delivered).
	delivered map[string][]span
	// servedGR are the group/resources some apiserver answered with a resource-level
	// outcome (Learn served, or Assume): real resources, a bounded set however many paths
	// clients make up (see KnownResource).
	servedGR map[GR]struct{}
	// configured are the apiservers whose address the configuration gave (Note with a zero
	// time): the one they forward from, where a learned one may be a loopback address only.
	configured map[string]bool
	// ready is, per apiserver and epoch (by its start, Unix ns; 0 for the first), the first
	// successful answer of the process to anyone but itself: when it began to serve.
	ready map[string]map[int64]time.Time
	// prevLast is, per apiserver, the last sighting of the process before the current one:
	// the current epoch never starts before it (moveStartLocked).
	prevLast map[string]time.Time
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// activityGap is the longest silence of an apiserver's audit stream that still counts as
// one stretch of activity. A live apiserver audits its own loopback calls (lease renewals,
// informers) besides its clients' requests, and its webhook sends a batch every batch wait
// (1 s in the tests; the records carry their own times, so the batch wait does not add
// gaps); a SIGKILLed one is silent from the last 0-1 s before the kill until its new
// process starts, which takes seconds (a kube-apiserver is ready about 4 s after start).
const activityGap = 2 * time.Second

// maxSpans bounds the stretches of activity kept per apiserver.
const maxSpans = 64

// ServerInfo is what is known of one apiserver.
type ServerInfo struct {
	Name string `json:"name"`
	// Version is taken from the configuration or from the user agent of the apiserver's own
	// loopback requests ("<binary>/v1.36.3 ...", whatever the binary is called), as written
	// there: it parses with ParseVersion.
	Version string `json:"version,omitempty"`
	// Addresses are the IPs the apiserver was seen to connect from (its own loopback requests)
	// or was configured with.
	Addresses []string  `json:"addresses,omitempty"`
	LastSeen  time.Time `json:"last_seen"`
	// Proxied says whether the apiserver was seen to forward any request to a peer.
	Proxied bool `json:"proxied"`
	// Process identifies the apiserver's current process: the UID of its loopback identity,
	// which every start of an apiserver makes up afresh. Empty until a loopback request with
	// a UID was seen.
	Process string `json:"process,omitempty"`
	// History is the apiserver's version history, oldest first (at most maxHistory): when
	// it was first seen, and each restart and version change since, each of which began a
	// capability epoch.
	History []VersionEpoch `json:"history,omitempty"`
}

// VersionEpoch is one entry of an apiserver's version history: from Since on, it ran Version
// ("" when its user agent gave no version that parses) in the process Process.
type VersionEpoch struct {
	Since   time.Time `json:"since"`
	Version string    `json:"version,omitempty"`
	Process string    `json:"process,omitempty"`
	// Cause is why the entry began: CauseFirstSeen, CauseRestart or CauseVersionChange.
	Cause string `json:"cause"`
}

// Values of VersionEpoch.Cause.
const (
	// CauseFirstSeen: the first loopback request peertrail saw of the apiserver.
	CauseFirstSeen = "first_seen"
	// CauseRestart: a new process of the apiserver, running the same version.
	CauseRestart = "restart"
	// CauseVersionChange: the apiserver runs another version than before (or than configured).
	CauseVersionChange = "version_change"
)

// maxHistory bounds the version history and the epochs kept per apiserver: an upgrade
// restarts each server a few times, not dozens.
const maxHistory = 32

// Sighting is what one of an apiserver's own loopback requests (or its configuration, with
// a zero At) tells about it.
type Sighting struct {
	// Version is the version its user agent names, already parsed with AgentVersion ("" when
	// unknown).
	Version string
	// Process is the UID of its loopback identity ("" when the record has none).
	Process string
	// Address is the IP it connected from ("" when unknown).
	Address string
	// At is when the request was received; zero for the configuration, which starts no epoch.
	At time.Time
}

// NewCapabilities returns an empty view in which evidence older than horizon is ignored.
func NewCapabilities(horizon time.Duration) *Capabilities {
	return &Capabilities{
		horizon:    horizon,
		evidence:   map[string]map[GVR][]run{},
		assumed:    map[string]map[GVR][]run{},
		proxied:    map[string]map[GVR][]run{},
		seen:       map[string]*ServerInfo{},
		epochs:     map[string][]time.Time{},
		active:     map[string][]span{},
		delivered:  map[string][]span{},
		servedGR:   map[GR]struct{}{},
		configured: map[string]bool{},
		prevLast:   map[string]time.Time{},
		ready:      map[string]map[int64]time.Time{},
	}
}

// epochLocked returns the bounds of the version epoch of apiserver that holds t.
func (c *Capabilities) epochLocked(apiserver string, t time.Time) (from, to time.Time) {
	for _, e := range c.epochs[apiserver] {
		if e.After(t) {
			return from, e
		}
		from = e
	}
	return from, time.Time{}
}

// VersionAt returns the version apiserver ran at t: that of the entry of its version history
// that began last at or before t. Before the first entry it is the first entry's version when
// that entry is the first sighting (the process peertrail first saw ran before it was seen, as
// epochLocked counts it), "" when the first entry kept is a restart (older history was
// dropped). An apiserver with no history has its configured version, if any.
func (c *Capabilities) VersionAt(apiserver string, t time.Time) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.versionAtLocked(apiserver, t)
}

func (c *Capabilities) versionAtLocked(apiserver string, t time.Time) string {
	info := c.seen[apiserver]
	if info == nil {
		return ""
	}
	h := info.History
	if len(h) == 0 {
		return info.Version
	}
	i := sort.Search(len(h), func(i int) bool { return h[i].Since.After(t) }) // first entry after t
	if i > 0 {
		return h[i-1].Version
	}
	if h[0].Cause == CauseFirstSeen {
		return h[0].Version
	}
	return ""
}

// LastSeen returns the version apiserver runs now, as far as its version history tells
// (VersionAt of its last sighting), and when peertrail last saw it; "" and the zero time
// for an apiserver never seen.
func (c *Capabilities) LastSeen(apiserver string) (version string, at time.Time) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	info := c.seen[apiserver]
	if info == nil || info.LastSeen.IsZero() {
		return "", time.Time{}
	}
	return c.versionAtLocked(apiserver, info.LastSeen), info.LastSeen
}

// Learn records that apiserver did (served) or did not serve g at t.
func (c *Capabilities) Learn(apiserver string, g GVR, t time.Time, served bool) {
	if g.Resource == "" || t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(c.evidence, apiserver, g, t, served)
	if served {
		c.noteServedLocked(g)
	}
}

// Assume records that apiserver answered a request for g at t with a success that does not
// show whether it served it or forwarded it (see Capabilities.assumed).
func (c *Capabilities) Assume(apiserver string, g GVR, t time.Time) {
	if g.Resource == "" || t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(c.assumed, apiserver, g, t, true)
	c.noteServedLocked(g)
}

func (c *Capabilities) learnLocked(into map[string]map[GVR][]run, apiserver string, g GVR, t time.Time, served bool) {
	byGVR := into[apiserver]
	if byGVR == nil {
		byGVR = map[GVR][]run{}
		into[apiserver] = byGVR
	}
	from, to := c.epochLocked(apiserver, t)
	byGVR[g] = addEvidence(byGVR[g], t, served, from, to)
	c.changes++
}

// noteServedLocked adds g's group/resource to what some apiserver serves (KnownResource).
func (c *Capabilities) noteServedLocked(g GVR) {
	if _, ok := c.servedGR[GR{g.Group, g.Resource}]; !ok && len(c.servedGR) < maxServedGR {
		c.servedGR[GR{g.Group, g.Resource}] = struct{}{}
	}
}

// GR names a group/resource.
type GR struct{ Group, Resource string }

// maxServedGR bounds KnownResource's set: a cluster serves hundreds of resources, CRDs included.
const maxServedGR = 4096

// KnownResource reports whether some apiserver was seen to serve group/resource: it answered
// a request for it with a resource-level outcome (Learn served, or Assume). Only a resource an
// apiserver serves gets one (a made-up path ends in a 404 or a 403), so the set is bounded by
// the cluster's resources, not by what clients send: the metrics label chains with it.
func (c *Capabilities) KnownResource(group, resource string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, ok := c.servedGR[GR{group, resource}]
	return ok
}

// Changes counts the changes made so far; it grows whenever the view learns something.
func (c *Capabilities) Changes() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changes
}

// addEvidence merges one observation into runs kept sorted by time. A run never reaches
// across the bounds [from, to) of the epoch that holds t (to zero: open): what one process
// served says nothing of the next, so evidence of the next starts a run of its own.
func addEvidence(runs []run, t time.Time, served bool, from, to time.Time) []run {
	inEpoch := func(r run) bool { return !r.first.Before(from) && (to.IsZero() || r.last.Before(to)) }
	i := sort.Search(len(runs), func(i int) bool { return !runs[i].last.Before(t) })
	// Inside (or at the edge of) run i?
	if i < len(runs) && !t.Before(runs[i].first) && inEpoch(runs[i]) {
		if runs[i].served == served {
			return runs
		}
		// Contradicting evidence inside a run: split it around t.
		left := run{served: runs[i].served, first: runs[i].first, last: t}
		mid := run{served: served, first: t, last: t}
		right := run{served: runs[i].served, first: t, last: runs[i].last}
		runs = slices.Replace(runs, i, i+1, left, mid, right)
		return trim(runs)
	}
	// Between run i-1 and run i: extend a neighbour that agrees, else start a run.
	if i > 0 && runs[i-1].served == served && inEpoch(runs[i-1]) {
		runs[i-1].last = t
		return runs
	}
	if i < len(runs) && runs[i].served == served && inEpoch(runs[i]) && !t.Before(from) {
		runs[i].first = t
		return runs
	}
	runs = slices.Insert(runs, i, run{served: served, first: t, last: t})
	return trim(runs)
}

func trim(runs []run) []run {
	if len(runs) > maxRuns {
		runs = slices.Delete(runs, 0, len(runs)-maxRuns)
	}
	return runs
}

// Serves reports what the evidence nearest to t says about apiserver serving g: served, not
// served, or unknown (known=false) when there is no evidence within the horizon. Evidence in
// the epoch that holds t outranks what is only assumed (Assume), however near in time.
func (c *Capabilities) Serves(apiserver string, g GVR, t time.Time) (served, known bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.servesLocked(apiserver, g, t)
}

func (c *Capabilities) servesLocked(apiserver string, g GVR, t time.Time) (served, known bool) {
	if served, known = c.nearestLocked(c.evidence[apiserver][g], apiserver, t); known {
		return served, known
	}
	return c.nearestLocked(c.assumed[apiserver][g], apiserver, t)
}

// nearestLocked is what the run of runs nearest to t within the horizon and within the
// epoch of apiserver that holds t says.
func (c *Capabilities) nearestLocked(runs []run, apiserver string, t time.Time) (served, known bool) {
	best := c.horizon
	from, to := c.epochLocked(apiserver, t)
	for _, r := range runs {
		if r.last.Before(from) || !to.IsZero() && !r.first.Before(to) {
			continue // another process or version of the apiserver
		}
		// A run learned before the epoch was known may reach across its start; only its
		// part inside the epoch counts.
		if r.first.Before(from) {
			r.first = from
		}
		if !to.IsZero() && !r.last.Before(to) {
			r.last = to
		}
		var d time.Duration
		switch {
		case t.Before(r.first):
			d = r.first.Sub(t)
		case t.After(r.last):
			d = t.Sub(r.last)
		}
		if d <= best {
			best, served, known = d, r.served, true
		}
	}
	return served, known
}

// SeenServing reports whether the process of apiserver that ran at t was seen to serve g at
// any time (Learn served, or Assume), within the horizon of t: a process serves a built-in
// resource for its whole life or not at all.
func (c *Capabilities) SeenServing(apiserver string, g GVR, t time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	from, to := c.epochLocked(apiserver, t)
	for _, runs := range [][]run{c.evidence[apiserver][g], c.assumed[apiserver][g]} {
		for _, r := range runs {
			if !r.served || r.last.Before(from) || !to.IsZero() && !r.first.Before(to) ||
				t.Sub(r.last) > c.horizon || r.first.Sub(t) > c.horizon {
				continue
			}
			return true
		}
	}
	return false
}

// OtherServer returns an apiserver other than except that served g nearest to t, if any.
func (c *Capabilities) OtherServer(except string, g GVR, t time.Time) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := make([]string, 0, len(c.evidence))
	for name := range c.evidence {
		if name != except {
			names = append(names, name)
		}
	}
	for name := range c.assumed {
		if _, ok := c.evidence[name]; !ok && name != except {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if served, known := c.servesLocked(name, g, t); known && served {
			return name, true
		}
	}
	return "", false
}

// NoteProxied records that apiserver forwarded a request for g at t.
func (c *Capabilities) NoteProxied(apiserver string, g GVR, t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(c.proxied, apiserver, g, t, true)
	c.infoLocked(apiserver).Proxied = true
}

// ProxiedRecently reports whether apiserver, in the process that ran at t, forwarded
// requests for g within the horizon of t: then its Mixed Version Proxy was active for g.
// What an earlier process of it did is not evidence of this one.
func (c *Capabilities) ProxiedRecently(apiserver string, g GVR, t time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, known := c.nearestLocked(c.proxied[apiserver][g], apiserver, t)
	return known
}

// NoteServing records that apiserver answered someone other than itself successfully at t:
// the process that ran at t was serving by then.
func (c *Capabilities) NoteServing(apiserver string, t time.Time) {
	if t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	from, _ := c.epochLocked(apiserver, t)
	m := c.ready[apiserver]
	if m == nil {
		m = map[int64]time.Time{}
		c.ready[apiserver] = m
	}
	k := int64(0)
	if !from.IsZero() {
		k = from.UnixNano()
	}
	if r, ok := m[k]; !ok || t.Before(r) {
		m[k] = t
		if len(m) > maxHistory+1 {
			oldest := int64(math.MaxInt64)
			for e := range m {
				oldest = min(oldest, e)
			}
			delete(m, oldest)
		}
	}
}

// Starting reports whether t lies in the start of the process of apiserver that ran at t:
// from its first loopback request (since) to window after it first served someone else
// successfully (or at any time before it did). Only a restart or a version change that
// peertrail saw counts: the first process peertrail saw may have run for long before.
func (c *Capabilities) Starting(apiserver string, t time.Time, window time.Duration) (since time.Time, starting bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	from, _ := c.epochLocked(apiserver, t)
	if from.IsZero() || t.Before(from) {
		return time.Time{}, false
	}
	ready, ok := c.ready[apiserver][from.UnixNano()]
	return from, !ok || t.Sub(ready) <= window
}

// StartedAt returns when the process of apiserver that ran at t started, as its audit
// stream showed (its first loopback request), if that process was a restart or a version
// change seen by peertrail: the first process peertrail saw may have run for long before.
func (c *Capabilities) StartedAt(apiserver string, t time.Time) (time.Time, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	from, _ := c.epochLocked(apiserver, t)
	return from, !from.IsZero()
}

// EpochCause returns why the process of apiserver that began at since began (CauseRestart,
// CauseVersionChange, CauseFirstSeen), or "" when the history does not hold it.
func (c *Capabilities) EpochCause(apiserver string, since time.Time) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if info := c.seen[apiserver]; info != nil {
		for _, e := range info.History {
			if e.Since.Equal(since) {
				return e.Cause
			}
		}
	}
	return ""
}

// NoteActivity records that apiserver's audit stream holds records from from to to (their
// own times): a webhook batch's span.
func (c *Capabilities) NoteActivity(apiserver string, from, to time.Time) {
	if from.IsZero() || to.Before(from) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	spans := c.active[apiserver]
	// Batches mostly come in order: look from the end for the place of the new span.
	i := len(spans)
	for i > 0 && spans[i-1].from.After(from) {
		i--
	}
	spans = slices.Insert(spans, i, span{from, to})
	// Merge the spans around i that overlap or lie within activityGap of each other.
	lo := max(i-1, 0)
	for lo+1 < len(spans) && lo <= i+1 {
		a, b := spans[lo], spans[lo+1]
		if b.from.Sub(a.to) <= activityGap {
			if b.to.After(a.to) {
				a.to = b.to
			}
			spans[lo] = a
			spans = slices.Delete(spans, lo+1, lo+2)
			continue
		}
		lo++
	}
	if len(spans) > maxSpans {
		spans = slices.Delete(spans, 0, len(spans)-maxSpans)
	}
	c.active[apiserver] = spans
}

// NoteDelivered records that a webhook batch of apiserver's was delivered whose events were
// written (their stages' own times) from from to to. A batch is a run of the events the
// apiserver wrote one after the other, so within its span no event of the apiserver is
// missing; batches are merged where they overlap or lie within activityGap of each other.
func (c *Capabilities) NoteDelivered(apiserver string, from, to time.Time) {
	if from.IsZero() || to.Before(from) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	spans := c.delivered[apiserver]
	i := len(spans)
	for i > 0 && spans[i-1].from.After(from) {
		i--
	}
	spans = slices.Insert(spans, i, span{from, to})
	// Merge backwards from i while the span before reaches it, then forwards.
	for i > 0 && !spans[i].from.After(spans[i-1].to.Add(activityGap)) {
		if spans[i].to.After(spans[i-1].to) {
			spans[i-1].to = spans[i].to
		}
		spans = slices.Delete(spans, i, i+1)
		i--
	}
	for i+1 < len(spans) && !spans[i+1].from.After(spans[i].to.Add(activityGap)) {
		if spans[i+1].to.After(spans[i].to) {
			spans[i].to = spans[i+1].to
		}
		spans = slices.Delete(spans, i+1, i+2)
	}
	if len(spans) > maxSpans {
		spans = slices.Delete(spans, 0, len(spans)-maxSpans)
	}
	c.delivered[apiserver] = spans
	c.deliveredChanges++
}

// Delivered reports whether apiserver's delivered batches cover from to to without a gap
// longer than activityGap (NoteDelivered): every event it wrote in that time has arrived.
func (c *Capabilities) Delivered(apiserver string, from, to time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, s := range c.delivered[apiserver] {
		if !s.from.After(from) && !s.to.Before(to) {
			return true
		}
	}
	return false
}

// DeliveredChanges counts the batches NoteDelivered took: what Delivered answers may change
// whenever it grows.
func (c *Capabilities) DeliveredChanges() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.deliveredChanges
}

// DownAt reports whether apiserver's audit stream was silent at t: t lies in a gap of its
// activity longer than activityGap, or after its last activity when now (the stream time)
// is more than activityGap past that. It returns the gap (to is zero while the silence
// lasts). An apiserver whose stream was never seen is not known to be down.
func (c *Capabilities) DownAt(apiserver string, t, now time.Time) (from, to time.Time, down bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	spans := c.active[apiserver]
	if len(spans) == 0 || t.Before(spans[0].from) {
		return time.Time{}, time.Time{}, false
	}
	i := sort.Search(len(spans), func(i int) bool { return spans[i].from.After(t) }) // first span after t
	prev := spans[i-1]
	if !t.After(prev.to) {
		return time.Time{}, time.Time{}, false // inside a stretch of activity
	}
	if i < len(spans) {
		return prev.to, spans[i].from, true // between two stretches: a gap longer than activityGap
	}
	if now.Sub(prev.to) > activityGap && t.Sub(prev.to) >= 0 {
		return prev.to, time.Time{}, true
	}
	return time.Time{}, time.Time{}, false
}

// NoteServer records that an apiserver was seen, with its version and address when known,
// at t (zero for its configuration). It is Note without a process identity.
func (c *Capabilities) NoteServer(apiserver, version, address string, t time.Time) {
	c.Note(apiserver, Sighting{Version: version, Address: address, At: t})
}

// Note records what one of apiserver's own loopback requests showed. A new process (another
// loopback UID than the current one) or another version than the current one, at a time not
// before the last sighting, begins a capability epoch and an entry of the version history:
// what the apiserver served before it is history. A process not yet known, seen from before
// the current one started (a stream late and out of order), begins a past epoch in its place
// (notePastLocked). Other older news (a late record of a previous process, or records
// replayed from the spool after peertrail restarted) changes nothing but the addresses and
// where a known process's epoch starts, and a record of a process already in the history
// starts nothing, so two processes that send under one name cannot make the view flap. A
// configured version (zero At) starts no epoch.
func (c *Capabilities) Note(apiserver string, s Sighting) {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.infoLocked(apiserver)
	if s.Address != "" && !slices.Contains(info.Addresses, s.Address) && len(info.Addresses) < 8 {
		info.Addresses = append(info.Addresses, s.Address)
		c.changes++
	}
	if s.At.IsZero() {
		if s.Address != "" {
			c.configured[apiserver] = true
		}
		c.setVersionLocked(info, s.Version)
		return
	}
	if s.Process != "" && s.Process == info.Process && c.moveStartLocked(apiserver, info, s.At) {
		return
	}
	if s.Process != "" && info.Process != "" && s.Process != info.Process && c.notePastLocked(apiserver, info, s) {
		return
	}
	if s.At.Before(info.LastSeen) || s.Process != "" && s.Process != info.Process && pastProcess(info.History, s.Process) {
		return
	}
	otherVersion := s.Version != "" && info.Version != "" && !sameRelease(s.Version, info.Version)
	cause := ""
	switch {
	case otherVersion:
		cause = CauseVersionChange
	case s.Process != "" && info.Process != "" && s.Process != info.Process:
		cause = CauseRestart
	case len(info.History) == 0 && (s.Process != "" || s.Version != ""):
		cause = CauseFirstSeen
	}
	if cause == CauseRestart || cause == CauseVersionChange {
		c.prevLast[apiserver] = info.LastSeen
		c.epochs[apiserver] = append(c.epochs[apiserver], s.At)
		if n := len(c.epochs[apiserver]); n > maxHistory {
			c.epochs[apiserver] = slices.Delete(c.epochs[apiserver], 0, n-maxHistory)
		}
	}
	c.setVersionLocked(info, s.Version)
	if s.Process != "" && s.Process != info.Process {
		info.Process = s.Process
		c.changes++
	}
	if cause != "" {
		v := s.Version
		if v == "" && cause == CauseFirstSeen {
			v = info.Version // the configured one
		}
		info.History = append(info.History, VersionEpoch{Since: s.At.UTC(), Version: v, Process: s.Process, Cause: cause})
		if n := len(info.History); n > maxHistory {
			info.History = slices.Delete(info.History, 0, n-maxHistory)
		}
		c.changes++
	}
	info.LastSeen = s.At
}

// moveStartLocked takes an earlier sighting of the current process as the start of its
// epoch. An apiserver's webhook sends its batches concurrently (the buffered backend's async
// delegate), so a later batch of a new process can arrive first: its epoch must then begin at
// the process's first request, not at the first one peertrail happened to read, or the
// requests in between are judged by what the previous process served (measured: 13 local
// requests of a server just restarted into 1.36 were reported broken that way). It never
// moves the start before the previous process's last sighting. It reports whether it moved.
func (c *Capabilities) moveStartLocked(apiserver string, info *ServerInfo, at time.Time) bool {
	n := len(info.History)
	if n == 0 || info.History[n-1].Process != info.Process || !at.Before(info.History[n-1].Since) {
		return false
	}
	e := &info.History[n-1]
	if e.Cause != CauseRestart && e.Cause != CauseVersionChange {
		e.Since = at.UTC() // the first sighting: no epoch to move, only the history
		c.changes++
		return true
	}
	epochs := c.epochs[apiserver]
	if len(epochs) == 0 || !epochs[len(epochs)-1].Equal(e.Since) {
		return false
	}
	floor := time.Time{}
	if len(epochs) > 1 {
		floor = epochs[len(epochs)-2]
	}
	if last := c.prevLast[apiserver]; last.After(floor) {
		floor = last
	}
	if !at.After(floor) {
		return false
	}
	c.moveEpochLocked(apiserver, len(epochs)-1, at)
	e.Since = at.UTC()
	c.changes++
	return true
}

// notePastLocked takes a sighting of another process than the current one, from before the
// current one started: a stream that arrives late and out of order (a webhook backing off,
// batches sent concurrently) shows an apiserver's older processes after its newer ones. Such
// a process, not yet known, begins an epoch of its own in the past, between the processes
// known to run before and after it; a known one seen earlier than its epoch's start moves the
// start back (moveStartLocked's rule, for a past epoch). So evidence is attributed to the
// process that ran at its time whatever order the records came in. A known process seen
// where another one ran changes nothing (two processes sending under one name). It reports
// whether the sighting was taken as such, false when it is not from before the current
// process.
func (c *Capabilities) notePastLocked(apiserver string, info *ServerInfo, s Sighting) bool {
	h := info.History
	n := len(h)
	if n == 0 || h[n-1].Process != info.Process || !s.At.Before(h[n-1].Since) {
		return false
	}
	// k is the first entry that began after the sighting.
	k := sort.Search(n, func(i int) bool { return h[i].Since.After(s.At) })
	if k > 0 && h[k-1].Process == s.Process {
		// Within its own epoch: the last sighting of the process before the current one
		// bounds how far back the current one's start may move.
		if k == n-1 && s.At.After(c.prevLast[apiserver]) {
			c.prevLast[apiserver] = s.At
		}
		return true
	}
	if i := slices.IndexFunc(h, func(e VersionEpoch) bool { return e.Process == s.Process }); i >= 0 {
		if i == k {
			c.movePastStartLocked(apiserver, info, i, s.At)
		}
		return true
	}
	if k == 0 && n >= maxHistory {
		return true // older than the history kept
	}
	e := VersionEpoch{Since: s.At.UTC(), Version: s.Version, Process: s.Process, Cause: CauseFirstSeen}
	if k > 0 {
		e.Cause = causeAfter(h[k-1].Version, s.Version)
		c.insertEpochLocked(apiserver, s.At)
	}
	next := &h[k]
	if next.Cause != CauseRestart && next.Cause != CauseVersionChange {
		c.insertEpochLocked(apiserver, next.Since)
	}
	next.Cause = causeAfter(s.Version, next.Version)
	if k == n-1 && s.At.After(c.prevLast[apiserver]) {
		c.prevLast[apiserver] = s.At
	}
	info.History = slices.Insert(h, k, e)
	if n := len(info.History); n > maxHistory {
		info.History = slices.Delete(info.History, 0, n-maxHistory)
	}
	if n := len(c.epochs[apiserver]); n > maxHistory {
		c.epochs[apiserver] = slices.Delete(c.epochs[apiserver], 0, n-maxHistory)
	}
	c.changes++
	return true
}

// causeAfter is why a process running version began after one running prev: a version change
// when both are known and name other releases, else a restart.
func causeAfter(prev, version string) string {
	if prev != "" && version != "" && !sameRelease(prev, version) {
		return CauseVersionChange
	}
	return CauseRestart
}

// movePastStartLocked takes at, earlier than its start, as the start of the past epoch of
// history entry i; never before the start of the entry before it.
func (c *Capabilities) movePastStartLocked(apiserver string, info *ServerInfo, i int, at time.Time) {
	e := &info.History[i]
	if i > 0 && !at.After(info.History[i-1].Since) {
		return
	}
	if e.Cause == CauseRestart || e.Cause == CauseVersionChange {
		j := slices.IndexFunc(c.epochs[apiserver], func(t time.Time) bool { return t.Equal(e.Since) })
		if j < 0 {
			return
		}
		c.moveEpochLocked(apiserver, j, at)
	}
	e.Since = at.UTC()
	c.changes++
}

// insertEpochLocked begins an epoch of apiserver at t, in the past or not, unless one begins
// there already. When the process of the epoch that held t was first seen serving at t or
// after, that was the new epoch's process.
func (c *Capabilities) insertEpochLocked(apiserver string, t time.Time) {
	epochs := c.epochs[apiserver]
	i, found := slices.BinarySearchFunc(epochs, t, func(e, t time.Time) int { return e.Compare(t) })
	if found {
		return
	}
	from := int64(0)
	if i > 0 {
		from = epochs[i-1].UnixNano()
	}
	c.epochs[apiserver] = slices.Insert(epochs, i, t)
	if m := c.ready[apiserver]; m != nil {
		if r, ok := m[from]; ok && !r.Before(t) {
			delete(m, from)
			m[t.UnixNano()] = r
		}
	}
	c.changes++
}

// moveEpochLocked moves the start of apiserver's epoch j back to at (after the epoch before
// it), with when its process was first seen serving: a first answer the epoch before it held
// at or after at was the moved epoch's process's.
func (c *Capabilities) moveEpochLocked(apiserver string, j int, at time.Time) {
	epochs := c.epochs[apiserver]
	old := epochs[j].UnixNano()
	epochs[j] = at
	m := c.ready[apiserver]
	if m == nil {
		return
	}
	r, ok := m[old]
	delete(m, old)
	prev := int64(0)
	if j > 0 {
		prev = epochs[j-1].UnixNano()
	}
	if p, pok := m[prev]; pok && !p.Before(at) {
		delete(m, prev)
		if !ok || p.Before(r) {
			r, ok = p, true
		}
	}
	if ok {
		m[at.UnixNano()] = r
	}
}

// setVersionLocked takes version as the apiserver's current one, unless it names the same
// release as what is known with less detail (an agent's "v1.35.4" for a configured
// "v1.35.4-eks-4a1b2c3").
func (c *Capabilities) setVersionLocked(info *ServerInfo, version string) {
	if version == "" || version == info.Version {
		return
	}
	if info.Version != "" && sameRelease(version, info.Version) && len(version) <= len(info.Version) {
		return
	}
	info.Version = version
	c.changes++
}

// pastProcess reports whether process is one of history's processes.
func pastProcess(history []VersionEpoch, process string) bool {
	for _, e := range history {
		if e.Process == process {
			return true
		}
	}
	return false
}

func (c *Capabilities) infoLocked(apiserver string) *ServerInfo {
	info := c.seen[apiserver]
	if info == nil {
		info = &ServerInfo{Name: apiserver}
		c.seen[apiserver] = info
	}
	return info
}

// IsAddressOf reports whether ip is a known address of an apiserver other than except.
func (c *Capabilities) IsAddressOf(ip, except string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, info := range c.seen {
		if name != except && slices.Contains(info.Addresses, ip) {
			return name, true
		}
	}
	return "", false
}

// HasAddress reports whether ip is a known address of apiserver.
func (c *Capabilities) HasAddress(apiserver, ip string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	info := c.seen[apiserver]
	return info != nil && slices.Contains(info.Addresses, ip)
}

// NamesOf returns, sorted, the apiservers other than except that ip is a known address of
// (several apiservers can share a host).
func (c *Capabilities) NamesOf(ip, except string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for name, info := range c.seen {
		if name != except && slices.Contains(info.Addresses, ip) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// AddressesKnown reports whether every apiserver peertrail knows of, and apiserver itself,
// has a known address: then an address that is none of theirs is no apiserver's.
func (c *Capabilities) AddressesKnown(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if info := c.seen[apiserver]; info == nil || len(info.Addresses) == 0 {
		return false
	}
	for _, info := range c.seen {
		if len(info.Addresses) == 0 {
			return false
		}
	}
	return true
}

// Configured reports whether apiserver's address was configured (NoteServer without a time):
// then it is the address the apiserver forwards from, and no other is.
func (c *Capabilities) Configured(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.configured[apiserver]
}

// HasForwardingAddress reports whether an address apiserver may forward from is known: a
// configured one, or a learned one that is not a loopback address (an apiserver bound to all
// interfaces makes its own calls from 127.0.0.1 but dials its peers from its node's address).
func (c *Capabilities) HasForwardingAddress(apiserver string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.configured[apiserver] {
		return true
	}
	if info := c.seen[apiserver]; info != nil {
		for _, a := range info.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil && !ip.IsLoopback() {
				return true
			}
		}
	}
	return false
}

// IsAPIServerAddress reports whether ip belongs to any known apiserver.
func (c *Capabilities) IsAPIServerAddress(ip string) bool {
	_, ok := c.IsAddressOf(ip, "")
	return ok
}

// ServedGVR is one entry of an apiserver's capability view.
type ServedGVR struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Served   bool   `json:"served"`
	// Assumed says that only answers that could have been forwards' entry records say so
	// (Capabilities.Assume).
	Assumed  bool      `json:"assumed,omitempty"`
	Since    time.Time `json:"since"`
	LastSeen time.Time `json:"last_seen"`
}

// APIServerView is what GET /api/v1/apiservers reports for one apiserver.
type APIServerView struct {
	ServerInfo
	// Resources lists, per GVR, what the latest evidence says.
	Resources []ServedGVR `json:"resources"`
}

// Snapshot returns every apiserver with its latest evidence per GVR, sorted by name.
func (c *Capabilities) Snapshot() []APIServerView {
	c.mu.RLock()
	defer c.mu.RUnlock()
	names := map[string]bool{}
	for n := range c.seen {
		names[n] = true
	}
	for n := range c.evidence {
		names[n] = true
	}
	for n := range c.assumed {
		names[n] = true
	}
	var out []APIServerView
	for n := range names {
		v := APIServerView{ServerInfo: ServerInfo{Name: n}}
		if info := c.seen[n]; info != nil {
			v.ServerInfo = *info
			v.Addresses = slices.Clone(info.Addresses)
			v.History = slices.Clone(info.History)
		}
		for g, runs := range c.evidence[n] {
			last := runs[len(runs)-1]
			v.Resources = append(v.Resources, ServedGVR{Group: g.Group, Version: g.Version, Resource: g.Resource,
				Served: last.served, Since: last.first, LastSeen: last.last})
		}
		for g, runs := range c.assumed[n] {
			last := runs[len(runs)-1]
			// Shown only where evidence says nothing of the process that ran then.
			if ev := c.evidence[n][g]; len(ev) > 0 {
				if from, _ := c.epochLocked(n, last.last); !ev[len(ev)-1].last.Before(from) {
					continue
				}
				v.Resources = slices.DeleteFunc(v.Resources, func(r ServedGVR) bool {
					return r.Group == g.Group && r.Version == g.Version && r.Resource == g.Resource
				})
			}
			v.Resources = append(v.Resources, ServedGVR{Group: g.Group, Version: g.Version, Resource: g.Resource,
				Served: last.served, Assumed: true, Since: last.first, LastSeen: last.last})
		}
		sort.Slice(v.Resources, func(i, j int) bool {
			a, b := v.Resources[i], v.Resources[j]
			if a.Group != b.Group {
				return a.Group < b.Group
			}
			if a.Version != b.Version {
				return a.Version < b.Version
			}
			return a.Resource < b.Resource
		})
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// capabilityFile is the on-disk form of the view, so that a restart keeps what was learned.
type capabilityFile struct {
	Servers  []ServerInfo           `json:"servers"`
	Epochs   map[string][]time.Time `json:"epochs,omitempty"`
	Evidence []capabilityRecord     `json:"evidence"`
	Assumed  []capabilityRecord     `json:"assumed,omitempty"`
	Proxied  []proxiedRecord        `json:"proxied"`
}

type capabilityRecord struct {
	APIServer string `json:"apiserver"`
	GVR       GVR    `json:"gvr"`
	Runs      []struct {
		Served bool      `json:"served"`
		First  time.Time `json:"first"`
		Last   time.Time `json:"last"`
	} `json:"runs"`
}

type proxiedRecord struct {
	APIServer string    `json:"apiserver"`
	GVR       GVR       `json:"gvr"`
	First     time.Time `json:"first,omitzero"`
	Last      time.Time `json:"last"`
}

// MarshalJSON writes the whole view.
func (c *Capabilities) MarshalJSON() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f := capabilityFile{Epochs: c.epochs}
	for _, info := range c.seen {
		f.Servers = append(f.Servers, *info)
	}
	f.Evidence = capabilityRecords(c.evidence)
	f.Assumed = capabilityRecords(c.assumed)
	for name, byGVR := range c.proxied {
		for g, runs := range byGVR {
			for _, r := range runs {
				f.Proxied = append(f.Proxied, proxiedRecord{APIServer: name, GVR: g, First: r.first, Last: r.last})
			}
		}
	}
	return json.Marshal(f)
}

func capabilityRecords(from map[string]map[GVR][]run) []capabilityRecord {
	var out []capabilityRecord
	for name, byGVR := range from {
		for g, runs := range byGVR {
			rec := capabilityRecord{APIServer: name, GVR: g}
			for _, r := range runs {
				rec.Runs = append(rec.Runs, struct {
					Served bool      `json:"served"`
					First  time.Time `json:"first"`
					Last   time.Time `json:"last"`
				}{r.served, r.first, r.last})
			}
			out = append(out, rec)
		}
	}
	return out
}

// UnmarshalJSON restores a view written by MarshalJSON, merging into what is known.
func (c *Capabilities) UnmarshalJSON(b []byte) error {
	var f capabilityFile
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	c.mu.Lock()
	for _, s := range f.Servers {
		// Restored as saved, not as sightings: what was learned from the stream wins over a
		// configured version, and restoring starts no epoch.
		info := c.infoLocked(s.Name)
		for _, a := range s.Addresses {
			if !slices.Contains(info.Addresses, a) && len(info.Addresses) < 8 {
				info.Addresses = append(info.Addresses, a)
			}
		}
		if s.Version != "" {
			info.Version = s.Version
		}
		if s.LastSeen.After(info.LastSeen) {
			info.LastSeen = s.LastSeen
		}
		info.Proxied = info.Proxied || s.Proxied
		if s.Process != "" {
			info.Process = s.Process
		}
		if len(s.History) > 0 {
			info.History = s.History[max(0, len(s.History)-maxHistory):]
		}
	}
	c.mu.Unlock()
	// The epochs first: runs are kept within them.
	c.mu.Lock()
	for name, es := range f.Epochs {
		c.epochs[name] = es
	}
	c.mu.Unlock()
	for _, e := range f.Evidence {
		for _, r := range e.Runs {
			c.Learn(e.APIServer, e.GVR, r.First, r.Served)
			c.Learn(e.APIServer, e.GVR, r.Last, r.Served)
		}
	}
	for _, e := range f.Assumed {
		for _, r := range e.Runs {
			c.Assume(e.APIServer, e.GVR, r.First)
			c.Assume(e.APIServer, e.GVR, r.Last)
		}
	}
	for _, p := range f.Proxied {
		c.NoteProxied(p.APIServer, p.GVR, p.First)
		c.NoteProxied(p.APIServer, p.GVR, p.Last)
	}
	return nil
}

// Servers returns what is known of each apiserver, sorted by name.
func (c *Capabilities) Servers() []ServerInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]ServerInfo, 0, len(c.seen))
	for _, info := range c.seen {
		s := *info
		s.Addresses = slices.Clone(info.Addresses)
		s.History = slices.Clone(info.History)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
