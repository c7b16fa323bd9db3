-- title: The chain of one auditID
-- report: no
-- description: How peertrail classified the request(s) with the auditID: every column of the
--   chain, both sides' records in full, oldest first (a client may reuse an Audit-ID, so more
--   than one chain can show up). The audit_ids lookup names the hours to read, and the chains
--   table is sorted by auditID within an hour. The chain API (GET /api/v1/chains/{auditID},
--   peertrail chain) and the chain investigation dashboard read a chain through this query.
SELECT *
FROM peertrail.chains FINAL
WHERE audit_id = {audit_id:String}
  AND toStartOfHour(first_received) GLOBAL IN (SELECT received_hour FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
ORDER BY first_received, request_time
