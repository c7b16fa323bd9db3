-- title: 404s and 5xx per minute by resource
-- report: no
-- description: The Chain investigation dashboard's panel "404s and 5xx per minute by resource"
--   (time series): answers 404 and 5xx per minute by group/resource and apiserver, from the
--   errors_per_minute rollup (migration 0008: the error rows alone, not every row of
--   events_per_minute).
SELECT
    minute,
    apiserver,
    if(resource = '', 'non-resource', concat(if(api_group = '', 'core', api_group), '/', resource)) AS resource,
    sumIf(events, code = 404) AS not_found,
    sumIf(events, code >= 500) AS server_errors
FROM peertrail.errors_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY minute, apiserver, resource
ORDER BY minute, apiserver, resource
