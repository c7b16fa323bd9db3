package correlate

import (
	"encoding/json"
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
	// epochs are, per apiserver, the times it was first seen running a new version: evidence
	// from before a restart into another version says nothing about after it.
	epochs    map[string][]time.Time
	evidence  map[string]map[GVR][]run // apiserver -> GVR -> runs by time
	proxiedBy map[string]map[GVR]time.Time
	seen      map[string]*ServerInfo
}

// ServerInfo is what is known of one apiserver.
type ServerInfo struct {
	Name string `json:"name"`
	// Version is taken from the configuration or from the user agent of the apiserver's own
	// loopback requests ("kube-apiserver/v1.36.3 ...").
	Version string `json:"version,omitempty"`
	// Addresses are the IPs the apiserver was seen to connect from (its own loopback requests)
	// or was configured with.
	Addresses []string  `json:"addresses,omitempty"`
	LastSeen  time.Time `json:"last_seen"`
	// Proxied says whether the apiserver was seen to forward any request to a peer.
	Proxied bool `json:"proxied"`
}

// NewCapabilities returns an empty view in which evidence older than horizon is ignored.
func NewCapabilities(horizon time.Duration) *Capabilities {
	return &Capabilities{
		horizon:   horizon,
		evidence:  map[string]map[GVR][]run{},
		proxiedBy: map[string]map[GVR]time.Time{},
		seen:      map[string]*ServerInfo{},
		epochs:    map[string][]time.Time{},
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

// Learn records that apiserver did (served) or did not serve g at t.
func (c *Capabilities) Learn(apiserver string, g GVR, t time.Time, served bool) {
	if g.Resource == "" || t.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	byGVR := c.evidence[apiserver]
	if byGVR == nil {
		byGVR = map[GVR][]run{}
		c.evidence[apiserver] = byGVR
	}
	byGVR[g] = addEvidence(byGVR[g], t, served)
	c.changes++
}

// Changes counts the changes made so far; it grows whenever the view learns something.
func (c *Capabilities) Changes() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changes
}

// addEvidence merges one observation into runs kept sorted by time.
func addEvidence(runs []run, t time.Time, served bool) []run {
	i := sort.Search(len(runs), func(i int) bool { return !runs[i].last.Before(t) })
	// Inside (or at the edge of) run i?
	if i < len(runs) && !t.Before(runs[i].first) {
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
	if i > 0 && runs[i-1].served == served {
		runs[i-1].last = t
		return runs
	}
	if i < len(runs) && runs[i].served == served {
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
// served, or unknown (known=false) when there is no evidence within the horizon.
func (c *Capabilities) Serves(apiserver string, g GVR, t time.Time) (served, known bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.servesLocked(apiserver, g, t)
}

func (c *Capabilities) servesLocked(apiserver string, g GVR, t time.Time) (served, known bool) {
	runs := c.evidence[apiserver][g]
	best := c.horizon
	from, to := c.epochLocked(apiserver, t)
	for _, r := range runs {
		if r.last.Before(from) || !to.IsZero() && !r.first.Before(to) {
			continue // another version of the apiserver
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
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.proxiedBy[apiserver]
	if m == nil {
		m = map[GVR]time.Time{}
		c.proxiedBy[apiserver] = m
	}
	if t.After(m[g]) {
		m[g] = t
		c.changes++
	}
	c.infoLocked(apiserver).Proxied = true
}

// ProxiedRecently reports whether apiserver forwarded requests for g within the horizon of t:
// then its Mixed Version Proxy was active for g.
func (c *Capabilities) ProxiedRecently(apiserver string, g GVR, t time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	last, ok := c.proxiedBy[apiserver][g]
	if !ok {
		return false
	}
	d := t.Sub(last)
	return d < c.horizon && d > -c.horizon
}

// NoteServer records that an apiserver was seen, with its version and address when known.
func (c *Capabilities) NoteServer(apiserver, version, address string, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.infoLocked(apiserver)
	if version != "" && !t.IsZero() && t.Before(info.LastSeen) {
		version = "" // older news than what is known: a late record from before a restart
	}
	if version != "" && info.Version != "" && version != info.Version && !t.IsZero() {
		// Restarted into another version: what it served before is history.
		c.epochs[apiserver] = append(c.epochs[apiserver], t)
		c.changes++
	}
	if version != "" {
		info.Version = version
	}
	if address != "" && !slices.Contains(info.Addresses, address) && len(info.Addresses) < 8 {
		info.Addresses = append(info.Addresses, address)
		c.changes++
	}
	if version != "" && version != info.Version {
		c.changes++
	}
	if t.After(info.LastSeen) {
		info.LastSeen = t
	}
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

// IsAPIServerAddress reports whether ip belongs to any known apiserver.
func (c *Capabilities) IsAPIServerAddress(ip string) bool {
	_, ok := c.IsAddressOf(ip, "")
	return ok
}

// ServedGVR is one entry of an apiserver's capability view.
type ServedGVR struct {
	Group    string    `json:"group"`
	Version  string    `json:"version"`
	Resource string    `json:"resource"`
	Served   bool      `json:"served"`
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
	var out []APIServerView
	for n := range names {
		v := APIServerView{ServerInfo: ServerInfo{Name: n}}
		if info := c.seen[n]; info != nil {
			v.ServerInfo = *info
			v.Addresses = slices.Clone(info.Addresses)
		}
		for g, runs := range c.evidence[n] {
			last := runs[len(runs)-1]
			v.Resources = append(v.Resources, ServedGVR{Group: g.Group, Version: g.Version, Resource: g.Resource,
				Served: last.served, Since: last.first, LastSeen: last.last})
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
	for name, byGVR := range c.evidence {
		for g, runs := range byGVR {
			rec := capabilityRecord{APIServer: name, GVR: g}
			for _, r := range runs {
				rec.Runs = append(rec.Runs, struct {
					Served bool      `json:"served"`
					First  time.Time `json:"first"`
					Last   time.Time `json:"last"`
				}{r.served, r.first, r.last})
			}
			f.Evidence = append(f.Evidence, rec)
		}
	}
	for name, byGVR := range c.proxiedBy {
		for g, t := range byGVR {
			f.Proxied = append(f.Proxied, proxiedRecord{APIServer: name, GVR: g, Last: t})
		}
	}
	return json.Marshal(f)
}

// UnmarshalJSON restores a view written by MarshalJSON, merging into what is known.
func (c *Capabilities) UnmarshalJSON(b []byte) error {
	var f capabilityFile
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	for _, s := range f.Servers {
		for _, a := range s.Addresses {
			c.NoteServer(s.Name, s.Version, a, s.LastSeen)
		}
		c.NoteServer(s.Name, s.Version, "", s.LastSeen)
		if s.Proxied {
			c.mu.Lock()
			c.infoLocked(s.Name).Proxied = true
			c.mu.Unlock()
		}
	}
	for _, e := range f.Evidence {
		for _, r := range e.Runs {
			c.Learn(e.APIServer, e.GVR, r.First, r.Served)
			c.Learn(e.APIServer, e.GVR, r.Last, r.Served)
		}
	}
	for _, p := range f.Proxied {
		c.NoteProxied(p.APIServer, p.GVR, p.Last)
	}
	c.mu.Lock()
	for name, es := range f.Epochs {
		c.epochs[name] = es
	}
	c.mu.Unlock()
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
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
