-- The report's own copy of the few chains its lists show: `peertrail report` read every chain of
-- the hours its window touched, with FINAL, once per query (chains is sorted by hour, then
-- auditID, so a time window reads the whole hour: 16 s for 15 minutes at 10,000 events/s,
-- BENCHMARKS.md). Its lists (misleading 404s, failed forwardings, broken chains, identity
-- mismatches, the chains with findings) are of the rare chains: every class but local and
-- proxied, and any chain with a finding. report_chains holds those alone, sorted by the minute
-- they were first received, with the columns the report reads; its counts come from the rollups.
--
-- A chain's rows fold like in chains (read with FINAL), by rank: its version twice, plus three
-- for a retracted row. A final row the writer supersedes is written again as retracted (migration
-- 0006, with the version of an open row: the final bit clear, so its rank is 2 above the final
-- row's and below any later version's); that retracted row is kept here (every retracted row, whatever its class: they are few)
-- and outranks the row it retracts, so a chain whose new final row is no longer rare (not
-- inserted here) shows as retracted, which the report's queries leave out. (Only final rows
-- are retracted; an open row the correlator would write, then supersede with a final row of a
-- common class, would stay. The correlator writes final chains alone.)
CREATE TABLE IF NOT EXISTS {{table "report_chains"}} {{on_cluster}}
(
    id                          String,
    audit_id                    String,
    rank                        UInt128,
    state                       LowCardinality(String),
    class                       LowCardinality(String),
    findings                    Array(LowCardinality(String)),
    explanation                 String CODEC(ZSTD(1)),
    verb                        LowCardinality(String),
    request_uri                 String CODEC(ZSTD(1)),
    api_group                   LowCardinality(String),
    api_version                 LowCardinality(String),
    resource                    LowCardinality(String),
    user_name                   LowCardinality(String),
    real_user                   LowCardinality(String),
    code                        Int32,
    has_entry                   Bool,
    entry_apiserver             LowCardinality(String),
    entry_user                  LowCardinality(String),
    entry_uid                   String,
    entry_groups                Array(LowCardinality(String)),
    entry_message               String CODEC(ZSTD(1)),
    has_peer                    Bool,
    peer_apiserver              LowCardinality(String),
    peer_user                   LowCardinality(String),
    peer_uid                    String,
    peer_groups                 Array(LowCardinality(String)),
    request_time                DateTime64(6, 'UTC'),
    first_received              DateTime64(6, 'UTC')
)
ENGINE = {{engine "ReplacingMergeTree" "report_chains" "rank"}}
PARTITION BY toDate(first_received)
ORDER BY (toStartOfMinute(first_received), id)
TTL toDateTime(first_received) + toIntervalDay({{.Retention}})
SETTINGS ttl_only_drop_parts = 1;

{{distributed "report_chains" "cityHash64(audit_id)"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "report_chains_mv"}} {{on_cluster}}
TO {{table "report_chains"}}
AS SELECT
    id, audit_id, toUInt128(version) * 2 + if(state = 'retracted', 3, 0) AS rank, state, class, findings, explanation,
    verb, request_uri, api_group, api_version, resource, user_name, real_user, code,
    has_entry, entry_apiserver, entry_user, entry_uid, entry_groups, entry_message,
    has_peer, peer_apiserver, peer_user, peer_uid, peer_groups,
    request_time, first_received
FROM {{table "chains"}}
WHERE class NOT IN ('local', 'proxied') OR notEmpty(findings) OR state = 'retracted';

-- An upgraded store starts with the rare chains chains holds (first received before the first
-- row the view above wrote; a chain written again folds with its copy in any case). A cluster
-- is filled by hand once, through the Distributed tables, with the same INSERT.
{{if not cluster}}
INSERT INTO {{Database}}.report_chains
SELECT
    id, audit_id, toUInt128(version) * 2 + if(state = 'retracted', 3, 0) AS rank, state, class, findings, explanation,
    verb, request_uri, api_group, api_version, resource, user_name, real_user, code,
    has_entry, entry_apiserver, entry_user, entry_uid, entry_groups, entry_message,
    has_peer, peer_apiserver, peer_user, peer_uid, peer_groups,
    request_time, first_received
FROM {{Database}}.chains
WHERE (class NOT IN ('local', 'proxied') OR notEmpty(findings) OR state = 'retracted')
  AND first_received < (SELECT if(count() = 0, toDateTime64('2106-01-01 00:00:00', 6, 'UTC'), min(first_received)) FROM {{Database}}.report_chains)
{{end}};
