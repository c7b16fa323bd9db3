package store

import (
	"encoding/binary"
	"slices"

	"github.com/peertrail/peertrail/ingest/record"
)

// Event rows straight to RowBinary, as for chains (chainrows.go). EventRow's []any boxes
// every value and copies the raw JSON (about 1 KiB an event) into a string, and a flush's
// 50,000 rows all lived until the insert returned: in peertrail bench's burst profile they were
// the largest part of the Go heap after the buffered records themselves. appendEventRow writes
// the same bytes as EncodeRowBinary(EventColumns, [][]any{EventRow(r)})
// (TestEventRowBinaryMatchesEventRow keeps them equal), and eventStream encodes the rows as
// the engine reads them, so a flush costs its records and a few hundred KiB.

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
