-- title: Findings per minute
-- report: no
-- description: Dashboard panel (time series): chains per minute with each finding
--   (identity_mismatch, peer_audit_missing, ...), from the chains_per_minute rollup.
SELECT minute, finding, sum(n) AS chains
FROM
(
    SELECT minute, sumMap(findings) AS m
    FROM peertrail.chains_per_minute
    WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
    GROUP BY minute
)
ARRAY JOIN mapKeys(m) AS finding, mapValues(m) AS n
GROUP BY minute, finding
ORDER BY minute, finding
