package store

import (
	"github.com/ClickHouse/ch-go/proto"

	"github.com/peertrail/peertrail/chain"
)

// chainBlock is the columns of a block of chain rows (ChainColumns; see nativeBlock). It is
// reused; the chain writer's insert (under Writer.chainMu) owns it.
type chainBlock struct {
	id, auditID, explanation, requestURI, name, otherSides                        proto.ColStr
	version                                                                       proto.ColUInt64
	revision, records                                                             proto.ColUInt32
	evicted                                                                       proto.ColBool
	state, class, verb, group, apiVersion, resource, subresource, namespace, user *lcStr
	realUser                                                                      *lcStr
	findings, otherAPIServers                                                     *proto.ColArr[string]
	code                                                                          proto.ColInt32
	otherCodes                                                                    *proto.ColArr[int32]
	entry, peer                                                                   sideBlock
	entryDuration, peerDuration, forwardingOverhead                               proto.ColFloat64
	requestTime, firstReceived, lastReceived                                      proto.ColDateTime64

	nativeBlock
	strs  []string // scratch for a row's findings, then its other_apiservers
	codes []int32  // scratch for a row's other_codes
}

// sideBlock is the columns of one side (has_<side> and sideColumns).
type sideBlock struct {
	has, hasObjects                                                        proto.ColBool
	apiserver, user, impersonatedUser, userAgent, reason, apiserverVersion *lcStr
	code                                                                   proto.ColInt32
	uid, message                                                           proto.ColStr
	groups, impersonatedGroups, sourceIPs, stages                          *proto.ColArr[string]
	extra, impersonatedExtra                                               *proto.ColMap[string, []string]
	requestReceived, completed                                             proto.ColDateTime64
}

func newSideBlock() sideBlock {
	return sideBlock{
		apiserver: lc(), user: lc(), impersonatedUser: lc(), userAgent: lc(), reason: lc(), apiserverVersion: lc(),
		groups: proto.NewArray[string](lc()), impersonatedGroups: proto.NewArray[string](lc()),
		sourceIPs: proto.NewArray[string](new(proto.ColStr)), stages: proto.NewArray[string](lc()),
		extra:             proto.NewMap[string, []string](lc(), proto.NewArray[string](new(proto.ColStr))),
		impersonatedExtra: proto.NewMap[string, []string](lc(), proto.NewArray[string](new(proto.ColStr))),
	}
}

// columns are the side's columns in the order of ChainColumns.
func (s *sideBlock) columns() []proto.Column {
	return []proto.Column{&s.has, s.apiserver, &s.code, s.user, &s.uid, s.groups, s.extra, s.impersonatedUser,
		s.impersonatedGroups, s.impersonatedExtra, s.sourceIPs, s.userAgent, &s.message, s.reason,
		ts(&s.requestReceived), ts(&s.completed), s.stages, &s.hasObjects, s.apiserverVersion}
}

func newChainBlock() *chainBlock {
	b := &chainBlock{
		state: lc(), class: lc(), verb: lc(), group: lc(), apiVersion: lc(), resource: lc(), subresource: lc(),
		namespace: lc(), user: lc(), realUser: lc(),
		findings: proto.NewArray[string](lc()), otherAPIServers: proto.NewArray[string](lc()),
		otherCodes: proto.NewArray[int32](new(proto.ColInt32)),
		entry:      newSideBlock(), peer: newSideBlock(),
	}
	cols := []proto.Column{&b.id, &b.auditID, &b.version, &b.revision, &b.evicted, b.state, b.class, b.findings,
		&b.explanation, b.verb, &b.requestURI, b.group, b.apiVersion, b.resource, b.subresource, b.namespace,
		&b.name, b.user, b.realUser, &b.code}
	cols = append(cols, b.entry.columns()...)
	cols = append(cols, b.peer.columns()...)
	cols = append(cols, b.otherAPIServers, b.otherCodes, &b.otherSides, &b.entryDuration, &b.peerDuration,
		&b.forwardingOverhead, ts(&b.requestTime), ts(&b.firstReceived), ts(&b.lastReceived), &b.records)
	b.nativeBlock = newNativeBlock("chains", ChainColumns, cols)
	return b
}

// add appends c's row (the values of ChainRow).
func (b *chainBlock) add(c *chain.Chain) {
	b.id.Append(c.ID)
	b.auditID.Append(c.AuditID)
	b.version.Append(ChainVersion(c))
	b.revision.Append(uint32(max(c.Revision, 0)))
	b.evicted.Append(c.Evicted)
	b.state.Append(string(c.State))
	b.class.Append(string(c.Class))
	b.strs = b.strs[:0]
	for _, f := range c.Findings {
		b.strs = append(b.strs, string(f))
	}
	b.findings.Append(b.strs)
	b.explanation.Append(c.Explanation)
	b.verb.Append(c.Verb)
	b.requestURI.Append(c.RequestURI)
	b.group.Append(c.Group)
	b.apiVersion.Append(c.Version)
	b.resource.Append(c.Resource)
	b.subresource.Append(c.Subresource)
	b.namespace.Append(c.Namespace)
	b.name.Append(c.Name)
	b.user.Append(c.User)
	b.realUser.Append(c.RealUser)
	b.code.Append(c.Code)
	b.addSide(&b.entry, c.Entry)
	b.addSide(&b.peer, c.Peer)
	b.strs, b.codes = b.strs[:0], b.codes[:0]
	for _, o := range c.Others {
		if o != nil {
			b.strs = append(b.strs, o.APIServer)
			b.codes = append(b.codes, o.Code)
		}
	}
	b.otherAPIServers.Append(b.strs)
	b.otherCodes.Append(b.codes)
	b.otherSides.Append(otherSides(c))
	b.entryDuration.Append(c.EntryDurationSeconds)
	b.peerDuration.Append(c.PeerDurationSeconds)
	b.forwardingOverhead.Append(c.ForwardingOverheadSeconds)
	b.requestTime.AppendRaw(dateTime64(c.RequestTime()))
	b.firstReceived.AppendRaw(dateTime64(c.FirstReceived))
	b.lastReceived.AppendRaw(dateTime64(c.LastReceived))
	b.records.Append(uint32(max(c.Records, 0)))
	b.size += len(c.ID) + len(c.AuditID) + len(c.Explanation) + len(c.RequestURI) + len(c.Name) + sideSize(c.Entry) + sideSize(c.Peer)
}

// sideSize is about how many bytes of strings a side holds, its largest ones.
func sideSize(s *chain.Side) int {
	if s == nil {
		return 0
	}
	return len(s.Message) + len(s.UserAgent) + len(s.UID) + 16*(len(s.Groups)+len(s.SourceIPs)+len(s.Extra)+len(s.ImpersonatedExtra))
}

// addSide appends s's columns to sb; a missing side is its zero values.
func (b *chainBlock) addSide(sb *sideBlock, s *chain.Side) {
	sb.has.Append(s != nil)
	if s == nil {
		s = &chain.Side{}
	}
	sb.apiserver.Append(s.APIServer)
	sb.code.Append(s.Code)
	sb.user.Append(s.User)
	sb.uid.Append(s.UID)
	sb.groups.Append(s.Groups)
	b.appendExtra(sb.extra, s.Extra)
	sb.impersonatedUser.Append(s.ImpersonatedUser)
	sb.impersonatedGroups.Append(s.ImpersonatedGroups)
	b.appendExtra(sb.impersonatedExtra, s.ImpersonatedExtra)
	sb.sourceIPs.Append(s.SourceIPs)
	sb.userAgent.Append(s.UserAgent)
	sb.message.Append(s.Message)
	sb.reason.Append(s.Reason)
	sb.requestReceived.AppendRaw(dateTime64(s.RequestReceived))
	sb.completed.AppendRaw(dateTime64(s.Completed))
	sb.stages.Append(s.Stages)
	sb.hasObjects.Append(s.HasObjects)
	sb.apiserverVersion.Append(s.APIServerVersion)
}
