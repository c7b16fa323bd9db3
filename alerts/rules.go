// Package alerts generates peertrail's Prometheus alerting and recording rules, the same rules
// as a prometheus-operator PrometheusRule, an example Alertmanager configuration that routes
// them, and promtool unit tests of every alert. Everything is built from the names in package
// metrics and correlate; `peertrail generate alerts` writes the files committed under
// alerts/generated, and a test fails when they differ from what this package generates.
//
// The rules page during a kube-apiserver rolling upgrade with the Mixed Version Proxy on:
// forwarded requests failing faster than KEP-4020's 99% SLO allows, misleading 404s, broken
// chains, identities that do not survive forwarding, audit that does not arrive, peertrail
// itself down or falling behind, apiservers outside the version-skew policy, and an upgrade
// gate that has said pause for too long. Each alert's runbook is alerts/runbooks/<alert>.md.
package alerts

import (
	"fmt"
	"strings"
	"time"

	"github.com/peertrail/peertrail/alerts/promql"
	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// Options shape the generated rules. The zero value gives the committed files.
type Options struct {
	// RunbookBaseURL is where alerts/runbooks is published; an alert's runbook_url is this
	// followed by "<alert>.md". Default DefaultRunbookBaseURL.
	RunbookBaseURL string
	// PeertrailJob is the Prometheus job label of peertrail's scrape target. Default "peertrail".
	PeertrailJob string
	// GatePausedFor is how long the upgrade gate may say pause before MVPUpgradeGatePaused
	// fires. Default 15 minutes.
	GatePausedFor time.Duration
}

// DefaultRunbookBaseURL is where the runbooks are read on the project's main branch.
const DefaultRunbookBaseURL = "https://github.com/peertrail/peertrail/blob/main/alerts/runbooks/"

func (o Options) withDefaults() Options {
	if o.RunbookBaseURL == "" {
		o.RunbookBaseURL = DefaultRunbookBaseURL
	}
	if !strings.HasSuffix(o.RunbookBaseURL, "/") {
		o.RunbookBaseURL += "/"
	}
	if o.PeertrailJob == "" {
		o.PeertrailJob = "peertrail"
	}
	if o.GatePausedFor == 0 {
		o.GatePausedFor = 15 * time.Minute
	}
	return o
}

// Severities, the values of the severity label.
const (
	SeverityCritical = "critical"
	SeverityWarning  = "warning"
)

// Labels every alert carries besides severity, for routing (see Alertmanager).
const (
	LabelComponent = "component"
	Component      = "peertrail"
)

// SLO is KEP-4020's objective: more than 99% of the requests the Mixed Version Proxy forwards
// are not answered 5xx.
const SLO = 0.99

// Group is one Prometheus rule group.
type Group struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is one alerting (Alert set) or recording (Record set) rule, as Prometheus reads it.
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// burnWindow is one pair of windows of the multi-window, multi-burn-rate alerts (the SRE
// workbook's, as kubernetes-mixin uses them for a 99% SLO).
type burnWindow struct {
	long, short string
	factor      float64
	forDur      time.Duration
	severity    string
}

var burnWindows = []burnWindow{
	{"1h", "5m", 14.4, 2 * time.Minute, SeverityCritical},
	{"6h", "30m", 6, 15 * time.Minute, SeverityCritical},
	{"1d", "2h", 3, time.Hour, SeverityWarning},
	{"3d", "6h", 1, 3 * time.Hour, SeverityWarning},
}

// RatioWindows are the windows over which the rerouted 5xx ratio is recorded.
func RatioWindows() []string { return []string{"5m", "30m", "1h", "2h", "6h", "1d", "3d"} }

// RatioRecord is the recording rule of the rerouted 5xx ratio over window.
func RatioRecord(window string) string { return metrics.RecordReroutedErrorRatioPrefix + window }

// Alert names.
const (
	AlertErrorBudgetBurn    = "MVPProxiedErrorBudgetBurn"
	AlertMisleading404s     = "MVPMisleading404s"
	AlertBrokenChains       = "MVPBrokenChains"
	AlertIdentityMismatch   = "MVPIdentityMismatch"
	AlertAuditIngestGap     = "PeertrailAuditIngestGap"
	AlertAuditWebhookErrors = "KubeAPIServerAuditWebhookErrors"
	AlertPeertrailDown      = "PeertrailDown"
	AlertSpoolGrowing       = "PeertrailSpoolGrowing"
	AlertSpoolNearlyFull    = "PeertrailSpoolNearlyFull"
	AlertStoreWriteFailing  = "PeertrailStoreWriteFailing"
	AlertVersionSkew        = "MVPVersionSkewBeyondPolicy"
	AlertUpgradeGatePaused  = "MVPUpgradeGatePaused"
	AlertForwardedMismatch  = "MVPForwardedCountsDisagree"
	// The HA layout (peertrail agent, aggregators).
	AlertAgentGaveUp        = "PeertrailAgentGaveUpFrames"
	AlertAgentBacklog       = "PeertrailAgentBacklogFilling"
	AlertAggregatorBehind   = "PeertrailAggregatorBehind"
	agentBacklogShare       = 0.5
	agentGaveUpWindow       = "10m"
	ingestGapRatio          = 0.05
	spoolLagShareOfCapacity = 0.1
	spoolNearlyFullShare    = 0.8
	versionSkewPolicyMinors = 1
	recentWindow            = "10m"
	newChainsWindow         = "5m"
	auditWindow             = "10m"
	auditErrorWindow        = "5m"
	// CrossCheckWindow is how far back peertrail's forwarded and failed counts are compared
	// with the apiservers' own: long enough that a webhook's batch wait (up to 30 s) and the
	// chain window do not matter.
	CrossCheckWindow = "30m"
	// storeErrorWindow spans several of the store writer's retries (their backoff is at most
	// 30 s), so an outage keeps the increase above zero for as long as it lasts.
	storeErrorWindow = "5m"
)

type alertDef struct {
	name, severity, expr string
	forDur               time.Duration
	labels               map[string]string
	summary, description string
}

// Groups returns the rule groups.
func Groups(o Options) []Group {
	o = o.withDefaults()
	rule := func(a alertDef) Rule {
		labels := map[string]string{"severity": a.severity, LabelComponent: Component}
		for k, v := range a.labels {
			labels[k] = v
		}
		return Rule{
			Alert:  a.name,
			Expr:   a.expr,
			For:    formatDuration(a.forDur),
			Labels: labels,
			Annotations: map[string]string{
				"summary":     a.summary,
				"description": a.description,
				"runbook_url": o.RunbookBaseURL + a.name + ".md",
			},
		}
	}
	var groups []Group
	for _, g := range []struct {
		name string
		defs []alertDef
	}{
		{"peertrail-mvp-slo", burnRateAlerts()},
		{"peertrail-mvp-chains", chainAlerts()},
		{"peertrail-audit-ingest", auditAlerts()},
		{"peertrail-mvp-crosscheck", crossCheckAlerts()},
		{"peertrail-pipeline", pipelineAlerts(o)},
		{"peertrail-ha", haAlerts()},
		{"peertrail-upgrade", upgradeAlerts(o)},
	} {
		grp := Group{Name: g.name}
		if g.name == "peertrail-mvp-slo" {
			grp.Rules = append(grp.Rules, ratioRecords()...)
		}
		if g.name == "peertrail-mvp-crosscheck" {
			grp.Rules = append(grp.Rules, crossCheckRecords()...)
		}
		for _, d := range g.defs {
			grp.Rules = append(grp.Rules, rule(d))
		}
		groups = append(groups, grp)
	}
	return groups
}

// ratioRecords record, for each window, the share of requests the apiservers' Mixed Version
// Proxy rerouted that were answered 5xx (KEP-4020's SLI, measured by the apiservers themselves:
// a forward to a killed peer is a 503 only they see).
func ratioRecords() []Rule {
	var out []Rule
	for _, w := range RatioWindows() {
		errs := promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, promql.Re(metrics.LabelCode, "5..")), w))
		all := promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal), w))
		out = append(out, Rule{Record: RatioRecord(w), Expr: errs + "\n/\n" + all})
	}
	return out
}

func burnRateAlerts() []alertDef {
	var out []alertDef
	budget := 1 - SLO
	for _, b := range burnWindows {
		threshold := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", b.factor*budget), "0"), ".")
		out = append(out, alertDef{
			name:     AlertErrorBudgetBurn,
			severity: b.severity,
			expr: fmt.Sprintf("%s > %s\nand\n%s > %s",
				RatioRecord(b.long), threshold, RatioRecord(b.short), threshold),
			forDur: b.forDur,
			labels: map[string]string{"long": b.long, "short": b.short},
			summary: "The Mixed Version Proxy is failing forwarded requests fast enough to exhaust " +
				"its 99% SLO error budget.",
			description: fmt.Sprintf("{{ $value | humanizePercentage }} of the requests the apiservers' Mixed Version Proxy "+
				"forwarded to a peer (%s) were answered 5xx over the last %s, and over the last %s too, so it "+
				"is still happening: %v times the 1%% error budget of the SLO (threshold %s); at this rate "+
				"a 30-day budget is gone in %s. Forwarded requests reach a peer that is stopping, killed or unreachable.",
				metrics.KubeReroutedRequestTotal, b.long, b.short, b.factor, threshold, exhaustion(b.factor)),
		})
	}
	return out
}

// exhaustion is how long a 30-day error budget lasts when it burns factor times too fast.
func exhaustion(factor float64) string {
	return formatDuration(time.Duration(float64(30*24*time.Hour) / factor).Round(time.Hour))
}

func chainAlerts() []alertDef {
	chains := func(class chain.Class) string {
		return promql.Sel(metrics.CorrelateChainsTotal, promql.Eq(metrics.LabelClass, string(class)))
	}
	finding := func(f chain.Finding) string {
		return promql.Sel(metrics.CorrelateFindingsTotal, promql.Eq(metrics.LabelFinding, string(f)))
	}
	return []alertDef{
		{
			name:     AlertMisleading404s,
			severity: SeverityWarning,
			expr: promql.Sum(promql.NewEvents(chains(chain.ClassMisleading404), newChainsWindow),
				metrics.LabelEntryAPIServer, metrics.LabelGroup, metrics.LabelResource) + " > 0",
			summary: "{{ $labels.entry_apiserver }} answers 404 for {{ $labels.resource }} that another apiserver serves.",
			description: "In the last " + newChainsWindow + ", {{ $value }} requests for {{ $labels.group }}/{{ $labels.resource }} " +
				"got 404 \"the server could not find the requested resource\" from {{ $labels.entry_apiserver }}, which " +
				"does not serve it, while another apiserver does: the peer that serves it is stopping or gone, or " +
				"{{ $labels.entry_apiserver }} does not proxy (Mixed Version Proxy off, or peer discovery not synced). " +
				"Clients see the resource vanish.",
		},
		{
			name:     AlertBrokenChains,
			severity: SeverityWarning,
			expr: promql.Sum(promql.NewEvents(chains(chain.ClassBroken), recentWindow),
				metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer) + " > 0",
			summary: "Forwarded requests are missing one of their two audit records.",
			description: "In the last " + recentWindow + ", {{ $value }} forwarded requests (entry \"{{ $labels.entry_apiserver }}\", peer " +
				"\"{{ $labels.peer_apiserver }}\") have only one side's audit record: an apiserver killed before its " +
				"audit webhook flushed, or audit events dropped. The audit trail of these requests is incomplete.",
		},
		{
			name:     AlertIdentityMismatch,
			severity: SeverityWarning,
			expr: promql.Sum(promql.NewEvents(finding(chain.FindingIdentityMismatch), recentWindow),
				metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer) + " > 0",
			summary: "{{ $labels.peer_apiserver }} served forwarded requests as a different identity than {{ $labels.entry_apiserver }} authenticated.",
			description: "In the last " + recentWindow + ", {{ $value }} requests forwarded from {{ $labels.entry_apiserver }} to " +
				"{{ $labels.peer_apiserver }} were recorded by the peer with another user, UID, groups or extra than " +
				"the entry authenticated (a UID dropped because the peer lacks --requestheader-uid-headers, or " +
				"X-Remote-* headers lost): the peer authorized and audited someone else.",
		},
	}
}

func auditAlerts() []alertDef {
	generated := promql.Sum(promql.Rate(promql.Sel(metrics.KubeAuditEventTotal, promql.Neq(metrics.LabelAPIServer, "")), auditWindow), metrics.LabelAPIServer)
	received := promql.Sum(promql.Rate(promql.Sel(metrics.IngestEventsTotal, promql.Eq(metrics.LabelResult, metrics.ResultAccepted)), auditWindow), metrics.LabelAPIServer)
	webhookErrors := promql.Sel(metrics.KubeAuditErrorTotal, promql.Eq(metrics.LabelPlugin, metrics.PluginWebhook))
	return []alertDef{
		{
			name:     AlertAuditIngestGap,
			severity: SeverityWarning,
			// An apiserver peertrail received nothing from has no received series: count it as 0.
			expr: fmt.Sprintf("1 - (\n  %s\n  or\n  %s * 0\n)\n/\n%s\n> %v",
				received, generated, generated, ingestGapRatio),
			forDur:  15 * time.Minute,
			summary: "peertrail receives fewer audit events from {{ $labels.apiserver }} than it generates.",
			description: "Over the last " + auditWindow + ", {{ $value | humanizePercentage }} of the audit events " +
				"{{ $labels.apiserver }} generated (" + metrics.KubeAuditEventTotal + ") did not reach peertrail " +
				"(" + promql.Sel(metrics.IngestEventsTotal, promql.Eq(metrics.LabelResult, metrics.ResultAccepted)) + "). Requests it handled are missing from " +
				"the chains: forwarded requests look broken and the gate's checks undercount.",
		},
		{
			name:     AlertAuditWebhookErrors,
			severity: SeverityCritical,
			expr:     promql.Sum(promql.NewEvents(webhookErrors, auditErrorWindow), metrics.LabelAPIServer) + " > 0",
			summary:  "{{ $labels.apiserver }} dropped audit events its webhook could not deliver.",
			description: "In the last " + auditErrorWindow + ", {{ $labels.apiserver }} counted {{ $value }} audit events it " +
				"gave up sending to peertrail (" + webhookErrors + "): after " +
				"retrying, the webhook backend drops the batch. Those events are lost for good.",
		},
	}
}

// ForwardedClasses are the classes of chains whose entry apiserver forwarded the request.
var ForwardedClasses = chain.ForwardedClasses

// PeertrailCount is, per apiserver, how many requests over window peertrail's chains show it
// forwarded as the entry, of classes (peertrail_correlate_forwarded_total).
func PeertrailCount(window string, classes ...chain.Class) string {
	return promql.Sum(promql.Increase(PeertrailForwarded(classes), window), metrics.LabelAPIServer)
}

// PeertrailForwarded selects peertrail's forwarded counter of classes, narrowed by more.
func PeertrailForwarded(classes []chain.Class, more ...promql.Matcher) string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = string(c)
	}
	return promql.Sel(metrics.CorrelateForwardedTotal, append([]promql.Matcher{promql.OneOf(metrics.LabelClass, names...)}, more...)...)
}

// APIServerCount is, per apiserver, how many requests over window its own Mixed Version Proxy
// counted as rerouted (apiserver_rerouted_request_total), those answered with a code matching
// codeRe ("" for every code).
func APIServerCount(window, codeRe string) string {
	ms := []promql.Matcher{promql.Neq(metrics.LabelAPIServer, "")}
	if codeRe != "" {
		ms = append(ms, promql.Re(metrics.LabelCode, codeRe))
	}
	return promql.Sum(promql.Increase(promql.Sel(metrics.KubeReroutedRequestTotal, ms...), window), metrics.LabelAPIServer)
}

// crossCheck is a cross-check of one count: the rules' thresholds and the two sides.
type crossCheck struct {
	count           string  // the label count of the alert: forwarded or failed
	peertrail, kube string  // the recording rules of the two counts
	minimum         int     // the larger side must reach it (in CrossCheckWindow)
	gap             float64 // the share by which the two may differ
	what            string
}

// Recording rules of the cross-check: per apiserver, the counts over CrossCheckWindow.
const (
	RecordPeertrailForwarded = metrics.RecordPeertrailForwarded
	RecordKubeRerouted       = metrics.RecordKubeRerouted
	RecordPeertrailFailed    = metrics.RecordPeertrailFailed
	RecordKubeRerouted5xx    = metrics.RecordKubeRerouted5xx
)

func crossCheckRecords() []Rule {
	return []Rule{
		{Record: RecordPeertrailForwarded, Expr: PeertrailCount(CrossCheckWindow, ForwardedClasses...)},
		{Record: RecordKubeRerouted, Expr: APIServerCount(CrossCheckWindow, "")},
		{Record: RecordPeertrailFailed, Expr: PeertrailCount(CrossCheckWindow, chain.ClassProxyFailed)},
		{Record: RecordKubeRerouted5xx, Expr: APIServerCount(CrossCheckWindow, "5..")},
	}
}

func crossChecks() []crossCheck {
	return []crossCheck{
		{count: "forwarded", peertrail: RecordPeertrailForwarded, kube: RecordKubeRerouted,
			minimum: 20, gap: 0.1, what: "requests it forwarded to a peer"},
		{count: "failed", peertrail: RecordPeertrailFailed, kube: RecordKubeRerouted5xx,
			minimum: 10, gap: 0.25, what: "forwarded requests that failed (5xx)"},
	}
}

// CrossCheckGap is the expression of one cross-check: per apiserver, the relative difference
// between peertrail's count and the apiserver's own (0 = equal, 1 = one side saw none), where
// the larger side reached minimum. A side without a series counts 0.
func CrossCheckGap(peertrail, kube string, minimum int) string {
	p := fmt.Sprintf("(%s or %s * 0)", peertrail, kube)
	k := fmt.Sprintf("(%s or %s * 0)", kube, peertrail)
	larger := fmt.Sprintf("(%s > %s or %s)", p, k, k)
	return fmt.Sprintf("abs(%s - %s)\n/\n(%s >= %d)", p, k, larger, minimum)
}

func crossCheckAlerts() []alertDef {
	var out []alertDef
	for _, c := range crossChecks() {
		out = append(out, alertDef{
			name:     AlertForwardedMismatch,
			severity: SeverityWarning,
			expr:     fmt.Sprintf("%s\n> %v", CrossCheckGap(c.peertrail, c.kube, c.minimum), c.gap),
			forDur:   15 * time.Minute,
			labels:   map[string]string{"count": c.count},
			summary:  "peertrail and {{ $labels.apiserver }}'s own metrics disagree on the " + c.what + ".",
			description: fmt.Sprintf("Over the last %s, the %s as peertrail's chains show them (%s) and as "+
				"{{ $labels.apiserver }} counts them itself (%s) differ by {{ $value | humanizePercentage }} of the larger. "+
				"Fewer in peertrail: audit of {{ $labels.apiserver }} is lost or late (see %s), so chains are missing. "+
				"Fewer in the apiserver's metric: it is not scraped, its Mixed Version Proxy metric is broken or "+
				"missing, or peertrail takes another apiserver's records for its. Either way one of the two views "+
				"cannot be trusted for this apiserver.", CrossCheckWindow, c.what, metrics.CorrelateForwardedTotal, metrics.KubeReroutedRequestTotal, AlertAuditIngestGap),
		})
	}
	return out
}

func pipelineAlerts(o Options) []alertDef {
	up := promql.Sel(metrics.PrometheusUp, promql.Eq(metrics.LabelJob, o.PeertrailJob))
	lag := promql.Sel(metrics.SpoolConsumerLagBytes)
	capacity := promql.Sel(metrics.SpoolCapacityBytes)
	return []alertDef{
		{
			name:     AlertPeertrailDown,
			severity: SeverityCritical,
			expr:     fmt.Sprintf("%s == 0\nor\nabsent(%s)", up, up),
			forDur:   2 * time.Minute,
			summary:  "peertrail is down or not scraped.",
			description: "Prometheus cannot scrape peertrail (job \"" + o.PeertrailJob + "\"{{ with $labels.instance }}, " +
				"instance {{ . }}{{ end }}). The apiservers' audit webhooks retry and then drop their " +
				"batches, so audit is being lost, and no chain, gate verdict or MVP alert is computed.",
		},
		{
			name:     AlertSpoolGrowing,
			severity: SeverityWarning,
			expr: fmt.Sprintf("%s\n/ ignoring (%s) group_left()\n(%s > 0) > %v\nand\nderiv(%s) > 0",
				lag, metrics.LabelConsumer, capacity, spoolLagShareOfCapacity, promql.Range(lag, "15m")),
			forDur:  15 * time.Minute,
			summary: "peertrail's {{ $labels.consumer }} consumer is falling behind the audit it receives.",
			description: "The spool consumer {{ $labels.consumer }} has {{ $value | humanizePercentage }} of the spool's " +
				"capacity not yet processed, and the backlog has grown for 15 minutes. Chains, the gate and the " +
				"store lag behind the apiservers; when the spool fills, audit webhooks are refused.",
		},
		{
			name:     AlertSpoolNearlyFull,
			severity: SeverityCritical,
			expr: fmt.Sprintf("%s\n/\n(%s > 0) > %v",
				promql.Sel(metrics.SpoolBytes), capacity, spoolNearlyFullShare),
			forDur:  5 * time.Minute,
			summary: "peertrail's spool is {{ $value | humanizePercentage }} full.",
			description: "The spool holds {{ $value | humanizePercentage }} of its capacity. When it is full, peertrail " +
				"answers audit webhooks 503; the apiservers retry and then drop the events.",
		},
		{
			// A store outage does not make /readyz fail: the receiver still acknowledges into the
			// spool, and taking peertrail out of its Service would lose audit instead. It shows
			// here, long before the spool's lag reaches PeertrailSpoolGrowing's share.
			name:     AlertStoreWriteFailing,
			severity: SeverityWarning,
			expr: promql.Sum(promql.Increase(promql.Sel(metrics.StoreInsertErrorsTotal), storeErrorWindow),
				metrics.LabelJob, metrics.LabelInstance) + " > 0",
			forDur:  10 * time.Minute,
			summary: "peertrail cannot write to its store (ClickHouse) for 10 minutes.",
			description: "peertrail's store writer failed {{ $value | humanize }} inserts in the last " + storeErrorWindow +
				" (" + metrics.StoreInsertErrorsTotal + ") and has kept failing for 10 minutes: ClickHouse is down, " +
				"refusing or out of space. Nothing is lost while the spool has room (the writer retries the same rows), " +
				"but SQL, the report and Grafana's chain views stop at the outage, and the spool grows toward full.",
		},
	}
}

// haAlerts are the HA layout's: an agent that gave up an aggregator's frames (that aggregator's
// store lacks them), an agent whose spool fills for an aggregator that stays away, an aggregator
// behind its agents.
func haAlerts() []alertDef {
	skipped := promql.Sel(metrics.AgentShipSkippedEventsTotal)
	backlog := promql.Sel(metrics.AgentShipBacklogBytes)
	capacity := promql.Sel(metrics.SpoolCapacityBytes)
	return []alertDef{
		{
			name:     AlertAgentGaveUp,
			severity: SeverityCritical,
			expr: promql.Sum(promql.Increase(skipped, agentGaveUpWindow),
				metrics.LabelJob, metrics.LabelInstance, metrics.LabelAggregator) + " > 0",
			summary: "The peertrail agent on {{ $labels.instance }} gave up {{ $value | humanize }} audit events for aggregator {{ $labels.aggregator }}.",
			description: "In the last " + agentGaveUpWindow + " the agent on {{ $labels.instance }} gave up the oldest " +
				"{{ $value | humanize }} events it held for aggregator {{ $labels.aggregator }} (" + metrics.AgentShipSkippedEventsTotal + "): " +
				"that aggregator stayed away (or behind) longer than the agent's spool could hold, and the agent " +
				"chose to keep taking its apiserver's audit. {{ $labels.aggregator }}'s store and chains lack those " +
				"events for good; the other aggregators have them. Every aggregator's gate pauses on its check " +
				metrics.CheckAgentSpool + " while the loss is in its window.",
		},
		{
			name:     AlertAgentBacklog,
			severity: SeverityWarning,
			expr: fmt.Sprintf("%s\n/ ignoring (%s) group_left()\n(%s > 0) > %v",
				backlog, metrics.LabelAggregator, capacity, agentBacklogShare),
			forDur:  10 * time.Minute,
			summary: "The peertrail agent on {{ $labels.instance }} holds {{ $value | humanizePercentage }} of its spool for aggregator {{ $labels.aggregator }}.",
			description: "Aggregator {{ $labels.aggregator }} has not acknowledged {{ $value | humanizePercentage }} of the " +
				"spool of the agent on {{ $labels.instance }} (" + metrics.AgentShipBacklogBytes + ") for 10 minutes: it is away " +
				"or too slow. At " + metrics.AgentSpoolGiveUpRatio + " of the spool the agent gives up that " +
				"aggregator's oldest frames (PeertrailAgentGaveUpFrames) rather than refuse its apiserver's audit.",
		},
		{
			name:     AlertAggregatorBehind,
			severity: SeverityWarning,
			expr:     promql.Sel(metrics.GateCheckFailing, promql.Eq(metrics.LabelCheck, metrics.CheckAgentsCaughtUp)) + " == 1",
			forDur:   10 * time.Minute,
			summary:  "The peertrail aggregator {{ $labels.instance }} has been behind its agents for 10 minutes.",
			description: "The aggregator {{ $labels.instance }} has not had what its agents have for 10 minutes (its gate's " +
				"check " + metrics.CheckAgentsCaughtUp + " fails): an agent is not heard from, its backlog is not stored, or " +
				"the correlator has not joined it. Its gate pauses and peertrail gate does not count its answer; " +
				"with the other aggregators away too, the upgrade has no gate.",
		},
	}
}

func upgradeAlerts(o Options) []alertDef {
	return []alertDef{
		{
			name:     AlertVersionSkew,
			severity: SeverityCritical,
			expr: fmt.Sprintf("%s > %d",
				promql.Sel(metrics.GateCheckValue, promql.Eq(metrics.LabelCheck, metrics.CheckVersionSkew)), versionSkewPolicyMinors),
			forDur:  5 * time.Minute,
			summary: "The apiservers are {{ $value }} minor versions apart, beyond the version-skew policy.",
			description: fmt.Sprintf("The kube-apiservers of this control plane run versions {{ $value }} minor versions apart "+
				"(%s); the Kubernetes version-skew policy allows HA apiservers at most %d minor apart. The Mixed "+
				"Version Proxy does not make a wider skew safe.", metrics.APIServerVersionInfo, versionSkewPolicyMinors),
		},
		{
			name:     AlertUpgradeGatePaused,
			severity: SeverityWarning,
			expr:     promql.Sel(metrics.GateProceed) + " == 0",
			forDur:   o.GatePausedFor,
			summary:  "The upgrade gate has said pause for more than " + formatDuration(o.GatePausedFor) + ".",
			description: "peertrail's upgrade gate has answered pause for " + formatDuration(o.GatePausedFor) + ": an " +
				"upgrade that polls it is stuck between two apiservers, in a mixed-version control plane. " +
				"The failing checks are the series " + metrics.GateCheckFailing + " == 1.",
		},
	}
}

// formatDuration renders d as Prometheus writes durations (1h, 15m, 90s); "" for 0.
func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return ""
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
