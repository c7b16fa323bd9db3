// Package gate gives the go/no-go verdict an upgrade polls before it replaces the next
// kube-apiserver: proceed when the recent window looks healthy, pause (with the reasons) when
// forwarded requests fail, clients get misleading 404s, chains break, identities do not
// survive forwarding, an apiserver's audit stream has gone quiet, or the servers are further
// apart than the version-skew policy allows.
package gate

import (
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// Thresholds configure the checks. A zero value of a count means "any is too many".
type Thresholds struct {
	// Window is how far back the checks look.
	Window time.Duration `json:"window"`
	// MaxProxied5xxRatio bounds the share of forwarding attempts that ended in a 5xx
	// (KEP-4020 aims for over 99% without).
	MaxProxied5xxRatio float64 `json:"max_proxied_5xx_ratio"`
	// MinForwarded is how many forwarding attempts the ratio needs to mean anything.
	MinForwarded int `json:"min_forwarded"`
	// MaxMisleading404, MaxBroken and MaxIdentityMismatch bound counts in the window.
	MaxMisleading404    int `json:"max_misleading_404"`
	MaxBroken           int `json:"max_broken"`
	MaxIdentityMismatch int `json:"max_identity_mismatch"`
	// MaxIngestGap is how long an apiserver's audit webhook may stay silent.
	MaxIngestGap time.Duration `json:"max_ingest_gap"`
	// MaxMinorSkew is the version-skew policy: HA apiservers at most this many minors apart.
	MaxMinorSkew int `json:"max_minor_skew"`
	// MaxEntryStarting and MaxPeerDown are the restart-noise budgets: how long one episode of
	// a restarted apiserver's own early 403s, 5xx and 404s (finding entry_starting) or its
	// last 5xx while stopping (entry_stopping), or of failed forwards to a peer that is down
	// and of the audit lost with an apiserver that went down (peer_down, entry_down), may
	// last before it pauses. Within
	// budget, such chains are reported but do not count as misleading 404s, broken chains or
	// forwarding 5xx. Zero takes the default budget (New fills it in); a negative budget
	// admits no noise at all.
	MaxEntryStarting time.Duration `json:"max_entry_starting"`
	MaxPeerDown      time.Duration `json:"max_peer_down"`
	// ForgetAfter is how long an apiserver that is not configured (Sources.Expected) stays in
	// the ingest-gap and version-skew checks after it was last heard from. An upgrade that
	// replaces machines under new names retires the old names; without this they would hold
	// the gate at pause for good. Configured apiservers are never forgotten. With
	// Sources.FirstBatches an apiserver is forgotten sooner once silent for longer than it had
	// been heard (at least MaxIngestGap): a name heard for a moment is no evidence (watched).
	ForgetAfter time.Duration `json:"forget_after"`
	// MaxAgentLag and MaxAgentSilence (an aggregator only, Sources.Agents): how far behind an
	// agent's newest batch the aggregator (its store of frames, and its correlator) may be, and
	// how long an agent may go unheard, before the aggregator counts as behind: its verdict is
	// then on partial data, and the check agents_caught_up pauses it. Zero takes the default.
	MaxAgentLag     time.Duration `json:"max_agent_lag,omitempty"`
	MaxAgentSilence time.Duration `json:"max_agent_silence,omitempty"`
}

// DefaultThresholds are peertrail serve's defaults.
func DefaultThresholds() Thresholds {
	return Thresholds{
		Window:             10 * time.Minute,
		MaxProxied5xxRatio: 0.01,
		MinForwarded:       20,
		MaxIngestGap:       2 * time.Minute,
		MaxMinorSkew:       1,
		// A restarted apiserver denies some requests in its first second and answers 404
		// until its peer discovery syncs (0-2 s); a SIGKILLed peer keeps being picked, and
		// failing, for ~8 s (measured on real apiservers).
		MaxEntryStarting: 10 * time.Second,
		MaxPeerDown:      30 * time.Second,
		ForgetAfter:      30 * time.Minute,
		// An agent relays each batch as soon as it is on its disk and posts a heartbeat every
		// second when it has none: ten seconds behind is a backlog, not a batch in flight.
		MaxAgentLag:     10 * time.Second,
		MaxAgentSilence: 15 * time.Second,
	}
}

// Sources are what the gate reads. Each is a small view of another component.
type Sources struct {
	// Recent returns the totals of chains in the last d.
	Recent func(d time.Duration) chain.Totals
	// APIServers returns the known apiservers (configured or seen) with their versions.
	APIServers func() []chain.ServerInfo
	// LastBatches returns when each apiserver's last audit batch was accepted.
	LastBatches func() map[string]time.Time
	// FirstBatches returns when each apiserver's first audit batch was accepted (since
	// peertrail started). nil: an apiserver not configured is watched for ForgetAfter however
	// briefly it was heard.
	FirstBatches func() map[string]time.Time
	// Expected are apiservers that must be sending (the configured ones).
	Expected []string
	// Started is when peertrail started: no apiserver is expected to have sent before it.
	Started time.Time
	// Agents returns what an aggregator knows of each of its agents (the HA layout), and
	// StreamTime how far its correlator has joined; with Agents nil (one peertrail serve) the
	// checks agents_caught_up and agent_spool are left out.
	Agents     func() []Agent
	StreamTime func() time.Time
}

// Agent is what an aggregator knows of one of its agents, as the gate reads it (server fills it
// from the receiver's account of the agents).
type Agent struct {
	Name string
	// Heard is when the agent's last request came (zero: not since this aggregator started);
	// StoredTime when the newest frame stored here from it had been received by the agent.
	Heard, StoredTime time.Time
	// LagBytes is the agent's spool not stored here; LagSeconds how much older the newest frame
	// stored here is than the agent's newest (-1 when not known).
	LagBytes   int64
	LagSeconds float64
	// SpoolMaxBytes and Aggregators are the agent's own account of its spool and of each
	// aggregator it ships to.
	SpoolMaxBytes int64
	Aggregators   []AgentAggregator
}

// AgentAggregator is an agent's account of one aggregator: its backlog in the agent's spool,
// and the last time the agent gave up frames for it (GaveUpEvents events received from
// GaveUpFrom to GaveUpTo; zero GaveUpLast: never).
type AgentAggregator struct {
	Name                             string
	BacklogBytes                     int64
	GaveUpEvents                     uint64
	GaveUpLast, GaveUpFrom, GaveUpTo time.Time
}

// Check is one check's outcome.
type Check struct {
	Name      string  `json:"name"`
	OK        bool    `json:"ok"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Detail    string  `json:"detail"`
}

// Verdict is the gate's answer.
type Verdict struct {
	Proceed bool `json:"proceed"`
	// Verdict is "proceed" or "pause".
	Verdict string `json:"verdict"`
	// Reasons says why it pauses (the failing checks' details).
	Reasons     []string   `json:"reasons"`
	Checks      []Check    `json:"checks"`
	Window      string     `json:"window"`
	EvaluatedAt time.Time  `json:"evaluated_at"`
	Thresholds  Thresholds `json:"thresholds"`
}

// Gate evaluates the checks. It is safe for concurrent use: it keeps no state of its own.
type Gate struct {
	t   Thresholds
	src Sources
	log *slog.Logger
	now func() time.Time
}

// New returns a gate.
func New(t Thresholds, src Sources, log *slog.Logger) *Gate {
	// Budgets came after the other thresholds; a caller that sets the others field by field
	// gets the measured defaults rather than a zero budget that pauses on any restart.
	d := DefaultThresholds()
	if t.MaxEntryStarting == 0 {
		t.MaxEntryStarting = d.MaxEntryStarting
	}
	if t.MaxPeerDown == 0 {
		t.MaxPeerDown = d.MaxPeerDown
	}
	if t.MaxAgentLag <= 0 {
		t.MaxAgentLag = d.MaxAgentLag
	}
	if t.MaxAgentSilence <= 0 {
		t.MaxAgentSilence = d.MaxAgentSilence
	}
	return &Gate{t: t, src: src, log: log, now: time.Now}
}

// Evaluate runs every check now.
func (g *Gate) Evaluate() Verdict {
	now := g.now()
	tot := g.src.Recent(g.t.Window)
	v := Verdict{Window: g.t.Window.String(), EvaluatedAt: now.UTC(), Thresholds: g.t, Reasons: []string{}}

	// Restart noise within its budget is reported by its own check and left out of the
	// others; an episode over budget fails that check, so it still pauses.
	noise := g.restartNoise(tot.Episodes)
	f5xx := tot.Forwarded5xx
	if noise.OK {
		f5xx -= tot.Forwarded5xxNoise
	}
	ratio := 0.0
	if tot.Forwarded > 0 {
		ratio = float64(f5xx) / float64(tot.Forwarded)
	}
	c := Check{Name: metrics.CheckProxied5xxRatio, Value: ratio, Threshold: g.t.MaxProxied5xxRatio}
	switch {
	case tot.Forwarded < g.t.MinForwarded && f5xx == 0:
		c.OK, c.Detail = true, fmt.Sprintf("%d forwarded requests, none failed (fewer than %d: the ratio is not meaningful yet)", tot.Forwarded, g.t.MinForwarded)
	case tot.Forwarded < g.t.MinForwarded:
		// Too few to be a ratio, but failures among few forwards are still failures.
		c.OK = float64(f5xx) <= g.t.MaxProxied5xxRatio*float64(g.t.MinForwarded)
		c.Detail = fmt.Sprintf("%d of %d forwarded requests got a 5xx", f5xx, tot.Forwarded)
	default:
		c.OK = ratio <= g.t.MaxProxied5xxRatio
		c.Detail = fmt.Sprintf("%d of %d forwarded requests got a 5xx (%.2f%%, limit %.2f%%)", f5xx, tot.Forwarded, 100*ratio, 100*g.t.MaxProxied5xxRatio)
	}
	if noise.OK && tot.Forwarded5xxNoise > 0 {
		c.Detail += fmt.Sprintf("; %d more explained as restart noise within budget", tot.Forwarded5xxNoise)
	}
	v.Checks = append(v.Checks, c)

	count := func(name string, class chain.Class, max int, what string) {
		n, explained := tot.Chains[class], 0
		if noise.OK {
			explained = tot.Noise[class]
			n -= explained
		}
		detail := fmt.Sprintf("%d %s in the last %s (limit %d)", n, what, g.t.Window, max)
		if explained > 0 {
			detail += fmt.Sprintf("; %d more explained as restart noise within budget", explained)
		}
		v.Checks = append(v.Checks, Check{Name: name, OK: n <= max, Value: float64(n), Threshold: float64(max), Detail: detail})
	}
	count(metrics.CheckMisleading404, chain.ClassMisleading404, g.t.MaxMisleading404, "misleading 404s")
	count(metrics.CheckBrokenChains, chain.ClassBroken, g.t.MaxBroken, "broken chains")
	n := tot.Findings[chain.FindingIdentityMismatch]
	v.Checks = append(v.Checks, Check{Name: metrics.CheckIdentity, OK: n <= g.t.MaxIdentityMismatch, Value: float64(n), Threshold: float64(g.t.MaxIdentityMismatch),
		Detail: fmt.Sprintf("%d identity mismatches in the last %s (limit %d)", n, g.t.Window, g.t.MaxIdentityMismatch)})

	last, servers := g.src.LastBatches(), g.src.APIServers()
	watched, forgotten := g.watched(now, last, servers)
	v.Checks = append(v.Checks, g.ingestGap(now, last, watched, forgotten), g.versionSkew(servers, watched), noise)
	if g.src.Agents != nil {
		agents := g.src.Agents()
		v.Checks = append(v.Checks, g.agentsCaughtUp(now, agents), g.agentSpool(now, agents))
	}

	v.Proceed = true
	for _, c := range v.Checks {
		if !c.OK {
			v.Proceed = false
			v.Reasons = append(v.Reasons, c.Name+": "+c.Detail)
		}
	}
	v.Verdict = "proceed"
	if !v.Proceed {
		v.Verdict = "pause"
	}
	return v
}

// restartNoise judges the restart-noise episodes of the window by how long each lasted
// against its budget (MaxEntryStarting, MaxPeerDown). Its value is the longest episode's
// share of its budget (above 1 fails), so one threshold, 1, serves both budgets.
func (g *Gate) restartNoise(eps []chain.NoiseEpisode) Check {
	c := Check{Name: metrics.CheckRestartNoise, Threshold: 1, OK: true}
	var within, over []string
	for _, e := range eps {
		budget, what := g.t.MaxPeerDown, "forwards failed, or lost their audit, while it was down"
		switch e.Finding {
		case chain.FindingEntryStarting:
			budget, what = g.t.MaxEntryStarting, "it answered 403, 5xx or misleading 404 while starting"
		case chain.FindingEntryStopping:
			budget, what = g.t.MaxEntryStarting, "it answered 5xx while stopping"
		case chain.FindingEntryDown:
			what = "its forwards' audit was lost while it was down"
		}
		share := 2.0 // a negative budget: any noise is over it
		if budget > 0 {
			share = e.Duration().Seconds() / budget.Seconds()
		}
		c.Value = max(c.Value, share)
		line := fmt.Sprintf("%s %s since %s: %d requests over %s (%s; budget %s)", e.Finding, e.APIServer, e.Since.Format(time.RFC3339),
			e.Chains, e.Duration().Round(time.Millisecond), what, budget)
		if budget < 0 || e.Duration() > budget {
			over = append(over, line)
		} else {
			within = append(within, line)
		}
	}
	switch {
	case len(over) > 0:
		c.OK = false
		c.Detail = "restart noise over budget: " + strings.Join(over, "; ")
		if len(within) > 0 {
			c.Detail += "; within budget: " + strings.Join(within, "; ")
		}
	case len(within) > 0:
		c.Detail = "restart noise within budget: " + strings.Join(within, "; ")
	default:
		c.Detail = "no restart noise in the last " + g.t.Window.String()
	}
	return c
}

// watched returns the apiservers the ingest-gap and version-skew checks look at: the
// configured ones, and any other heard from (last batch, or last record) within ForgetAfter
// and, when the sources say when its stream began, within as long as it was heard (at least
// MaxIngestGap): anyone may make a name up in trial mode, and the silence of a name heard for
// a moment is no evidence of a lost apiserver. forgotten are the others.
func (g *Gate) watched(now time.Time, last map[string]time.Time, servers []chain.ServerInfo) (watched map[string]bool, forgotten []string) {
	watched = map[string]bool{}
	for _, n := range g.src.Expected {
		watched[n] = true
	}
	heard := map[string]time.Time{}
	for n, t := range last {
		heard[n] = t
	}
	for _, s := range servers {
		if t, ok := heard[s.Name]; !ok || s.LastSeen.After(t) {
			heard[s.Name] = s.LastSeen
		}
	}
	var first map[string]time.Time // when each stream began: its first batch, or first record
	if g.src.FirstBatches != nil {
		first = maps.Clone(g.src.FirstBatches())
		if first == nil {
			first = map[string]time.Time{}
		}
		for _, s := range servers {
			if len(s.History) > 0 {
				if f, ok := first[s.Name]; !ok || s.History[0].Since.Before(f) {
					first[s.Name] = s.History[0].Since
				}
			}
		}
	}
	for n, t := range heard {
		hold := g.t.ForgetAfter
		if first != nil {
			heardFor := time.Duration(0) // a name whose stream has no known start: the gap alone
			if f, ok := first[n]; ok {
				heardFor = t.Sub(f)
			}
			hold = min(hold, max(heardFor, g.t.MaxIngestGap))
		}
		switch {
		case watched[n]:
		case g.t.ForgetAfter <= 0 || now.Sub(t) <= hold:
			watched[n] = true
		default:
			forgotten = append(forgotten, n)
		}
	}
	sort.Strings(forgotten)
	return watched, forgotten
}

func (g *Gate) ingestGap(now time.Time, last map[string]time.Time, names map[string]bool, forgotten []string) Check {
	c := Check{Name: metrics.CheckIngestGap, Threshold: g.t.MaxIngestGap.Seconds(), OK: true}
	var silent []string
	for n := range names {
		seen := last[n]
		if seen.Before(g.src.Started) {
			seen = g.src.Started
		}
		gap := now.Sub(seen)
		if gap.Seconds() > c.Value {
			c.Value = gap.Seconds()
		}
		if gap > g.t.MaxIngestGap {
			silent = append(silent, fmt.Sprintf("%s (%s)", n, gap.Round(time.Second)))
		}
	}
	sort.Strings(silent)
	if len(silent) > 0 {
		c.OK = false
		c.Detail = "no audit batch for longer than " + g.t.MaxIngestGap.String() + " from " + strings.Join(silent, ", ")
	} else {
		c.Detail = fmt.Sprintf("every one of %d apiservers sent audit within %s", len(names), g.t.MaxIngestGap)
	}
	if len(forgotten) > 0 {
		c.Detail += fmt.Sprintf("; no longer watched, not configured and silent for over %s or for longer than they had been heard: %s", g.t.ForgetAfter, strings.Join(forgotten, ", "))
	}
	return c
}

// versionSkew checks the version-skew policy over the watched apiservers: their versions,
// parsed with chain.ParseVersion (so "v1.35.4+k3s1" and "v1.36.3-eks-4a1b2c3" compare as
// 1.35 and 1.36), at most MaxMinorSkew minors apart. Apiservers of different major versions
// are never within the policy. A version that does not parse, and an apiserver whose version
// is not known, are named in the detail and left out of the comparison.
func (g *Gate) versionSkew(servers []chain.ServerInfo, watched map[string]bool) Check {
	c := Check{Name: metrics.CheckVersionSkew, Threshold: float64(g.t.MaxMinorSkew), OK: true}
	var lo, hi *version.Version
	var versions, unparsed, unknown []string
	for _, s := range servers {
		if !watched[s.Name] {
			continue
		}
		if s.Version == "" {
			// Not configured and its own calls named no version that parses (counted in
			// peertrail_apiserver_version_unparseable_total), or it has sent none yet.
			unknown = append(unknown, s.Name)
			continue
		}
		v, err := chain.ParseVersion(s.Version)
		if err != nil {
			unparsed = append(unparsed, s.Name+"="+s.Version)
			continue
		}
		versions = append(versions, s.Name+"="+s.Version)
		if lo == nil || v.LessThan(lo) {
			lo = v
		}
		if hi == nil || v.GreaterThan(hi) {
			hi = v
		}
	}
	sort.Strings(versions)
	sort.Strings(unparsed)
	sort.Strings(unknown)
	var ignored string
	if len(unparsed) > 0 {
		ignored = "; left out, not a version: " + strings.Join(unparsed, ", ")
	}
	if len(unknown) > 0 {
		ignored += "; left out, version unknown: " + strings.Join(unknown, ", ")
	}
	switch {
	case lo == nil:
		c.Detail = "no apiserver versions known yet" + ignored
	case lo.Major() != hi.Major():
		// No count of minors spans majors; any value past the threshold says "beyond the
		// policy" to the alert rules (and +Inf would not encode as JSON).
		c.OK, c.Value = false, float64(g.t.MaxMinorSkew+1)
		c.Detail = fmt.Sprintf("versions %s: different major versions (policy: at most %d minor apart)%s", strings.Join(versions, ", "), g.t.MaxMinorSkew, ignored)
	default:
		skew := int(hi.Minor()) - int(lo.Minor())
		c.Value = float64(skew)
		c.OK = skew <= g.t.MaxMinorSkew
		c.Detail = fmt.Sprintf("versions %s: %d minor apart (policy: at most %d)%s", strings.Join(versions, ", "), skew, g.t.MaxMinorSkew, ignored)
	}
	return c
}

// agentsCaughtUp says whether this aggregator has what its agents had: each heard from within
// MaxAgentSilence, none with a backlog older than MaxAgentLag, and the correlator within
// MaxAgentLag of the newest frame stored. Its value is how far behind the furthest is, in
// seconds (past the threshold for an agent never heard from, or whose backlog's age is not known).
func (g *Gate) agentsCaughtUp(now time.Time, agents []Agent) Check {
	c := Check{Name: metrics.CheckAgentsCaughtUp, Threshold: g.t.MaxAgentLag.Seconds(), OK: true}
	past := g.t.MaxAgentLag.Seconds() + 1
	var behind []string
	var newest time.Time
	for _, a := range agents {
		if a.StoredTime.After(newest) {
			newest = a.StoredTime
		}
		switch silence := now.Sub(a.Heard); {
		case a.Heard.IsZero():
			behind = append(behind, a.Name+" not heard from since this aggregator started")
			c.Value = max(c.Value, past)
		case silence > g.t.MaxAgentSilence:
			behind = append(behind, fmt.Sprintf("%s silent for %s", a.Name, silence.Round(time.Second)))
			c.Value = max(c.Value, silence.Seconds())
		case a.LagSeconds < 0:
			behind = append(behind, fmt.Sprintf("%s: %d bytes of its spool not stored here yet", a.Name, a.LagBytes))
			c.Value = max(c.Value, past)
		case a.LagSeconds > g.t.MaxAgentLag.Seconds():
			behind = append(behind, fmt.Sprintf("%s: %s behind (%d bytes of its spool not stored here yet)", a.Name, (time.Duration(a.LagSeconds*1e9)).Round(time.Second), a.LagBytes))
			c.Value = max(c.Value, a.LagSeconds)
		default:
			c.Value = max(c.Value, a.LagSeconds)
		}
	}
	if g.src.StreamTime != nil && !newest.IsZero() {
		if joined := g.src.StreamTime(); newest.Sub(joined) > g.t.MaxAgentLag {
			d := newest.Sub(joined)
			behind = append(behind, fmt.Sprintf("the correlator has joined up to %s, %s before the newest frame stored", joined.UTC().Format(time.RFC3339), d.Round(time.Second)))
			c.Value = max(c.Value, d.Seconds())
		}
	}
	sort.Strings(behind)
	if len(behind) > 0 {
		c.OK = false
		c.Detail = "this aggregator is behind its agents, its verdict on partial data: " + strings.Join(behind, "; ")
		return c
	}
	c.Detail = fmt.Sprintf("every one of %d agents heard within %s and stored within %s of its newest batch", len(agents), g.t.MaxAgentSilence, g.t.MaxAgentLag)
	return c
}

// agentSpool fails while an agent says that, within the window, it gave up frames for an
// aggregator that stayed away longer than its spool could hold: that aggregator's store and
// chains lack them. Its value is the events given up in the window's episodes. A backlog over
// half an agent's spool is reported without failing.
func (g *Gate) agentSpool(now time.Time, agents []Agent) Check {
	c := Check{Name: metrics.CheckAgentSpool, OK: true}
	var lost, filling []string
	for _, a := range agents {
		for _, ag := range a.Aggregators {
			if !ag.GaveUpLast.IsZero() && now.Sub(ag.GaveUpLast) <= g.t.Window {
				lost = append(lost, fmt.Sprintf("agent %s gave up %d events for aggregator %s at %s (received %s to %s): its spool was full and that aggregator away, whose store lacks them",
					a.Name, ag.GaveUpEvents, ag.Name, ag.GaveUpLast.UTC().Format(time.RFC3339), ag.GaveUpFrom.UTC().Format(time.RFC3339), ag.GaveUpTo.UTC().Format(time.RFC3339)))
				c.Value += float64(ag.GaveUpEvents)
			}
			if a.SpoolMaxBytes > 0 && 2*ag.BacklogBytes > a.SpoolMaxBytes {
				filling = append(filling, fmt.Sprintf("agent %s holds %d%% of its spool for aggregator %s", a.Name, 100*ag.BacklogBytes/a.SpoolMaxBytes, ag.Name))
			}
		}
	}
	sort.Strings(lost)
	sort.Strings(filling)
	switch {
	case len(lost) > 0:
		c.OK = false
		c.Detail = strings.Join(lost, "; ")
	default:
		c.Detail = "no agent gave up frames for an aggregator in the last " + g.t.Window.String()
	}
	if len(filling) > 0 {
		c.Detail += "; " + strings.Join(filling, "; ")
	}
	return c
}
