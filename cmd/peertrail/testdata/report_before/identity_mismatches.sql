-- title: Identity mismatches by user
-- description: Forwarded requests whose peer recorded another identity than the entry: a UID lost
--   (the peer lacks --requestheader-uid-headers), groups or extra attributes that differ, or an
--   impersonation flattened (the peer sees only the impersonated user; the real actor is in the
--   entry record alone).
SELECT
    user_name AS user,
    arrayStringConcat(arraySort(groupUniqArrayArray(arrayFilter(f -> f IN ('identity_mismatch', 'impersonation_flattened'), findings))), ',') AS finding_list,
    count() AS requests,
    uniqExact(real_user) AS real_users,
    any(real_user) AS example_real_user,
    countIf(entry_user = peer_user AND entry_uid != '' AND peer_uid = '') AS uid_lost,
    countIf(entry_user = peer_user AND arraySort(entry_groups) != arraySort(peer_groups)) AS groups_differ,
    arrayStringConcat(arraySort(groupUniqArray(concat(entry_apiserver, '>', peer_apiserver))), ' ') AS pairs,
    any(audit_id) AS example_audit_id
FROM peertrail.chains FINAL
WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
  AND (has(findings, 'identity_mismatch') OR has(findings, 'impersonation_flattened'))
GROUP BY user
ORDER BY requests DESC
LIMIT 100
