-- title: Slowest forwardings
-- description: Proxied requests with the largest forwarding overhead (the entry's duration minus
--   the peer's: what the extra hop cost), at most 20. Clocks of different hosts may skew the
--   overhead; the entry and peer durations are each measured on one host.
SELECT
    request_time,
    audit_id,
    entry_apiserver AS entry,
    peer_apiserver AS peer,
    verb,
    if(api_group = '', 'core', api_group) AS group,
    resource,
    code,
    round(forwarding_overhead_seconds * 1000, 2) AS overhead_ms,
    round(entry_duration_seconds * 1000, 2) AS entry_ms,
    round(peer_duration_seconds * 1000, 2) AS peer_ms
FROM peertrail.chains FINAL
WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
  AND class = 'proxied' AND has_entry AND has_peer
ORDER BY forwarding_overhead_seconds DESC
LIMIT 20
