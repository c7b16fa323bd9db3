-- title: The chain of one auditID
-- report: no
-- description: How peertrail classified the request(s) with the auditID, with both sides. The
--   audit_ids lookup names the hours to read, and the chains table is sorted by auditID within
--   an hour.
SELECT
    id,
    state,
    class,
    arrayStringConcat(findings, ',') AS finding_list,
    explanation,
    verb,
    request_uri,
    user_name AS user,
    real_user,
    code,
    entry_apiserver,
    entry_code,
    peer_apiserver,
    peer_code,
    round(entry_duration_seconds * 1000, 2) AS entry_ms,
    round(peer_duration_seconds * 1000, 2) AS peer_ms,
    request_time,
    records
FROM peertrail.chains FINAL
WHERE audit_id = {audit_id:String}
  AND toStartOfHour(first_received) GLOBAL IN (SELECT received_hour FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
ORDER BY request_time
