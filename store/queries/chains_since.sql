-- title: Chains since a time
-- report: no
-- default: classes []
-- default: findings []
-- default: apiservers []
-- default: limit 1000
-- description: Every column of the chains whose last record arrived since the time, newest
--   first, at most limit of them; an empty classes, findings or apiservers array matches any,
--   otherwise the chain has one of the classes, one of the findings, and one of the apiservers
--   as its entry or its peer. last_received has a minmax index, so the time bound skips most of
--   the table. The chain API's list (GET /api/v1/chains?since=) reads stored chains through it.
SELECT *
FROM peertrail.chains FINAL
WHERE last_received >= {since:DateTime64(6, 'UTC')}
  AND (empty({classes:Array(String)}) OR has({classes:Array(String)}, class))
  AND (empty({findings:Array(String)}) OR hasAny(findings, {findings:Array(String)}))
  AND (empty({apiservers:Array(String)}) OR has({apiservers:Array(String)}, entry_apiserver) OR has({apiservers:Array(String)}, peer_apiserver))
ORDER BY last_received DESC
LIMIT {limit:UInt32}
