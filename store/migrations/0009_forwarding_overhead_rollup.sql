-- The forwarding overhead panel's own rollup, like 0008's: the panel merged the overhead states
-- of chain_latency_per_minute's proxied rows, but that rollup keeps every class in the same
-- minutes (sorted by minute, then class), so the engine read and decoded the states of every
-- class to keep one: over a day at 10,000 events/s about as slow as the request latency panel
-- before 0008 (BENCHMARKS.md, "store"). forwarding_overhead_per_minute holds the proxied chains
-- alone, one state per minute and apiserver pair, counted like chain_latency_per_minute (a
-- retracted row counts -1; its duration stays in the state, see migration 0006).
CREATE TABLE IF NOT EXISTS {{table "forwarding_overhead_per_minute"}} {{on_cluster}}
(
    minute                      DateTime('UTC'),
    entry_apiserver             LowCardinality(String),
    peer_apiserver              LowCardinality(String),
    chains                      SimpleAggregateFunction(sum, Int64),
    forwarding_overhead_seconds AggregateFunction(quantilesTDigest(0.5, 0.9, 0.99), Float64)
)
ENGINE = {{engine "AggregatingMergeTree" "forwarding_overhead_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, entry_apiserver, peer_apiserver)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "forwarding_overhead_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "forwarding_overhead_per_minute_mv"}} {{on_cluster}}
TO {{table "forwarding_overhead_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    entry_apiserver,
    peer_apiserver,
    sum(if(state = 'retracted', -1, 1)) AS chains,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(forwarding_overhead_seconds, has_entry AND has_peer AND state = 'final') AS forwarding_overhead_seconds
FROM {{table "chains"}}
WHERE state IN ('final', 'retracted') AND class = 'proxied'
GROUP BY minute, entry_apiserver, peer_apiserver;

-- An upgraded store starts with what chain_latency_per_minute holds, as in 0008 (and, as there,
-- a cluster is filled by hand, through the Distributed tables:
--   INSERT INTO peertrail.forwarding_overhead_per_minute SELECT minute, entry_apiserver, peer_apiserver,
--     sum(chains), quantilesTDigestMergeState(0.5, 0.9, 0.99)(forwarding_overhead_seconds)
--     FROM peertrail.chain_latency_per_minute WHERE class = 'proxied' GROUP BY minute, entry_apiserver, peer_apiserver
-- ).
{{if not cluster}}
INSERT INTO {{Database}}.forwarding_overhead_per_minute
SELECT minute, entry_apiserver, peer_apiserver, sum(chains), quantilesTDigestMergeState(0.5, 0.9, 0.99)(forwarding_overhead_seconds)
FROM {{Database}}.chain_latency_per_minute
WHERE class = 'proxied'
  AND minute < (SELECT if(count() = 0, toDateTime('2106-01-01 00:00:00', 'UTC'), min(minute)) FROM {{Database}}.forwarding_overhead_per_minute)
GROUP BY minute, entry_apiserver, peer_apiserver
{{end}};
