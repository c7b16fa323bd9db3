package correlate

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/peertrail/peertrail/chain"
)

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
	evidence map[string]map[chain.GVR][]run // apiserver -> GVR -> runs by time
	// assumed holds, like evidence, when an apiserver answered a request for a GVR with a
	// success that could also have been a forward's entry record (no objects, a bare status:
	// measured, the entry of a forward records only {"code":N}, and at Metadata level a local
	// answer looks the same). It says "serves" only where evidence says nothing in the
	// epoch: a process either serves a built-in resource or not for its whole life, so one
	// observed forward outranks any number of such answers, in whatever order they arrive.
	assumed map[string]map[chain.GVR][]run
	// learned are the apiservers evidence or assumed hold, sorted: the order OtherServer
	// asks them in, kept rather than built for every chain it classifies.
	learned []string
	// proxied holds, like evidence, when each apiserver was seen to forward requests for a
	// GVR (every run served=true), kept per epoch: that a process forwarded a resource is
	// evidence about that process only.
	proxied map[string]map[chain.GVR][]run
	seen    map[string]*chain.ServerInfo
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

// NewCapabilities returns an empty view in which evidence older than horizon is ignored.
func NewCapabilities(horizon time.Duration) *Capabilities {
	return &Capabilities{
		horizon:    horizon,
		evidence:   map[string]map[chain.GVR][]run{},
		assumed:    map[string]map[chain.GVR][]run{},
		proxied:    map[string]map[chain.GVR][]run{},
		seen:       map[string]*chain.ServerInfo{},
		epochs:     map[string][]time.Time{},
		active:     map[string][]span{},
		delivered:  map[string][]span{},
		servedGR:   map[GR]struct{}{},
		configured: map[string]bool{},
		prevLast:   map[string]time.Time{},
		ready:      map[string]map[int64]time.Time{},
	}
}

// Learn records that apiserver did (served) or did not serve g at t.
func (c *Capabilities) Learn(apiserver string, g chain.GVR, t time.Time, served bool) {
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
func (c *Capabilities) Assume(apiserver string, g chain.GVR, t time.Time) {
	if g.Resource == "" || t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.learnLocked(c.assumed, apiserver, g, t, true)
	c.noteServedLocked(g)
}

func (c *Capabilities) learnLocked(into map[string]map[chain.GVR][]run, apiserver string, g chain.GVR, t time.Time, served bool) {
	byGVR := into[apiserver]
	if byGVR == nil {
		byGVR = map[chain.GVR][]run{}
		into[apiserver] = byGVR
		// A new name in evidence or assumed (not proxied) joins learned.
		if (c.evidence[apiserver] != nil || c.assumed[apiserver] != nil) && !slices.Contains(c.learned, apiserver) {
			c.learned = append(c.learned, apiserver)
			slices.Sort(c.learned)
		}
	}
	from, to := c.epochLocked(apiserver, t)
	byGVR[g] = addEvidence(byGVR[g], t, served, from, to)
	c.changes++
}

// noteServedLocked adds g's group/resource to what some apiserver serves (KnownResource).
func (c *Capabilities) noteServedLocked(g chain.GVR) {
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
func (c *Capabilities) Serves(apiserver string, g chain.GVR, t time.Time) (served, known bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.servesLocked(apiserver, g, t)
}

func (c *Capabilities) servesLocked(apiserver string, g chain.GVR, t time.Time) (served, known bool) {
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
func (c *Capabilities) SeenServing(apiserver string, g chain.GVR, t time.Time) bool {
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
func (c *Capabilities) OtherServer(except string, g chain.GVR, t time.Time) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, name := range c.learned {
		if name == except {
			continue
		}
		if served, known := c.servesLocked(name, g, t); known && served {
			return name, true
		}
	}
	return "", false
}

// NoteProxied records that apiserver forwarded a request for g at t.
func (c *Capabilities) NoteProxied(apiserver string, g chain.GVR, t time.Time) {
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
func (c *Capabilities) ProxiedRecently(apiserver string, g chain.GVR, t time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	_, known := c.nearestLocked(c.proxied[apiserver][g], apiserver, t)
	return known
}

// Snapshot returns every apiserver with its latest evidence per GVR, sorted by name.
func (c *Capabilities) Snapshot() []chain.APIServerView {
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
	var out []chain.APIServerView
	for n := range names {
		v := chain.APIServerView{ServerInfo: chain.ServerInfo{Name: n}}
		if info := c.seen[n]; info != nil {
			v.ServerInfo = *info
			v.Addresses = slices.Clone(info.Addresses)
			v.History = slices.Clone(info.History)
		}
		for g, runs := range c.evidence[n] {
			last := runs[len(runs)-1]
			v.Resources = append(v.Resources, chain.ServedGVR{Group: g.Group, Version: g.Version, Resource: g.Resource,
				Served: last.served, Since: last.first, LastSeen: last.last})
		}
		for g, runs := range c.assumed[n] {
			last := runs[len(runs)-1]
			// Shown only where evidence says nothing of the process that ran then.
			if ev := c.evidence[n][g]; len(ev) > 0 {
				if from, _ := c.epochLocked(n, last.last); !ev[len(ev)-1].last.Before(from) {
					continue
				}
				v.Resources = slices.DeleteFunc(v.Resources, func(r chain.ServedGVR) bool {
					return r.Group == g.Group && r.Version == g.Version && r.Resource == g.Resource
				})
			}
			v.Resources = append(v.Resources, chain.ServedGVR{Group: g.Group, Version: g.Version, Resource: g.Resource,
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
