package correlate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// Classifier decides what happened to a request from the records of every apiserver that saw it.
//
// Classify receives a draft (a chain with the correlator's working state) whose sides (one per
// apiserver, in arrival order) are filled in and whose roles are not: it sets Entry, Peer and
// Others, Class, Findings and Explanation. It may read what it has learned but must not change
// it, because it also classifies open chains for display. Learn is called once for each chain
// that becomes final, after Classify, and teaches the classifier from it (which apiserver
// serves what). Both are called from one goroutine at a time; the draft belongs to the caller,
// and is valid only for the call (its memory serves the next chain).
type Classifier interface {
	Classify(c *draft)
	Learn(c *draft)
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
// (test/testdata/real/README.md): the peer's sourceIPs carry one more hop, only the entry records
// impersonation, the entry's record of a forwarded request has a bare status, and what each
// apiserver serves is learned from the chains (Capabilities).
type DefaultClassifier struct {
	Caps *Capabilities
}

// NewClassifier returns a DefaultClassifier over caps.
func NewClassifier(caps *Capabilities) *DefaultClassifier { return &DefaultClassifier{Caps: caps} }

// Classify implements Classifier.
func (k *DefaultClassifier) Classify(c *draft) {
	c.Entry, c.Peer, c.Others, c.Findings = nil, nil, nil, []chain.Finding{}
	c.undecided, c.noiseOf, c.noiseSince, c.apart, c.collapsed = "", "", time.Time{}, nil, false
	switch len(c.sides) {
	case 0:
		c.Class, c.Explanation = chain.ClassBroken, "no records"
	case 1:
		k.single(c, c.sides[0])
	default:
		if groups := k.requests(c); len(groups) > 1 {
			// Records of one auditID that no forward joins: each group is a request of its
			// own, split off by the correlator. Until then the chain shows the first.
			c.apart = groups[1:]
			first := groups[0]
			switch len(first) {
			case 1:
				k.single(c, c.sides[first[0]])
			case 2:
				entry, peer, why, _ := k.forward(c, c.sides[first[0]], c.sides[first[1]])
				c.Entry, c.Peer = entry, peer
				c.collapsed = slices.Equal(entry.SourceIPs, peer.SourceIPs)
				k.pair(c, why)
			default:
				k.loop(c)
			}
			c.Explanation += "; " + k.apartWhy(c, groups)
			break
		}
		if len(c.sides) == 2 {
			entry, peer, why, _ := k.forward(c, c.sides[0], c.sides[1])
			c.Entry, c.Peer = entry, peer
			c.collapsed = slices.Equal(entry.SourceIPs, peer.SourceIPs)
			k.pair(c, why)
		} else {
			k.loop(c)
		}
	}
	k.noise(c)
	// Whatever the class, a chain that had to drop records (its auditID sent more than one
	// request can make: a client reusing its own Audit-ID) is decided on the records it kept.
	if c.reused || c.shared || c.split || len(c.apart) > 0 {
		c.Findings = append(c.Findings, chain.FindingAuditIDReused)
	}
	if c.reused {
		c.Explanation += fmt.Sprintf("; more records arrived for its auditID than requests make (%d counted here): a chain takes at most %d and an auditID has at most %d chains at a time, the rest were dropped (%s)",
			c.Records, MaxChainRecords, MaxChainRecords, chain.FindingAuditIDReused)
	}
	switch {
	case c.split:
		c.Explanation += fmt.Sprintf("; another apiserver's records of its auditID show no forward of it (%s): requests of their own sharing one Audit-ID, which a client may set, so nothing is learned from it (%s)",
			forwardEvidence, chain.FindingAuditIDReused)
	case c.shared:
		c.Explanation += fmt.Sprintf("; other requests carried its auditID too (a client may set its own Audit-ID): every chain of the auditID is listed with it (%s)", chain.FindingAuditIDReused)
	}
	fillDerived(&c.Chain)
}

// forwardEvidence says what shows a forward, for explanations.
const forwardEvidence = "a forward's peer record comes from the entry apiserver's address, its sourceIPs begin as the entry's do, and its time lies within the entry's"

// forwardSkew is how far a peer's record may lie outside its entry's time and still be its
// forward: the peer's time nests in the entry's (measured), give or take the hosts' clocks.
const forwardSkew = time.Second

// hopFrom reports whether p's record shows a request forwarded to it by e's apiserver: its last
// sourceIP (the address the request came from, which no header sets) is one of e's apiserver's
// addresses, and its sourceIPs begin as e's do. A forward adds the entry's address to the
// client's; when the client's address is the entry's own, the peer's collapses to the entry's
// (measured).
//
// Where e's address was neither configured nor learned other than as a loopback address, the
// address it forwards from is one peertrail does not know: an apiserver bound to all
// interfaces makes its loopback calls from 127.0.0.1, and dials its peers from its node's
// address. Then p's sourceIPs being e's and one address more, an address of no known
// apiserver, is the hop. That a client can make too (its request to p through a proxy that
// adds X-Forwarded-For); a configured or learned address leaves it out.
func (k *DefaultClassifier) hopFrom(e, p *chain.Side) bool {
	last := lastIP(p.SourceIPs)
	if last == "" || len(e.SourceIPs) == 0 || p.SourceIPs[0] != e.SourceIPs[0] {
		return false
	}
	if k.isAddressOf(last, e.APIServer) {
		return len(p.SourceIPs) >= 2 || lastIP(e.SourceIPs) == last
	}
	return !k.Caps.Configured(e.APIServer) && !k.Caps.HasForwardingAddress(e.APIServer) &&
		hops(e.SourceIPs, p.SourceIPs) == 1 && !k.Caps.IsAPIServerAddress(last)
}

// nested reports whether p's request lies within e's in time, give or take forwardSkew: the
// peer receives a forward after the entry did and answers before the entry does. Only the
// times recorded count (a side with no outcome has no end).
func nested(e, p *chain.Side) bool {
	if e.RequestReceived.IsZero() || p.RequestReceived.IsZero() {
		return true
	}
	if p.RequestReceived.Before(e.RequestReceived.Add(-forwardSkew)) {
		return false
	}
	if complete(e) && p.RequestReceived.After(e.Completed.Add(forwardSkew)) {
		return false
	}
	return !complete(e) || !complete(p) || !p.Completed.After(e.Completed.Add(forwardSkew))
}

// forward decides whether a and b, two apiservers' records of one auditID, are one forwarded
// request, and if so which got the client's call (entry) and which served it (peer), and on
// what evidence. Only what a client cannot supply makes a forward: the hop (hopFrom; any
// client sets X-Forwarded-For, none the address its connection comes from) and the timing
// (nested). Without them the records are requests of their own that share an Audit-ID (ok
// false; Classify keeps them apart). When the hop goes both ways (the client's address is the
// entry's, and the apiservers share a host), roles decides the direction.
func (k *DefaultClassifier) forward(c *draft, a, b *chain.Side) (entry, peer *chain.Side, why string, ok bool) {
	ab, ba := k.hopFrom(a, b), k.hopFrom(b, a)
	switch {
	case ab && !ba:
		entry, peer, why = a, b, fmt.Sprintf("%s's record comes from %s's address", b.APIServer, a.APIServer)
	case ba && !ab:
		entry, peer, why = b, a, fmt.Sprintf("%s's record comes from %s's address", a.APIServer, b.APIServer)
	case ab && ba:
		entry, peer, why = k.roles(c, a, b)
	default:
		for _, s := range []*chain.Side{a, b} {
			if ip := lastIP(s.SourceIPs); ip != "" && !k.Caps.IsAPIServerAddress(ip) && !k.Caps.AddressesKnown(s.APIServer) && c.undecided == "" {
				c.undecided = "whether " + ip + " is an apiserver's address"
			}
		}
		return a, b, "", false
	}
	if !nested(entry, peer) {
		return entry, peer, why, false
	}
	return entry, peer, why, true
}

// requests groups c's sides (indexes, in arrival order, the first side's group first) into
// the requests they record: two sides are one request when one is the forward of the other
// (forward), and a group of three or more is a forward forwarded again (loop).
func (k *DefaultClassifier) requests(c *draft) [][]int {
	n := len(c.sides)
	group := make([]int, n)
	for i := range group {
		group[i] = i
	}
	find := func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if _, _, _, ok := k.forward(c, c.sides[i], c.sides[j]); ok {
				a, b := find(i), find(j)
				group[max(a, b)] = min(a, b)
			}
		}
	}
	var out [][]int
	at := map[int]int{}
	for i := range n {
		r := find(i)
		g, seen := at[r]
		if !seen {
			g = len(out)
			at[r] = g
			out = append(out, nil)
		}
		out[g] = append(out[g], i)
	}
	return out
}

// apartWhy says why c's records are more than one request.
func (k *DefaultClassifier) apartWhy(c *draft, groups [][]int) string {
	names := make([]string, len(groups))
	for i, g := range groups {
		var ns []string
		for _, x := range g {
			ns = append(ns, c.sides[x].APIServer)
		}
		names[i] = strings.Join(ns, "+")
	}
	return fmt.Sprintf("the records of %s share its auditID but show no forward between them (%s): %d requests sharing an Audit-ID, which a client may set (%s)",
		strings.Join(names, ", "), forwardEvidence, len(groups), chain.FindingAuditIDReused)
}

// hops is how many more addresses b's sourceIPs list than a's, when b's extends a's; -1 otherwise.
func hops(a, b []string) int {
	if len(b) < len(a) || !slices.Equal(a, b[:len(a)]) {
		return -1
	}
	return len(b) - len(a)
}

// roles decides which of two sides got the client's call (entry) and which served it (peer),
// and says on what evidence. The weights put what the records themselves show above what the
// capability view believes (each weight exceeds the sum of those below it): the hop, the
// impersonation, the objects and the status message are in the records; who serves what is
// learned from other chains and may be out of date for a server that has just restarted, so
// it only breaks a tie.
func (k *DefaultClassifier) roles(c *draft, a, b *chain.Side) (entry, peer *chain.Side, why string) {
	score := 0 // > 0: a is the entry
	var reasons []string
	add := func(n int, reason string) {
		score += n
		reasons = append(reasons, reason)
	}
	// A forwarded request arrives at the peer from the entry's address.
	if last := lastIP(b.SourceIPs); last != "" && len(b.SourceIPs) >= 2 && k.isAddressOf(last, a.APIServer) && !k.isAddressOf(lastIP(a.SourceIPs), b.APIServer) {
		add(32, fmt.Sprintf("%s's record comes from %s's address", b.APIServer, a.APIServer))
	} else if last := lastIP(a.SourceIPs); last != "" && len(a.SourceIPs) >= 2 && k.isAddressOf(last, b.APIServer) && !k.isAddressOf(lastIP(b.SourceIPs), a.APIServer) {
		add(-32, fmt.Sprintf("%s's record comes from %s's address", a.APIServer, b.APIServer))
	}
	// The peer's sourceIPs are the entry's plus the entry's address.
	if h := hops(a.SourceIPs, b.SourceIPs); h > 0 {
		add(16, fmt.Sprintf("%s's sourceIPs add a hop to %s's", b.APIServer, a.APIServer))
	} else if h := hops(b.SourceIPs, a.SourceIPs); h > 0 {
		add(-16, fmt.Sprintf("%s's sourceIPs add a hop to %s's", a.APIServer, b.APIServer))
	}
	// Only the entry records impersonation; the peer sees the impersonated user.
	if (a.ImpersonatedUser != "") != (b.ImpersonatedUser != "") {
		if a.ImpersonatedUser != "" {
			add(8, a.APIServer+" recorded the impersonation")
		} else {
			add(-8, b.APIServer+" recorded the impersonation")
		}
	}
	// The entry never decodes the body or keeps the response: objects, the status message and
	// a created object's name are on the peer's side only.
	if a.HasObjects != b.HasObjects {
		if b.HasObjects {
			add(4, b.APIServer+" recorded the objects")
		} else {
			add(-4, a.APIServer+" recorded the objects")
		}
	}
	if (a.Message == "") != (b.Message == "") && a.Code >= 400 && b.Code >= 400 {
		if b.Message != "" {
			add(2, b.APIServer+" recorded the status message")
		} else {
			add(-2, a.APIServer+" recorded the status message")
		}
	}
	// Belief, last: who serves the resource (the peer does, the entry does not).
	if c.Resource != "" {
		t := c.when()
		as, aknown := k.Caps.Serves(a.APIServer, c.gvr(), t)
		bs, bknown := k.Caps.Serves(b.APIServer, c.gvr(), t)
		if aknown && bknown && as != bs {
			if bs {
				add(1, b.APIServer+" serves "+c.gvr().String())
			} else {
				add(-1, a.APIServer+" serves "+c.gvr().String())
			}
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

func complete(s *chain.Side) bool { return s.Code != 0 }

// apiserverHops counts the apiserver addresses that end s's sourceIPs, the client's own (the
// first, which may be any host's, an apiserver's too) aside: each is one forwarding.
func (k *DefaultClassifier) apiserverHops(s *chain.Side) int {
	n := 0
	for i := len(s.SourceIPs) - 1; i >= 1 && k.Caps.IsAPIServerAddress(s.SourceIPs[i]); i-- {
		n++
	}
	return n
}

func (k *DefaultClassifier) pair(c *draft, roles string) {
	e, p := c.Entry, c.Peer
	// A second hop: a record shows two apiserver hops after the client, counted against the
	// other side's record or by the addresses themselves (the first hop's record may be missing).
	h := max(hops(e.SourceIPs, p.SourceIPs), k.apiserverHops(p), k.apiserverHops(e))
	if h >= 2 {
		c.Class = chain.ClassLoop
		c.Explanation = fmt.Sprintf("%s's record shows %d hops after the client: forwarded more than once", p.APIServer, h)
		return
	}
	switch {
	case !complete(e):
		c.Class = chain.ClassBroken
		c.Findings = append(c.Findings, chain.FindingEntryAuditMissing)
		c.Explanation = fmt.Sprintf("forwarded by %s to %s, but %s recorded only %s (roles: %s)", e.APIServer, p.APIServer, e.APIServer, strings.Join(e.Stages, ","), roles)
	case !complete(p):
		c.Class = chain.ClassBroken
		c.Findings = append(c.Findings, chain.FindingPeerAuditMissing)
		c.Explanation = fmt.Sprintf("forwarded by %s to %s, but %s recorded only %s (roles: %s)", e.APIServer, p.APIServer, p.APIServer, strings.Join(p.Stages, ","), roles)
	default:
		c.Class = chain.ClassProxied
		c.Explanation = fmt.Sprintf("%s forwarded the request to %s, which answered %d (roles: %s)", e.APIServer, p.APIServer, p.Code, roles)
	}
	// Identity: the peer must see who the entry decided the request was for.
	effName, effGroups, effExtra := e.User, e.Groups, e.Extra
	if e.ImpersonatedUser != "" {
		effName, effGroups, effExtra = e.ImpersonatedUser, e.ImpersonatedGroups, e.ImpersonatedExtra
	}
	if p.User != effName || !sameSet(p.Groups, effGroups) || !sameExtra(p.Extra, effExtra) {
		if c.collapsed {
			// Two requests of one client on the entry's host, one to each apiserver with one
			// Audit-ID, look the same; a broken requestheader configuration shows on every
			// forward, the other clients' too.
			c.Explanation += fmt.Sprintf("; the peer saw another identity, but the client's address is the entry's own, which a client on that host gives two requests of its own too: no %s", chain.FindingIdentityMismatch)
		} else {
			c.Findings = append(c.Findings, chain.FindingIdentityMismatch)
		}
	}
	if e.ImpersonatedUser != "" && p.ImpersonatedUser == "" {
		c.Findings = append(c.Findings, chain.FindingImpersonationFlattened)
	}
	if complete(e) && complete(p) && e.Code != p.Code {
		c.Findings = append(c.Findings, chain.FindingStatusMismatch)
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

// A lone side: one apiserver's records of a request and nobody else's. Its rules, in order;
// the first that matches decides. What the records themselves show comes first; what the
// capability view believes (who serves what, learned from other chains) is used only where
// the records cannot tell, only as learned about the same process of the apiserver (a new
// process or version starts the view afresh, as unknown: measured, a server restarted into
// 1.36 serves what its 1.35 process forwarded), and never turns a chain broken alone: a
// missing side needs the apiserver's own forwarding of the resource in that process as well.
// Where the rule needs a fact the view does not know yet, the chain waits for it (it sets
// draft.undecided; the correlator keeps it open one more chain window, once: Joiner.hold),
// then takes the verdict that claims no fault.
//
//  1. internal: /api or /apis fetched as system:apiserver with no user agent (a peer's
//     discovery; measured: peers fetch each other's discovery so, with a fresh auditID).
//  2. loop (+entry_audit_missing): the sourceIPs end in two or more apiserver addresses.
//  3. broken, entry_audit_missing: a forwarded request's peer record. Evidence: two or more
//     sourceIPs, the last a known apiserver address, no impersonation recorded. The peer's
//     sourceIPs are the client's plus the entry's address (measured); an apiserver never
//     forwards to itself, but several apiservers can share a host, so the recording
//     apiserver's own address counts too. A plain client request has one sourceIP unless a
//     proxy added X-Forwarded-For; and only the entry records impersonation. When the last
//     address is no known apiserver's while some apiserver's address (the recording one's
//     included) is not known yet, the chain waits; then local. But the address is one a
//     client can reach from too (a proxy or a host-network pod on that host that sets
//     X-Forwarded-For): when every other apiserver at that address delivered its audit
//     across the request (Capabilities.Delivered) without a record of its auditID, none
//     forwarded it, and the record is judged as an entry's by the rules below.
//  4. local: a non-resource request.
//  5. no outcome (only RequestReceived): broken, peer_audit_missing if the apiserver does not
//     serve the resource and forwarded it in this process; else local.
//  6. proxy_failed: a 502/503 whose message is one of the proxy's (measured messages), or a
//     bare 502/503 (the entry of a forward records only the code) from an apiserver that does
//     not serve the resource, or that is not known to while another does. Unknown both ways:
//     wait, then local.
//  7. a 404 "could not find the requested resource" (or bare) from an apiserver not known to
//     serve the resource while another does: broken, peer_audit_missing when it is bare and
//     the apiserver forwarded the resource in this process (a forwarded 404 whose peer record
//     is missing), was not starting, and not every apiserver that could have served it
//     delivered its audit across the request without a record of its auditID; else
//     misleading_404: the 404 is its own, before its peer discovery listed a server of the
//     resource (measured on a first start, which peertrail does not see as a start, while the
//     peers delivered their audit without the request). Nobody known to serve it: wait, then
//     local (measured: a resource no server serves gets a local 404).
//  8. a success, or a bare error the apiserver itself would have written with a message:
//     local when the record holds objects (the entry of a forward never records them,
//     measured); broken, peer_audit_missing when the apiserver does not serve the resource
//     and forwarded it, both in this process; otherwise local, after waiting while whether
//     it serves the resource is unknown in this process and another apiserver serves it.
//  9. local otherwise.
//
// Then the restart noise, from the streams (DefaultClassifier.noise), which adds a finding
// and changes no class:
//   - entry_starting: the entry answered a 403, a 5xx or a misleading 404 while its
//     restarted process was starting (Capabilities.Starting, StartingWindow). Measured: a
//     restarted apiserver denies some requests in its first second (its authorizer's caches
//     not synced) and answers 404 before its peer discovery syncs (0-2 s).
//   - peer_down: a forward failed (proxy_failed), or lost its peer record (broken,
//     peer_audit_missing), while an apiserver that served the resource was silent in its
//     audit stream (Capabilities.DownAt, at most peerDownLookback into the silence) when the
//     request came or when the entry answered it (a peer killed while it served the
//     request); or the peer recorded only the request's start and its stream fell silent
//     right after; or a forward failed, or the peer answered it with a 5xx, while that
//     apiserver's restarted process was starting (at most peerStartingLimit after its start);
//     or the entry answered a misleading 404 while the apiserver that served the resource
//     before its restart was starting (not while it was down: a stopped peer's 404s are
//     real). Measured: a SIGKILLed peer keeps being picked for ~8 s and each try fails 503,
//     and its last 0-1 s of audit is lost with it.
//   - entry_down: a forward's lone peer record (broken, entry_audit_missing) while an
//     apiserver at the address it came from was silent: the entry's record died with it.
//   - entry_stopping: the entry answered a 5xx within stoppingWindow before its own stream
//     fell silent. Measured: a 1.35 apiserver stopping gracefully answered its last forwards
//     503 "Error getting ip and port info of the remote server while proxying".

// StartingWindow is how long after a restarted process began to serve (its first successful
// answer to anyone but itself, in its stream) its 403s, 5xx and misleading 404s count as
// restart noise (entry_starting); before that, from its first loopback request on, they all
// do. Measured: the 403s come in its first second, the 404s before its peer discovery syncs
// (0-2 s).
const StartingWindow = 5 * time.Second

// startLead is how long before its first loopback request a new process may already answer
// clients: the audit stream shows the process's start a moment after its first answers.
const startLead = time.Second

// peerDownLookback bounds how long into a peer's silence a failed forward is still put down
// to it: a SIGKILLed peer is dropped by its entries once its peer endpoint lease expires
// (measured ~8 s with three servers; ~15 s before the 503 changes to "Error getting ip and
// port info"). Much later failures have another cause, and an apiserver whose audit policy
// leaves it quiet for long is not thereby down.
const peerDownLookback = 30 * time.Second

// peerRecordAddress reports whether a lone side's sourceIPs say it is a forwarded request's
// peer record (rule 3): known is false when its last address is not known to be any
// apiserver's (yet).
func (k *DefaultClassifier) peerRecordAddress(s *chain.Side) (peer, known bool) {
	if len(s.SourceIPs) < 2 || s.User == userAPIServer || s.ImpersonatedUser != "" {
		return false, true
	}
	if k.Caps.IsAPIServerAddress(lastIP(s.SourceIPs)) {
		return true, true
	}
	// Unknown only while some apiserver's address is not known yet (peertrail started
	// recently, or an apiserver is new): clients behind a proxy that adds X-Forwarded-For
	// must not wait for ever.
	return false, k.Caps.AddressesKnown(s.APIServer)
}

// coverMargin is how far around a request's own times another apiserver's delivered audit
// must reach to show that it holds no record of the request, where a forward's other side's
// records would lie: measured, a peer's within its entry's time but for 0.4 ms (a watch the
// client cancelled), an entry's end at most 5 ms after its peer's (test/testdata/real), with
// room for the hosts' clocks.
const coverMargin = 50 * time.Millisecond

// end is the last time s recorded (its request time when it recorded no other).
func end(s *chain.Side) time.Time {
	if s.Completed.After(s.RequestReceived) {
		return s.Completed
	}
	return s.RequestReceived
}

// entriesDeliveredWithout reports whether every apiserver other than s's that s's last
// sourceIP belongs to delivered its audit across s's request without recording its auditID
// (Capabilities.Delivered, coverMargin around it), and names them: then none of them
// forwarded it. False when there is none, or one did not (yet).
func (k *DefaultClassifier) entriesDeliveredWithout(c *draft, s *chain.Side) ([]string, bool) {
	if s.RequestReceived.IsZero() {
		return nil, false
	}
	names := k.Caps.NamesOf(lastIP(s.SourceIPs), s.APIServer)
	if len(names) == 0 {
		return nil, false
	}
	for _, n := range names {
		if slices.Contains(c.elsewhere, n) || !k.Caps.Delivered(n, s.RequestReceived.Add(-coverMargin), end(s).Add(coverMargin)) {
			return nil, false
		}
	}
	return names, true
}

// peersDeliveredWithout reports whether every apiserver that could have served s's request as
// a peer (every other apiserver but those known not to serve its resource then) delivered its
// audit across the request, coverMargin around it, without recording its auditID: a forward
// is always audited by its peer, so s's apiserver did not forward it. It names them; false
// when there is none, or one did not (yet).
func (k *DefaultClassifier) peersDeliveredWithout(c *draft, s *chain.Side) ([]string, bool) {
	if s.RequestReceived.IsZero() {
		return nil, false
	}
	g, t := c.gvr(), c.when()
	var names []string
	for _, srv := range k.Caps.Servers() {
		if srv.Name == s.APIServer {
			continue
		}
		if served, known := k.Caps.Serves(srv.Name, g, t); known && !served {
			continue
		}
		if slices.Contains(c.elsewhere, srv.Name) || !k.Caps.Delivered(srv.Name, s.RequestReceived.Add(-coverMargin), end(s).Add(coverMargin)) {
			return nil, false
		}
		names = append(names, srv.Name)
	}
	return names, len(names) > 0
}

func isInternal(c *draft, s *chain.Side) bool {
	if c.Resource != "" || s.User != userAPIServer || s.UserAgent != "" {
		return false
	}
	path, _, _ := strings.Cut(c.RequestURI, "?")
	return path == "/api" || path == "/apis"
}

func (k *DefaultClassifier) single(c *draft, s *chain.Side) {
	if isInternal(c, s) {
		c.Entry = s
		c.Class = chain.ClassInternal
		c.Explanation = fmt.Sprintf("peer discovery: another apiserver fetched %s from %s", c.RequestURI, s.APIServer)
		return
	}
	if h := k.apiserverHops(s); h >= 2 {
		c.Peer = s
		c.Class = chain.ClassLoop
		c.Findings = append(c.Findings, chain.FindingEntryAuditMissing)
		c.Explanation = fmt.Sprintf("%s's record shows %d apiserver hops after the client (%s): forwarded more than once, the earlier records missing",
			s.APIServer, h, strings.Join(s.SourceIPs[len(s.SourceIPs)-h:], " -> "))
		return
	}
	peer, addrKnown := k.peerRecordAddress(s)
	notForwarded := ""
	if peer {
		if names, ok := k.entriesDeliveredWithout(c, s); ok {
			// Its last address is an apiserver's, but that apiserver's stream, delivered across
			// the request, has no record of it: no forward; a client on that host (a proxy, a
			// host-network pod) that set X-Forwarded-For.
			peer = false
			notForwarded = fmt.Sprintf(" (it came from %s's address %s, but %s delivered its audit across the request's time without a record of its auditID: no forward, a client on that host)",
				strings.Join(names, " or "), lastIP(s.SourceIPs), strings.Join(names, " and "))
		}
	}
	if peer {
		c.Peer = s
		c.Class = chain.ClassBroken
		c.Findings = append(c.Findings, chain.FindingEntryAuditMissing)
		from := lastIP(s.SourceIPs)
		if names := k.Caps.NamesOf(from, s.APIServer); len(names) > 0 {
			from = strings.Join(names, " or ") + " (" + from + ")"
		}
		c.Explanation = fmt.Sprintf("%s served a request forwarded from %s, whose record of it is missing", s.APIServer, from)
		return
	}
	c.Entry = s
	if !addrKnown {
		c.undecided = "whether " + lastIP(s.SourceIPs) + " is an apiserver's address"
	}
	if notForwarded != "" {
		defer func() { c.Explanation += notForwarded }()
	}
	if c.Resource == "" {
		c.Class, c.Explanation = chain.ClassLocal, fmt.Sprintf("%s answered a non-resource request itself", s.APIServer)
		return
	}
	g, t := c.gvr(), c.when()
	served, known := k.Caps.Serves(s.APIServer, g, t)
	notServed := known && !served
	forwards := k.Caps.ProxiedRecently(s.APIServer, g, t)
	other, otherServes := k.Caps.OtherServer(s.APIServer, g, t)
	code := s.Code
	wait := func(what string) {
		if c.undecided == "" {
			c.undecided = what
		}
	}
	// A forward is always audited by its peer: when every apiserver that could have served
	// the request delivered its audit across the request's time without a record of its
	// auditID, the entry did not forward it, whatever it was seen to forward otherwise (a
	// bare 404, which its own not-found handler writes too).
	unforwarded := func() (string, bool) {
		names, ok := k.peersDeliveredWithout(c, s)
		if !ok {
			return "", false
		}
		return fmt.Sprintf("; no peer has a record of it: %s delivered its audit across the request's time without its auditID, and a forward is always audited by its peer", strings.Join(names, " and ")), true
	}
	switch {
	case code == 0:
		if notServed && forwards {
			c.Class = chain.ClassBroken
			c.Findings = append(c.Findings, chain.FindingPeerAuditMissing)
			c.Explanation = fmt.Sprintf("%s does not serve %s, forwards it, and recorded only %s: the rest of the forwarding is missing", s.APIServer, g, strings.Join(s.Stages, ","))
		} else {
			c.Class = chain.ClassLocal
			c.Explanation = fmt.Sprintf("%s recorded only %s; no outcome", s.APIServer, strings.Join(s.Stages, ","))
		}
	case (code == 503 || code == 502) && isProxyError(s.Message):
		c.Class = chain.ClassProxyFailed
		c.Explanation = fmt.Sprintf("%s could not forward the request (%d %s)", s.APIServer, code, s.Message)
	case (code == 503 || code == 502) && s.Message == "" && (notServed || otherServes && !served):
		c.Class = chain.ClassProxyFailed
		c.Explanation = fmt.Sprintf("%s could not forward the request (%d, a bare status: the entry of a forward records only the code)", s.APIServer, code)
		if otherServes {
			c.Explanation += "; " + other + " serves " + g.String()
		}
	case code == 404 && (s.Message == msgResourceNotFound || s.Message == "") && !served && otherServes:
		// A bare 404 from an apiserver that forwards this resource is a forwarded answer whose
		// peer record is missing, not the apiserver's own not-found page. Except while it
		// starts: until its peer discovery lists a server of the resource, it serves the
		// request locally, and a resource it has no handler for ends at the not-found
		// handler's plain 404, whose record holds only the code (1.36's peer proxy; measured:
		// a restarted 1.36 apiserver with batch/v1 off answered a list of jobs 404 with one
		// Audit-Id in its first second).
		// And it did not forward the request when no peer audited it (unforwarded): then the
		// bare 404 is the not-found handler's own, before its peer discovery listed a server
		// of the resource (measured on a first start, which peertrail does not see as one).
		why := ""
		if s.Message == "" && forwards {
			if _, starting := k.entryStarting(s.APIServer, t); !starting {
				var unfwd bool
				if why, unfwd = unforwarded(); !unfwd {
					c.Class = chain.ClassBroken
					c.Findings = append(c.Findings, chain.FindingPeerAuditMissing)
					c.Explanation = fmt.Sprintf("%s forwards %s and answered a bare 404; the peer's record is missing", s.APIServer, g)
					return
				}
			}
		}
		c.Class = chain.ClassMisleading404
		c.Explanation = fmt.Sprintf("%s answered 404 for %s, which %s serves (the peer was gone or not yet discovered, MVP was off, or the client sent x-kubernetes-peer-proxied itself)", s.APIServer, g, other) + why
	case code == 404 && (s.Message == msgResourceNotFound || s.Message == "") && !served:
		wait("whether another apiserver serves " + g.String())
		c.Class = chain.ClassLocal
		c.Explanation = fmt.Sprintf("%s answered 404 for %s, which no apiserver is known to serve", s.APIServer, g)
	case (code == 503 || code == 502) && s.Message == "" && !known:
		wait("whether " + s.APIServer + " serves " + g.String())
		c.Class = chain.ClassLocal
		c.Explanation = fmt.Sprintf("%s answered a bare %d for %s, which no apiserver is known to serve", s.APIServer, code, g)
	case code < 400 || s.Message == "" && code != 404 && code != 401 && code != 403 && code != 429:
		switch {
		case s.HasObjects:
			c.Class = chain.ClassLocal
			c.Explanation = fmt.Sprintf("%s answered %d itself: its record holds the objects, which the entry of a forward never records", s.APIServer, code)
		case notServed && forwards:
			// Not judged by the peers' streams: it cannot have answered a success itself for
			// what it does not serve, so its forward's peer record is lost even where the rest
			// of the peer's stream came (its audit buffer full drops single events).
			c.Class = chain.ClassBroken
			c.Findings = append(c.Findings, chain.FindingPeerAuditMissing)
			c.Explanation = fmt.Sprintf("%s does not serve %s and forwards it, yet answered %d with no peer: it forwarded the request, and the peer's record is missing", s.APIServer, g, code)
		case !known && otherServes:
			wait("whether " + s.APIServer + " serves " + g.String())
			fallthrough
		default:
			c.Class = chain.ClassLocal
			c.Explanation = fmt.Sprintf("%s answered %d itself", s.APIServer, code)
			if notServed {
				c.Explanation += fmt.Sprintf(" (it was not seen to serve %s, but neither to forward it, in this process)", g)
			}
		}
	default:
		c.Class = chain.ClassLocal
		c.Explanation = fmt.Sprintf("%s answered %d itself", s.APIServer, code)
	}
}

func (k *DefaultClassifier) loop(c *draft) {
	// The entry is the side with the fewest hops; the others follow in hop order.
	sides := slices.Clone(c.sides)
	slices.SortStableFunc(sides, func(a, b *chain.Side) int { return len(a.SourceIPs) - len(b.SourceIPs) })
	c.Entry, c.Peer, c.Others = sides[0], sides[1], sides[2:]
	names := make([]string, len(sides))
	for i, s := range sides {
		names[i] = s.APIServer
	}
	c.Class = chain.ClassLoop
	c.Explanation = fmt.Sprintf("recorded by %d apiservers (%s): forwarded more than once", len(sides), strings.Join(names, " -> "))
}

// fillDerived derives the chain's user, code and latencies from its roles.
func fillDerived(c *chain.Chain) {
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
	if c.Entry != nil && c.Peer != nil && c.Class == chain.ClassProxied {
		c.ForwardingOverheadSeconds = c.EntryDurationSeconds - c.PeerDurationSeconds
	}
}

// Learn implements Classifier.
//
// What it learns must hold whatever clients send (they choose their paths, headers and
// Audit-IDs): nothing from records split apart as requests sharing an Audit-ID (draft.split,
// apart); that an apiserver serves a resource only from an answer of its own at the
// resource's level (servedOutcome: a 404 "could not find" or a bare one says the opposite,
// and a client gets one for any path); that it does not, only from a request for the resource
// itself (no subresource: a made-up subresource of a served resource is not found either)
// whose apiserver's process was not seen to serve it, and not from a forward whose client's
// address was its entry's own (draft.collapsed).
func (k *DefaultClassifier) Learn(c *draft) {
	if c.Resource == "" || c.split || len(c.apart) > 0 {
		return
	}
	g, t := c.gvr(), c.when()
	notServed := func(apiserver string, at time.Time) {
		// A 404 "could not find" is also what a path the resource has no route for gets
		// (/api/v1/configmaps/NAME, a made-up subresource): it does not unlearn what the
		// same process was seen to serve.
		if c.Subresource == "" && !k.Caps.SeenServing(apiserver, g, at) {
			k.Caps.Learn(apiserver, g, at, false)
		}
	}
	switch c.Class {
	case chain.ClassProxied:
		if servedOutcome(c.Peer) {
			k.Caps.Learn(c.Peer.APIServer, g, c.Peer.RequestReceived, true)
		}
		if c.collapsed {
			// A client on the entry's host makes this shape with two requests of its own:
			// what it says of the entry is not learned.
			return
		}
		k.Caps.Learn(c.Entry.APIServer, g, c.Entry.RequestReceived, false)
		k.Caps.NoteProxied(c.Entry.APIServer, g, t)
	case chain.ClassProxyFailed:
		k.Caps.Learn(c.Entry.APIServer, g, t, false)
		k.Caps.NoteProxied(c.Entry.APIServer, g, t)
	case chain.ClassMisleading404:
		notServed(c.Entry.APIServer, t)
	case chain.ClassBroken:
		if c.Peer != nil && complete(c.Peer) && servedOutcome(c.Peer) {
			k.Caps.Learn(c.Peer.APIServer, g, c.Peer.RequestReceived, true)
		}
	case chain.ClassLocal:
		s := c.Entry
		switch {
		case s.Code == 404 && (s.Message == msgResourceNotFound || s.Message == ""):
			notServed(s.APIServer, t)
		case (s.Code >= 200 && s.Code < 300 || s.Code == 409 || s.Code == 410 || s.Code == 422) && !s.HasObjects && s.Message == "":
			// It looks the same as a forward's entry record whose peer record is not here
			// (yet, or ever): what a forward observed outranks it (Capabilities.Assume).
			k.Caps.Assume(s.APIServer, g, t)
		case s.Code >= 200 && s.Code < 300, s.Code == 404, s.Code == 409, s.Code == 410, s.Code == 422:
			// A resource-level outcome: the apiserver reached the resource's storage.
			k.Caps.Learn(s.APIServer, g, t, true)
		}
	}
}

// servedOutcome reports whether s, a record of the apiserver that answered a request itself,
// shows it reached the resource's storage: a success, or a resource-level error (a missing
// object, a conflict, an invalid object, a gone resource version).
func servedOutcome(s *chain.Side) bool {
	switch {
	case s.Code >= 200 && s.Code < 300, s.Code == 409, s.Code == 410, s.Code == 422:
		return true
	case s.Code == 404:
		return s.Message != "" && s.Message != msgResourceNotFound
	}
	return false
}
