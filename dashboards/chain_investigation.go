//lint:file-ignore SA1019 Grafana's file provisioning takes the v1 dashboard JSON (dashboard.Dashboard); dashboardv2 is the schema of Grafana 12's new dashboards, which peertrail does not target yet.

package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/store/queries"
)

// The grafana-clickhouse-datasource (v4) query model: raw SQL, as a time series (long format:
// a time column, string columns naming the series, numeric values) or a table.
const (
	FormatTimeSeries = 0
	FormatTable      = 1
)

// auditIDVar is the chain-investigation dashboard's auditID variable; in SQL it is written
// ${audit_id:sqlstring}, which Grafana renders as a quoted, escaped string literal.
const auditIDVar = "audit_id"

var auditIDLiteral = "${" + auditIDVar + ":sqlstring}"

func chTarget(i int, sql string, format int) cog.Builder[variants.Dataquery] {
	queryType := "table"
	if format == FormatTimeSeries {
		queryType = "timeSeries"
	}
	return variants.NewUnknownDataqueryBuilderFromObject(variants.UnknownDataquery{
		"refId":      refID(i),
		"datasource": dsRef(ClickHouseType),
		"editorType": "sql",
		"queryType":  queryType,
		"format":     format,
		"rawSql":     strings.TrimSpace(sql),
	})
}

// auditIDLink opens this dashboard on the chain of the auditID in the cell.
func auditIDLink() dashboard.DynamicConfigValue {
	return dashboard.DynamicConfigValue{Id: "links", Value: []map[string]any{{
		"title":       "Show this chain",
		"url":         "/d/" + UIDChainInvestigation + "/?var-" + auditIDVar + "=${__value.raw}&${__url_time_range}",
		"targetBlank": false,
	}}}
}

func chTable(title, description string, width, height uint32, sql string) *table.PanelBuilder {
	return tablePanel(title, description, ClickHouseType, width, height, []cog.Builder[variants.Dataquery]{chTarget(0, sql, FormatTable)}).
		OverrideByName("audit_id", []dashboard.DynamicConfigValue{auditIDLink()}).
		OverrideByName("example_audit_id", []dashboard.DynamicConfigValue{auditIDLink()})
}

func chGraph(g graph, sql string) *timeseries.PanelBuilder {
	return g.panel(ClickHouseType, []cog.Builder[variants.Dataquery]{chTarget(0, sql, FormatTimeSeries)})
}

// ChainInvestigation is the "Chain investigation" dashboard (ClickHouse).
func ChainInvestigation() (dashboard.Dashboard, error) {
	// The questions store/queries answers for the API, the CLI and `peertrail report` are asked
	// here with the same text; a panel only picks and names the columns it shows.
	q, err := namedQueries("audit_id_chain", "audit_id_records", "dashboard_chains_per_minute", "dashboard_forwarding_overhead",
		"dashboard_findings_per_minute", "dashboard_requests_per_minute", "dashboard_errors_by_resource", "dashboard_request_latency",
		"broken_chains", "proxy_failures", "misleading_404s", "identity_mismatches")
	if err != nil {
		return dashboard.Dashboard{}, err
	}
	return dashboard.NewDashboardBuilder("Chain investigation").
		Uid(UIDChainInvestigation).
		Description("peertrail's store: chains (one per request, as every apiserver that recorded it saw it) and the audit events behind them. Find the broken, failed and misleading ones, then open one chain by auditID.").
		Tags([]string{"peertrail", "kubernetes", "mvp"}).
		Time("now-6h", "now").Refresh("1m").Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("MVP rollout").Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"peertrail"}).AsDropdown(false).KeepTime(true).IncludeVars(false)).
		WithVariable(dashboard.NewDatasourceVariableBuilder(datasourceVar).Label("ClickHouse").Type(ClickHouseType)).
		WithVariable(dashboard.NewTextBoxVariableBuilder(auditIDVar).Label("auditID").
			Description("The auditID of a request (its Audit-Id response header, or any audit record's auditID); click one in the tables to fill it in.").
			DefaultValue(dashboard.StringOrMap{String: ptr("")})).
		WithRow(dashboard.NewRowBuilder("Over time")).
		WithPanel(chGraph(graph{title: "Chains per minute by class", stacked: true,
			description: "Final chains per minute by class (the chains_per_minute rollup)."}, `
SELECT minute AS time, class, chains
FROM
(
`+q["dashboard_chains_per_minute"]+`
)
ORDER BY time, class`)).
		WithPanel(chGraph(graph{title: "Misleading 404s per minute by resource", bars: true,
			description: "Misleading 404s per minute, by the apiserver that answered them and the resource."}, fmt.Sprintf(`
SELECT minute AS time,
       concat(entry_apiserver, ' ', if(api_group = '', 'core', api_group), '/', resource) AS answered_by,
       sum(chains) AS misleading_404s
FROM peertrail.chains_per_minute
WHERE $__timeFilter(minute) AND class = '%s'
GROUP BY time, answered_by
ORDER BY time, answered_by`, chain.ClassMisleading404))).
		WithPanel(chGraph(graph{title: "Forwarding overhead p50 / p99 per minute", unit: "s",
			description: "What the extra hop cost proxied requests, per minute and entry -> peer pair (t-digest states merged from the forwarding_overhead_per_minute rollup)."}, `
SELECT minute AS time, pair, p50_seconds AS p50, p99_seconds AS p99
FROM
(
`+q["dashboard_forwarding_overhead"]+`
)
ORDER BY time, pair`)).
		WithPanel(chGraph(graph{title: "Findings per minute", bars: true,
			description: "Chains per minute with each finding: identity_mismatch, impersonation_flattened, peer_audit_missing, entry_audit_missing, status_mismatch, audit_id_reused, and the restart noise entry_starting, entry_stopping, entry_down, peer_down."}, `
SELECT minute AS time, finding, chains
FROM
(
`+q["dashboard_findings_per_minute"]+`
)
ORDER BY time, finding`)).
		// Every request, chained or not (the events rollups).
		WithPanel(chGraph(graph{title: "Requests per minute by apiserver", width: third,
			description: "Completed requests (ResponseComplete records) per minute per apiserver (the events_per_minute rollup). A forwarded request counts at its entry and its peer."}, `
SELECT minute AS time, apiserver, requests
FROM
(
`+q["dashboard_requests_per_minute"]+`
)
ORDER BY time, apiserver`)).
		WithPanel(chGraph(graph{title: "404s and 5xx per minute by resource", width: third, bars: true,
			description: "Requests answered 404 (not_found) and 5xx (server_errors) per minute, by the apiserver that answered and the group/resource (the errors_per_minute rollup)."}, `
SELECT minute AS time, concat(apiserver, ' ', resource) AS answered_by, not_found, server_errors
FROM
(
`+q["dashboard_errors_by_resource"]+`
)
ORDER BY time, answered_by`)).
		WithPanel(chGraph(graph{title: "Request latency p50 / p90 / p99 per minute", width: third, unit: "s",
			description: "requestReceived to ResponseComplete per minute per apiserver (t-digest states merged from the apiserver_latency_per_minute rollup). A forwarded request's entry includes the hop."}, `
SELECT minute AS time, apiserver, p50_seconds AS p50, p90_seconds AS p90, p99_seconds AS p99
FROM
(
`+q["dashboard_request_latency"]+`
)
ORDER BY time, apiserver`)).
		WithRow(dashboard.NewRowBuilder("Find the requests")).
		WithPanel(chTable("Broken chains", "Forwarded requests with a side missing (broken, or a missing audit record): a peer record without its entry record, or an entry record of a forwarding whose peer never reported. Newest first. Click an auditID to open its chain.",
			half, 10, `
SELECT request_time, audit_id, entry, peer, verb, what, code, finding_list, explanation
FROM
(
`+q["broken_chains"]+`
)`)).
		WithPanel(chTable("Failed forwardings by entry apiserver", "Requests the entry tried to forward and answered with an error instead (503 while a killed peer's lease lives on, or when the peer's address is unknown), by entry apiserver, code and message.",
			half, 10, `
SELECT entry, code, message, requests, first, last, example_audit_id
FROM
(
`+q["proxy_failures"]+`
)`)).
		WithPanel(chTable("Misleading 404s by resource", "Requests answered 404 by an apiserver that does not serve the resource while another does; served_by lists the other apiservers that served it with a 2xx in the same time range: where the request should have gone.",
			full, 8, `
SELECT group, version, resource, answered_404, requests, users, first, last,
    arrayStringConcat(served_by, ', ') AS served_by, example_audit_id
FROM
(
`+q["misleading_404s"]+`
)`)).
		WithPanel(chTable("Identity mismatches by user", "Forwarded requests whose peer recorded another identity than the entry: a UID lost (the peer lacks --requestheader-uid-headers), groups that differ, or impersonation flattened by the hop (the real actor only in the entry's record).",
			full, 8, `
SELECT user, finding_list, requests, real_users, example_real_user, uid_lost, groups_differ, pairs, example_audit_id
FROM
(
`+q["identity_mismatches"]+`
)`)).
		WithRow(dashboard.NewRowBuilder("One chain: ${" + auditIDVar + "}")).
		WithPanel(chTable("Chain", "How peertrail classified the request(s) with this auditID, both sides side by side (any time: the audit_ids lookup names the hours to read). A client can reuse an Audit-ID, so more than one chain may show.",
			full, 6, `
SELECT
    request_time,
    class,
    arrayStringConcat(findings, ',') AS finding_list,
    explanation,
    verb,
    request_uri,
    user_name AS user,
    real_user,
    code,
    entry_apiserver,
    entry_code,
    entry_user,
    entry_uid,
    arrayStringConcat(entry_source_ips, ',') AS entry_source_ips,
    peer_apiserver,
    peer_code,
    peer_user,
    peer_uid,
    arrayStringConcat(peer_source_ips, ',') AS peer_source_ips,
    round(entry_duration_seconds * 1000, 2) AS entry_ms,
    round(peer_duration_seconds * 1000, 2) AS peer_ms,
    round(forwarding_overhead_seconds * 1000, 2) AS overhead_ms,
    records,
    state
FROM
(
`+q["audit_id_chain"]+`
)`)).
		WithPanel(chTable("Audit records", "Every audit record any apiserver sent for this auditID, in time order: the entry's and the peer's, each stage.",
			full, 8, `
SELECT stage_timestamp, apiserver, stage, verb, request_uri, user, uid, impersonated_user, source_ips, user_agent,
    code, reason, message, has_objects, received_at
FROM
(
`+q["audit_id_records"]+`
)`)).
		Build()
}

// namedQueries returns the text of store/queries' named queries for a panel: the time range of
// the dashboard for since and until, the auditID variable for audit_id.
func namedQueries(names ...string) (map[string]string, error) {
	with := map[string]string{"since": "$__fromTime", "until": "$__toTime", "audit_id": auditIDLiteral}
	out := map[string]string{}
	for _, name := range names {
		q, err := queries.Named(name)
		if err != nil {
			return nil, err
		}
		if out[name], err = q.Text(with); err != nil {
			return nil, err
		}
	}
	return out, nil
}
