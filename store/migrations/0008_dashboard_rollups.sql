-- Two rollups shaped like the dashboard panels that read them, so that a day's panel reads (and
-- for latency, merges) about as many rows as it draws points. Measured over a day at 10,000
-- events/s (BENCHMARKS.md, "store"):
--
--   - The request latency panel (per minute and apiserver) merged the t-digest states of
--     request_latency_per_minute, one per (minute, apiserver, verb): 30,000 states of a few KiB
--     a day, 0.6 s. Merging costs per state, so apiserver_latency_per_minute keeps one state per
--     (minute, apiserver), merged at insert time: seven times fewer states.
--   - The 404s-and-5xx panel scanned every row of events_per_minute (3 million a day, a row per
--     apiserver, verb, stage, code, group and resource) to keep the few with an error code;
--     errors_per_minute holds those rows alone, without the verb.
--
-- request_latency_per_minute and events_per_minute stay: they keep the verb and the stage, for
-- anyone who asks by them.
CREATE TABLE IF NOT EXISTS {{table "apiserver_latency_per_minute"}} {{on_cluster}}
(
    minute          DateTime('UTC'),
    apiserver       LowCardinality(String),
    requests        SimpleAggregateFunction(sum, UInt64),
    latency_seconds AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64)
)
ENGINE = {{engine "AggregatingMergeTree" "apiserver_latency_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "apiserver_latency_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "apiserver_latency_per_minute_mv"}} {{on_cluster}}
TO {{table "apiserver_latency_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', received_at, stage_timestamp)) < 86400, stage_timestamp, received_at), 'UTC')) AS minute,
    apiserver,
    count() AS requests,
    quantilesTDigestState(0.5, 0.9, 0.99)(dateDiff('microsecond', request_received_timestamp, stage_timestamp) / 1e6) AS latency_seconds
FROM {{table "events"}}
WHERE stage = 'ResponseComplete'
GROUP BY minute, apiserver;

-- The answers 404 and 5xx per minute, apiserver, group, resource and code (the code kept, so
-- that a panel can tell 503 from 500).
CREATE TABLE IF NOT EXISTS {{table "errors_per_minute"}} {{on_cluster}}
(
    minute    DateTime('UTC'),
    apiserver LowCardinality(String),
    api_group LowCardinality(String),
    resource  LowCardinality(String),
    code      Int32,
    events    SimpleAggregateFunction(sum, UInt64)
)
ENGINE = {{engine "AggregatingMergeTree" "errors_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver, api_group, resource, code)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "errors_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "errors_per_minute_mv"}} {{on_cluster}}
TO {{table "errors_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', received_at, stage_timestamp)) < 86400, stage_timestamp, received_at), 'UTC')) AS minute,
    apiserver,
    api_group,
    resource,
    code,
    count() AS events
FROM {{table "events"}}
WHERE stage = 'ResponseComplete' AND (code = 404 OR code >= 500)
GROUP BY minute, apiserver, api_group, resource, code;

-- An upgraded store: the new rollups start with what the old ones hold (the states merge as
-- they are; the minutes are the same), for the minutes before the first one the views above
-- wrote, so running this again adds nothing. Migrate runs before the writer starts, so no
-- minute is split between the two; a store whose events arrive meanwhile (another writer)
-- may lose that minute's earlier rows in the new rollups.
--
-- A cluster (every DDL statement there runs ON CLUSTER, which an INSERT cannot) is filled by
-- hand once, on any node, through the Distributed tables:
--   INSERT INTO peertrail.apiserver_latency_per_minute SELECT minute, apiserver, sum(requests),
--     quantilesTDigestMergeState(0.5, 0.9, 0.99)(latency_seconds) FROM peertrail.request_latency_per_minute
--     GROUP BY minute, apiserver;
--   INSERT INTO peertrail.errors_per_minute SELECT minute, apiserver, api_group, resource, code, sum(events)
--     FROM peertrail.events_per_minute WHERE stage = 'ResponseComplete' AND (code = 404 OR code >= 500)
--     GROUP BY minute, apiserver, api_group, resource, code;
{{if not cluster}}
INSERT INTO {{Database}}.apiserver_latency_per_minute
SELECT minute, apiserver, sum(requests), quantilesTDigestMergeState(0.5, 0.9, 0.99)(latency_seconds)
FROM {{Database}}.request_latency_per_minute
WHERE minute < (SELECT if(count() = 0, toDateTime('2106-01-01 00:00:00', 'UTC'), min(minute)) FROM {{Database}}.apiserver_latency_per_minute)
GROUP BY minute, apiserver;

INSERT INTO {{Database}}.errors_per_minute
SELECT minute, apiserver, api_group, resource, code, sum(events)
FROM {{Database}}.events_per_minute
WHERE stage = 'ResponseComplete' AND (code = 404 OR code >= 500)
  AND minute < (SELECT if(count() = 0, toDateTime('2106-01-01 00:00:00', 'UTC'), min(minute)) FROM {{Database}}.errors_per_minute)
GROUP BY minute, apiserver, api_group, resource, code
{{end}};
