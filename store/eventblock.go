package store

import (
	"github.com/ClickHouse/ch-go/proto"

	"github.com/peertrail/peertrail/ingest/record"
)

// eventBlock is the columns of a block of event rows. It is reused: encode empties it. Not safe
// for concurrent use; the writer's events goroutine owns it.
type eventBlock struct {
	apiserver, stage, level, verb, group, version, resource, subresource, namespace, userName,
	impersonatedUser, impersonationConstraint, userAgent, status, reason *lcStr
	auditID, requestURI, name, userUID, impersonatedUID, message, raw proto.ColStr
	userGroups, impersonatedGroups, sourceIPs                         *proto.ColArr[string]
	userExtra, impersonatedExtra                                      *proto.ColMap[string, []string]
	annotations                                                       *proto.ColMap[string, string]
	code                                                              proto.ColInt32
	requestReceived, stageTimestamp, receivedAt                       proto.ColDateTime64
	hasRequestObject, hasResponseObject                               proto.ColBool
	requestObjectBytes, responseObjectBytes                           proto.ColInt64

	nativeBlock // the columns above in EventColumns' order
}

func newEventBlock() *eventBlock {
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
	b.nativeBlock = newNativeBlock("events", EventColumns, cols)
	return b
}

// add appends r's row (the values of EventRow).
func (b *eventBlock) add(r *record.Record) {
	b.apiserver.Append(r.APIServer)
	b.auditID.Append(r.AuditID)
	b.stage.Append(r.Stage)
	b.level.Append(r.Level)
	b.verb.Append(r.Verb)
	b.requestURI.Append(r.RequestURI)
	b.group.Append(r.Group)
	b.version.Append(r.Version)
	b.resource.Append(r.Resource)
	b.subresource.Append(r.Subresource)
	b.namespace.Append(r.Namespace)
	b.name.Append(r.Name)
	b.userName.Append(r.UserName)
	b.userUID.Append(r.UserUID)
	b.userGroups.Append(r.UserGroups)
	b.appendExtra(b.userExtra, r.UserExtra)
	b.impersonatedUser.Append(r.ImpersonatedUser)
	b.impersonatedUID.Append(r.ImpersonatedUID)
	b.impersonatedGroups.Append(r.ImpersonatedGroups)
	b.appendExtra(b.impersonatedExtra, r.ImpersonatedExtra)
	b.impersonationConstraint.Append(r.ImpersonationConstraint)
	b.sourceIPs.Append(r.SourceIPs)
	b.userAgent.Append(r.UserAgent)
	b.code.Append(r.Code)
	b.status.Append(r.Status)
	b.reason.Append(r.Reason)
	b.message.Append(r.Message)
	b.requestReceived.AppendRaw(dateTime64(r.RequestReceivedTimestamp))
	b.stageTimestamp.AppendRaw(dateTime64(r.StageTimestamp))
	b.appendStringMap(b.annotations, r.Annotations)
	b.hasRequestObject.Append(r.HasRequestObject)
	b.requestObjectBytes.Append(r.RequestObjectBytes)
	b.hasResponseObject.Append(r.HasResponseObject)
	b.responseObjectBytes.Append(r.ResponseObjectBytes)
	b.receivedAt.AppendRaw(dateTime64(r.ReceivedAt))
	b.raw.AppendBytes(r.Raw)
	// The other strings are parts of the raw JSON: about as many bytes again.
	b.size += 2 * len(r.Raw)
}
