-- title: Failed forwardings by entry apiserver
-- description: Requests the entry tried to forward and answered with an error instead (503
--   "error trying to reach service" while a killed peer's lease lives on, 503 "Error getting ip and
--   port info of the remote server"), by entry apiserver, code and message.
SELECT
    entry_apiserver AS entry,
    code,
    if(entry_message = '', '(no message in the audit record)', substring(entry_message, 1, 80)) AS message,
    count() AS requests,
    min(request_time) AS first,
    max(request_time) AS last,
    any(audit_id) AS example_audit_id
FROM peertrail.chains FINAL
WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
  AND class = 'proxy_failed'
GROUP BY entry, code, message
ORDER BY requests DESC
