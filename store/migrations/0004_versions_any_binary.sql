-- The apiserver-version rollup learns versions from an apiserver's own loopback calls whatever
-- its binary is called (k3s/v1.35.4+k3s1, kube-apiserver-1.36/v1.36.3, ...), as the correlator
-- does: the user system:apiserver in group system:masters from one address (peer discovery is
-- system:apiserver too, but without system:masters and without a user agent), the version being
-- the token after the agent's first '/'. 0003's view knew only agents starting kube-apiserver/.
DROP VIEW IF EXISTS {{table "apiserver_versions_per_minute_mv"}} {{on_cluster}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "apiserver_versions_per_minute_mv"}} {{on_cluster}}
TO {{table "apiserver_versions_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(received_at, 'UTC')) AS minute,
    apiserver,
    extract(user_agent, '^[^/ ]+/(v[0-9][^ ]*)') AS version,
    count() AS events
FROM {{table "events"}}
WHERE user_name = 'system:apiserver' AND has(user_groups, 'system:masters') AND length(source_ips) = 1 AND version != ''
GROUP BY minute, apiserver, version;
