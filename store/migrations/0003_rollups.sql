-- Per-minute rollups that dashboards read instead of scanning events and chains. Each is an
-- AggregatingMergeTree fed by a materialized view at insert time; read them with GROUP BY, sum()
-- for counts and the -Merge combinator for latency states, e.g.
--   SELECT minute, quantilesTDigestMerge(0.5, 0.9, 0.99)(latency_seconds)
--   FROM peertrail.request_latency_per_minute WHERE minute >= now() - INTERVAL 1 HOUR GROUP BY minute
--
-- Counts and latency states live in different rollups. Merging t-digest states costs per state
-- (about 5 µs each here), so a state per (apiserver, verb, stage, code, group, resource) made a
-- day's latency panel at 10k events/s merge two million states and take 11 s; the latency
-- rollups keep few dimensions (30,000 states a day) and the count rollups keep many.
--
-- The minute is the apiserver's own time of the event (stage_timestamp), unless that clock is
-- off by more than a day from when peertrail received it: then the receive time, so a broken
-- clock cannot scatter rows (and partitions) over the calendar.

CREATE TABLE IF NOT EXISTS {{table "events_per_minute"}} {{on_cluster}}
(
    minute    DateTime('UTC'),
    apiserver LowCardinality(String),
    verb      LowCardinality(String),
    stage     LowCardinality(String),
    code      Int32,
    api_group LowCardinality(String),
    resource  LowCardinality(String),
    events    SimpleAggregateFunction(sum, UInt64)
)
ENGINE = {{engine "AggregatingMergeTree" "events_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver, verb, api_group, resource, code, stage)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "events_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "events_per_minute_mv"}} {{on_cluster}}
TO {{table "events_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', received_at, stage_timestamp)) < 86400, stage_timestamp, received_at), 'UTC')) AS minute,
    apiserver,
    verb,
    stage,
    code,
    api_group,
    resource,
    count() AS events
FROM {{table "events"}}
GROUP BY minute, apiserver, verb, stage, code, api_group, resource;

-- Request latency (requestReceivedTimestamp to the ResponseComplete stage) per apiserver and
-- verb.
CREATE TABLE IF NOT EXISTS {{table "request_latency_per_minute"}} {{on_cluster}}
(
    minute          DateTime('UTC'),
    apiserver       LowCardinality(String),
    verb            LowCardinality(String),
    requests        SimpleAggregateFunction(sum, UInt64),
    latency_seconds AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64)
)
ENGINE = {{engine "AggregatingMergeTree" "request_latency_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver, verb)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "request_latency_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "request_latency_per_minute_mv"}} {{on_cluster}}
TO {{table "request_latency_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', received_at, stage_timestamp)) < 86400, stage_timestamp, received_at), 'UTC')) AS minute,
    apiserver,
    verb,
    count() AS requests,
    quantilesTDigestState(0.5, 0.9, 0.99)(dateDiff('microsecond', request_received_timestamp, stage_timestamp) / 1e6) AS latency_seconds
FROM {{table "events"}}
WHERE stage = 'ResponseComplete'
GROUP BY minute, apiserver, verb;

-- Which version each apiserver ran when: every apiserver audits its own loopback requests
-- with the user agent "kube-apiserver/v1.36.3 (linux/amd64) kubernetes/<commit>", so a
-- rolling upgrade shows up here as the version of an apiserver changing.
CREATE TABLE IF NOT EXISTS {{table "apiserver_versions_per_minute"}} {{on_cluster}}
(
    minute    DateTime('UTC'),
    apiserver LowCardinality(String),
    version   LowCardinality(String),
    events    SimpleAggregateFunction(sum, UInt64)
)
ENGINE = {{engine "AggregatingMergeTree" "apiserver_versions_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver, version)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "apiserver_versions_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "apiserver_versions_per_minute_mv"}} {{on_cluster}}
TO {{table "apiserver_versions_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(received_at, 'UTC')) AS minute,
    apiserver,
    extract(user_agent, '^kube-apiserver/(v[0-9][^ ]*)') AS version,
    count() AS events
FROM {{table "events"}}
WHERE user_name = 'system:apiserver' AND startsWith(user_agent, 'kube-apiserver/') AND version != ''
GROUP BY minute, apiserver, version;

-- Chains per minute. Each chain is counted once, at its first final revision (state 'final',
-- revision 0 or 1): the chain sink writes a chain version once, but the correlator finalises a
-- chain again when a late record reopens it, and an AggregatingMergeTree cannot take a count
-- back. (chains FINAL has the latest class.)
CREATE TABLE IF NOT EXISTS {{table "chains_per_minute"}} {{on_cluster}}
(
    minute          DateTime('UTC'),
    class           LowCardinality(String),
    entry_apiserver LowCardinality(String),
    peer_apiserver  LowCardinality(String),
    api_group       LowCardinality(String),
    resource        LowCardinality(String),
    verb            LowCardinality(String),
    code            Int32,
    chains          SimpleAggregateFunction(sum, UInt64),
    findings        SimpleAggregateFunction(sumMap, Map(String, UInt64))
)
ENGINE = {{engine "AggregatingMergeTree" "chains_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, class, entry_apiserver, peer_apiserver, api_group, resource, verb, code)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "chains_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "chains_per_minute_mv"}} {{on_cluster}}
TO {{table "chains_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    class,
    entry_apiserver,
    peer_apiserver,
    api_group,
    resource,
    verb,
    code,
    count() AS chains,
    sumMap(mapFromArrays(CAST(findings, 'Array(String)'), arrayMap(f -> toUInt64(1), findings))) AS findings
FROM {{table "chains"}}
WHERE state = 'final' AND revision <= 1
GROUP BY minute, class, entry_apiserver, peer_apiserver, api_group, resource, verb, code;

-- The chains' durations per class and apiserver pair: the entry's, the peer's, and the
-- forwarding overhead (entry minus peer) of the chains with both sides. Counted like
-- chains_per_minute.
CREATE TABLE IF NOT EXISTS {{table "chain_latency_per_minute"}} {{on_cluster}}
(
    minute                      DateTime('UTC'),
    class                       LowCardinality(String),
    entry_apiserver             LowCardinality(String),
    peer_apiserver              LowCardinality(String),
    chains                      SimpleAggregateFunction(sum, UInt64),
    entry_duration_seconds      AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64),
    peer_duration_seconds       AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64),
    forwarding_overhead_seconds AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64)
)
ENGINE = {{engine "AggregatingMergeTree" "chain_latency_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, class, entry_apiserver, peer_apiserver)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "chain_latency_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "chain_latency_per_minute_mv"}} {{on_cluster}}
TO {{table "chain_latency_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    class,
    entry_apiserver,
    peer_apiserver,
    count() AS chains,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(entry_duration_seconds, has_entry) AS entry_duration_seconds,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(peer_duration_seconds, has_peer) AS peer_duration_seconds,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(forwarding_overhead_seconds, has_entry AND has_peer) AS forwarding_overhead_seconds
FROM {{table "chains"}}
WHERE state = 'final' AND revision <= 1
GROUP BY minute, class, entry_apiserver, peer_apiserver;
