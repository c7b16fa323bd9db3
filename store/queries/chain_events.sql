-- title: The audit events of one auditID, as the apiservers sent them
-- report: no
-- description: Every audit event any apiserver sent for the auditID, in time order, as the JSON
--   it sent (raw), found like audit_id_records through the audit_ids lookup. The chain API's
--   records view (GET /api/v1/chains/{auditID}/records, peertrail chain --records) reads it and
--   keeps the events of the one chain (received between its first and last record).
SELECT
    apiserver,
    stage,
    stage_timestamp,
    received_at,
    raw
FROM peertrail.events
WHERE audit_id = {audit_id:String}
  AND toDate(received_at) GLOBAL IN (SELECT received_day FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
  AND (toStartOfHour(stage_timestamp), apiserver, resource) GLOBAL IN
      (SELECT stage_hour, apiserver, resource FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
ORDER BY stage_timestamp, apiserver, stage
LIMIT 1 BY apiserver, audit_id, stage, stage_timestamp
