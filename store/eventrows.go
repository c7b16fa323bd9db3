package store

import (
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

// Event rows go to the embedded engine as Native blocks (eventblock.go), not as EventRow's []any
// rows, which box every value, copy the raw JSON into a string and all live until the insert
// returns (BENCHMARKS.md, "Later the same day"); eventStream encodes the rows as the engine
// reads them, so a flush costs its records and a block. TestEventNativeBlocksMatchEventRow
// keeps what the table holds the same as from EventRow.

// eventStream streams the rows of records as Native blocks, encoded in block.
func eventStream(block *eventBlock, records []record.Record) *blockStream {
	return &blockStream{n: len(records), block: block, add: func(i int) { block.add(&records[i]) }}
}
