-- title: The chain of one auditID
-- report: no
-- description: How peertrail classified the request(s) with the auditID: every column of the
--   chain, both sides' records in full, oldest first (a client may reuse an Audit-ID, so more
--   than one chain can show up). The audit_ids lookup names the hours to read, and the chains
--   table is sorted by auditID within an hour. The chain API (GET /api/v1/chains/{auditID},
--   peertrail chain) and the chain investigation dashboard read a chain through this query.
SELECT *
FROM peertrail.chains FINAL
-- PREWHERE, not WHERE: with FINAL the engine keeps a WHERE until the versions are folded (a
-- condition on another column could pick an older version), so it folded the whole granule,
-- 8,192 rows of every column, to keep one chain (twice the time at 50 million events,
-- BENCHMARKS.md). Both conditions are on the sorting key, which every version of a chain
-- shares, so filtering first gives the same answer.
PREWHERE audit_id = {audit_id:String}
  AND toStartOfHour(first_received) GLOBAL IN (SELECT received_hour FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
ORDER BY first_received, request_time
