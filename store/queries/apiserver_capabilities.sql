-- title: Capability history: what each apiserver served or forwarded, per version
-- description: Per apiserver and the version it ran when it received each request (the
--   correlator's version history, from the apiserver's own loopback requests, kept on the
--   chain; for chains stored before it was, the version the apiserver ran most in that minute,
--   from the apiserver_versions_per_minute rollup; "" before its first), each
--   group/version/resource it served (answered 2xx itself, or as the peer of a forward) or
--   forwarded to a peer, from the first to the end of the last minute it did, and how often. In
--   the minute of a restart into another version, each version has what it did. A restart into
--   the same version continues its epoch. The capability API (GET /api/v1/apiservers?at=) and
--   `peertrail apiservers` read this query.
SELECT
    c.apiserver AS apiserver,
    if(c.apiserver_version != '', c.apiserver_version, v.version) AS version,
    c.role AS role,
    c.api_group AS api_group,
    c.api_version AS api_version,
    c.resource AS resource,
    min(c.minute) AS first_minute,
    max(c.minute) + INTERVAL 1 MINUTE AS until_minute,
    sum(c.requests) AS requests
FROM
(
    SELECT minute, apiserver, apiserver_version, role, api_group, api_version, resource, sum(requests) AS requests
    FROM peertrail.apiserver_capabilities_per_minute
    WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
    GROUP BY minute, apiserver, apiserver_version, role, api_group, api_version, resource
    HAVING requests > 0
) AS c
GLOBAL ASOF LEFT JOIN
(
    SELECT apiserver, minute, argMax(version, events) AS version
    FROM
    (
        SELECT apiserver, minute, version, sum(events) AS events
        FROM peertrail.apiserver_versions_per_minute
        WHERE minute < {until:DateTime64(6, 'UTC')}
        GROUP BY apiserver, minute, version
    )
    GROUP BY apiserver, minute
) AS v ON c.apiserver = v.apiserver AND c.minute >= v.minute
GROUP BY apiserver, version, role, api_group, api_version, resource
ORDER BY apiserver, first_minute, role, api_group, api_version, resource
