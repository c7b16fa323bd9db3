package store

import (
	"encoding/json"
	"time"

	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/ingest/record"
)

// The tables' columns as the writer inserts them, in the order of the row functions below.
// store/COLUMNS.md documents each; schema_test.go checks these lists against the live tables.

// Table names, database-qualified.
const (
	EventsTable = Database + ".events"
	ChainsTable = Database + ".chains"
)

// EventColumns are the columns of the events table, in the order of EventRow.
var EventColumns = []Column{
	{"apiserver", "LowCardinality(String)"},
	{"audit_id", "String"},
	{"stage", "LowCardinality(String)"},
	{"level", "LowCardinality(String)"},
	{"verb", "LowCardinality(String)"},
	{"request_uri", "String"},
	{"api_group", "LowCardinality(String)"},
	{"api_version", "LowCardinality(String)"},
	{"resource", "LowCardinality(String)"},
	{"subresource", "LowCardinality(String)"},
	{"namespace", "LowCardinality(String)"},
	{"name", "String"},
	{"user_name", "LowCardinality(String)"},
	{"user_uid", "String"},
	{"user_groups", "Array(LowCardinality(String))"},
	{"user_extra", "Map(LowCardinality(String), Array(String))"},
	{"impersonated_user", "LowCardinality(String)"},
	{"impersonated_uid", "String"},
	{"impersonated_groups", "Array(LowCardinality(String))"},
	{"impersonated_extra", "Map(LowCardinality(String), Array(String))"},
	{"impersonation_constraint", "LowCardinality(String)"},
	{"source_ips", "Array(String)"},
	{"user_agent", "LowCardinality(String)"},
	{"code", "Int32"},
	{"status", "LowCardinality(String)"},
	{"reason", "LowCardinality(String)"},
	{"message", "String"},
	{"request_received_timestamp", "DateTime64(6, 'UTC')"},
	{"stage_timestamp", "DateTime64(6, 'UTC')"},
	{"annotations", "Map(LowCardinality(String), String)"},
	{"has_request_object", "Bool"},
	{"request_object_bytes", "Int64"},
	{"has_response_object", "Bool"},
	{"response_object_bytes", "Int64"},
	{"received_at", "DateTime64(6, 'UTC')"},
	{"raw", "String"},
}

// EventRow returns r's row for the events table. Nil slices and maps become empty ones.
func EventRow(r *record.Record) []any {
	return []any{
		r.APIServer,
		r.AuditID,
		r.Stage,
		r.Level,
		r.Verb,
		r.RequestURI,
		r.Group,
		r.Version,
		r.Resource,
		r.Subresource,
		r.Namespace,
		r.Name,
		r.UserName,
		r.UserUID,
		strs(r.UserGroups),
		extra(r.UserExtra),
		r.ImpersonatedUser,
		r.ImpersonatedUID,
		strs(r.ImpersonatedGroups),
		extra(r.ImpersonatedExtra),
		r.ImpersonationConstraint,
		strs(r.SourceIPs),
		r.UserAgent,
		r.Code,
		r.Status,
		r.Reason,
		r.Message,
		r.RequestReceivedTimestamp.UTC(),
		r.StageTimestamp.UTC(),
		annotations(r.Annotations),
		r.HasRequestObject,
		r.RequestObjectBytes,
		r.HasResponseObject,
		r.ResponseObjectBytes,
		r.ReceivedAt.UTC(),
		string(r.Raw),
	}
}

// clickhouse-go wants non-nil slices and maps.
func strs(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func extra(m map[string][]string) map[string][]string {
	if m == nil {
		return map[string][]string{}
	}
	return m
}

func annotations(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// ChainColumns are the columns of the chains table, in the order of ChainRow.
var ChainColumns = []Column{
	{"id", "String"},
	{"audit_id", "String"},
	{"version", "UInt64"},
	{"revision", "UInt32"},
	{"evicted", "Bool"},
	{"state", "LowCardinality(String)"},
	{"class", "LowCardinality(String)"},
	{"findings", "Array(LowCardinality(String))"},
	{"explanation", "String"},
	{"verb", "LowCardinality(String)"},
	{"request_uri", "String"},
	{"api_group", "LowCardinality(String)"},
	{"api_version", "LowCardinality(String)"},
	{"resource", "LowCardinality(String)"},
	{"subresource", "LowCardinality(String)"},
	{"namespace", "LowCardinality(String)"},
	{"name", "String"},
	{"user_name", "LowCardinality(String)"},
	{"real_user", "LowCardinality(String)"},
	{"code", "Int32"},
}

// sideColumns are the columns of one side, after its prefix ("entry_" or "peer_") and the
// has_entry/has_peer flag.
var sideColumns = []Column{
	{"apiserver", "LowCardinality(String)"},
	{"code", "Int32"},
	{"user", "LowCardinality(String)"},
	{"uid", "String"},
	{"groups", "Array(LowCardinality(String))"},
	{"extra", "Map(LowCardinality(String), Array(String))"},
	{"impersonated_user", "LowCardinality(String)"},
	{"impersonated_groups", "Array(LowCardinality(String))"},
	{"impersonated_extra", "Map(LowCardinality(String), Array(String))"},
	{"source_ips", "Array(String)"},
	{"user_agent", "LowCardinality(String)"},
	{"message", "String"},
	{"reason", "LowCardinality(String)"},
	{"request_received", "DateTime64(6, 'UTC')"},
	{"completed", "DateTime64(6, 'UTC')"},
	{"stages", "Array(LowCardinality(String))"},
	{"has_objects", "Bool"},
	{"apiserver_version", "LowCardinality(String)"}, // migration 0011
}

func init() {
	for _, side := range []string{"entry", "peer"} {
		ChainColumns = append(ChainColumns, Column{"has_" + side, "Bool"})
		for _, c := range sideColumns {
			ChainColumns = append(ChainColumns, Column{side + "_" + c.Name, c.Type})
		}
	}
	ChainColumns = append(ChainColumns,
		Column{"other_apiservers", "Array(LowCardinality(String))"},
		Column{"other_codes", "Array(Int32)"},
		Column{"other_sides", "String"},
		Column{"entry_duration_seconds", "Float64"},
		Column{"peer_duration_seconds", "Float64"},
		Column{"forwarding_overhead_seconds", "Float64"},
		Column{"request_time", "DateTime64(6, 'UTC')"},
		Column{"first_received", "DateTime64(6, 'UTC')"},
		Column{"last_received", "DateTime64(6, 'UTC')"},
		Column{"records", "UInt32"},
	)
}

// ChainVersion orders the rows written for one chain; ReplacingMergeTree keeps the highest. A
// higher Revision wins (the correlator finalised the chain again after a late record), then a
// later last_received, then a final chain over an open one:
//
//	revision (10 bits) | last_received in µs since 1970 (53 bits, to the year 2255) | final (1 bit)
func ChainVersion(c *correlate.Chain) uint64 {
	rev := uint64(min(max(c.Revision, 0), 1<<10-1))
	last := uint64(min(max(c.LastReceived.UnixMicro(), 0), 1<<53-1))
	v := rev<<54 | last<<1
	if c.State == correlate.StateFinal {
		v |= 1
	}
	return v
}

// versionFinal reports whether a ChainVersion is of a final chain (its lowest bit).
func versionFinal(v uint64) bool { return v&1 == 1 }

// RequestTime is when the request reached the first apiserver that recorded it: the entry's
// requestReceivedTimestamp, else the peer's, else when peertrail first received a record.
func RequestTime(c *correlate.Chain) time.Time {
	switch {
	case c.Entry != nil && !c.Entry.RequestReceived.IsZero():
		return c.Entry.RequestReceived.UTC()
	case c.Peer != nil && !c.Peer.RequestReceived.IsZero():
		return c.Peer.RequestReceived.UTC()
	}
	return c.FirstReceived.UTC()
}

// ChainRow returns c's row for the chains table.
func ChainRow(c *correlate.Chain) []any {
	findings := make([]string, len(c.Findings))
	for i, f := range c.Findings {
		findings[i] = string(f)
	}
	row := make([]any, 0, len(ChainColumns))
	row = append(row,
		c.ID, c.AuditID, ChainVersion(c), uint32(max(c.Revision, 0)), c.Evicted, string(c.State), string(c.Class), findings, c.Explanation,
		c.Verb, c.RequestURI, c.Group, c.Version, c.Resource, c.Subresource, c.Namespace, c.Name,
		c.User, c.RealUser, c.Code)
	row = appendSide(row, c.Entry)
	row = appendSide(row, c.Peer)
	others, codes := []string{}, []int32{}
	for _, o := range c.Others {
		if o != nil {
			others = append(others, o.APIServer)
			codes = append(codes, o.Code)
		}
	}
	return append(row, others, codes, otherSides(c),
		c.EntryDurationSeconds, c.PeerDurationSeconds, c.ForwardingOverheadSeconds,
		RequestTime(c), c.FirstReceived.UTC(), c.LastReceived.UTC(), uint32(max(c.Records, 0)))
}

// otherSides is the JSON of c.Others (loops only), "" when there are none.
func otherSides(c *correlate.Chain) string {
	if len(c.Others) == 0 {
		return ""
	}
	b, err := json.Marshal(c.Others)
	if err != nil {
		return "" // a Side is strings, numbers and times: it always marshals
	}
	return string(b)
}

func appendSide(row []any, s *correlate.Side) []any {
	if s == nil {
		var zero time.Time
		return append(row, false, "", int32(0), "", "", []string{}, map[string][]string{}, "", []string{}, map[string][]string{},
			[]string{}, "", "", "", zero, zero, []string{}, false, "")
	}
	return append(row, true, s.APIServer, s.Code, s.User, s.UID, strs(s.Groups), extra(s.Extra),
		s.ImpersonatedUser, strs(s.ImpersonatedGroups), extra(s.ImpersonatedExtra), strs(s.SourceIPs), s.UserAgent, s.Message, s.Reason,
		s.RequestReceived.UTC(), s.Completed.UTC(), strs(s.Stages), s.HasObjects, s.APIServerVersion)
}
