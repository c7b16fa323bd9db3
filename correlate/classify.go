package correlate

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Classifier decides what happened to a request from the records of every apiserver that saw it.
//
// Classify receives a chain whose sides (one per apiserver, in arrival order) are filled in and
// whose roles are not: it sets Entry, Peer and Others, Class, Findings and Explanation. It may
// read what it has learned but must not change it, because it also classifies open chains for
// display. Learn is called once for each chain that becomes final, after Classify, and teaches
// the classifier from it (which apiserver serves what). Both are called from one goroutine at a
// time; the chain belongs to the caller.
type Classifier interface {
	Classify(c *Chain)
	Learn(c *Chain)
}

// Messages that identify an outcome in an audit record's responseStatus.
const (
	// msgResourceNotFound is what an apiserver answers for a resource it does not serve.
	msgResourceNotFound = "the server could not find the requested resource"
	userAPIServer       = "system:apiserver"
)

// proxyErrorMessages are the starts of the entry's messages when forwarding to a peer failed.
var proxyErrorMessages = []string{
	"error trying to reach service",
	"Error getting ip and port info of the remote server while proxying",
	"no endpoints available",
}

func isProxyError(msg string) bool {
	for _, p := range proxyErrorMessages {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// DefaultClassifier classifies chains by the facts measured on real kube-apiservers
// (KUBERNETES-FACTS.md): the peer's sourceIPs carry one more hop, only the entry records
// impersonation, the entry's record of a forwarded request has a bare status, and what each
// apiserver serves is learned from the chains (Capabilities).
type DefaultClassifier struct {
	Caps *Capabilities
}

// NewClassifier returns a DefaultClassifier over caps.
func NewClassifier(caps *Capabilities) *DefaultClassifier { return &DefaultClassifier{Caps: caps} }

func (c *Chain) gvr() GVR { return GVR{Group: c.Group, Version: c.Version, Resource: c.Resource} }

// when is the time a chain's request was made, for capability lookups.
func (c *Chain) when() time.Time {
	for _, s := range c.sides {
		if !s.RequestReceived.IsZero() {
			return s.RequestReceived
		}
	}
	return c.FirstReceived
}

// Classify implements Classifier.
func (k *DefaultClassifier) Classify(c *Chain) {
	c.Entry, c.Peer, c.Others, c.Findings = nil, nil, nil, []Finding{}
	switch len(c.sides) {
	case 0:
		c.Class, c.Explanation = ClassBroken, "no records"
	case 1:
		k.single(c, c.sides[0])
	case 2:
		entry, peer, why := k.roles(c, c.sides[0], c.sides[1])
		c.Entry, c.Peer = entry, peer
		k.pair(c, why)
	default:
		k.loop(c)
	}
	// Whatever the class, a chain that had to drop records (its auditID sent more than one
	// request can make: a client reusing its own Audit-ID) is decided on the records it kept.
	if c.reused {
		c.Findings = append(c.Findings, FindingAuditIDReused)
		c.Explanation += fmt.Sprintf("; more records arrived for its auditID than requests make (%d counted here): a chain takes at most %d and an auditID has at most %d chains at a time, the rest were dropped (%s)",
			c.Records, MaxChainRecords, MaxChainRecords, FindingAuditIDReused)
	}
	fillDerived(c)
}

// hops is how many more addresses b's sourceIPs list than a's, when b's extends a's; -1 otherwise.
func hops(a, b []string) int {
	if len(b) < len(a) || !slices.Equal(a, b[:len(a)]) {
		return -1
	}
	return len(b) - len(a)
}

// roles decides which of two sides got the client's call (entry) and which served it (peer),
// and says on what evidence.
func (k *DefaultClassifier) roles(c *Chain, a, b *Side) (entry, peer *Side, why string) {
	score := 0 // > 0: a is the entry
	var reasons []string
	add := func(n int, reason string) {
		score += n
		reasons = append(reasons, reason)
	}
	// A forwarded request arrives at the peer from the entry's address.
	if last := lastIP(b.SourceIPs); last != "" && len(b.SourceIPs) >= 2 && k.isAddressOf(last, a.APIServer) && !k.isAddressOf(lastIP(a.SourceIPs), b.APIServer) {
		add(8, fmt.Sprintf("%s's record comes from %s's address", b.APIServer, a.APIServer))
	} else if last := lastIP(a.SourceIPs); last != "" && len(a.SourceIPs) >= 2 && k.isAddressOf(last, b.APIServer) && !k.isAddressOf(lastIP(b.SourceIPs), a.APIServer) {
		add(-8, fmt.Sprintf("%s's record comes from %s's address", a.APIServer, b.APIServer))
	}
	// The peer's sourceIPs are the entry's plus the entry's address.
	if h := hops(a.SourceIPs, b.SourceIPs); h > 0 {
		add(4, fmt.Sprintf("%s's sourceIPs add a hop to %s's", b.APIServer, a.APIServer))
	} else if h := hops(b.SourceIPs, a.SourceIPs); h > 0 {
		add(-4, fmt.Sprintf("%s's sourceIPs add a hop to %s's", a.APIServer, b.APIServer))
	}
	// Only the entry records impersonation; the peer sees the impersonated user.
	if (a.ImpersonatedUser != "") != (b.ImpersonatedUser != "") {
		if a.ImpersonatedUser != "" {
			add(3, a.APIServer+" recorded the impersonation")
		} else {
			add(-3, b.APIServer+" recorded the impersonation")
		}
	}
	// Who serves the resource: the peer does, the entry does not.
	if c.Resource != "" {
		t := c.when()
		as, aknown := k.Caps.Serves(a.APIServer, c.gvr(), t)
		bs, bknown := k.Caps.Serves(b.APIServer, c.gvr(), t)
		if aknown && bknown && as != bs {
			if bs {
				add(2, b.APIServer+" serves "+c.gvr().String())
			} else {
				add(-2, a.APIServer+" serves "+c.gvr().String())
			}
		}
	}
	// The entry never decodes the body or keeps the response: objects, the status message and
	// a created object's name are on the peer's side only.
	if a.HasObjects != b.HasObjects {
		if b.HasObjects {
			add(1, b.APIServer+" recorded the objects")
		} else {
			add(-1, a.APIServer+" recorded the objects")
		}
	}
	if (a.Message == "") != (b.Message == "") && a.Code >= 400 && b.Code >= 400 {
		if b.Message != "" {
			add(1, b.APIServer+" recorded the status message")
		} else {
			add(-1, a.APIServer+" recorded the status message")
		}
	}
	if score == 0 {
		// Last resort: the entry's window encloses the peer's (clocks on different hosts may skew).
		switch {
		case !a.RequestReceived.After(b.RequestReceived) && !a.Completed.Before(b.Completed):
			score, reasons = 1, []string{a.APIServer + "'s timestamps enclose " + b.APIServer + "'s"}
		case !b.RequestReceived.After(a.RequestReceived) && !b.Completed.Before(a.Completed):
			score, reasons = -1, []string{b.APIServer + "'s timestamps enclose " + a.APIServer + "'s"}
		default:
			score, reasons = 1, []string{a.APIServer + " recorded the request first"}
		}
	}
	why = strings.Join(reasons, "; ")
	if score > 0 {
		return a, b, why
	}
	return b, a, why
}

func lastIP(ips []string) string {
	if len(ips) == 0 {
		return ""
	}
	return ips[len(ips)-1]
}

// isAddressOf reports whether ip belongs to apiserver.
func (k *DefaultClassifier) isAddressOf(ip, apiserver string) bool {
	return ip != "" && k.Caps.HasAddress(apiserver, ip)
}

func complete(s *Side) bool { return s.Code != 0 }

// apiserverHops counts the apiserver addresses that end s's sourceIPs, the client's own (the
// first, which may be any host's, an apiserver's too) aside: each is one forwarding.
func (k *DefaultClassifier) apiserverHops(s *Side) int {
	n := 0
	for i := len(s.SourceIPs) - 1; i >= 1 && k.Caps.IsAPIServerAddress(s.SourceIPs[i]); i-- {
		n++
	}
	return n
}

func (k *DefaultClassifier) pair(c *Chain, roles string) {
	e, p := c.Entry, c.Peer
	// A second hop: a record shows two apiserver hops after the client, counted against the
	// other side's record or by the addresses themselves (the first hop's record may be missing).
	h := max(hops(e.SourceIPs, p.SourceIPs), k.apiserverHops(p), k.apiserverHops(e))
	if h >= 2 {
		c.Class = ClassLoop
		c.Explanation = fmt.Sprintf("%s's record shows %d hops after the client: forwarded more than once", p.APIServer, h)
		return
	}
	switch {
	case !complete(e):
		c.Class = ClassBroken
		c.Findings = append(c.Findings, FindingEntryAuditMissing)
		c.Explanation = fmt.Sprintf("forwarded by %s to %s, but %s recorded only %s (roles: %s)", e.APIServer, p.APIServer, e.APIServer, strings.Join(e.Stages, ","), roles)
	case !complete(p):
		c.Class = ClassBroken
		c.Findings = append(c.Findings, FindingPeerAuditMissing)
		c.Explanation = fmt.Sprintf("forwarded by %s to %s, but %s recorded only %s (roles: %s)", e.APIServer, p.APIServer, p.APIServer, strings.Join(p.Stages, ","), roles)
	default:
		c.Class = ClassProxied
		c.Explanation = fmt.Sprintf("%s forwarded the request to %s, which answered %d (roles: %s)", e.APIServer, p.APIServer, p.Code, roles)
	}
	// Identity: the peer must see who the entry decided the request was for.
	effName, effGroups, effExtra := e.User, e.Groups, e.Extra
	if e.ImpersonatedUser != "" {
		effName, effGroups, effExtra = e.ImpersonatedUser, e.ImpersonatedGroups, e.ImpersonatedExtra
	}
	if p.User != effName || !sameSet(p.Groups, effGroups) || !sameExtra(p.Extra, effExtra) {
		c.Findings = append(c.Findings, FindingIdentityMismatch)
	}
	if e.ImpersonatedUser != "" && p.ImpersonatedUser == "" {
		c.Findings = append(c.Findings, FindingImpersonationFlattened)
	}
	if complete(e) && complete(p) && e.Code != p.Code {
		c.Findings = append(c.Findings, FindingStatusMismatch)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func sameExtra(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !sameSet(v, w) {
			return false
		}
	}
	return true
}

// isPeerRecord reports whether a lone side looks like the peer of a forwarding: its request
// came from another apiserver's address, one hop after a client.
func (k *DefaultClassifier) isPeerRecord(c *Chain, s *Side) bool {
	if len(s.SourceIPs) < 2 || s.User == userAPIServer {
		return false
	}
	if !k.Caps.IsAPIServerAddress(lastIP(s.SourceIPs)) {
		return false
	}
	// A peer serves what it was sent; a side whose apiserver is known not to serve the
	// resource cannot be one.
	if c.Resource != "" {
		if served, known := k.Caps.Serves(s.APIServer, c.gvr(), c.when()); known && !served {
			return false
		}
	}
	return true
}

func isInternal(c *Chain, s *Side) bool {
	if c.Resource != "" || s.User != userAPIServer || s.UserAgent != "" {
		return false
	}
	path, _, _ := strings.Cut(c.RequestURI, "?")
	return path == "/api" || path == "/apis"
}

func (k *DefaultClassifier) single(c *Chain, s *Side) {
	if isInternal(c, s) {
		c.Entry = s
		c.Class = ClassInternal
		c.Explanation = fmt.Sprintf("peer discovery: another apiserver fetched %s from %s", c.RequestURI, s.APIServer)
		return
	}
	if h := k.apiserverHops(s); h >= 2 {
		c.Peer = s
		c.Class = ClassLoop
		c.Findings = append(c.Findings, FindingEntryAuditMissing)
		c.Explanation = fmt.Sprintf("%s's record shows %d apiserver hops after the client (%s): forwarded more than once, the earlier records missing",
			s.APIServer, h, strings.Join(s.SourceIPs[len(s.SourceIPs)-h:], " -> "))
		return
	}
	if k.isPeerRecord(c, s) {
		c.Peer = s
		c.Class = ClassBroken
		c.Findings = append(c.Findings, FindingEntryAuditMissing)
		c.Explanation = fmt.Sprintf("%s served a request forwarded from %s, whose record of it is missing", s.APIServer, lastIP(s.SourceIPs))
		return
	}
	c.Entry = s
	if c.Resource == "" {
		c.Class, c.Explanation = ClassLocal, fmt.Sprintf("%s answered a non-resource request itself", s.APIServer)
		return
	}
	g, t := c.gvr(), c.when()
	served, known := k.Caps.Serves(s.APIServer, g, t)
	notServed := known && !served
	other, otherServes := k.Caps.OtherServer(s.APIServer, g, t)
	code := s.Code
	switch {
	case code == 0:
		if notServed {
			c.Class = ClassBroken
			c.Findings = append(c.Findings, FindingPeerAuditMissing)
			c.Explanation = fmt.Sprintf("%s does not serve %s and recorded only %s: the rest of the forwarding is missing", s.APIServer, g, strings.Join(s.Stages, ","))
		} else {
			c.Class = ClassLocal
			c.Explanation = fmt.Sprintf("%s recorded only %s; no outcome", s.APIServer, strings.Join(s.Stages, ","))
		}
	case (code == 503 || code == 502) && (isProxyError(s.Message) || s.Message == "" && (notServed || otherServes && !served)):
		c.Class = ClassProxyFailed
		c.Explanation = fmt.Sprintf("%s could not forward the request (%d %s)", s.APIServer, code, orDash(s.Message))
		if otherServes {
			c.Explanation += "; " + other + " serves " + g.String()
		}
	case code == 404 && (s.Message == msgResourceNotFound || s.Message == "") && otherServes && !served:
		if s.Message == "" && k.Caps.ProxiedRecently(s.APIServer, g, t) {
			// A bare 404 from an apiserver that forwards this resource is a forwarded answer
			// whose peer record is missing, not the apiserver's own not-found page.
			c.Class = ClassBroken
			c.Findings = append(c.Findings, FindingPeerAuditMissing)
			c.Explanation = fmt.Sprintf("%s forwards %s and answered a bare 404; the peer's record is missing", s.APIServer, g)
			return
		}
		c.Class = ClassMisleading404
		c.Explanation = fmt.Sprintf("%s answered 404 for %s, which %s serves (the peer was gone or not yet discovered, MVP was off, or the client sent x-kubernetes-peer-proxied itself)", s.APIServer, g, other)
	case notServed && (code < 400 || s.Message == "" && code != 404 && code != 401 && code != 403 && code != 429):
		c.Class = ClassBroken
		c.Findings = append(c.Findings, FindingPeerAuditMissing)
		c.Explanation = fmt.Sprintf("%s does not serve %s yet answered %d: it forwarded the request, and the peer's record is missing", s.APIServer, g, code)
	default:
		c.Class = ClassLocal
		c.Explanation = fmt.Sprintf("%s answered %d itself", s.APIServer, code)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (k *DefaultClassifier) loop(c *Chain) {
	// The entry is the side with the fewest hops; the others follow in hop order.
	sides := slices.Clone(c.sides)
	slices.SortStableFunc(sides, func(a, b *Side) int { return len(a.SourceIPs) - len(b.SourceIPs) })
	c.Entry, c.Peer, c.Others = sides[0], sides[1], sides[2:]
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.APIServer
	}
	c.Class = ClassLoop
	c.Explanation = fmt.Sprintf("recorded by %d apiservers (%s): forwarded more than once", len(sides), strings.Join(names, " -> "))
}

// fillDerived derives the chain's user, code and latencies from its roles.
func fillDerived(c *Chain) {
	first := c.Entry
	if first == nil {
		first = c.Peer
	}
	if first == nil {
		return
	}
	c.User, c.RealUser = first.User, ""
	if first.ImpersonatedUser != "" {
		c.User, c.RealUser = first.ImpersonatedUser, first.User
	}
	c.Code = first.Code
	c.EntryDurationSeconds = c.Entry.Duration().Seconds()
	c.PeerDurationSeconds = c.Peer.Duration().Seconds()
	c.ForwardingOverheadSeconds = 0
	if c.Entry != nil && c.Peer != nil && c.Class == ClassProxied {
		c.ForwardingOverheadSeconds = c.EntryDurationSeconds - c.PeerDurationSeconds
	}
}

// Learn implements Classifier.
func (k *DefaultClassifier) Learn(c *Chain) {
	if c.Resource == "" {
		return
	}
	g, t := c.gvr(), c.when()
	switch c.Class {
	case ClassProxied:
		k.Caps.Learn(c.Peer.APIServer, g, c.Peer.RequestReceived, true)
		k.Caps.Learn(c.Entry.APIServer, g, c.Entry.RequestReceived, false)
		k.Caps.NoteProxied(c.Entry.APIServer, g, t)
	case ClassProxyFailed:
		k.Caps.Learn(c.Entry.APIServer, g, t, false)
		k.Caps.NoteProxied(c.Entry.APIServer, g, t)
	case ClassMisleading404:
		k.Caps.Learn(c.Entry.APIServer, g, t, false)
	case ClassBroken:
		if c.Peer != nil && complete(c.Peer) {
			k.Caps.Learn(c.Peer.APIServer, g, c.Peer.RequestReceived, true)
		}
	case ClassLocal:
		s := c.Entry
		switch {
		case s.Code == 404 && (s.Message == msgResourceNotFound || s.Message == ""):
			k.Caps.Learn(s.APIServer, g, t, false)
		case s.Code >= 200 && s.Code < 300, s.Code == 404, s.Code == 409, s.Code == 410, s.Code == 422:
			// A resource-level outcome: the apiserver reached the resource's storage.
			k.Caps.Learn(s.APIServer, g, t, true)
		}
	}
}
