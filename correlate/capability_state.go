package correlate

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// capabilityFile is the on-disk form of the view, so that a restart keeps what was learned.
type capabilityFile struct {
	Servers  []chain.ServerInfo     `json:"servers"`
	Epochs   map[string][]time.Time `json:"epochs,omitempty"`
	Evidence []capabilityRecord     `json:"evidence"`
	Assumed  []capabilityRecord     `json:"assumed,omitempty"`
	Proxied  []proxiedRecord        `json:"proxied"`
}

type capabilityRecord struct {
	APIServer string    `json:"apiserver"`
	GVR       chain.GVR `json:"gvr"`
	Runs      []struct {
		Served bool      `json:"served"`
		First  time.Time `json:"first"`
		Last   time.Time `json:"last"`
	} `json:"runs"`
}

type proxiedRecord struct {
	APIServer string    `json:"apiserver"`
	GVR       chain.GVR `json:"gvr"`
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

func capabilityRecords(from map[string]map[chain.GVR][]run) []capabilityRecord {
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
