package store

import (
	"encoding/binary"
	"slices"

	"github.com/peertrail/peertrail/ingest/record"
)

// The events table's rows, in the order of EventColumns; store/COLUMNS.md documents each, and
// schema_test.go checks the list against the live table.

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

// Event rows straight to RowBinary, as for chains (chainwriter.go), not as EventRow's []any
// rows, which box every value, copy the raw JSON into a string and all live until the insert
// returns (BENCHMARKS.md, "Later the same day"). appendEventRow writes the same bytes as
// EncodeRowBinary(EventColumns, [][]any{EventRow(r)}) (TestEventRowBinaryMatchesEventRow keeps
// them equal), and eventStream encodes the rows as the engine reads them, so a flush costs its
// records and a few hundred KiB.

// eventStream streams the rows of records.
func eventStream(records []record.Record) *rowStream {
	return &rowStream{n: len(records), row: func(b []byte, i int) []byte { return appendEventRow(b, &records[i]) }}
}

// appendEventRow appends r's row of the events table in RowBinary, the columns of
// EventColumns in their order (see EventRow).
func appendEventRow(b []byte, r *record.Record) []byte {
	b = rbString(b, r.APIServer)
	b = rbString(b, r.AuditID)
	b = rbString(b, r.Stage)
	b = rbString(b, r.Level)
	b = rbString(b, r.Verb)
	b = rbString(b, r.RequestURI)
	b = rbString(b, r.Group)
	b = rbString(b, r.Version)
	b = rbString(b, r.Resource)
	b = rbString(b, r.Subresource)
	b = rbString(b, r.Namespace)
	b = rbString(b, r.Name)
	b = rbString(b, r.UserName)
	b = rbString(b, r.UserUID)
	b = rbStrings(b, r.UserGroups)
	b = rbExtra(b, r.UserExtra)
	b = rbString(b, r.ImpersonatedUser)
	b = rbString(b, r.ImpersonatedUID)
	b = rbStrings(b, r.ImpersonatedGroups)
	b = rbExtra(b, r.ImpersonatedExtra)
	b = rbString(b, r.ImpersonationConstraint)
	b = rbStrings(b, r.SourceIPs)
	b = rbString(b, r.UserAgent)
	b = binary.LittleEndian.AppendUint32(b, uint32(r.Code))
	b = rbString(b, r.Status)
	b = rbString(b, r.Reason)
	b = rbString(b, r.Message)
	b = rbTime(b, r.RequestReceivedTimestamp)
	b = rbTime(b, r.StageTimestamp)
	b = rbAnnotations(b, r.Annotations)
	b = rbBool(b, r.HasRequestObject)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.RequestObjectBytes))
	b = rbBool(b, r.HasResponseObject)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.ResponseObjectBytes))
	b = rbTime(b, r.ReceivedAt)
	b = binary.AppendUvarint(b, uint64(len(r.Raw)))
	return append(b, r.Raw...)
}

// rbAnnotations is a Map(String, String) with its keys sorted, as mapEncoder writes it. Most
// events carry the authorization decision and reason; a small slice of keys on the stack
// keeps the sort from allocating for them.
func rbAnnotations(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) == 0 {
		return b
	}
	var arr [8]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = rbString(b, k)
		b = rbString(b, m[k])
	}
	return b
}
