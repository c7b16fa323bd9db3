-- title: Requests per minute by apiserver
-- report: no
-- description: The Chain investigation dashboard's panel "Requests per minute by apiserver" (time
--   series): completed requests per minute per apiserver, from the events_per_minute rollup.
SELECT minute, apiserver, sum(events) AS requests
FROM peertrail.events_per_minute
WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
  AND stage = 'ResponseComplete'
GROUP BY minute, apiserver
ORDER BY minute, apiserver
