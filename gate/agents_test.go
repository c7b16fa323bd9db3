package gate

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// aggregator is the healthy fixture seen by an aggregator of the HA layout: two agents, both
// heard a second ago and stored up to their head, and the correlator joined up to now.
func aggregator(agents []Agent, joined time.Time) *Gate {
	f := healthy()
	g := New(DefaultThresholds(), Sources{
		Recent:      func(time.Duration) chain.Totals { return f.tot },
		APIServers:  func() []chain.ServerInfo { return f.servers },
		LastBatches: func() map[string]time.Time { return f.last },
		Started:     now.Add(-time.Hour),
		Agents:      func() []Agent { return agents },
		StreamTime:  func() time.Time { return joined },
	}, slog.New(slog.DiscardHandler))
	g.now = func() time.Time { return now }
	return g
}

func caughtUpAgents() []Agent {
	return []Agent{
		{Name: "node-a", Heard: now.Add(-time.Second), StoredTime: now.Add(-2 * time.Second), LagSeconds: 0},
		{Name: "node-b", Heard: now.Add(-time.Second), StoredTime: now.Add(-3 * time.Second), LagSeconds: 0},
	}
}

func check(v Verdict, name string) *Check {
	for i := range v.Checks {
		if v.Checks[i].Name == name {
			return &v.Checks[i]
		}
	}
	return nil
}

func TestAgentChecksOnlyWithAgents(t *testing.T) {
	v := healthy().gate().Evaluate()
	if check(v, metrics.CheckAgentsCaughtUp) != nil || check(v, metrics.CheckAgentSpool) != nil {
		t.Fatalf("one serve's gate has agent checks: %v", v.Checks)
	}
	v = aggregator(caughtUpAgents(), now).Evaluate()
	if !v.Proceed || check(v, metrics.CheckAgentsCaughtUp) == nil || check(v, metrics.CheckAgentSpool) == nil {
		t.Fatalf("an aggregator caught up: %v %v", v.Verdict, v.Reasons)
	}
}

func TestAggregatorBehindItsAgentsPauses(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func([]Agent) []Agent
		joined time.Time
		want   string
	}{
		{"an agent never heard", func(a []Agent) []Agent { a[1].Heard = time.Time{}; return a }, now, "node-b not heard from"},
		{"an agent silent", func(a []Agent) []Agent { a[0].Heard = now.Add(-16 * time.Second); return a }, now, "node-a silent for 16s"},
		{"a backlog", func(a []Agent) []Agent {
			a[0].LagSeconds, a[0].LagBytes = 42, 1<<20
			return a
		}, now, "node-a: 42s behind"},
		{"a backlog of unknown age", func(a []Agent) []Agent {
			a[1].LagSeconds, a[1].LagBytes = -1, 100
			return a
		}, now, "node-b: 100 bytes"},
		{"the correlator behind what is stored", func(a []Agent) []Agent { return a }, now.Add(-time.Minute), "the correlator has joined up to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := aggregator(c.change(caughtUpAgents()), c.joined).Evaluate()
			ch := check(v, metrics.CheckAgentsCaughtUp)
			if v.Proceed || ch.OK || !strings.Contains(ch.Detail, c.want) || ch.Value <= ch.Threshold {
				t.Fatalf("%s: %+v", v.Verdict, ch)
			}
			if !slices.Equal(failing(v), []string{metrics.CheckAgentsCaughtUp}) {
				t.Fatalf("failing %v", failing(v))
			}
		})
	}
	// Within the thresholds: a batch in flight.
	a := caughtUpAgents()
	a[0].LagSeconds, a[0].LagBytes = 0.5, 3000
	a[1].Heard = now.Add(-14 * time.Second)
	if v := aggregator(a, now.Add(-5*time.Second)).Evaluate(); !v.Proceed {
		t.Fatalf("within the thresholds: %v", v.Reasons)
	}
}

func TestAnAggregatorGivenUpByAnAgentPausesForTheWindow(t *testing.T) {
	a := caughtUpAgents()
	a[0].SpoolMaxBytes = 1000
	a[0].Aggregators = []AgentAggregator{
		{Name: "agg-0", BacklogBytes: 10},
		{Name: "agg-1", BacklogBytes: 900, GaveUpEvents: 1234, GaveUpLast: now.Add(-9 * time.Minute), GaveUpFrom: now.Add(-2 * time.Hour), GaveUpTo: now.Add(-90 * time.Minute)},
	}
	v := aggregator(a, now).Evaluate()
	ch := check(v, metrics.CheckAgentSpool)
	if v.Proceed || ch.OK || ch.Value != 1234 || !strings.Contains(ch.Detail, "agent node-a gave up 1234 events for aggregator agg-1") ||
		!strings.Contains(ch.Detail, "holds 90% of its spool for aggregator agg-1") {
		t.Fatalf("%s: %+v", v.Verdict, ch)
	}
	// Out of the window (10m): it proceeds, and still says how full the spool is.
	a[0].Aggregators[1].GaveUpLast = now.Add(-11 * time.Minute)
	v = aggregator(a, now).Evaluate()
	if ch := check(v, metrics.CheckAgentSpool); !v.Proceed || !ch.OK || !strings.Contains(ch.Detail, "holds 90%") {
		t.Fatalf("%s: %+v", v.Verdict, ch)
	}
}
