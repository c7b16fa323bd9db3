-- title: Chains by class per apiserver pair
-- description: Every request peertrail assembled in the window, by what happened to it (local,
--   proxied, proxy_failed, misleading_404, broken, loop, internal) and by the entry and peer
--   apiserver. A peer of "-" means the entry served it alone (or the peer's record is missing).
--   The counts are the chains_per_minute rollup's (each final chain once, in its final class, in
--   the minute of its request), p50 and p99 of the entry's duration t-digests of
--   chain_latency_per_minute, with_findings counted in report_chains (migration 0010).
SELECT
    n.class AS class,
    n.entry AS entry,
    n.peer AS peer,
    n.n_chains AS chains,
    n.n_5xx AS `5xx`,
    f.with_findings AS with_findings,
    round(if(isFinite(l.q[1]), l.q[1], 0) * 1000, 1) AS p50_ms,
    round(if(isFinite(l.q[3]), l.q[3], 0) * 1000, 1) AS p99_ms
FROM
(
    SELECT class, if(entry_apiserver = '', '-', entry_apiserver) AS entry, if(peer_apiserver = '', '-', peer_apiserver) AS peer,
        sum(chains) AS n_chains, sumIf(chains, code >= 500) AS n_5xx
    FROM peertrail.chains_per_minute
    WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
    GROUP BY class, entry, peer
    HAVING n_chains > 0
) AS n
GLOBAL LEFT JOIN
(
    SELECT class, if(entry_apiserver = '', '-', entry_apiserver) AS entry, if(peer_apiserver = '', '-', peer_apiserver) AS peer,
        quantilesTDigestMerge(0.5, 0.9, 0.99)(entry_duration_seconds) AS q
    FROM peertrail.chain_latency_per_minute
    WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
    GROUP BY class, entry, peer
) AS l ON l.class = n.class AND l.entry = n.entry AND l.peer = n.peer
GLOBAL LEFT JOIN
(
    SELECT class, if(has_entry, entry_apiserver, '-') AS entry, if(has_peer, peer_apiserver, '-') AS peer, count() AS with_findings
    FROM peertrail.report_chains FINAL
    WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
      AND state != 'retracted' AND notEmpty(findings)
    GROUP BY class, entry, peer
) AS f ON f.class = n.class AND f.entry = n.entry AND f.peer = n.peer
ORDER BY class, chains DESC, entry, peer
