-- Audit events: one row per audit event as one apiserver reported it (a record.Record).
-- Every column is documented in store/COLUMNS.md.
--
-- Deduplication: the sorting key ends in (apiserver, audit_id, stage, stage_timestamp), the
-- identity of an audit event, and every other key column is a function of the event itself,
-- so ReplacingMergeTree folds a row inserted twice into one when parts merge (queries that
-- must be exact before then use FINAL or LIMIT 1 BY). The writer keeps duplicates out in the
-- first place (see store.Writer); this is the backstop.
--
-- Partitioned by the day peertrail received the event (our clock, so a wrong apiserver
-- clock cannot spray partitions), sorted for the common scans: a time range, then apiserver,
-- then resource.
CREATE TABLE IF NOT EXISTS {{table "events"}} {{on_cluster}}
(
    apiserver                  LowCardinality(String),
    audit_id                   String,
    stage                      LowCardinality(String),
    level                      LowCardinality(String),
    verb                       LowCardinality(String),
    request_uri                String CODEC(ZSTD(1)),
    api_group                  LowCardinality(String),
    api_version                LowCardinality(String),
    resource                   LowCardinality(String),
    subresource                LowCardinality(String),
    namespace                  LowCardinality(String),
    name                       String,
    user_name                  LowCardinality(String),
    user_uid                   String,
    user_groups                Array(LowCardinality(String)),
    user_extra                 Map(LowCardinality(String), Array(String)),
    impersonated_user          LowCardinality(String),
    impersonated_uid           String,
    impersonated_groups        Array(LowCardinality(String)),
    impersonated_extra         Map(LowCardinality(String), Array(String)),
    impersonation_constraint   LowCardinality(String),
    source_ips                 Array(String),
    user_agent                 LowCardinality(String),
    code                       Int32,
    status                     LowCardinality(String),
    reason                     LowCardinality(String),
    message                    String CODEC(ZSTD(1)),
    request_received_timestamp DateTime64(6, 'UTC'),
    stage_timestamp            DateTime64(6, 'UTC'),
    annotations                Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    has_request_object         Bool,
    request_object_bytes       Int64,
    has_response_object        Bool,
    response_object_bytes      Int64,
    received_at                DateTime64(6, 'UTC'),
    raw                        String CODEC(ZSTD(3)),

    INDEX received_at_minmax received_at TYPE minmax GRANULARITY 1,
    INDEX audit_id_bloom audit_id TYPE bloom_filter(0.01) GRANULARITY 1
)
ENGINE = {{engine "ReplacingMergeTree" "events" ""}}
PARTITION BY toDate(received_at)
PRIMARY KEY (toStartOfHour(stage_timestamp), apiserver, resource, audit_id)
ORDER BY (toStartOfHour(stage_timestamp), apiserver, resource, audit_id, stage, stage_timestamp)
TTL toDateTime(received_at) + toIntervalDay({{.Retention}})
SETTINGS ttl_only_drop_parts = 1;

-- Sharded by audit_id: the entry and peer records of one forwarded request land on the same
-- shard, so a chain can be assembled and queried there.
{{distributed "events" "cityHash64(audit_id)"}};

-- Where the records of an auditID are: "all records of this auditID" without knowing its
-- day reads this small table first, then only the matching events granules (the lookup
-- yields the events sorting key prefix and partition). One row per (auditID, apiserver,
-- hour, resource), folded by ReplacingMergeTree.
CREATE TABLE IF NOT EXISTS {{table "audit_ids"}} {{on_cluster}}
(
    audit_id      String,
    apiserver     LowCardinality(String),
    stage_hour    DateTime('UTC'),
    resource      LowCardinality(String),
    received_day  Date,
    received_hour DateTime('UTC')
)
ENGINE = {{engine "ReplacingMergeTree" "audit_ids" ""}}
PARTITION BY received_day
ORDER BY (audit_id, apiserver, stage_hour, resource, received_hour)
TTL received_day + toIntervalDay({{.Retention}})
SETTINGS ttl_only_drop_parts = 1;

{{distributed "audit_ids" "cityHash64(audit_id)"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "audit_ids_mv"}} {{on_cluster}}
TO {{table "audit_ids"}}
AS SELECT DISTINCT
    audit_id,
    apiserver,
    toStartOfHour(stage_timestamp) AS stage_hour,
    resource,
    toDate(received_at) AS received_day,
    toStartOfHour(received_at) AS received_hour
FROM {{table "events"}};
