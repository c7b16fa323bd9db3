-- title: Apiserver versions
-- description: The version each apiserver reported in the window (from the user agent of its own
--   loopback requests), with when it was first and last seen: a rolling upgrade shows as an
--   apiserver with two versions.
SELECT
    apiserver,
    version,
    min(minute) AS first_seen,
    max(minute) AS last_seen,
    sum(events) AS own_requests
FROM peertrail.apiserver_versions_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY apiserver, version
ORDER BY apiserver, first_seen
