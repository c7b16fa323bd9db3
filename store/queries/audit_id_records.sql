-- title: All records of one auditID
-- report: no
-- description: Every audit record any apiserver sent for the auditID, in time order, without
--   knowing its day: the audit_ids lookup names the partitions and sorting-key ranges of events
--   to read. A client may reuse an Audit-ID, so more than one request can show up. The chain
--   investigation dashboard shows these; chain_events has the events as the apiservers sent
--   them.
SELECT
    stage_timestamp,
    apiserver,
    stage,
    verb,
    request_uri,
    user_name AS user,
    user_uid AS uid,
    impersonated_user,
    arrayStringConcat(source_ips, ',') AS source_ips,
    user_agent,
    code,
    reason,
    message,
    has_request_object OR has_response_object AS has_objects,
    received_at
FROM peertrail.events
WHERE audit_id = {audit_id:String}
  AND toDate(received_at) GLOBAL IN (SELECT received_day FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
  AND (toStartOfHour(stage_timestamp), apiserver, resource) GLOBAL IN
      (SELECT stage_hour, apiserver, resource FROM peertrail.audit_ids WHERE audit_id = {audit_id:String})
ORDER BY stage_timestamp, apiserver, stage
LIMIT 1 BY apiserver, audit_id, stage, stage_timestamp
