-- Chains: one request as every apiserver that recorded it saw it (a correlate.Chain), with
-- both sides flattened into entry_* and peer_* columns. Every column is documented in
-- store/COLUMNS.md.
--
-- A chain can be written more than once: again when the correlator replays the spool after a
-- restart, with a higher revision when a late record reopened it, as open and then final.
-- Rows with the same id fold into the one with the highest version (store.ChainVersion:
-- revision, then last_received, then final over open). Read with FINAL (or argMax by version).
--
-- The sorting key holds only what never changes for a chain: the hour it was first received,
-- its auditID (which makes "the chain of this auditID" a key lookup) and its id.
CREATE TABLE IF NOT EXISTS {{table "chains"}} {{on_cluster}}
(
    id                          String,
    audit_id                    String,
    version                     UInt64,
    revision                    UInt32,
    evicted                     Bool,
    state                       LowCardinality(String),
    class                       LowCardinality(String),
    findings                    Array(LowCardinality(String)),
    explanation                 String CODEC(ZSTD(1)),

    verb                        LowCardinality(String),
    request_uri                 String CODEC(ZSTD(1)),
    api_group                   LowCardinality(String),
    api_version                 LowCardinality(String),
    resource                    LowCardinality(String),
    subresource                 LowCardinality(String),
    namespace                   LowCardinality(String),
    name                        String,
    user_name                   LowCardinality(String),
    real_user                   LowCardinality(String),
    code                        Int32,

    has_entry                   Bool,
    entry_apiserver             LowCardinality(String),
    entry_code                  Int32,
    entry_user                  LowCardinality(String),
    entry_uid                   String,
    entry_groups                Array(LowCardinality(String)),
    entry_extra                 Map(LowCardinality(String), Array(String)),
    entry_impersonated_user     LowCardinality(String),
    entry_impersonated_groups   Array(LowCardinality(String)),
    entry_impersonated_extra    Map(LowCardinality(String), Array(String)),
    entry_source_ips            Array(String),
    entry_user_agent            LowCardinality(String),
    entry_message               String CODEC(ZSTD(1)),
    entry_reason                LowCardinality(String),
    entry_request_received      DateTime64(6, 'UTC'),
    entry_completed             DateTime64(6, 'UTC'),
    entry_stages                Array(LowCardinality(String)),
    entry_has_objects           Bool,

    has_peer                    Bool,
    peer_apiserver              LowCardinality(String),
    peer_code                   Int32,
    peer_user                   LowCardinality(String),
    peer_uid                    String,
    peer_groups                 Array(LowCardinality(String)),
    peer_extra                  Map(LowCardinality(String), Array(String)),
    peer_impersonated_user      LowCardinality(String),
    peer_impersonated_groups    Array(LowCardinality(String)),
    peer_impersonated_extra     Map(LowCardinality(String), Array(String)),
    peer_source_ips             Array(String),
    peer_user_agent             LowCardinality(String),
    peer_message                String CODEC(ZSTD(1)),
    peer_reason                 LowCardinality(String),
    peer_request_received       DateTime64(6, 'UTC'),
    peer_completed              DateTime64(6, 'UTC'),
    peer_stages                 Array(LowCardinality(String)),
    peer_has_objects            Bool,

    other_apiservers            Array(LowCardinality(String)),
    other_codes                 Array(Int32),

    entry_duration_seconds      Float64,
    peer_duration_seconds       Float64,
    forwarding_overhead_seconds Float64,

    request_time                DateTime64(6, 'UTC'),
    first_received              DateTime64(6, 'UTC'),
    last_received               DateTime64(6, 'UTC'),
    records                     UInt32,

    INDEX request_time_minmax request_time TYPE minmax GRANULARITY 1,
    INDEX last_received_minmax last_received TYPE minmax GRANULARITY 1
)
ENGINE = {{engine "ReplacingMergeTree" "chains" "version"}}
PARTITION BY toDate(first_received)
ORDER BY (toStartOfHour(first_received), audit_id, id)
TTL toDateTime(first_received) + toIntervalDay({{.Retention}})
SETTINGS ttl_only_drop_parts = 1;

{{distributed "chains" "cityHash64(audit_id)"}};
