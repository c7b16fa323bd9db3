-- title: Chains by class per apiserver pair
-- description: Every request peertrail assembled in the window, by what happened to it (local,
--   proxied, proxy_failed, misleading_404, broken, loop, internal) and by the entry and peer
--   apiserver. A peer of "-" means the entry served it alone (or the peer's record is missing).
SELECT
    class,
    if(has_entry, entry_apiserver, '-') AS entry,
    if(has_peer, peer_apiserver, '-') AS peer,
    count() AS chains,
    countIf(code >= 500) AS `5xx`,
    countIf(length(findings) > 0) AS with_findings,
    round(quantile(0.5)(entry_duration_seconds) * 1000, 1) AS p50_ms,
    round(quantile(0.99)(entry_duration_seconds) * 1000, 1) AS p99_ms
FROM peertrail.chains FINAL
WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
GROUP BY class, entry, peer
ORDER BY class, chains DESC, entry, peer
