// Package metrics is the one place where peertrail's metric names, label names and label values
// are spelled. The code that exports a metric, the dashboards that chart it and the alert rules
// that page on it all use these constants, so a rename is a compile error rather than a silent
// gap in a dashboard.
package metrics

// Ingest: the audit webhook receiver.
const (
	// BuildInfo is 1, labelled with the binary's version, VCS revision and Go version.
	BuildInfo = "peertrail_build_info"
	// IngestEventsTotal counts audit events per sending apiserver and outcome (LabelResult).
	IngestEventsTotal = "peertrail_ingest_events_total"
	// IngestRequestsTotal counts webhook POSTs by sending apiserver and HTTP status code.
	IngestRequestsTotal = "peertrail_ingest_requests_total"
	// IngestBytesTotal counts request body bytes as received on the wire (before gzip decoding).
	IngestBytesTotal = "peertrail_ingest_bytes_total"
	// IngestAckDurationSeconds is the time from request start to the answer, durability included.
	IngestAckDurationSeconds = "peertrail_ingest_ack_duration_seconds"
	// IngestInflightRequests is the number of webhook requests being read or processed.
	IngestInflightRequests = "peertrail_ingest_inflight_requests"
	// IngestLastEventTimestampSeconds is the Unix time of the last accepted batch per apiserver;
	// a stale value is an audit ingest gap.
	IngestLastEventTimestampSeconds = "peertrail_ingest_last_batch_timestamp_seconds"
	// IngestDeadLettersTotal counts items or bodies kept in the dead-letter file, by LabelReason.
	IngestDeadLettersTotal = "peertrail_ingest_dead_letters_total"
	// IngestDeadLettersDroppedTotal counts dead letters that could not be kept (file limit or I/O error).
	IngestDeadLettersDroppedTotal = "peertrail_ingest_dead_letters_dropped_total"
	// IngestUnknownAPIServers is the number of apiserver names not in the configuration whose
	// batches are taken (--accept-unknown-apiservers, at most --max-unknown-apiservers).
	IngestUnknownAPIServers = "peertrail_ingest_unknown_apiservers"
	// IngestUnknownAPIServersRefusedTotal counts requests under a new name not in the
	// configuration refused because the limit of such names was reached.
	IngestUnknownAPIServersRefusedTotal = "peertrail_ingest_unknown_apiservers_refused_total"
	// DedupKeys is the number of event keys remembered for duplicate detection.
	DedupKeys = "peertrail_dedup_keys"
	// DedupMemoryBytes is an estimate of the memory the duplicate index holds.
	DedupMemoryBytes = "peertrail_dedup_memory_bytes"
	// DedupFileErrorsTotal counts failed writes and reads of the duplicate index's spilled minutes.
	DedupFileErrorsTotal = "peertrail_dedup_file_errors_total"
)

// Spool: the on-disk write-ahead log between the receiver and its consumers.
const (
	SpoolBytes               = "peertrail_spool_bytes"
	SpoolCapacityBytes       = "peertrail_spool_capacity_bytes"
	SpoolSegments            = "peertrail_spool_segments"
	SpoolWrittenBytesTotal   = "peertrail_spool_written_bytes_total"
	SpoolSyncDurationSeconds = "peertrail_spool_sync_duration_seconds"
	SpoolRecoveredBytesTotal = "peertrail_spool_truncated_bytes_total"
	SpoolCorruptFramesTotal  = "peertrail_spool_corrupt_frames_total"
	SpoolConsumerLagBytes    = "peertrail_spool_consumer_lag_bytes"
	SpoolConsumerErrorsTotal = "peertrail_spool_consumer_errors_total"
)

// Agent (peertrail agent, the HA layout): what it ships to each aggregator (LabelAggregator).
const (
	// AgentShipRequestsTotal counts requests to each aggregator by the HTTP status of its
	// answer (LabelCode; "error" when none came).
	AgentShipRequestsTotal = "peertrail_agent_ship_requests_total"
	// AgentShipFramesTotal, AgentShipEventsTotal and AgentShipBytesTotal count what each
	// aggregator acknowledged.
	AgentShipFramesTotal = "peertrail_agent_ship_frames_total"
	AgentShipEventsTotal = "peertrail_agent_ship_events_total"
	AgentShipBytesTotal  = "peertrail_agent_ship_bytes_total"
	// AgentShipBacklogBytes is the agent's spool an aggregator has not acknowledged.
	AgentShipBacklogBytes = "peertrail_agent_ship_backlog_bytes"
	// AgentSpoolGiveUpRatio is the share of the spool's limit at which the oldest frames of the
	// aggregator with the largest backlog are given up.
	AgentSpoolGiveUpRatio = "peertrail_agent_spool_give_up_ratio"
	// AgentShipSkippedFramesTotal, AgentShipSkippedEventsTotal and AgentShipSkippedBytesTotal
	// count what the agent gave up for an aggregator that stayed away longer than its spool
	// could hold: that aggregator's store lacks them.
	AgentShipSkippedFramesTotal = "peertrail_agent_ship_skipped_frames_total"
	AgentShipSkippedEventsTotal = "peertrail_agent_ship_skipped_events_total"
	AgentShipSkippedBytesTotal  = "peertrail_agent_ship_skipped_bytes_total"
	// AgentShipLastSuccessTimestampSeconds is the Unix time an aggregator last acknowledged a
	// request.
	AgentShipLastSuccessTimestampSeconds = "peertrail_agent_ship_last_success_timestamp_seconds"
	// AgentShipDurationSeconds is the time of one request to an aggregator.
	AgentShipDurationSeconds = "peertrail_agent_ship_duration_seconds"
)

// Aggregator (peertrail serve with agents configured): what it takes from each agent
// (LabelAgent).
const (
	// AggregatorRequestsTotal counts agents' requests by agent ("unknown" until established)
	// and HTTP status code.
	AggregatorRequestsTotal = "peertrail_aggregator_requests_total"
	// AggregatorFramesTotal counts agents' frames by LabelResult: accepted, or duplicate (the
	// aggregator had it: a resend).
	AggregatorFramesTotal = "peertrail_aggregator_frames_total"
	// AggregatorAgentLagSeconds is how far behind its agent the aggregator is: the agent's
	// newest batch's receipt time minus that of the newest frame the aggregator stored from it
	// (0 once it has the agent's head).
	AggregatorAgentLagSeconds = "peertrail_aggregator_agent_lag_seconds"
	// AggregatorAgentLagBytes is the agent's spool the aggregator has not stored yet, as the
	// agent last said.
	AggregatorAgentLagBytes = "peertrail_aggregator_agent_lag_bytes"
	// AggregatorAgentLastHeardTimestampSeconds is the Unix time of the agent's last request.
	AggregatorAgentLastHeardTimestampSeconds = "peertrail_aggregator_agent_last_heard_timestamp_seconds"
	// AggregatorAgentSkippedEvents is what each agent (LabelAgent) says it gave up for each
	// aggregator (LabelAggregator), since its data directory was made.
	AggregatorAgentSkippedEvents = "peertrail_aggregator_agent_skipped_events"
)

// Label names.
const (
	LabelAPIServer = "apiserver"
	LabelResult    = "result"
	LabelCode      = "code"
	LabelReason    = "reason"
	LabelConsumer  = "consumer"
	// LabelAgent names a peertrail agent, LabelAggregator an aggregator (the HA layout).
	LabelAgent      = "agent"
	LabelAggregator = "aggregator"
)

// Values of LabelConsumer: the spool's consumers, by the names they commit their positions
// under (dedup.ConsumerName, correlate.ConsumerName, store.ConsumerName).
const (
	ConsumerDedup     = "dedup"
	ConsumerCorrelate = "correlate"
	ConsumerStore     = "store"
)

// Values of LabelResult on IngestEventsTotal.
const (
	ResultAccepted  = "accepted"
	ResultDuplicate = "duplicate"
	ResultInvalid   = "invalid"
)

// UnknownAPIServer is the LabelAPIServer value of requests whose sender was not established
// (unauthenticated, forbidden, malformed path), so untrusted input cannot create label values.
const UnknownAPIServer = "unknown"

// Store: the ClickHouse writer, the chain sink and the ClickHouse HTTP interface.
const (
	// StoreRowsWrittenTotal counts rows inserted, by LabelTable.
	StoreRowsWrittenTotal = "peertrail_store_rows_written_total"
	// StoreRowsSkippedTotal counts rows not inserted because the store already held them
	// (redelivered by the spool after a restart or a failed insert, or a chain version
	// already written), by LabelTable.
	StoreRowsSkippedTotal = "peertrail_store_rows_skipped_total"
	// StoreInsertErrorsTotal counts failed inserts (each is retried), by LabelTable.
	StoreInsertErrorsTotal = "peertrail_store_insert_errors_total"
	// StoreInsertDurationSeconds is the time of one insert, by LabelTable.
	StoreInsertDurationSeconds = "peertrail_store_insert_duration_seconds"
	// StoreBadFramesTotal counts spool frames the writer could not decode and skipped.
	StoreBadFramesTotal = "peertrail_store_bad_frames_total"
	// StoreNewestRowTimestampSeconds is, by LabelTable, the receive time of the newest row
	// written: time() minus it is how far the store lags behind the receiver (it grows while
	// ClickHouse is down; the spool's consumer lag says how much is waiting).
	StoreNewestRowTimestampSeconds = "peertrail_store_newest_row_timestamp_seconds"
	// StoreChainsRetractedTotal counts final chain rows the writer took back from the rollups
	// because a newer version superseded them (a reclassification after a late record, or a
	// replay after a restart).
	StoreChainsRetractedTotal = "peertrail_store_chains_retracted_total"
	// StoreHTTPQueriesTotal counts queries to the ClickHouse HTTP interface, by LabelResult
	// (ResultOK, ResultError, ResultRefused).
	StoreHTTPQueriesTotal = "peertrail_store_http_queries_total"
	// StoreHTTPQueryDurationSeconds is the time to answer one query of the HTTP interface.
	StoreHTTPQueryDurationSeconds = "peertrail_store_http_query_duration_seconds"
	// StoreHTTPStuckReads is how many reads of the HTTP interface the engine has not given
	// back since they were killed (their slots are free; their connections are not).
	StoreHTTPStuckReads = "peertrail_store_http_stuck_reads"
	// StoreEngineProfileEventsTotal is the embedded engine's cumulative counters of inserts and
	// merges (its system.events), by LabelEvent (store.EngineProfileEvents).
	StoreEngineProfileEventsTotal = "peertrail_store_engine_profile_events_total"
	// StoreEngineActiveParts is the embedded engine's active data parts, by LabelTable.
	StoreEngineActiveParts = "peertrail_store_engine_active_parts"
	// StoreEngineMemoryBytes is the memory the embedded engine's own accounting says it holds
	// (its system.metrics), by LabelMetric (store.EngineMemoryMetrics).
	StoreEngineMemoryBytes = "peertrail_store_engine_memory_bytes"
)

// Store label names and values.
const (
	LabelTable = "table"
	// LabelEvent names one of the engine's counters on StoreEngineProfileEventsTotal.
	LabelEvent = "event"
	// LabelMetric names one of the engine's gauges on StoreEngineMemoryBytes.
	LabelMetric = "metric"

	// Values of LabelResult on StoreHTTPQueriesTotal.
	ResultOK      = "ok"
	ResultError   = "error"
	ResultRefused = "refused"
)

// Correlate: chains joined from the entry's and the peer's records.
const (
	// CorrelateRecordsTotal counts audit records fed to the correlator.
	CorrelateRecordsTotal = "peertrail_correlate_records_total"
	// CorrelateChainsTotal counts final chains by class, entry and peer apiserver, group and
	// resource (resource "" for non-resource requests such as /apis).
	CorrelateChainsTotal = "peertrail_correlate_chains_total"
	// CorrelateForwardedTotal counts requests an apiserver (LabelAPIServer) forwarded to a peer
	// as the entry, as the chains show them, by LabelClass (proxied, proxy_failed, broken,
	// loop): the same label as the apiservers' own KubeReroutedRequestTotal, to compare.
	CorrelateForwardedTotal = "peertrail_correlate_forwarded_total"
	// CorrelateFindingsTotal counts findings on final chains.
	CorrelateFindingsTotal = "peertrail_correlate_findings_total"
	// CorrelateForwardingOverheadSeconds is, per proxied chain, the entry's duration minus the
	// peer's: what forwarding added.
	CorrelateForwardingOverheadSeconds = "peertrail_correlate_forwarding_overhead_seconds"
	// CorrelateProxiedDurationSeconds is the entry's duration of proxied chains: what the client waited.
	CorrelateProxiedDurationSeconds = "peertrail_correlate_proxied_duration_seconds"
	// CorrelateOpenChains is the number of chains still open (records may still arrive).
	CorrelateOpenChains = "peertrail_correlate_open_chains"
	// CorrelateEvictionsTotal counts chains finalised early because too many were open, by class.
	CorrelateEvictionsTotal = "peertrail_correlate_evictions_total"
	// CorrelateReopenedTotal counts final chains reopened by a late record.
	CorrelateReopenedTotal = "peertrail_correlate_reopened_total"
	// CorrelateDroppedRecordsTotal counts records not joined because their chain or auditID
	// already had as many as a chain takes (a reused Audit-ID; finding audit_id_reused).
	CorrelateDroppedRecordsTotal = "peertrail_correlate_dropped_records_total"
	// CorrelateReplayRemnantsTotal counts chains of a replay after a restart that left memory
	// unseen: the last process had stored them whole.
	CorrelateReplayRemnantsTotal = "peertrail_correlate_replay_remnants_total"
	// CorrelateReclassifiedTotal counts reopened chains whose class changed, by old and new class.
	CorrelateReclassifiedTotal = "peertrail_correlate_reclassified_total"
	// CorrelateHeldTotal counts chains kept open one more chain window to wait for evidence.
	CorrelateHeldTotal = "peertrail_correlate_held_total"
	// CorrelateReevaluatedTotal counts final chains whose verdict changed when the evidence
	// they had waited for came later.
	CorrelateReevaluatedTotal = "peertrail_correlate_reevaluated_total"
	// CorrelatePendingChains is the number of final chains not yet written to the store.
	CorrelatePendingChains = "peertrail_correlate_pending_chains"
	// CorrelateSinkErrorsTotal counts failed attempts to write chains to the store.
	CorrelateSinkErrorsTotal = "peertrail_correlate_sink_errors_total"
	// CorrelateBadFramesTotal counts spool frames the correlator could not decode.
	CorrelateBadFramesTotal = "peertrail_correlate_bad_frames_total"
)

// Label names of the correlate metrics.
const (
	LabelClass          = "class"
	LabelFinding        = "finding"
	LabelEntryAPIServer = "entry_apiserver"
	LabelPeerAPIServer  = "peer_apiserver"
	LabelGroup          = "group"
	LabelResource       = "resource"
	LabelFrom           = "from"
	LabelTo             = "to"
)

// Gate: the go/no-go verdict for the next step of an upgrade.
const (
	// GateProceed is 1 while the gate says proceed and 0 while it says pause.
	GateProceed = "peertrail_gate_proceed"
	// GateCheckFailing is 1 for each gate check that currently fails (LabelCheck), else 0.
	GateCheckFailing = "peertrail_gate_check_failing"
	// GateCheckValue is each check's current value, next to GateCheckThreshold, its limit.
	GateCheckValue     = "peertrail_gate_check_value"
	GateCheckThreshold = "peertrail_gate_check_threshold"
	// APIServerVersionInfo is 1 per apiserver and the version it was last seen running (LabelVersion).
	APIServerVersionInfo = "peertrail_apiserver_version_info"
	// APIServerVersionUnparseableTotal counts, per apiserver, its own loopback requests whose
	// user agent named no version peertrail could parse (its version is then not followed).
	APIServerVersionUnparseableTotal = "peertrail_apiserver_version_unparseable_total"
)

// Label names of the gate metrics and values of LabelCheck.
const (
	LabelCheck   = "check"
	LabelVersion = "version"

	CheckProxied5xxRatio = "proxied_5xx_ratio"
	CheckMisleading404   = "misleading_404_rate"
	CheckBrokenChains    = "broken_chains"
	CheckIdentity        = "identity_mismatch"
	CheckIngestGap       = "audit_ingest_gap"
	CheckVersionSkew     = "version_skew"
	// CheckRestartNoise judges restart noise (findings entry_starting, peer_down) by how
	// long each episode lasted against its budget.
	CheckRestartNoise = "restart_noise"
	// CheckAgentsCaughtUp (an aggregator only) fails while it is behind its agents: an agent
	// not heard from, a backlog it has not stored, or stored frames the correlator has not
	// joined yet. Its verdict is then on partial data; peertrail gate with several servers
	// proceeds only on an aggregator whose check passes.
	CheckAgentsCaughtUp = "agents_caught_up"
	// CheckAgentSpool (an aggregator only) fails while an agent says, within the window, that
	// it gave up frames for an aggregator that stayed away longer than its spool could hold.
	CheckAgentSpool = "agent_spool"
)

// Metrics the kube-apiservers export themselves, which the dashboards and alerts put next to
// peertrail's (names as of 1.35/1.36: 1.35 has apiserver_rerouted_request_total{code}; 1.36
// adds the group, version and resource labels and the peer-proxy and peer-discovery error
// counters).
const (
	KubeReroutedRequestTotal   = "apiserver_rerouted_request_total"
	KubePeerProxyErrorsTotal   = "apiserver_peer_proxy_errors_total"
	KubeRequestTotal           = "apiserver_request_total"
	KubeAuditEventTotal        = "apiserver_audit_event_total"
	KubeAuditErrorTotal        = "apiserver_audit_error_total"
	KubePeerDiscoverySyncError = "apiserver_peer_discovery_sync_errors_total"
)

// Labels of the kube-apiserver metrics above, and their values the alert rules select on.
const (
	// LabelPlugin is the audit backend on KubeAuditErrorTotal ("webhook", "log").
	LabelPlugin   = "plugin"
	PluginWebhook = "webhook"
	// LabelProxyErrorType is the failure kind on KubePeerProxyErrorsTotal
	// ("endpoint_resolution", "proxy_transport").
	LabelProxyErrorType = "type"
	// LabelVerb is the request verb on KubeRequestTotal.
	LabelVerb = "verb"
)

// Series and labels Prometheus itself adds, which the alert rules and dashboards use.
const (
	// PrometheusUp is 1 per scrape target that answered its last scrape, 0 otherwise.
	PrometheusUp = "up"
	// LabelJob and LabelInstance are the scrape target labels.
	LabelJob      = "job"
	LabelInstance = "instance"
	// LabelBucket is a histogram bucket's upper bound (the _bucket series of a histogram).
	LabelBucket = "le"
)

// Recording rules (alerts/): the 5xx ratio of requests the Mixed Version Proxy rerouted, over
// the windows of the multi-window burn-rate alerts. A rule's name is the prefix followed by
// its window, e.g. "cluster:apiserver_rerouted_request_5xx:ratio_rate5m".
const RecordReroutedErrorRatioPrefix = "cluster:apiserver_rerouted_request_5xx:ratio_rate"

// Recording rules (alerts/) of the cross-check of peertrail's chains against the apiservers'
// own Mixed Version Proxy counter, per apiserver, over 30 minutes.
const (
	// RecordPeertrailForwarded: CorrelateForwardedTotal, every class.
	RecordPeertrailForwarded = "apiserver:peertrail_correlate_forwarded:increase30m"
	// RecordPeertrailFailed: CorrelateForwardedTotal of class proxy_failed.
	RecordPeertrailFailed = "apiserver:peertrail_correlate_forwarded_failed:increase30m"
	// RecordKubeRerouted: KubeReroutedRequestTotal, every code.
	RecordKubeRerouted = "apiserver:apiserver_rerouted_request:increase30m"
	// RecordKubeRerouted5xx: KubeReroutedRequestTotal answered 5xx.
	RecordKubeRerouted5xx = "apiserver:apiserver_rerouted_request_5xx:increase30m"
)
