-- title: Forwarding overhead quantiles per minute by apiserver pair
-- report: no
-- description: Dashboard panel (time series): p50 and p99 of what the extra hop cost proxied
--   requests, per minute and entry>peer pair, from the forwarding_overhead_per_minute rollup (the
--   proxied chains alone, migration 0009).
SELECT
    minute,
    concat(entry_apiserver, ' -> ', peer_apiserver) AS pair,
    sum(chains) AS proxied,
    quantilesTDigestMerge(0.5, 0.9, 0.99)(forwarding_overhead_seconds) AS q,
    q[1] AS p50_seconds,
    q[3] AS p99_seconds
FROM peertrail.forwarding_overhead_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY minute, pair
ORDER BY minute, pair
