package correlate

import (
	"maps"
	"time"

	"github.com/peertrail/peertrail/chain"
)

func newTotals() chain.Totals {
	return chain.Totals{Chains: map[chain.Class]int{}, Findings: map[chain.Finding]int{}, Noise: map[chain.Class]int{}}
}

// addTotals adds o's counts to t.
func addTotals(t, o *chain.Totals) {
	for k, v := range o.Chains {
		t.Chains[k] += v
	}
	for k, v := range o.Findings {
		t.Findings[k] += v
	}
	for k, v := range o.Noise {
		t.Noise[k] += v
	}
	t.Forwarded += o.Forwarded
	t.Forwarded5xx += o.Forwarded5xx
	t.Forwarded5xxNoise += o.Forwarded5xxNoise
	t.ResourceRequests += o.ResourceRequests
}

// The window keeps counts per slot of slotSeconds, windowSlots of them: two hours. Slots of
// ten seconds, not minutes, so that a gate window of 30 s means 30-40 s, not up to 90.
const (
	slotSeconds = 10
	windowSlots = 2 * 3600 / slotSeconds
)

// window counts final chains per slot of their receipt by peertrail, for the last two hours.
// Receipt time, not request time: an apiserver's clock may be off, and what the gate asks is
// what peertrail learned recently.
type window struct {
	slots [windowSlots]chain.Totals
	stamp [windowSlots]int64 // the slot each holds (Unix seconds / slotSeconds)
}

// count adds a chain (by = 1) or takes back an earlier count of it (by = -1, when a late record
// reclassified it).
func (w *window) count(c *tally, by int) {
	m := c.first / slotSeconds
	i := int(m % windowSlots)
	if w.stamp[i] != m {
		if by < 0 {
			return // that slot has left the window already
		}
		w.stamp[i], w.slots[i] = m, newTotals()
	}
	s := &w.slots[i]
	s.Chains[c.class] += by
	for _, f := range c.findings {
		s.Findings[f] += by
	}
	if c.noise {
		s.Noise[c.class] += by
	}
	if c.class == chain.ClassProxied || c.class == chain.ClassProxyFailed {
		s.Forwarded += by
		if c.code >= 500 {
			s.Forwarded5xx += by
			if c.noise {
				s.Forwarded5xxNoise += by
			}
		}
	}
	if c.resource && c.class != chain.ClassInternal {
		s.ResourceRequests += by
	}
}

// tally is what the window counts of a chain, kept with it to take back on reclassification.
type tally struct {
	class    chain.Class
	findings []chain.Finding
	code     int32
	resource bool
	noise    bool  // a restart-noise finding explains it
	first    int64 // Unix seconds of the first receipt
}

func tallyOf(c *draft) tally {
	return tally{class: c.Class, findings: c.Findings, code: c.Code, resource: c.Resource != "", noise: c.noiseOf != "", first: c.FirstReceived.Unix()}
}

// since sums the slots from from to now.
func (w *window) since(from, now time.Time) chain.Totals {
	out := newTotals()
	lo, hi := from.Unix()/slotSeconds, now.Unix()/slotSeconds
	for i := range w.slots {
		if m := w.stamp[i]; m >= lo && m <= hi && m != 0 {
			addTotals(&out, &w.slots[i])
		}
	}
	return out
}

// Recent returns the totals of the chains first received in the last d (at most two hours), as
// classified when they became final.
func (co *Correlator) Recent(d time.Duration) chain.Totals {
	co.mu.Lock()
	defer co.mu.Unlock()
	now := co.now()
	t := co.win.since(now.Add(-d), now)
	t.Episodes = co.noise.since(now.Add(-d))
	return t
}

// maxEpisodes bounds the noise episodes kept: a rolling upgrade restarts each apiserver a
// few times.
const maxEpisodes = 256

// noiseEpisodes are the recent noise episodes, oldest first.
type noiseEpisodes struct{ list []episode }

// episode is a noise episode and when peertrail last counted a chain into it (the window is
// receipt time).
type episode struct {
	chain.NoiseEpisode
	seen time.Time
}

func (n *noiseEpisodes) add(c *draft) {
	f := chain.FindingEntryStarting
	for _, x := range chain.NoiseFindings {
		if c.HasFinding(x) {
			f = x
		}
	}
	t := c.when()
	for i := range n.list {
		e := &n.list[i]
		if e.Finding == f && e.APIServer == c.noiseOf && e.Since.Equal(c.noiseSince) {
			if t.Before(e.First) {
				e.First = t
			}
			if t.After(e.Last) {
				e.Last = t
			}
			e.Chains++
			e.Classes[c.Class]++
			e.seen = c.LastReceived
			return
		}
	}
	n.list = append(n.list, episode{chain.NoiseEpisode{Finding: f, APIServer: c.noiseOf, Since: c.noiseSince.UTC(), First: t, Last: t,
		Chains: 1, Classes: map[chain.Class]int{c.Class: 1}}, c.LastReceived})
	if len(n.list) > maxEpisodes {
		n.list = n.list[len(n.list)-maxEpisodes:]
	}
}

// since returns copies of the episodes that counted a chain received at or after from.
func (n *noiseEpisodes) since(from time.Time) []chain.NoiseEpisode {
	out := []chain.NoiseEpisode{}
	for _, e := range n.list {
		if !e.seen.Before(from) {
			e.Classes = maps.Clone(e.Classes)
			out = append(out, e.NoiseEpisode)
		}
	}
	return out
}
