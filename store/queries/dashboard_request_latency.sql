-- title: Request latency quantiles per minute by apiserver
-- report: no
-- description: The Chain investigation dashboard's panel "Request latency p50 / p90 / p99 per
--   minute" (time series): p50, p90 and p99 of requestReceived to ResponseComplete per minute
--   per apiserver, from the apiserver_latency_per_minute rollup: one t-digest state per minute
--   and apiserver (migration 0008; merging costs per state).
SELECT
    minute,
    apiserver,
    sum(requests) AS requests,
    quantilesTDigestMerge(0.5, 0.9, 0.99)(latency_seconds) AS q,
    q[1] AS p50_seconds,
    q[2] AS p90_seconds,
    q[3] AS p99_seconds
FROM peertrail.apiserver_latency_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY minute, apiserver
ORDER BY minute, apiserver
