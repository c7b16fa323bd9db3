package store

import (
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/peertrail/peertrail/ingest/record"
)

// Event rows for the embedded engine in ClickHouse's Native format: blocks of columns, the
// LowCardinality ones with their dictionaries built here. The engine parsed RowBinary events at
// about three times the CPU of the same rows as Native (BENCHMARKS.md, "The events go to the
// engine as Native blocks"), most of it building those dictionaries value by value.
// ch-go's proto columns do the encoding; eventBlock only fills them in EventColumns' order.

// eventBlockRows is how many rows a Native block holds: the engine gathers an insert's blocks
// into one part whatever their size, so a block is only as large as keeps its memory small
// (about 1.5 MB at a kilobyte of raw JSON an event).
const eventBlockRows = 1024

// eventBlock is the columns of a block of event rows. It is reused: encode empties it. Not safe
// for concurrent use; the writer's events goroutine owns it.
type eventBlock struct {
	apiserver, stage, level, verb, group, version, resource, subresource, namespace, userName,
	impersonatedUser, impersonationConstraint, userAgent, status, reason *proto.ColLowCardinality[string]
	auditID, requestURI, name, userUID, impersonatedUID, message, raw proto.ColStr
	userGroups, impersonatedGroups, sourceIPs                         *proto.ColArr[string]
	userExtra, impersonatedExtra                                      *proto.ColMap[string, []string]
	annotations                                                       *proto.ColMap[string, string]
	code                                                              proto.ColInt32
	requestReceived, stageTimestamp, receivedAt                       proto.ColDateTime64
	hasRequestObject, hasResponseObject                               proto.ColBool
	requestObjectBytes, responseObjectBytes                           proto.ColInt64

	input proto.Input // the columns above in EventColumns' order
	out   proto.Buffer
	// owned holds the block's copies of the strings its LowCardinality columns keep (own).
	owned map[string]string
	strs  []string
	// Scratch for a row's map entries in key order (equal maps, equal bytes, as RowBinary).
	extraKV []proto.KV[string, []string]
	annoKV  []proto.KV[string, string]
}

func newEventBlock() *eventBlock {
	lc := func() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }
	ts := func(c *proto.ColDateTime64) proto.Column {
		c.WithPrecision(proto.PrecisionMicro).WithLocation(time.UTC)
		return c
	}
	b := &eventBlock{
		apiserver: lc(), stage: lc(), level: lc(), verb: lc(), group: lc(), version: lc(), resource: lc(),
		subresource: lc(), namespace: lc(), userName: lc(), impersonatedUser: lc(),
		impersonationConstraint: lc(), userAgent: lc(), status: lc(), reason: lc(),
		userGroups:         proto.NewArray[string](lc()),
		impersonatedGroups: proto.NewArray[string](lc()),
		sourceIPs:          proto.NewArray[string](new(proto.ColStr)),
		userExtra:          proto.NewMap[string, []string](lc(), proto.NewArray[string](new(proto.ColStr))),
		impersonatedExtra:  proto.NewMap[string, []string](lc(), proto.NewArray[string](new(proto.ColStr))),
		annotations:        proto.NewMap[string, string](lc(), new(proto.ColStr)),
		owned:              map[string]string{},
	}
	cols := []proto.Column{
		b.apiserver, &b.auditID, b.stage, b.level, b.verb, &b.requestURI, b.group, b.version,
		b.resource, b.subresource, b.namespace, &b.name, b.userName, &b.userUID, b.userGroups,
		b.userExtra, b.impersonatedUser, &b.impersonatedUID, b.impersonatedGroups,
		b.impersonatedExtra, b.impersonationConstraint, b.sourceIPs, b.userAgent, &b.code,
		b.status, b.reason, &b.message, ts(&b.requestReceived), ts(&b.stageTimestamp),
		b.annotations, &b.hasRequestObject, &b.requestObjectBytes, &b.hasResponseObject,
		&b.responseObjectBytes, ts(&b.receivedAt), &b.raw,
	}
	for i, c := range cols {
		b.input = append(b.input, proto.InputColumn{Name: EventColumns[i].Name, Data: c})
	}
	return b
}

// rows is how many rows the block holds.
func (b *eventBlock) rows() int { return b.raw.Rows() }

// add appends r's row (the values of EventRow).
func (b *eventBlock) add(r *record.Record) {
	b.apiserver.Append(b.own(r.APIServer))
	b.auditID.Append(r.AuditID)
	b.stage.Append(b.own(r.Stage))
	b.level.Append(b.own(r.Level))
	b.verb.Append(b.own(r.Verb))
	b.requestURI.Append(r.RequestURI)
	b.group.Append(b.own(r.Group))
	b.version.Append(b.own(r.Version))
	b.resource.Append(b.own(r.Resource))
	b.subresource.Append(b.own(r.Subresource))
	b.namespace.Append(b.own(r.Namespace))
	b.name.Append(r.Name)
	b.userName.Append(b.own(r.UserName))
	b.userUID.Append(r.UserUID)
	b.userGroups.Append(b.ownAll(r.UserGroups))
	b.appendExtra(b.userExtra, r.UserExtra)
	b.impersonatedUser.Append(b.own(r.ImpersonatedUser))
	b.impersonatedUID.Append(r.ImpersonatedUID)
	b.impersonatedGroups.Append(b.ownAll(r.ImpersonatedGroups))
	b.appendExtra(b.impersonatedExtra, r.ImpersonatedExtra)
	b.impersonationConstraint.Append(b.own(r.ImpersonationConstraint))
	b.sourceIPs.Append(r.SourceIPs)
	b.userAgent.Append(b.own(r.UserAgent))
	b.code.Append(r.Code)
	b.status.Append(b.own(r.Status))
	b.reason.Append(b.own(r.Reason))
	b.message.Append(r.Message)
	b.requestReceived.AppendRaw(dateTime64(r.RequestReceivedTimestamp))
	b.stageTimestamp.AppendRaw(dateTime64(r.StageTimestamp))
	b.appendAnnotations(r.Annotations)
	b.hasRequestObject.Append(r.HasRequestObject)
	b.requestObjectBytes.Append(r.RequestObjectBytes)
	b.hasResponseObject.Append(r.HasResponseObject)
	b.responseObjectBytes.Append(r.ResponseObjectBytes)
	b.receivedAt.AppendRaw(dateTime64(r.ReceivedAt))
	b.raw.AppendBytes(r.Raw)
}

// encode appends the block in Native format to out and empties it; an empty block appends
// nothing.
func (b *eventBlock) encode(out []byte) []byte {
	n := b.rows()
	if n == 0 {
		return out
	}
	b.out.Buf = out
	// Every column has n rows (add appends one to each), the one error EncodeRawBlock reports,
	// and Prepare of these columns cannot fail.
	if err := (proto.Block{Columns: len(b.input), Rows: n}).EncodeRawBlock(&b.out, 0, b.input); err != nil {
		panic("store: encode an events block: " + err.Error())
	}
	out = b.out.Buf
	b.out.Buf = nil
	b.reset()
	return out
}

// reset empties the block.
func (b *eventBlock) reset() {
	b.input.Reset()
	clear(b.owned)
}

// own returns the block's copy of v. A LowCardinality column keeps the strings it is given
// until the block is encoded, and a frame's records alias the frame reader's memory only until
// it decodes the next frame; the other columns copy the bytes as they append them.
func (b *eventBlock) own(v string) string {
	if s, ok := b.owned[v]; ok {
		return s
	}
	s := strings.Clone(v)
	b.owned[s] = s
	return s
}

// ownAll is vs as the block's copies, in a list reused by the next call (the columns copy
// the list, not the strings).
func (b *eventBlock) ownAll(vs []string) []string {
	b.strs = b.strs[:0]
	for _, v := range vs {
		b.strs = append(b.strs, b.own(v))
	}
	return b.strs
}

// dateTime64 is t as DateTime64(6): microseconds since 1970, the zero time 0 (as rbTime).
func dateTime64(t time.Time) proto.DateTime64 {
	if t.IsZero() {
		return 0
	}
	return proto.DateTime64(t.UnixNano() / 1000)
}

func (b *eventBlock) appendExtra(c *proto.ColMap[string, []string], m map[string][]string) {
	kv := b.extraKV[:0]
	for k, v := range m {
		kv = append(kv, proto.KV[string, []string]{Key: b.own(k), Value: v})
	}
	slices.SortFunc(kv, func(x, y proto.KV[string, []string]) int { return strings.Compare(x.Key, y.Key) })
	c.AppendKV(kv)
	clear(kv)
	b.extraKV = kv[:0]
}

func (b *eventBlock) appendAnnotations(m map[string]string) {
	kv := b.annoKV[:0]
	for k, v := range m {
		kv = append(kv, proto.KV[string, string]{Key: b.own(k), Value: v})
	}
	slices.SortFunc(kv, func(x, y proto.KV[string, string]) int { return strings.Compare(x.Key, y.Key) })
	b.annotations.AppendKV(kv)
	clear(kv)
	b.annoKV = kv[:0]
}
