package alerts

import (
	"fmt"
	"maps"
	"math"
	"sort"
	"strings"
	"text/template"

	"github.com/peertrail/peertrail/alerts/promql"
	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// The promtool unit tests of the rules (RulesTestFile, run by `promtool test rules`): for every
// alert, input series on which it must fire, with the labels and the annotations it must have,
// and series on which it must stay silent.

type testFile struct {
	RuleFiles          []string    `yaml:"rule_files"`
	EvaluationInterval string      `yaml:"evaluation_interval"`
	Tests              []testGroup `yaml:"tests"`
}

type testGroup struct {
	Name        string      `yaml:"name"`
	Interval    string      `yaml:"interval"`
	InputSeries []series    `yaml:"input_series"`
	AlertTests  []alertTest `yaml:"alert_rule_test"`
}

type series struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertTest struct {
	EvalTime  string     `yaml:"eval_time"`
	Alertname string     `yaml:"alertname"`
	ExpAlerts []expAlert `yaml:"exp_alerts"`
}

type expAlert struct {
	Labels      map[string]string `yaml:"exp_labels"`
	Annotations map[string]string `yaml:"exp_annotations"`
}

// Labels of the scrape target in the tests' peertrail series.
var target = map[string]string{metrics.LabelInstance: "127.0.0.1:8443", metrics.LabelJob: "peertrail"}

func withTarget(m map[string]string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, target)
	return out
}

// sel renders a series of the test input, labels sorted.
func sel(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		if v != "" { // an empty label is no label
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	ms := make([]promql.Matcher, len(keys))
	for i, k := range keys {
		ms[i] = promql.Eq(k, labels[k])
	}
	return promql.Sel(name, ms...)
}

// tests builds the unit tests against the rules of o.
type tests struct {
	rules []Rule
	err   error
}

// fires is the expected alert name with labels (the series' labels that the expression keeps,
// the rule's own labels added) and annotations expanded for value.
func (t *tests) fires(name string, labels map[string]string, value float64) expAlert {
	var rule *Rule
	for i := range t.rules {
		r := &t.rules[i]
		if r.Alert != name {
			continue
		}
		match := true
		for k, v := range r.Labels {
			if lv, ok := labels[k]; ok && lv != v {
				match = false
			}
		}
		if match {
			rule = r
			break
		}
	}
	if rule == nil {
		t.err = fmt.Errorf("alerts: unit test expects alert %s %v, which no rule matches", name, labels)
		return expAlert{}
	}
	all := maps.Clone(labels)
	maps.Copy(all, rule.Labels)
	maps.DeleteFunc(all, func(_, v string) bool { return v == "" })
	ann := map[string]string{}
	for k, text := range rule.Annotations {
		s, err := expand(text, all, value)
		if err != nil {
			t.err = fmt.Errorf("alerts: %s annotation %s: %w", name, k, err)
		}
		ann[k] = s
	}
	return expAlert{Labels: all, Annotations: ann}
}

func silent(evalTime, name string) alertTest {
	return alertTest{EvalTime: evalTime, Alertname: name, ExpAlerts: []expAlert{}}
}

func firing(evalTime, name string, alerts ...expAlert) alertTest {
	return alertTest{EvalTime: evalTime, Alertname: name, ExpAlerts: alerts}
}

// UnitTestsYAML is the promtool test file of the rules of o (which it expects beside it, as
// RulesFile).
func UnitTestsYAML(o Options) ([]byte, error) {
	f, err := unitTests(o)
	if err != nil {
		return nil, err
	}
	return marshal(generatedHeader+"# promtool test rules "+RulesTestFile+"\n", f)
}

func unitTests(o Options) (testFile, error) {
	t := &tests{}
	for _, g := range Groups(o) {
		t.rules = append(t.rules, g.Rules...)
	}
	o = o.withDefaults()
	groups := []testGroup{
		t.burnRate(), t.burnRateSlow(), t.burnRateVerySlow(), t.burnRateWithinSLO(),
		t.misleading404s(), t.brokenChains(), t.identityMismatch(),
		t.ingestGap(), t.webhookErrors(), t.crossCheck(),
		t.peertrailDown(o), t.peertrailAbsent(o), t.spool(), t.storeWriteFailing(), t.versionSkew(), t.gatePaused(o),
		t.agentGaveUp(), t.agentBacklog(), t.aggregatorBehind(),
	}
	if t.err != nil {
		return testFile{}, t.err
	}
	return testFile{RuleFiles: []string{RulesFile}, EvaluationInterval: "1m", Tests: groups}, nil
}

func rerouted(code string) string {
	return sel(metrics.KubeReroutedRequestTotal, map[string]string{metrics.LabelCode: code, metrics.LabelAPIServer: "kas-a",
		metrics.LabelGroup: "scheduling.k8s.io", metrics.LabelResource: "podgroups"})
}

func (t *tests) burnRate() testGroup {
	// 20 of every 120 forwarded requests fail: 16.67%, above 14.4 x 1% (and 6 x 1%).
	burn := func(long, short, severity string) expAlert {
		return t.fires(AlertErrorBudgetBurn, map[string]string{"long": long, "short": short, "severity": severity}, 20.0/120)
	}
	return testGroup{
		Name:     "MVPProxiedErrorBudgetBurn: a fast burn pages on the 1h/5m and then the 6h/30m windows",
		Interval: "1m",
		InputSeries: []series{
			{rerouted("200"), "0+90x240"},
			{rerouted("404"), "0+10x240"},
			{rerouted("503"), "0+20x240"},
		},
		AlertTests: []alertTest{
			// Pending for its 2 minutes first.
			silent("2m", AlertErrorBudgetBurn),
			firing("5m", AlertErrorBudgetBurn, burn("1h", "5m", SeverityCritical)),
			firing("20m", AlertErrorBudgetBurn, burn("1h", "5m", SeverityCritical), burn("6h", "30m", SeverityCritical)),
		},
	}
}

func (t *tests) burnRateSlow() testGroup {
	// 4% fail: above 3 x 1% (1d/2h) but below 6 x 1%: a warning after an hour, no page.
	return testGroup{
		Name:     "MVPProxiedErrorBudgetBurn: a slow burn warns on the 1d/2h window",
		Interval: "1m",
		InputSeries: []series{
			{rerouted("200"), "0+96x180"},
			{rerouted("503"), "0+4x180"},
		},
		AlertTests: []alertTest{
			silent("50m", AlertErrorBudgetBurn),
			firing("2h", AlertErrorBudgetBurn, t.fires(AlertErrorBudgetBurn, map[string]string{"long": "1d", "short": "2h", "severity": SeverityWarning}, 0.04)),
		},
	}
}

func (t *tests) burnRateVerySlow() testGroup {
	// 1.5% fail: above the 1% budget, below 3 x 1%: a warning on the 3d/6h window after 3 hours.
	return testGroup{
		Name:     "MVPProxiedErrorBudgetBurn: a very slow burn warns on the 3d/6h window",
		Interval: "1m",
		InputSeries: []series{
			{rerouted("200"), "0+197x240"},
			{rerouted("503"), "0+3x240"},
		},
		AlertTests: []alertTest{
			silent("2h", AlertErrorBudgetBurn),
			firing("3h30m", AlertErrorBudgetBurn, t.fires(AlertErrorBudgetBurn, map[string]string{"long": "3d", "short": "6h", "severity": SeverityWarning}, 0.015)),
		},
	}
}

func (t *tests) burnRateWithinSLO() testGroup {
	// 0.5% fail, within the 1% budget: silent at every window, even after 4 hours.
	return testGroup{
		Name:     "MVPProxiedErrorBudgetBurn: silent within the SLO",
		Interval: "1m",
		InputSeries: []series{
			{rerouted("200"), "0+199x300"},
			{rerouted("503"), "0+1x300"},
		},
		AlertTests: []alertTest{silent("30m", AlertErrorBudgetBurn), silent("5h", AlertErrorBudgetBurn)},
	}
}

func chainLabels(class chain.Class, entry, peer, group, resource string) map[string]string {
	return withTarget(map[string]string{metrics.LabelClass: string(class), metrics.LabelEntryAPIServer: entry,
		metrics.LabelPeerAPIServer: peer, metrics.LabelGroup: group, metrics.LabelResource: resource})
}

func (t *tests) misleading404s() testGroup {
	podgroups := chainLabels(chain.ClassMisleading404, "kas-b", "", "scheduling.k8s.io", "podgroups")
	fires := func(n float64) expAlert {
		return t.fires(AlertMisleading404s, map[string]string{metrics.LabelEntryAPIServer: "kas-b",
			metrics.LabelGroup: "scheduling.k8s.io", metrics.LabelResource: "podgroups"}, n)
	}
	return testGroup{
		Name:     "MVPMisleading404s: the first misleading 404 fires (its series is created by it), more fire again, none stays silent",
		Interval: "1m",
		InputSeries: []series{
			// Created at 5m by the first misleading 404, two more at 15m; peertrail restarts
			// at 30m (the counter starts over) and sees one more at 31m.
			{sel(metrics.CorrelateChainsTotal, podgroups), "_ _ _ _ _ 1 1 1 1 1 1 1 1 1 1 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 _ 1 1 1 1 1 1 1 1 1 1"},
			// Proxied requests and local 404s do not count.
			{sel(metrics.CorrelateChainsTotal, chainLabels(chain.ClassProxied, "kas-a", "kas-c", "scheduling.k8s.io", "podgroups")), "0+5x40"},
			{sel(metrics.CorrelateChainsTotal, chainLabels(chain.ClassLocal, "kas-a", "", "", "configmaps")), "0+5x40"},
		},
		AlertTests: []alertTest{
			silent("4m", AlertMisleading404s),
			firing("6m", AlertMisleading404s, fires(1)),
			silent("11m", AlertMisleading404s),
			firing("16m", AlertMisleading404s, fires(2)),
			silent("25m", AlertMisleading404s),
			firing("32m", AlertMisleading404s, fires(1)),
			silent("40m", AlertMisleading404s),
		},
	}
}

func (t *tests) brokenChains() testGroup {
	broken := chainLabels(chain.ClassBroken, "kas-a", "", "scheduling.k8s.io", "podgroups")
	return testGroup{
		Name:     "MVPBrokenChains: fires for ten minutes after a broken chain, silent otherwise",
		Interval: "1m",
		InputSeries: []series{
			{sel(metrics.CorrelateChainsTotal, broken), "_ _ _ 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2"},
			{sel(metrics.CorrelateChainsTotal, chainLabels(chain.ClassProxyFailed, "kas-a", "", "scheduling.k8s.io", "podgroups")), "0+3x20"},
		},
		AlertTests: []alertTest{
			silent("2m", AlertBrokenChains),
			firing("3m", AlertBrokenChains, t.fires(AlertBrokenChains, map[string]string{metrics.LabelEntryAPIServer: "kas-a", metrics.LabelPeerAPIServer: ""}, 2)),
			firing("12m", AlertBrokenChains, t.fires(AlertBrokenChains, map[string]string{metrics.LabelEntryAPIServer: "kas-a", metrics.LabelPeerAPIServer: ""}, 2)),
			silent("14m", AlertBrokenChains),
		},
	}
}

func (t *tests) identityMismatch() testGroup {
	finding := func(f chain.Finding) string {
		return sel(metrics.CorrelateFindingsTotal, withTarget(map[string]string{metrics.LabelFinding: string(f),
			metrics.LabelEntryAPIServer: "kas-b", metrics.LabelPeerAPIServer: "kas-c"}))
	}
	return testGroup{
		Name:     "MVPIdentityMismatch: any identity mismatch fires; flattened impersonation (expected on every forward) does not",
		Interval: "1m",
		InputSeries: []series{
			{finding(chain.FindingIdentityMismatch), "0 0 0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"},
			{finding(chain.FindingImpersonationFlattened), "0+4x20"},
			{finding(chain.FindingPeerAuditMissing), "0+1x20"},
		},
		AlertTests: []alertTest{
			silent("4m", AlertIdentityMismatch),
			firing("5m", AlertIdentityMismatch, t.fires(AlertIdentityMismatch, map[string]string{metrics.LabelEntryAPIServer: "kas-b", metrics.LabelPeerAPIServer: "kas-c"}, 1)),
			silent("16m", AlertIdentityMismatch),
		},
	}
}

func (t *tests) ingestGap() testGroup {
	generated := func(apiserver string) string {
		return sel(metrics.KubeAuditEventTotal, map[string]string{metrics.LabelAPIServer: apiserver, metrics.LabelInstance: "10.0.0.11:6443", metrics.LabelJob: "apiserver"})
	}
	received := func(apiserver, result string) string {
		return sel(metrics.IngestEventsTotal, withTarget(map[string]string{metrics.LabelAPIServer: apiserver, metrics.LabelResult: result}))
	}
	return testGroup{
		Name:     "PeertrailAuditIngestGap: fires for an apiserver whose audit arrives short or not at all",
		Interval: "1m",
		InputSeries: []series{
			// kas-a: 10% of its events never arrive; duplicates (resent batches) do not make up for them.
			{generated("kas-a"), "0+100x40"},
			{received("kas-a", metrics.ResultAccepted), "0+90x40"},
			{received("kas-a", metrics.ResultDuplicate), "0+30x40"},
			// kas-b: 1% short, within the tolerance of batches in flight.
			{generated("kas-b"), "0+100x40"},
			{received("kas-b", metrics.ResultAccepted), "0+99x40"},
			// kas-c: nothing arrives at all.
			{generated("kas-c"), "0+100x40"},
		},
		AlertTests: []alertTest{
			silent("10m", AlertAuditIngestGap),
			firing("20m", AlertAuditIngestGap,
				t.fires(AlertAuditIngestGap, map[string]string{metrics.LabelAPIServer: "kas-a"}, 0.1),
				t.fires(AlertAuditIngestGap, map[string]string{metrics.LabelAPIServer: "kas-c"}, 1)),
		},
	}
}

func (t *tests) crossCheck() testGroup {
	kube := func(apiserver, code string) string {
		return sel(metrics.KubeReroutedRequestTotal, map[string]string{metrics.LabelAPIServer: apiserver, metrics.LabelCode: code,
			metrics.LabelGroup: "scheduling.k8s.io", metrics.LabelResource: "podgroups", metrics.LabelInstance: "10.0.0.11:6443", metrics.LabelJob: "apiserver"})
	}
	counted := func(class chain.Class, entry string) string {
		return sel(metrics.CorrelateForwardedTotal, withTarget(map[string]string{metrics.LabelAPIServer: entry, metrics.LabelClass: string(class)}))
	}
	fires := func(count, apiserver string, gap float64) expAlert {
		return t.fires(AlertForwardedMismatch, map[string]string{"count": count, metrics.LabelAPIServer: apiserver}, gap)
	}
	return testGroup{
		Name:     "MVPForwardedCountsDisagree: fires where peertrail's forwarded or failed counts and the apiserver's own differ",
		Interval: "1m",
		InputSeries: []series{
			// kas-a: both views agree (10 served and 1 failed a minute; broken chains count as forwarded).
			{kube("kas-a", "200"), "0+10x60"},
			{kube("kas-a", "503"), "0+1x60"},
			{counted(chain.ClassProxied, "kas-a"), "0+9x60"},
			{counted(chain.ClassBroken, "kas-a"), "0+1x60"},
			{counted(chain.ClassProxyFailed, "kas-a"), "0+1x60"},
			// kas-b: its audit arrives short: peertrail saw 5 of the 12 forwarded, none of the 2 failed.
			{kube("kas-b", "200"), "0+10x60"},
			{kube("kas-b", "503"), "0+2x60"},
			{counted(chain.ClassProxied, "kas-b"), "0+5x60"},
			// kas-c: forwards, but its own metric is not there (not scraped, or MVP metrics off).
			{counted(chain.ClassProxied, "kas-c"), "0+10x60"},
		},
		AlertTests: []alertTest{
			silent("10m", AlertForwardedMismatch),
			firing("50m", AlertForwardedMismatch,
				fires("forwarded", "kas-b", 7.0/12),
				fires("failed", "kas-b", 1),
				fires("forwarded", "kas-c", 1)),
		},
	}
}

func (t *tests) webhookErrors() testGroup {
	errs := func(apiserver, plugin string) string {
		return sel(metrics.KubeAuditErrorTotal, map[string]string{metrics.LabelAPIServer: apiserver, metrics.LabelPlugin: plugin,
			metrics.LabelInstance: "10.0.0.11:6443", metrics.LabelJob: "apiserver"})
	}
	return testGroup{
		Name:     "KubeAPIServerAuditWebhookErrors: a dropped webhook batch fires, log backend errors do not",
		Interval: "1m",
		InputSeries: []series{
			// kas-a drops a batch of 400 events at 3m (its first error creates the series).
			{errs("kas-a", metrics.PluginWebhook), "_ _ _ 400 400 400 400 400 400 400 400 400 400 400"},
			{errs("kas-b", "log"), "0+10x13"},
		},
		AlertTests: []alertTest{
			silent("2m", AlertAuditWebhookErrors),
			firing("4m", AlertAuditWebhookErrors, t.fires(AlertAuditWebhookErrors, map[string]string{metrics.LabelAPIServer: "kas-a"}, 400)),
			silent("9m", AlertAuditWebhookErrors),
		},
	}
}

func (t *tests) peertrailDown(o Options) testGroup {
	up := sel(metrics.PrometheusUp, map[string]string{metrics.LabelJob: o.PeertrailJob, metrics.LabelInstance: "127.0.0.1:8443"})
	other := sel(metrics.PrometheusUp, map[string]string{metrics.LabelJob: "apiserver", metrics.LabelInstance: "10.0.0.11:6443"})
	return testGroup{
		Name:     "PeertrailDown: fires after two minutes of failed scrapes, silent while up",
		Interval: "1m",
		InputSeries: []series{
			{up, "1 1 1 1 1 0 0 0 0 0 1 1 1"},
			{other, "0x12"},
		},
		AlertTests: []alertTest{
			silent("4m", AlertPeertrailDown),
			silent("6m", AlertPeertrailDown),
			firing("8m", AlertPeertrailDown, t.fires(AlertPeertrailDown, map[string]string{metrics.LabelJob: o.PeertrailJob, metrics.LabelInstance: "127.0.0.1:8443"}, 0)),
			silent("11m", AlertPeertrailDown),
		},
	}
}

func (t *tests) peertrailAbsent(o Options) testGroup {
	return testGroup{
		Name:        "PeertrailDown: fires when peertrail is not scraped at all",
		Interval:    "1m",
		InputSeries: []series{{sel(metrics.PrometheusUp, map[string]string{metrics.LabelJob: "apiserver", metrics.LabelInstance: "10.0.0.11:6443"}), "1x10"}},
		AlertTests: []alertTest{
			silent("1m", AlertPeertrailDown),
			firing("3m", AlertPeertrailDown, t.fires(AlertPeertrailDown, map[string]string{metrics.LabelJob: o.PeertrailJob}, 1)),
		},
	}
}

func (t *tests) spool() testGroup {
	lag := func(consumer string) string {
		return sel(metrics.SpoolConsumerLagBytes, withTarget(map[string]string{metrics.LabelConsumer: consumer}))
	}
	correlateLag := withTarget(map[string]string{metrics.LabelConsumer: metrics.ConsumerCorrelate})
	return testGroup{
		Name:     "PeertrailSpoolGrowing and PeertrailSpoolNearlyFull",
		Interval: "1m",
		InputSeries: []series{
			{sel(metrics.SpoolCapacityBytes, target), "1000000000x60"},
			// The correlator falls behind by 5 MB a minute: past 10% of the capacity at 20m.
			{lag(metrics.ConsumerCorrelate), "0+5000000x60"},
			// The dedup consumer is 20% behind, but not growing.
			{lag(metrics.ConsumerDedup), "200000000x60"},
			// The spool fills to 90% from 30m on.
			{sel(metrics.SpoolBytes, target), "100000000x29 900000000x30"},
		},
		AlertTests: []alertTest{
			silent("30m", AlertSpoolGrowing),
			firing("45m", AlertSpoolGrowing, t.fires(AlertSpoolGrowing, correlateLag, 0.225)),
			silent("33m", AlertSpoolNearlyFull),
			firing("40m", AlertSpoolNearlyFull, t.fires(AlertSpoolNearlyFull, target, 0.9)),
		},
	}
}

// agent is an agent's scrape target in the tests.
var agent = map[string]string{metrics.LabelInstance: "10.0.0.11:9444", metrics.LabelJob: "peertrail-agent"}

func withAgent(m map[string]string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, agent)
	return out
}

func (t *tests) agentGaveUp() testGroup {
	skipped := func(aggregator string) string {
		return sel(metrics.AgentShipSkippedEventsTotal, withAgent(map[string]string{metrics.LabelAggregator: aggregator}))
	}
	return testGroup{
		Name:     "PeertrailAgentGaveUpFrames: frames given up for an aggregator fire for the window, the other aggregator's do not",
		Interval: "1m",
		InputSeries: []series{
			// The agent gives up 4,000 events for agg-1 at 5m and 6m; none for agg-0.
			{skipped("agg-1"), "0x4 2000 4000x20"},
			{skipped("agg-0"), "0x25"},
		},
		AlertTests: []alertTest{
			silent("4m", AlertAgentGaveUp),
			firing("7m", AlertAgentGaveUp, t.fires(AlertAgentGaveUp, withAgent(map[string]string{metrics.LabelAggregator: "agg-1"}), 4000)),
			silent("20m", AlertAgentGaveUp),
		},
	}
}

func (t *tests) agentBacklog() testGroup {
	backlog := func(aggregator string) string {
		return sel(metrics.AgentShipBacklogBytes, withAgent(map[string]string{metrics.LabelAggregator: aggregator}))
	}
	return testGroup{
		Name:     "PeertrailAgentBacklogFilling: an aggregator's backlog past half the spool for 10 minutes fires",
		Interval: "1m",
		InputSeries: []series{
			{sel(metrics.SpoolCapacityBytes, agent), "1000000000x40"},
			// agg-1 away from 0m: 50 MB a minute, past half the spool at 10m.
			{backlog("agg-1"), "0+50000000x40"},
			{backlog("agg-0"), "1000x40"},
		},
		AlertTests: []alertTest{
			silent("15m", AlertAgentBacklog),
			firing("22m", AlertAgentBacklog, t.fires(AlertAgentBacklog, withAgent(map[string]string{metrics.LabelAggregator: "agg-1"}), 1.1)),
		},
	}
}

func (t *tests) aggregatorBehind() testGroup {
	check := func(name string) string {
		return sel(metrics.GateCheckFailing, withTarget(map[string]string{metrics.LabelCheck: name}))
	}
	return testGroup{
		Name:     "PeertrailAggregatorBehind: behind its agents for 10 minutes fires, a catch-up of a few minutes does not",
		Interval: "1m",
		InputSeries: []series{
			// Behind for 3 minutes (a restart), caught up, then behind from 10m on.
			{check(metrics.CheckAgentsCaughtUp), "1 1 1 0 0 0 0 0 0 0 1x20"},
			{check(metrics.CheckIngestGap), "1x30"},
		},
		AlertTests: []alertTest{
			silent("5m", AlertAggregatorBehind),
			silent("15m", AlertAggregatorBehind),
			firing("22m", AlertAggregatorBehind, t.fires(AlertAggregatorBehind, withTarget(map[string]string{metrics.LabelCheck: metrics.CheckAgentsCaughtUp}), 1)),
		},
	}
}

func (t *tests) storeWriteFailing() testGroup {
	errs := func(table string) string {
		return sel(metrics.StoreInsertErrorsTotal, withTarget(map[string]string{metrics.LabelTable: table}))
	}
	return testGroup{
		Name:     "PeertrailStoreWriteFailing: inserts failing for 10 minutes fire, a single failed insert does not",
		Interval: "1m",
		InputSeries: []series{
			// One failed insert at 2m, retried with success; then an outage from 20m on, the
			// writer retrying (and failing) twice a minute.
			{errs("events"), "0 0 1x17 1+2x20"},
			{errs("chains"), "0x40"},
		},
		AlertTests: []alertTest{
			silent("10m", AlertStoreWriteFailing),
			silent("25m", AlertStoreWriteFailing),
			firing("32m", AlertStoreWriteFailing, t.fires(AlertStoreWriteFailing, target, 10)),
		},
	}
}

func (t *tests) versionSkew() testGroup {
	check := func(name string) map[string]string { return withTarget(map[string]string{metrics.LabelCheck: name}) }
	return testGroup{
		Name:     "MVPVersionSkewBeyondPolicy: two minors apart fires after 5 minutes, one minor apart is the policy",
		Interval: "1m",
		InputSeries: []series{
			{sel(metrics.GateCheckValue, check(metrics.CheckVersionSkew)), "1x10 2x10"},
			{sel(metrics.GateCheckValue, check(metrics.CheckBrokenChains)), "5x20"},
		},
		AlertTests: []alertTest{
			silent("10m", AlertVersionSkew),
			silent("14m", AlertVersionSkew),
			firing("16m", AlertVersionSkew, t.fires(AlertVersionSkew, check(metrics.CheckVersionSkew), 2)),
		},
	}
}

func (t *tests) gatePaused(o Options) testGroup {
	n := int(o.GatePausedFor.Minutes())
	// Pauses briefly (shorter than N), proceeds, then pauses for good.
	values := fmt.Sprintf("1 0x%d 1 0x%d", n-2, n+5)
	pausedAt := n + 1 // the long pause starts here
	return testGroup{
		Name:     "MVPUpgradeGatePaused: fires after the gate said pause for N minutes without a break",
		Interval: "1m",
		InputSeries: []series{
			{sel(metrics.GateProceed, target), values},
		},
		AlertTests: []alertTest{
			silent(fmt.Sprintf("%dm", n-1), AlertUpgradeGatePaused),
			silent(fmt.Sprintf("%dm", pausedAt+n-1), AlertUpgradeGatePaused),
			firing(fmt.Sprintf("%dm", pausedAt+n+1), AlertUpgradeGatePaused, t.fires(AlertUpgradeGatePaused, target, 0)),
		},
	}
}

// expand renders an annotation template the way Prometheus does, for the functions the rules
// use ($labels, $value, humanizePercentage, humanize). promtool checks the result: a
// difference from Prometheus' own expansion fails the unit tests.
func expand(text string, labels map[string]string, value float64) (string, error) {
	funcs := template.FuncMap{
		"humanizePercentage": func(v float64) string { return fmt.Sprintf("%.4g%%", v*100) },
		"humanize":           humanize,
	}
	tmpl, err := template.New("a").Funcs(funcs).Option("missingkey=zero").Parse(
		"{{$labels := .Labels}}{{$value := .Value}}" + text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, struct {
		Labels map[string]string
		Value  float64
	}{labels, value}); err != nil {
		return "", err
	}
	return b.String(), nil
}

func humanize(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprintf("%.4g", v)
	}
	prefix := ""
	if math.Abs(v) >= 1 {
		for _, p := range []string{"k", "M", "G", "T", "P", "E", "Z", "Y"} {
			if math.Abs(v) < 1000 {
				break
			}
			prefix, v = p, v/1000
		}
		return fmt.Sprintf("%.4g%s", v, prefix)
	}
	for _, p := range []string{"m", "u", "n", "p", "f", "a", "z", "y"} {
		if math.Abs(v) >= 1 {
			break
		}
		prefix, v = p, v*1000
	}
	return fmt.Sprintf("%.4g%s", v, prefix)
}
