-- title: 404s and 5xx per minute by resource
-- report: no
-- description: The Chain investigation dashboard's panel "404s and 5xx per minute by resource"
--   (time series): answers 404 and 5xx per minute by group/resource and apiserver, from the
--   events_per_minute rollup.
SELECT
    minute,
    apiserver,
    if(resource = '', 'non-resource', concat(if(api_group = '', 'core', api_group), '/', resource)) AS resource,
    sumIf(events, code = 404) AS not_found,
    sumIf(events, code >= 500) AS server_errors
FROM peertrail.events_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
  AND stage = 'ResponseComplete' AND (code = 404 OR code >= 500)
GROUP BY minute, apiserver, resource
ORDER BY minute, apiserver, resource
