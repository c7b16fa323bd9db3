-- The capability history credits each version of an apiserver with what it did. 0007 counted
-- per minute and apiserver, and its query labelled each minute with the version the apiserver
-- ran most in it (apiserver_versions_per_minute): in the minute of a restart into another
-- version, everything the apiserver did went to one of the two (measured in a simulated
-- upgrade: kas-2 on v1.35.4 credited with serving podgroups, and no v1.36.3 line for kas-2).
-- The correlator knows the version epoch of each side when it classifies a chain (its version
-- history, from the apiserver's own loopback requests, correlate.Capabilities.VersionAt), so
-- the chain carries it: entry_apiserver_version and peer_apiserver_version (a loop's further
-- sides carry theirs in other_sides). The rollup is keyed by it. Rows written before this
-- migration have "" there, and the query labels those as before.
ALTER TABLE {{table "chains"}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS entry_apiserver_version LowCardinality(String) AFTER entry_has_objects,
    ADD COLUMN IF NOT EXISTS peer_apiserver_version LowCardinality(String) AFTER peer_has_objects;

{{if cluster}}ALTER TABLE {{Database}}.chains {{on_cluster}}
    ADD COLUMN IF NOT EXISTS entry_apiserver_version LowCardinality(String) AFTER entry_has_objects,
    ADD COLUMN IF NOT EXISTS peer_apiserver_version LowCardinality(String) AFTER peer_has_objects{{end}};

-- A column outside the sorting key of an AggregatingMergeTree would be folded away (any value
-- of the rows merged), so apiserver_version joins the key; a key may only grow by a column
-- added in the same ALTER, at its end.
ALTER TABLE {{table "apiserver_capabilities_per_minute"}} {{on_cluster}}
    ADD COLUMN IF NOT EXISTS apiserver_version LowCardinality(String) AFTER apiserver,
    MODIFY ORDER BY (minute, apiserver, role, api_group, api_version, resource, apiserver_version);

{{if cluster}}ALTER TABLE {{Database}}.apiserver_capabilities_per_minute {{on_cluster}}
    ADD COLUMN IF NOT EXISTS apiserver_version LowCardinality(String) AFTER apiserver{{end}};

DROP VIEW IF EXISTS {{table "apiserver_capabilities_per_minute_mv"}} {{on_cluster}};

-- As 0007's view, with each side's version. A retracted row repeats the row it retracts (read
-- back from chains, versions included), so its -1 lands on the version its +1 was counted for.
CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "apiserver_capabilities_per_minute_mv"}} {{on_cluster}}
TO {{table "apiserver_capabilities_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    tupleElement(side, 1) AS apiserver,
    tupleElement(side, 3) AS apiserver_version,
    tupleElement(side, 2) AS role,
    api_group,
    api_version,
    resource,
    sum(if(state = 'retracted', -1, 1)) AS requests
FROM {{table "chains"}}
ARRAY JOIN arrayFilter(s -> tupleElement(s, 1) != '', [
    tuple(if(class = 'local' AND entry_code >= 200 AND entry_code < 300, entry_apiserver, ''), 'served', entry_apiserver_version),
    tuple(if(class = 'proxied' AND peer_code >= 200 AND peer_code < 300, peer_apiserver, ''), 'served', peer_apiserver_version),
    tuple(if(class IN ('proxied', 'proxy_failed'), entry_apiserver, ''), 'forwarded', entry_apiserver_version)
]) AS side
WHERE state IN ('final', 'retracted') AND resource != ''
GROUP BY minute, apiserver, apiserver_version, role, api_group, api_version, resource;
