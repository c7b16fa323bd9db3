-- title: Misleading 404s by resource
-- description: Requests answered 404 "the server could not find the requested resource" by an
--   apiserver that did not serve the group/version/resource while another apiserver did (its peer
--   was gone or not yet discovered). served_by lists the other apiservers that served the same
--   resource with a 2xx in the window (the peer of a proxied request, not its entry, whose record
--   looks the same as when it serves a request itself): where the request should have gone. The
--   apiserver that answered 404 is left out even when it served the resource at another time of
--   the window (after its own upgrade, say). The requests are read from report_chains (the rare
--   chains, migration 0010), who served each resource from the chains_per_minute rollup.
SELECT
    c.api_group AS group,
    c.api_version AS version,
    c.resource AS resource,
    c.entry_apiserver AS answered_404,
    count() AS requests,
    uniqExact(c.user_name) AS users,
    min(c.request_time) AS first,
    max(c.request_time) AS last,
    any(c.audit_id) AS example_audit_id,
    arrayFilter(x -> x != answered_404, any(s.served_by)) AS served_by
FROM peertrail.report_chains AS c FINAL
-- GLOBAL: on a cluster (Distributed tables) the subquery runs once over every shard and its
-- result goes to each shard; a plain JOIN is refused there (distributed_product_mode = 'deny').
GLOBAL LEFT JOIN
(
    SELECT api_group, resource, arraySort(groupUniqArray(if(class = 'proxied', peer_apiserver, entry_apiserver))) AS served_by
    FROM
    (
        SELECT class, entry_apiserver, peer_apiserver, api_group, resource, sum(chains) AS n
        FROM peertrail.chains_per_minute
        WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
          AND class IN ('local', 'proxied') AND code >= 200 AND code < 300
        GROUP BY class, entry_apiserver, peer_apiserver, api_group, resource
        HAVING n > 0
    )
    GROUP BY api_group, resource
) AS s ON s.api_group = c.api_group AND s.resource = c.resource
WHERE c.first_received >= {since:DateTime64(6, 'UTC')} AND c.first_received < {until:DateTime64(6, 'UTC')}
  AND c.state != 'retracted' AND c.class = 'misleading_404'
GROUP BY group, version, resource, answered_404
ORDER BY requests DESC
