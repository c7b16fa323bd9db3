//lint:file-ignore SA1019 Grafana's file provisioning takes the v1 dashboard JSON (dashboard.Dashboard); dashboardv2 is the schema of Grafana 12's new dashboards, which peertrail does not target yet.

package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"

	"github.com/peertrail/peertrail/alerts"
	"github.com/peertrail/peertrail/alerts/promql"
	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// Variables of the MVP rollout dashboard.
const (
	apiserverVar = "apiserver"
	resourceVar  = "resource"
	// rateWindow is Grafana's interval for rate(): at least four scrapes.
	rateWindow = "$__rate_interval"
)

// Selectors narrowed by the dashboard's variables.
var (
	byAPIServer = promql.Re(metrics.LabelAPIServer, "$"+apiserverVar)
	byEntry     = promql.Re(metrics.LabelEntryAPIServer, "$"+apiserverVar)
	byResource  = promql.Re(metrics.LabelResource, "$"+resourceVar)
)

func chains(classes ...chain.Class) string {
	ms := []promql.Matcher{byEntry, byResource}
	if len(classes) > 0 {
		names := make([]string, len(classes))
		for i, c := range classes {
			names[i] = string(c)
		}
		ms = append([]promql.Matcher{promql.OneOf(metrics.LabelClass, names...)}, ms...)
	}
	return promql.Sel(metrics.CorrelateChainsTotal, ms...)
}

// needsPeer are the classes of requests that only another apiserver could serve: forwarded
// (proxied), forwarded and failed, or answered 404 instead of forwarded.
var needsPeer = []chain.Class{chain.ClassProxied, chain.ClassProxyFailed, chain.ClassMisleading404}

// hitRate is the proxy hit rate: the share of resource requests that were proxied (served by
// another apiserver than the one the client called).
func hitRate(by ...string) string {
	resourceRequests := promql.Sel(metrics.CorrelateChainsTotal, byEntry, byResource,
		promql.Neq(metrics.LabelResource, ""), promql.Neq(metrics.LabelClass, string(chain.ClassInternal)))
	return fmt.Sprintf("%s\n/\n%s",
		promql.Sum(promql.Rate(chains(chain.ClassProxied), rateWindow), by...),
		promql.Sum(promql.Rate(resourceRequests, rateWindow), by...))
}

// forwardingSuccess is the share of the requests that needed a peer which reached one and were
// served.
func forwardingSuccess(by ...string) string {
	return fmt.Sprintf("%s\n/\n%s",
		promql.Sum(promql.Rate(chains(chain.ClassProxied), rateWindow), by...),
		promql.Sum(promql.Rate(chains(needsPeer...), rateWindow), by...))
}

// counts is how many events of counter sel each panel interval saw, by labels.
func counts(sel string, by ...string) string {
	return promql.Sum(promql.Increase(sel, rateWindow), by...)
}

// MVPRollout is the "MVP rollout" dashboard (Prometheus).
func MVPRollout() (dashboard.Dashboard, error) {
	return dashboard.NewDashboardBuilder("MVP rollout").
		Uid(UIDMVPRollout).
		Description("A kube-apiserver rolling upgrade with the Mixed Version Proxy: the upgrade gate, what happened to requests that only another apiserver could serve (peertrail's chains), the apiservers' own MVP and audit metrics, and peertrail's pipeline health.").
		Tags([]string{"peertrail", "kubernetes", "mvp"}).
		Time("now-1h", "now").Refresh("30s").Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("Chain investigation").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"peertrail"}).AsDropdown(false).KeepTime(true).IncludeVars(false)).
		WithVariable(dashboard.NewDatasourceVariableBuilder(datasourceVar).Label("Prometheus").Type(PrometheusType)).
		WithVariable(queryVariable(apiserverVar, "Apiserver", fmt.Sprintf("label_values(%s, %s)", metrics.IngestEventsTotal, metrics.LabelAPIServer))).
		WithVariable(queryVariable(resourceVar, "Resource", fmt.Sprintf("label_values(%s, %s)", metrics.CorrelateChainsTotal, metrics.LabelResource))).
		WithRow(dashboard.NewRowBuilder("Upgrade gate")).
		WithPanel(gateVerdict()).
		WithPanel(gateChecks()).
		WithPanel(gateCheckTable()).
		WithPanel(versions()).
		WithRow(dashboard.NewRowBuilder("Mixed Version Proxy: requests that only another apiserver could serve (peertrail's chains)")).
		WithPanel(graph{title: "Proxy hit rate by entry apiserver", unit: "percentunit", min: ptr(0.0), max: ptr(1.0),
			description: "Of the resource requests entering at each apiserver, the share it forwarded to a peer that served them (proxied): how much of its traffic depends on the Mixed Version Proxy."}.
			prom(query{expr: hitRate(metrics.LabelEntryAPIServer), legend: "{{" + metrics.LabelEntryAPIServer + "}}"})).
		WithPanel(graph{title: "Proxy hit rate by resource", unit: "percentunit", min: ptr(0.0), max: ptr(1.0),
			description: "The same share, by the group and resource requested: 1 for what only the other version serves."}.
			prom(query{expr: hitRate(metrics.LabelGroup, metrics.LabelResource), legend: "{{" + metrics.LabelGroup + "}}/{{" + metrics.LabelResource + "}}"})).
		WithPanel(graph{title: "Forwarding success by entry apiserver", unit: "percentunit", min: ptr(0.0), max: ptr(1.0),
			description: "Of the requests entering at each apiserver that only another apiserver could serve, the share that was forwarded and served (proxied), rather than failed (proxy_failed) or answered 404 (misleading_404)."}.
			prom(query{expr: forwardingSuccess(metrics.LabelEntryAPIServer), legend: "{{" + metrics.LabelEntryAPIServer + "}}"})).
		WithPanel(graph{title: "Chains by class", unit: "reqps", stacked: true,
			description: "Every request peertrail assembled, per second, by what happened to it: local, proxied, proxy_failed, misleading_404, broken, loop, internal (the apiservers' own peer discovery)."}.
			prom(query{expr: promql.Sum(promql.Rate(chains(), rateWindow), metrics.LabelClass), legend: "{{" + metrics.LabelClass + "}}"})).
		WithPanel(graph{title: "Forwarding overhead p50 / p99", unit: "s",
			description: "Per entry -> peer pair, what the extra hop added to a proxied request: the entry's duration minus the peer's (clocks of different hosts may skew it)."}.
			prom(
				query{expr: promql.Quantile(0.5, metrics.CorrelateForwardingOverheadSeconds, metrics.LabelBucket, rateWindow, []promql.Matcher{byEntry}, metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer),
					legend: "p50 {{" + metrics.LabelEntryAPIServer + "}} -> {{" + metrics.LabelPeerAPIServer + "}}"},
				query{expr: promql.Quantile(0.99, metrics.CorrelateForwardingOverheadSeconds, metrics.LabelBucket, rateWindow, []promql.Matcher{byEntry}, metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer),
					legend: "p99 {{" + metrics.LabelEntryAPIServer + "}} -> {{" + metrics.LabelPeerAPIServer + "}}"},
			)).
		WithPanel(graph{title: "Misleading 404s", bars: true, width: third,
			description: "404 \"the server could not find the requested resource\" from an apiserver that does not serve the resource while another does (its peer stopping or gone, or MVP not active on the entry). See alert MVPMisleading404s."}.
			prom(query{expr: counts(chains(chain.ClassMisleading404), metrics.LabelEntryAPIServer, metrics.LabelGroup, metrics.LabelResource),
				legend: "{{" + metrics.LabelEntryAPIServer + "}} {{" + metrics.LabelGroup + "}}/{{" + metrics.LabelResource + "}}"})).
		WithPanel(graph{title: "Proxy failures", bars: true, width: third,
			description: "Requests the entry tried to forward and answered with an error (503 \"error trying to reach service\" from a killed peer, \"Error getting ip and port info\")."}.
			prom(query{expr: counts(chains(chain.ClassProxyFailed), metrics.LabelEntryAPIServer, metrics.LabelGroup, metrics.LabelResource),
				legend: "{{" + metrics.LabelEntryAPIServer + "}} {{" + metrics.LabelGroup + "}}/{{" + metrics.LabelResource + "}}"})).
		WithPanel(graph{title: "Broken chains", bars: true, width: third,
			description: "Forwarded requests with one side's audit record missing (an apiserver killed before its audit webhook flushed). See alert MVPBrokenChains."}.
			prom(query{expr: counts(chains(chain.ClassBroken), metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer),
				legend: "entry {{" + metrics.LabelEntryAPIServer + "}} peer {{" + metrics.LabelPeerAPIServer + "}}"})).
		WithPanel(graph{title: "Identity on the hop", bars: true, width: full, height: 7,
			description: "Forwarded requests whose peer recorded another identity than the entry authenticated (identity_mismatch: a UID or groups lost) and impersonation flattened by the hop (expected MVP behaviour: the real actor is only in the entry's record)."}.
			prom(query{expr: counts(promql.Sel(metrics.CorrelateFindingsTotal,
				promql.OneOf(metrics.LabelFinding, string(chain.FindingIdentityMismatch), string(chain.FindingImpersonationFlattened)), byEntry),
				metrics.LabelFinding, metrics.LabelEntryAPIServer, metrics.LabelPeerAPIServer),
				legend: "{{" + metrics.LabelFinding + "}} {{" + metrics.LabelEntryAPIServer + "}} -> {{" + metrics.LabelPeerAPIServer + "}}"})).
		WithRow(dashboard.NewRowBuilder("kube-apiserver: the apiservers' own metrics")).
		WithPanel(graph{title: "Rerouted requests by code", unit: "reqps",
			description: metrics.KubeReroutedRequestTotal + ": requests each apiserver's Mixed Version Proxy forwarded to a peer, by the code the client got (503: the peer could not be reached)."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, byAPIServer, byResource), rateWindow), metrics.LabelAPIServer, metrics.LabelCode),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelCode + "}}"})).
		WithPanel(graph{title: "Rerouted 5xx ratio against the SLO", unit: "percentunit", min: ptr(0.0), threshold: ptr(1 - alerts.SLO),
			description: "The share of rerouted requests answered 5xx: KEP-4020's SLI. The dashed line is the 1% the 99% SLO allows; alert MVPProxiedErrorBudgetBurn pages when it is burnt too fast."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, promql.Re(metrics.LabelCode, "5.."), byAPIServer), rateWindow)) +
				"\n/\n" + promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, byAPIServer), rateWindow)), legend: "5xx ratio"})).
		WithPanel(graph{title: "Peer proxy errors", unit: "reqps", width: third,
			description: metrics.KubePeerProxyErrorsTotal + " (1.36+): endpoint_resolution (no address for the peer) and proxy_transport (the forward failed)."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubePeerProxyErrorsTotal, byAPIServer, byResource), rateWindow), metrics.LabelAPIServer, metrics.LabelProxyErrorType),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelProxyErrorType + "}}"})).
		WithPanel(graph{title: "Peer discovery sync errors", unit: "reqps", width: third,
			description: metrics.KubePeerDiscoverySyncError + " (1.36+): failures listing identity leases, resolving a peer's address or fetching its discovery."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubePeerDiscoverySyncError, byAPIServer), rateWindow), metrics.LabelAPIServer, metrics.LabelProxyErrorType),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelProxyErrorType + "}}"})).
		WithPanel(graph{title: "404s and 5xx answered", unit: "reqps", width: third,
			description: metrics.KubeRequestTotal + " with code 404 or 5xx, by apiserver: a jump in 404s at one apiserver during the rollout is the misleading-404 signature."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeRequestTotal, promql.Re(metrics.LabelCode, "404|5.."), byAPIServer, byResource), rateWindow), metrics.LabelAPIServer, metrics.LabelCode),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelCode + "}}"})).
		WithPanel(graph{title: "Audit: generated, received by peertrail, dropped", unit: "ops", width: full, height: 8,
			description: "Per apiserver: audit events it generated (" + metrics.KubeAuditEventTotal + "), events peertrail accepted from it, and events its audit backends dropped (" + metrics.KubeAuditErrorTotal + "). Generated above received is an audit ingest gap."}.
			prom(
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeAuditEventTotal, byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "generated {{" + metrics.LabelAPIServer + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.IngestEventsTotal, promql.Eq(metrics.LabelResult, metrics.ResultAccepted), byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "received {{" + metrics.LabelAPIServer + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeAuditErrorTotal, byAPIServer), rateWindow), metrics.LabelAPIServer, metrics.LabelPlugin), legend: "dropped {{" + metrics.LabelAPIServer + "}} ({{" + metrics.LabelPlugin + "}})"},
			)).
		WithRow(dashboard.NewRowBuilder("Cross-check: peertrail against the apiservers' own MVP metrics")).
		WithPanel(graph{title: "Forwarded: peertrail vs the apiserver", unit: "reqps", width: third,
			description: "Per apiserver, requests it forwarded to a peer as peertrail's chains show them (" + metrics.CorrelateForwardedTotal + ": the entry of a proxied, proxy_failed, broken or loop chain) and as it counts them itself (" + metrics.KubeReroutedRequestTotal + "). The lines should lie on each other: peertrail below is lost audit, the apiserver below (or missing) a broken or unscraped metric. Alert " + alerts.AlertForwardedMismatch + "."}.
			prom(
				query{expr: promql.Sum(promql.Rate(alerts.PeertrailForwarded(alerts.ForwardedClasses, byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "peertrail {{" + metrics.LabelAPIServer + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "apiserver {{" + metrics.LabelAPIServer + "}}"},
			)).
		WithPanel(graph{title: "Failed forwards: peertrail vs the apiserver", unit: "reqps", width: third,
			description: "Per apiserver, forwards that failed as peertrail's chains show them (proxy_failed) and as it counts them itself: rerouted requests answered 5xx, and " + metrics.KubePeerProxyErrorsTotal + " (1.36+)."}.
			prom(
				query{expr: promql.Sum(promql.Rate(alerts.PeertrailForwarded([]chain.Class{chain.ClassProxyFailed}, byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "peertrail {{" + metrics.LabelAPIServer + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubeReroutedRequestTotal, promql.Re(metrics.LabelCode, "5.."), byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "apiserver 5xx {{" + metrics.LabelAPIServer + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.KubePeerProxyErrorsTotal, byAPIServer), rateWindow), metrics.LabelAPIServer), legend: "apiserver proxy errors {{" + metrics.LabelAPIServer + "}}"},
			)).
		WithPanel(graph{title: "Disagreement (what the alert compares)", unit: "percentunit", min: ptr(0.0), width: third,
			description: "Per apiserver, how far the two views differ over the last 30 minutes, as a share of the larger (what alert " + alerts.AlertForwardedMismatch + " compares: it fires above 10% forwarded or 25% failed, given enough requests)."}.
			prom(
				query{expr: alerts.CrossCheckGap(alerts.PeertrailCount(alerts.CrossCheckWindow, alerts.ForwardedClasses...), alerts.APIServerCount(alerts.CrossCheckWindow, ""), 1),
					legend: "forwarded {{" + metrics.LabelAPIServer + "}}"},
				query{expr: alerts.CrossCheckGap(alerts.PeertrailCount(alerts.CrossCheckWindow, chain.ClassProxyFailed), alerts.APIServerCount(alerts.CrossCheckWindow, "5.."), 1),
					legend: "failed {{" + metrics.LabelAPIServer + "}}"},
			)).
		WithRow(dashboard.NewRowBuilder("peertrail pipeline health")).
		WithPanel(graph{title: "Audit events received", unit: "ops", width: third,
			description: "Audit events per second from each apiserver's webhook, by result: accepted, duplicate (a batch resent), invalid (kept as a dead letter)."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.IngestEventsTotal, byAPIServer), rateWindow), metrics.LabelAPIServer, metrics.LabelResult),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelResult + "}}"})).
		WithPanel(graph{title: "Webhook answers", unit: "reqps", width: third,
			description: "Answers to the apiservers' audit webhook POSTs by code: 503 while the spool is full, 401/403 for an unknown or unauthenticated sender."}.
			prom(query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.IngestRequestsTotal), rateWindow), metrics.LabelAPIServer, metrics.LabelCode),
				legend: "{{" + metrics.LabelAPIServer + "}} {{" + metrics.LabelCode + "}}"})).
		WithPanel(graph{title: "Time since each apiserver's last audit batch", unit: "s", width: third,
			description: "Seconds since peertrail last accepted a batch from each apiserver: the batch wait of the webhook (1 s to 30 s) is normal, minutes are an ingest gap."}.
			prom(query{expr: "time() - " + promql.Agg("max", promql.Sel(metrics.IngestLastEventTimestampSeconds, byAPIServer), metrics.LabelAPIServer),
				legend: "{{" + metrics.LabelAPIServer + "}}"})).
		WithPanel(graph{title: "Spool: consumer lag and use", unit: "bytes", width: third,
			description: "Bytes of spool each consumer has not processed yet, and the spool's size against its capacity (at capacity the webhook is answered 503)."}.
			prom(
				query{expr: promql.Agg("max", promql.Sel(metrics.SpoolConsumerLagBytes), metrics.LabelConsumer), legend: "lag {{" + metrics.LabelConsumer + "}}"},
				query{expr: promql.Sum(promql.Sel(metrics.SpoolBytes)), legend: "spool"},
				query{expr: promql.Sum(promql.Sel(metrics.SpoolCapacityBytes)), legend: "capacity"},
			)).
		WithPanel(graph{title: "Dead letters", bars: true, width: third,
			description: "Audit items or bodies peertrail could not decode, kept in its dead-letter files by reason, and those it could not keep."}.
			prom(
				query{expr: counts(promql.Sel(metrics.IngestDeadLettersTotal), metrics.LabelReason), legend: "{{" + metrics.LabelReason + "}}"},
				query{expr: counts(promql.Sel(metrics.IngestDeadLettersDroppedTotal)), legend: "dropped"},
			)).
		WithPanel(graph{title: "Store lag and insert errors", unit: "s", width: third,
			description: "How far the ClickHouse store is behind the receiver (time since the newest row written was received), by table; and failed inserts per second (each is retried)."}.
			prom(
				query{expr: "time() - " + promql.Agg("max", promql.Sel(metrics.StoreNewestRowTimestampSeconds), metrics.LabelTable), legend: "lag {{" + metrics.LabelTable + "}}"},
				query{expr: promql.Sum(promql.Rate(promql.Sel(metrics.StoreInsertErrorsTotal), rateWindow), metrics.LabelTable), legend: "insert errors/s {{" + metrics.LabelTable + "}}"},
			)).
		WithPanel(graph{title: "Webhook acknowledge latency p50 / p99", unit: "s", width: half,
			description: "From the start of an audit webhook request to its answer, the spool's fsync included: the apiservers' webhook waits this long per batch."}.
			prom(
				query{expr: promql.Quantile(0.5, metrics.IngestAckDurationSeconds, metrics.LabelBucket, rateWindow, nil), legend: "p50"},
				query{expr: promql.Quantile(0.99, metrics.IngestAckDurationSeconds, metrics.LabelBucket, rateWindow, nil), legend: "p99"},
			)).
		WithPanel(graph{title: "Correlator: open and pending chains", width: half,
			description: "Chains still open (records may still arrive) and final chains not yet written to the store."}.
			prom(
				query{expr: promql.Sum(promql.Sel(metrics.CorrelateOpenChains)), legend: "open"},
				query{expr: promql.Sum(promql.Sel(metrics.CorrelatePendingChains)), legend: "pending store"},
			)).
		Build()
}

func queryVariable(name, label, q string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Datasource(dsRef(PrometheusType)).
		Query(dashboard.StringOrMap{String: ptr(q)}).Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Selected: ptr(true), Text: dashboard.StringOrArrayOfString{String: ptr("All")},
			Value: dashboard.StringOrArrayOfString{String: ptr("$__all")}})
}

func gateVerdict() *stat.PanelBuilder {
	return statPanel("Gate verdict", "peertrail's upgrade gate (peertrail gate, GET /api/v1/gate): PROCEED when every check passes over its window, PAUSE otherwise. An upgrade should replace the next apiserver only on PROCEED.",
		quarter, short, []mapping{{"1", "PROCEED", "green"}, {"0", "PAUSE", "red"}},
		query{expr: promql.Sel(metrics.GateProceed), legend: "gate"})
}

func gateChecks() *stat.PanelBuilder {
	return statPanel("Gate checks", "Each check of the gate: ok or FAIL ("+metrics.GateCheckFailing+").",
		half+quarter, short, []mapping{{"0", "ok", "green"}, {"1", "FAIL", "red"}},
		query{expr: promql.Agg("max", promql.Sel(metrics.GateCheckFailing), metrics.LabelCheck), legend: "{{" + metrics.LabelCheck + "}}"})
}

func gateCheckTable() *table.PanelBuilder {
	q := func(metric, ref string) query {
		return query{expr: promql.Agg("max", promql.Sel(metric), metrics.LabelCheck), instant: true, table: true, legend: ref}
	}
	return tablePanel("Gate checks: value and limit", "Each check's current value next to its threshold (ratio, count or seconds; see peertrail gate for the detail).",
		PrometheusType, half, 7, promTargets([]query{q(metrics.GateCheckValue, "value"), q(metrics.GateCheckThreshold, "threshold"), q(metrics.GateCheckFailing, "failing")}),
		dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}},
		dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true},
			"renameByName":  map[string]string{"Value #A": "value", "Value #B": "threshold", "Value #C": "failing"},
		}})
}

func versions() *table.PanelBuilder {
	return tablePanel("Apiserver versions", "The version each apiserver was last seen running (from the user agent of its own requests in its audit stream). The version-skew policy allows at most one minor apart.",
		PrometheusType, half, 7, promTargets([]query{{expr: promql.Agg("max", promql.Sel(metrics.APIServerVersionInfo), metrics.LabelAPIServer, metrics.LabelVersion), instant: true, table: true}}),
		organize([]string{"Time", "Value"}, []string{metrics.LabelAPIServer, metrics.LabelVersion}))
}
