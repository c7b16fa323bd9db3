-- title: Chains per minute by class
-- report: no
-- description: Dashboard panel (stacked time series): final chains per minute by class, from the
--   chains_per_minute rollup.
SELECT minute, class, sum(chains) AS chains
FROM peertrail.chains_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY minute, class
ORDER BY minute, class
