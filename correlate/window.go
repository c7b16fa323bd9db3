package correlate

import (
	"time"
)

// Totals are counts of final chains over a stretch of time.
type Totals struct {
	Chains    map[Class]int   `json:"chains"`
	Findings  map[Finding]int `json:"findings"`
	Forwarded int             `json:"forwarded"` // proxied and proxy_failed: every forwarding attempt
	// Forwarded5xx are forwarding attempts the client got a 5xx for.
	Forwarded5xx int `json:"forwarded_5xx"`
	// ResourceRequests are chains of resource requests (every class but internal).
	ResourceRequests int `json:"resource_requests"`
}

func newTotals() Totals {
	return Totals{Chains: map[Class]int{}, Findings: map[Finding]int{}}
}

func (t *Totals) add(o *Totals) {
	for k, v := range o.Chains {
		t.Chains[k] += v
	}
	for k, v := range o.Findings {
		t.Findings[k] += v
	}
	t.Forwarded += o.Forwarded
	t.Forwarded5xx += o.Forwarded5xx
	t.ResourceRequests += o.ResourceRequests
}

// windowMinutes is how far back Recent can look.
const windowMinutes = 120

// window counts final chains per minute of their receipt by peertrail, for the last two hours.
// Receipt time, not request time: an apiserver's clock may be off, and what the gate asks is
// what peertrail learned recently.
type window struct {
	minutes [windowMinutes]Totals
	stamp   [windowMinutes]int64 // the minute each slot holds
}

// count adds a chain (by = 1) or takes back an earlier count of it (by = -1, when a late record
// reclassified it).
func (w *window) count(c *tally, by int) {
	m := c.first / 60
	i := int(m % windowMinutes)
	if w.stamp[i] != m {
		if by < 0 {
			return // that minute has left the window already
		}
		w.stamp[i], w.minutes[i] = m, newTotals()
	}
	s := &w.minutes[i]
	s.Chains[c.class] += by
	for _, f := range c.findings {
		s.Findings[f] += by
	}
	if c.class == ClassProxied || c.class == ClassProxyFailed {
		s.Forwarded += by
		if c.code >= 500 {
			s.Forwarded5xx += by
		}
	}
	if c.resource && c.class != ClassInternal {
		s.ResourceRequests += by
	}
}

// tally is what the window counts of a chain, kept with it to take back on reclassification.
type tally struct {
	class    Class
	findings []Finding
	code     int32
	resource bool
	first    int64 // Unix seconds of the first receipt
}

func tallyOf(c *Chain) tally {
	return tally{class: c.Class, findings: c.Findings, code: c.Code, resource: c.Resource != "", first: c.FirstReceived.Unix()}
}

// since sums the minutes from from to now.
func (w *window) since(from, now time.Time) Totals {
	out := newTotals()
	lo, hi := from.Unix()/60, now.Unix()/60
	for i := range w.minutes {
		if m := w.stamp[i]; m >= lo && m <= hi {
			out.add(&w.minutes[i])
		}
	}
	return out
}

// Recent returns the totals of the chains first received in the last d (at most two hours), as
// classified when they became final.
func (co *Correlator) Recent(d time.Duration) Totals {
	co.mu.Lock()
	defer co.mu.Unlock()
	now := co.now()
	return co.win.since(now.Add(-d), now)
}
