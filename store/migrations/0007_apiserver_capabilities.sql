-- What each apiserver served or forwarded, per minute: the capability history behind
-- GET /api/v1/apiservers?at= and `peertrail apiservers` (store/queries/apiserver_capabilities.sql
-- labels each minute with the version the apiserver ran, from apiserver_versions_per_minute).
-- From the final chains of a resource: the apiserver that answered a local request 2xx, or the
-- peer that answered a proxied one 2xx, served its group/version/resource; the entry of a
-- proxied or failed forward forwarded it. Counted like chains_per_minute: a retracted row
-- (store.Writer, migration 0006) counts -1.
CREATE TABLE IF NOT EXISTS {{table "apiserver_capabilities_per_minute"}} {{on_cluster}}
(
    minute      DateTime('UTC'),
    apiserver   LowCardinality(String),
    role        LowCardinality(String),
    api_group   LowCardinality(String),
    api_version LowCardinality(String),
    resource    LowCardinality(String),
    requests    SimpleAggregateFunction(sum, Int64)
)
ENGINE = {{engine "AggregatingMergeTree" "apiserver_capabilities_per_minute" ""}}
PARTITION BY toDate(minute)
ORDER BY (minute, apiserver, role, api_group, api_version, resource)
TTL minute + toIntervalDay({{.RollupRetention}});

{{distributed "apiserver_capabilities_per_minute" "rand()"}};

CREATE MATERIALIZED VIEW IF NOT EXISTS {{table "apiserver_capabilities_per_minute_mv"}} {{on_cluster}}
TO {{table "apiserver_capabilities_per_minute"}}
AS SELECT
    toStartOfMinute(toDateTime(if(abs(dateDiff('second', first_received, request_time)) < 86400, request_time, first_received), 'UTC')) AS minute,
    tupleElement(side, 1) AS apiserver,
    tupleElement(side, 2) AS role,
    api_group,
    api_version,
    resource,
    sum(if(state = 'retracted', -1, 1)) AS requests
FROM {{table "chains"}}
ARRAY JOIN arrayFilter(s -> tupleElement(s, 1) != '', [
    tuple(if(class = 'local' AND entry_code >= 200 AND entry_code < 300, entry_apiserver, ''), 'served'),
    tuple(if(class = 'proxied' AND peer_code >= 200 AND peer_code < 300, peer_apiserver, ''), 'served'),
    tuple(if(class IN ('proxied', 'proxy_failed'), entry_apiserver, ''), 'forwarded')
]) AS side
WHERE state IN ('final', 'retracted') AND resource != ''
GROUP BY minute, apiserver, role, api_group, api_version, resource;
