-- The chain rollups count each chain once, in its final class. 0003 counted a chain at its
-- first final revision only, so a chain a late record reopened and reclassified stayed in the
-- dashboards with its first class. Now the writer, when it writes a final chain over a final one
-- the table already holds (store.Writer.WriteChains), writes in the same insert the superseded
-- row again with state 'retracted': the views count it -1 where it was counted, and the new
-- row +1 in its final class. The counts are signed (Int64) for that.
--
-- The latency states cannot take a value back: a reclassified chain's durations stay in the
-- t-digest of the class it was first counted in (its count moves; see store/COLUMNS.md).
-- Chains reclassified before this migration keep their first class in the rollups.
ALTER TABLE {{table "chains_per_minute"}} {{on_cluster}}
    MODIFY COLUMN chains SimpleAggregateFunction(sum, Int64),
    MODIFY COLUMN findings SimpleAggregateFunction(sumMap, Map(String, Int64));

{{if cluster}}ALTER TABLE {{Database}}.chains_per_minute {{on_cluster}}
    MODIFY COLUMN chains SimpleAggregateFunction(sum, Int64),
    MODIFY COLUMN findings SimpleAggregateFunction(sumMap, Map(String, Int64)){{end}};

ALTER TABLE {{table "chain_latency_per_minute"}} {{on_cluster}}
    MODIFY COLUMN chains SimpleAggregateFunction(sum, Int64);

{{if cluster}}ALTER TABLE {{Database}}.chain_latency_per_minute {{on_cluster}}
    MODIFY COLUMN chains SimpleAggregateFunction(sum, Int64){{end}};

DROP VIEW IF EXISTS {{table "chains_per_minute_mv"}} {{on_cluster}};

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
    sum(if(state = 'retracted', -1, 1)) AS chains,
    sumMap(mapFromArrays(CAST(findings, 'Array(String)'), arrayMap(f -> if(state = 'retracted', toInt64(-1), toInt64(1)), findings))) AS findings
FROM {{table "chains"}}
WHERE state IN ('final', 'retracted')
GROUP BY minute, class, entry_apiserver, peer_apiserver, api_group, resource, verb, code;

DROP VIEW IF EXISTS {{table "chain_latency_per_minute_mv"}} {{on_cluster}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "chain_latency_per_minute_mv"}} {{on_cluster}}
TO {{table "chain_latency_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    class,
    entry_apiserver,
    peer_apiserver,
    sum(if(state = 'retracted', -1, 1)) AS chains,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(entry_duration_seconds, has_entry AND state = 'final') AS entry_duration_seconds,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(peer_duration_seconds, has_peer AND state = 'final') AS peer_duration_seconds,
    quantilesTDigestStateIf(0.5, 0.9, 0.99)(forwarding_overhead_seconds, has_entry AND has_peer AND state = 'final') AS forwarding_overhead_seconds
FROM {{table "chains"}}
WHERE state IN ('final', 'retracted')
GROUP BY minute, class, entry_apiserver, peer_apiserver;
