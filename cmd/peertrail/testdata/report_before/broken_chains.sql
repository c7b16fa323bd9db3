-- title: Broken chains
-- description: Forwarded requests with a side missing: a peer record without its entry record,
--   or an entry record of a forwarding whose peer never reported (an apiserver killed before it
--   flushed its audit buffer loses its last second of events). Newest first, at most 100.
SELECT
    request_time,
    audit_id,
    if(has_entry, entry_apiserver, '-') AS entry,
    if(has_peer, peer_apiserver, '-') AS peer,
    verb,
    if(resource = '', request_uri, concat(if(api_group = '', 'core', api_group), '/', api_version, '/', resource)) AS what,
    code,
    arrayStringConcat(findings, ',') AS finding_list,
    explanation
FROM peertrail.chains FINAL
WHERE first_received >= {since:DateTime64(6, 'UTC')} AND first_received < {until:DateTime64(6, 'UTC')}
  AND (class = 'broken' OR has(findings, 'peer_audit_missing') OR has(findings, 'entry_audit_missing'))
ORDER BY request_time DESC
LIMIT 100
