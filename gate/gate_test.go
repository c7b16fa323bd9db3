package gate

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type fixture struct {
	tot      chain.Totals
	servers  []chain.ServerInfo
	last     map[string]time.Time
	first    map[string]time.Time // nil: the sources do not say when streams began
	expected []string
}

func (f *fixture) gate() *Gate {
	src := Sources{
		Recent:      func(time.Duration) chain.Totals { return f.tot },
		APIServers:  func() []chain.ServerInfo { return f.servers },
		LastBatches: func() map[string]time.Time { return f.last },
		Expected:    f.expected,
		Started:     now.Add(-time.Hour),
	}
	if f.first != nil {
		src.FirstBatches = func() map[string]time.Time { return f.first }
	}
	g := New(DefaultThresholds(), src, slog.New(slog.DiscardHandler))
	g.now = func() time.Time { return now }
	return g
}

func healthy() *fixture {
	return &fixture{
		tot: chain.Totals{
			Chains:    map[chain.Class]int{chain.ClassProxied: 500, chain.ClassLocal: 5000},
			Findings:  map[chain.Finding]int{},
			Forwarded: 500, Forwarded5xx: 2, ResourceRequests: 5500,
		},
		servers: []chain.ServerInfo{{Name: "kas-a", Version: "v1.35.4"}, {Name: "kas-b", Version: "v1.36.3"}},
		last:    map[string]time.Time{"kas-a": now.Add(-5 * time.Second), "kas-b": now.Add(-20 * time.Second)},
	}
}

func failing(v Verdict) []string {
	var out []string
	for _, c := range v.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

func TestHealthyWindowProceeds(t *testing.T) {
	v := healthy().gate().Evaluate()
	if !v.Proceed || v.Verdict != "proceed" || len(v.Reasons) != 0 {
		t.Fatalf("healthy window: %+v", v)
	}
	if len(v.Checks) != 7 {
		t.Fatalf("%d checks, want 7", len(v.Checks))
	}
}

func TestEachCheckPauses(t *testing.T) {
	cases := map[string]func(f *fixture){
		metrics.CheckProxied5xxRatio: func(f *fixture) { f.tot.Forwarded5xx = 10 }, // 2% of 500
		metrics.CheckMisleading404:   func(f *fixture) { f.tot.Chains[chain.ClassMisleading404] = 1 },
		metrics.CheckBrokenChains:    func(f *fixture) { f.tot.Chains[chain.ClassBroken] = 3 },
		metrics.CheckIdentity:        func(f *fixture) { f.tot.Findings[chain.FindingIdentityMismatch] = 1 },
		metrics.CheckIngestGap:       func(f *fixture) { f.last["kas-b"] = now.Add(-5 * time.Minute) },
		metrics.CheckVersionSkew: func(f *fixture) {
			f.servers = append(f.servers, chain.ServerInfo{Name: "kas-c", Version: "v1.37.2"})
			f.last["kas-c"] = now
		},
		metrics.CheckRestartNoise: func(f *fixture) {
			f.tot.Episodes = []chain.NoiseEpisode{{Finding: chain.FindingPeerDown, APIServer: "kas-c", First: now.Add(-time.Minute), Last: now.Add(-29 * time.Second), Chains: 40}}
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			f := healthy()
			breakIt(f)
			v := f.gate().Evaluate()
			if v.Proceed || v.Verdict != "pause" {
				t.Fatalf("did not pause: %+v", v)
			}
			if got := failing(v); len(got) != 1 || got[0] != name {
				t.Fatalf("failing checks %v, want only %s", got, name)
			}
			if len(v.Reasons) != 1 || !strings.HasPrefix(v.Reasons[0], name+": ") {
				t.Fatalf("reasons %v", v.Reasons)
			}
		})
	}
}

func TestFewForwardsWithFailuresStillPause(t *testing.T) {
	f := healthy()
	f.tot.Forwarded, f.tot.Forwarded5xx = 5, 3
	if v := f.gate().Evaluate(); v.Proceed {
		t.Fatalf("3 of 5 forwards failed and the gate proceeds: %+v", v.Checks[0])
	}
	f.tot.Forwarded5xx = 0
	if v := f.gate().Evaluate(); !v.Proceed {
		t.Fatalf("5 clean forwards and the gate pauses: %v", v.Reasons)
	}
}

func TestExpectedApiserverThatNeverSentPauses(t *testing.T) {
	f := healthy()
	f.expected = []string{"kas-a", "kas-b", "kas-c"}
	v := f.gate().Evaluate()
	if v.Proceed || !strings.Contains(strings.Join(v.Reasons, ";"), "kas-c") {
		t.Fatalf("a configured apiserver silent for an hour: %+v", v.Reasons)
	}
}

// TestVersionSkewComparesParsedVersions: the skew check compares minors of versions as
// distributions write them (build metadata, pre-releases, a configured major.minor), across
// majors never passes, and names what does not parse instead of dropping it silently.
func TestVersionSkewComparesParsedVersions(t *testing.T) {
	cases := []struct {
		name     string
		versions []string
		ok       bool
		value    float64
		detail   string
	}{
		{"kubeadm", []string{"v1.35.4", "v1.36.3"}, true, 1, "1 minor apart"},
		{"k3s", []string{"v1.35.4+k3s1", "v1.36.3+k3s1"}, true, 1, "kas-0=v1.35.4+k3s1"},
		{"rke2 and eks and gke", []string{"v1.35.4+rke2r1", "v1.36.3-eks-4a1b2c3", "v1.36.1-gke.1200"}, true, 1, "1 minor apart"},
		{"configured minor only", []string{"v1.36", "v1.36.3"}, true, 0, "0 minor apart"},
		{"minor only with metadata", []string{"v1.35+k3s1", "v1.37.0"}, false, 2, "2 minor apart"},
		{"release candidate", []string{"v1.35.4", "v1.37.0-rc.1"}, false, 2, "2 minor apart"},
		{"two minors with metadata", []string{"v1.35.4+k3s1", "v1.37.2+k3s1"}, false, 2, "2 minor apart"},
		{"other major", []string{"v1.36.3", "v2.0.0"}, false, 2, "different major versions"},
		{"garbage is named", []string{"v1.35.4", "unknown"}, true, 0, "left out, not a version: kas-1=unknown"},
		{"nothing parses", []string{"garbage"}, true, 0, "no apiserver versions known yet; left out, not a version: kas-0=garbage"},
		{"unknown is named", []string{"v1.35.4", ""}, true, 0, "0 minor apart (policy: at most 1); left out, version unknown: kas-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			f.servers, f.last = nil, map[string]time.Time{}
			for i, v := range tc.versions {
				name := fmt.Sprintf("kas-%d", i)
				f.servers = append(f.servers, chain.ServerInfo{Name: name, Version: v})
				f.last[name] = now
			}
			var c Check
			for _, c = range f.gate().Evaluate().Checks {
				if c.Name == metrics.CheckVersionSkew {
					break
				}
			}
			if c.OK != tc.ok || c.Value != tc.value || !strings.Contains(c.Detail, tc.detail) {
				t.Fatalf("ok=%v value=%v detail %q; want ok=%v value=%v detail containing %q", c.OK, c.Value, c.Detail, tc.ok, tc.value, tc.detail)
			}
			if _, err := json.Marshal(c); err != nil {
				t.Fatalf("the check does not encode: %v", err)
			}
		})
	}
}

// TestRetiredApiserverIsForgotten: an upgrade that replaces a machine under a new name leaves
// the old name silent; once it is silent for ForgetAfter it stops holding the gate, unless it is
// configured.
func TestRetiredApiserverIsForgotten(t *testing.T) {
	retire := func(f *fixture, silentFor time.Duration) {
		f.servers = append(f.servers, chain.ServerInfo{Name: "kas-old", Version: "v1.34.9", LastSeen: now.Add(-silentFor)})
		f.last["kas-old"] = now.Add(-silentFor)
	}
	f := healthy()
	retire(f, 10*time.Minute)
	if got := failing(f.gate().Evaluate()); len(got) != 2 || got[0] != metrics.CheckIngestGap || got[1] != metrics.CheckVersionSkew {
		t.Fatalf("an apiserver silent for 10m (v1.34 among v1.35/v1.36): failing %v, want the ingest gap and the skew", got)
	}

	f = healthy()
	retire(f, 45*time.Minute)
	v := f.gate().Evaluate()
	if !v.Proceed {
		t.Fatalf("an unconfigured apiserver silent for 45m still holds the gate: %v", v.Reasons)
	}
	if d := v.Checks[4].Detail; v.Checks[4].Name != metrics.CheckIngestGap || !strings.Contains(d, "kas-old") {
		t.Fatalf("the ingest-gap check does not say kas-old is no longer watched: %q", d)
	}

	f = healthy()
	retire(f, 45*time.Minute)
	f.expected = []string{"kas-a", "kas-b", "kas-old"}
	if v := f.gate().Evaluate(); v.Proceed {
		t.Fatal("a configured apiserver silent for 45m was forgotten")
	}
}

// TestMadeUpNamesHoldTheGateNoLongerThanTheyWereHeard: in trial mode anyone may post under a
// name of their own. A name heard for a moment (one batch) never pauses the gate for its
// silence, nor for its version once it is silent past MaxIngestGap; one heard for 10 minutes
// pauses from MaxIngestGap of silence until it has been silent for as long as it was heard. A
// configured apiserver's silence pauses however briefly it was heard.
func TestMadeUpNamesHoldTheGateNoLongerThanTheyWereHeard(t *testing.T) {
	gap := DefaultThresholds().MaxIngestGap
	trial := func(heardFor, silentFor time.Duration, version string) *fixture {
		f := healthy()
		f.first = map[string]time.Time{"kas-a": now.Add(-time.Hour), "kas-b": now.Add(-time.Hour)}
		for i := range 1000 {
			n := fmt.Sprintf("made-up-%d", i)
			f.first[n], f.last[n] = now.Add(-silentFor-heardFor), now.Add(-silentFor)
			if version != "" {
				f.servers = append(f.servers, chain.ServerInfo{Name: n, Version: version, LastSeen: now.Add(-silentFor),
					History: []chain.VersionEpoch{{Since: now.Add(-silentFor - heardFor), Version: version, Cause: chain.CauseFirstSeen}}})
			}
		}
		return f
	}
	for _, c := range []struct {
		heardFor, silentFor time.Duration
		version             string
		pause               []string
	}{
		{0, gap / 2, "", nil},
		{0, gap / 2, "v1.20.0", []string{metrics.CheckVersionSkew}}, // heard a minute ago, at a version out of the policy
		{0, gap + time.Second, "", nil},
		{0, gap + time.Second, "v1.20.0", nil},
		{0, 29 * time.Minute, "v1.20.0", nil},
		{time.Minute, 3 * time.Minute, "", nil},
		{10 * time.Minute, 5 * time.Minute, "", []string{metrics.CheckIngestGap}},
		{10 * time.Minute, 11 * time.Minute, "", nil},
		{2 * time.Hour, 29 * time.Minute, "", []string{metrics.CheckIngestGap}},
		{2 * time.Hour, 31 * time.Minute, "", nil},
	} {
		v := trial(c.heardFor, c.silentFor, c.version).gate().Evaluate()
		if got := failing(v); !slices.Equal(got, c.pause) {
			t.Errorf("1000 names heard for %s, silent for %s, version %q: failing %v, want %v", c.heardFor, c.silentFor, c.version, got, c.pause)
		}
	}
	// Without the streams' beginnings, as before: watched for ForgetAfter.
	f := trial(0, gap+time.Second, "")
	f.first = nil
	if got := failing(f.gate().Evaluate()); !slices.Equal(got, []string{metrics.CheckIngestGap}) {
		t.Errorf("without FirstBatches: failing %v", got)
	}
	// A configured apiserver heard once is watched for good.
	f = trial(0, gap+time.Second, "")
	f.expected = []string{"kas-a", "kas-b", "made-up-7"}
	if v := f.gate().Evaluate(); v.Proceed || !strings.Contains(strings.Join(v.Reasons, ""), "made-up-7") {
		t.Errorf("a configured apiserver heard once and silent: %v", v.Reasons)
	}
}

// noisy is a window with a replacement's restart noise: a peer down for 8 s (its forwards
// failed 503 and some of its audit was lost) and a restarted entry's 403s and 404s.
func noisy(peerDown, starting time.Duration) *fixture {
	f := healthy()
	f.tot.Forwarded5xx += 12
	f.tot.Forwarded5xxNoise = 12
	f.tot.Chains[chain.ClassProxyFailed] = 12
	f.tot.Chains[chain.ClassBroken] = 2
	f.tot.Chains[chain.ClassMisleading404] = 3
	f.tot.Noise = map[chain.Class]int{chain.ClassProxyFailed: 12, chain.ClassBroken: 2, chain.ClassMisleading404: 3}
	f.tot.Episodes = []chain.NoiseEpisode{
		{Finding: chain.FindingPeerDown, APIServer: "kas-c", Since: now.Add(-2 * time.Minute), First: now.Add(-2 * time.Minute), Last: now.Add(-2*time.Minute + peerDown), Chains: 14},
		{Finding: chain.FindingEntryStarting, APIServer: "kas-b", Since: now.Add(-time.Minute), First: now.Add(-55 * time.Second), Last: now.Add(-55*time.Second + starting), Chains: 5},
	}
	return f
}

// TestRestartNoiseWithinBudgetProceeds: what a replacement costs (a peer down for seconds, a
// restarted entry's first answers) is reported but does not pause; past either budget it does,
// and then its chains count against the other checks again.
func TestRestartNoiseWithinBudgetProceeds(t *testing.T) {
	v := noisy(8*time.Second, time.Second).gate().Evaluate()
	if !v.Proceed {
		t.Fatalf("restart noise within budget pauses: %v", v.Reasons)
	}
	c := v.Checks[len(v.Checks)-1]
	if c.Name != metrics.CheckRestartNoise || !c.OK || !strings.Contains(c.Detail, "within budget: peer_down kas-c") || !strings.Contains(c.Detail, "entry_starting kas-b") {
		t.Fatalf("noise check %+v", c)
	}
	if !strings.Contains(v.Checks[0].Detail, "12 more explained as restart noise") {
		t.Fatalf("the 5xx check does not say what it left out: %q", v.Checks[0].Detail)
	}

	for name, f := range map[string]*fixture{"peer down 31s": noisy(31*time.Second, time.Second), "starting 11s": noisy(8*time.Second, 11*time.Second)} {
		v := f.gate().Evaluate()
		got := failing(v)
		if v.Proceed || !slices.Contains(got, metrics.CheckRestartNoise) || !slices.Contains(got, metrics.CheckBrokenChains) ||
			!slices.Contains(got, metrics.CheckMisleading404) || !slices.Contains(got, metrics.CheckProxied5xxRatio) {
			t.Fatalf("%s: failing %v, want the noise check and the checks its chains count in again", name, got)
		}
		if !strings.Contains(strings.Join(v.Reasons, "; "), "restart noise over budget") {
			t.Fatalf("%s: reasons %v", name, v.Reasons)
		}
	}

	// A persistent fault next to noise within budget still pauses at once.
	f := noisy(8*time.Second, time.Second)
	f.tot.Chains[chain.ClassMisleading404]++
	if got := failing(f.gate().Evaluate()); len(got) != 1 || got[0] != metrics.CheckMisleading404 {
		t.Fatalf("one misleading 404 not explained by a restart: failing %v", got)
	}
}

// TestZeroBudgetTakesTheDefault: a caller that builds Thresholds field by field without the
// budgets gets the defaults; a negative budget admits no noise.
func TestZeroBudgetTakesTheDefault(t *testing.T) {
	f := noisy(8*time.Second, time.Second)
	g := New(Thresholds{Window: 10 * time.Minute, MaxProxied5xxRatio: 0.01, MinForwarded: 20, MaxIngestGap: 2 * time.Minute, MaxMinorSkew: 1},
		Sources{Recent: func(time.Duration) chain.Totals { return f.tot }, APIServers: func() []chain.ServerInfo { return f.servers },
			LastBatches: func() map[string]time.Time { return f.last }, Started: now.Add(-time.Hour)}, slog.New(slog.DiscardHandler))
	g.now = func() time.Time { return now }
	if v := g.Evaluate(); !v.Proceed {
		t.Fatalf("zero budgets: %v", v.Reasons)
	}
	g.t.MaxPeerDown = -1
	if got := failing(g.Evaluate()); !slices.Contains(got, metrics.CheckRestartNoise) {
		t.Fatalf("a negative budget admits noise: failing %v", got)
	}
}
