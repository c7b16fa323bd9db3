package correlate

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// Options tune the joiner.
type Options struct {
	// Window is how long a chain stays open after its last record arrived (receipt time).
	// Records of one request from different apiservers arrive up to one webhook batch wait apart
	// (30 s by default), more when a webhook backs off.
	Window time.Duration
	// WatchWindow replaces Window for chains whose request is a started watch that has not
	// completed yet: its ResponseComplete comes when the watch ends.
	WatchWindow time.Duration
	// LateWindow is how long after it became final a chain can still be reopened by a late
	// record (an apiserver whose webhook was backing off), then re-emitted reclassified.
	LateWindow time.Duration
	// MaxOpen bounds the open chains; beyond it the least recently updated chain is finalised
	// early, and counted as an eviction.
	MaxOpen int
	// MaxRecent bounds the final chains kept in memory for the API and for late records.
	MaxRecent int
}

// DefaultOptions are the defaults of peertrail serve.
func DefaultOptions() Options {
	return Options{
		Window:      30 * time.Second,
		WatchWindow: time.Hour,
		LateWindow:  5 * time.Minute,
		MaxOpen:     1_000_000,
		MaxRecent:   200_000,
	}
}

// stage bits of side.stages.
const (
	stageReceived uint8 = 1 << iota
	stageStarted
	stageComplete
	stagePanic
	stageOther
)

func stageBit(s string) uint8 {
	switch s {
	case "RequestReceived":
		return stageReceived
	case "ResponseStarted":
		return stageStarted
	case "ResponseComplete":
		return stageComplete
	case "Panic":
		return stagePanic
	}
	return stageOther
}

// identity is a user as recorded, shared between chains through the interner.
type identity struct {
	name, uid string
	groups    []string
	extra     map[string][]string
}

// side is one apiserver's records of a request, kept compact: open chains are many.
type side struct {
	apiserver  string
	rr         int64 // requestReceivedTimestamp, Unix µs
	done       int64 // stageTimestamp of the latest stage, Unix µs
	code       int32
	stages     uint8
	hasObjects bool
	user, imp  *identity
	sourceIPs  *[]string // interned
	userAgent  string
	rare       *rareFields
}

// rareFields are what few records carry: kept out of line so that the common side stays small.
type rareFields struct {
	message string
	reason  string
}

func (s *side) ips() []string {
	if s.sourceIPs == nil {
		return nil
	}
	return *s.sourceIPs
}

// target is what a request was for; many chains share one through the interner.
type target struct {
	verb, group, version, resource, subres, ns string
}

// chainState is a chain being joined (open), or final but still amendable.
type chainState struct {
	id      string
	auditID string
	uri     string
	// canonURI is uri with its query re-encoded, kept once a record of the same path but
	// another URI was compared with it (see uriMatcher).
	canonURI string
	name     string
	*target
	sides    []side
	inline   [2]side // backing for sides: most chains have one or two
	firstPos spool.Position
	first    int64 // receipt of the first record, Unix ns
	last     int64 // receipt of the latest record, Unix ns
	checked  int64 // when a running watch was last looked at, Unix ns; orders the LRU with last
	// The small fields together, without padding between them: open chains are many.
	records int32
	emitted int32 // how many times it was finalised
	final   bool
	evicted bool
	reused  bool    // a record of its auditID was dropped against it (MaxChainRecords)
	held    bool    // it was kept open once to wait for evidence (Joiner.hold)
	waiting bool    // final without the evidence it waited for (Correlator.undecided)
	res     *result // the classification it was last finalised with

	prev, next   *chainState // LRU of open chains, or FIFO of recent final chains
	pprev, pnext *chainState // open chains in order of firstPos (see Joiner.byPos)
	sameID       *chainState // other chains with the same auditID
}

func (c *chainState) watching() bool {
	if c.verb != "watch" {
		return false
	}
	for i := range c.sides {
		if c.sides[i].stages&stageStarted != 0 && c.sides[i].stages&(stageComplete|stagePanic) == 0 {
			return true
		}
	}
	return false
}

// list is an intrusive doubly linked list of chains.
type list struct{ head, tail *chainState }

func (l *list) pushBack(c *chainState) {
	c.prev, c.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *list) remove(c *chainState) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

// interner shares the strings, identities and address lists that repeat across records, so
// that an open chain holds pointers rather than copies. It is cleared when it grows large, so a
// flood of distinct values cannot grow it without bound. Identities and address lists are found
// by hash and compared before reuse.
type interner struct {
	strs    map[string]string
	targets map[target]*target
	ids     map[uint64]*identity
	ips     map[uint64]*[]string
	h       xxh3.Hasher
}

const internMax = 1 << 16

func newInterner() *interner {
	return &interner{strs: map[string]string{}, targets: map[target]*target{}, ids: map[uint64]*identity{}, ips: map[uint64]*[]string{}}
}

func (in *interner) target(r *record.Record) *target {
	k := target{verb: r.Verb, group: r.Group, version: r.Version, resource: r.Resource, subres: r.Subresource, ns: r.Namespace}
	if t, ok := in.targets[k]; ok {
		return t
	}
	if len(in.targets) >= internMax {
		clear(in.targets)
	}
	t := new(target)
	*t = k
	in.targets[k] = t
	return t
}

func (in *interner) str(s string) string {
	if v, ok := in.strs[s]; ok {
		return v
	}
	if len(in.strs) >= internMax {
		clear(in.strs)
	}
	in.strs[s] = s
	return s
}

var sep = []byte{0}

func (in *interner) identity(name, uid string, groups []string, extra map[string][]string) *identity {
	in.h.Reset()
	in.h.WriteString(name)
	in.h.Write(sep)
	in.h.WriteString(uid)
	for _, g := range groups {
		in.h.Write(sep)
		in.h.WriteString(g)
	}
	// Map order is random: combine the entries order-independently.
	var ex uint64
	for k, vs := range extra {
		e := xxh3.HashString(k)
		for _, v := range vs {
			e = e*31 + xxh3.HashString(v)
		}
		ex += e
	}
	key := in.h.Sum64() ^ ex*0x9e3779b97f4a7c15
	if id, ok := in.ids[key]; ok && id.name == name && id.uid == uid && slices.Equal(id.groups, groups) && equalExtra(id.extra, extra) {
		return id
	}
	if len(in.ids) >= internMax {
		clear(in.ids)
	}
	id := &identity{name: in.str(name), uid: uid, groups: groups, extra: extra}
	in.ids[key] = id
	return id
}

// equalExtra is exact equality of extra attributes (values in order).
func equalExtra(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

func (in *interner) addrs(ips []string) *[]string {
	if len(ips) == 0 {
		return nil
	}
	in.h.Reset()
	for _, ip := range ips {
		in.h.WriteString(ip)
		in.h.Write(sep)
	}
	key := in.h.Sum64()
	if v, ok := in.ips[key]; ok && slices.Equal(*v, ips) {
		return v
	}
	if len(in.ips) >= internMax {
		clear(in.ips)
	}
	v := new([]string)
	*v = ips
	in.ips[key] = v
	return v
}

// Joiner joins the records of one request from every apiserver into a chain. It is a plain data
// structure without goroutines or locks: one goroutine feeds it (the Correlator holds the lock).
// Time is receipt time as carried by the records, so replaying the spool after a restart
// rebuilds the same chains.
type Joiner struct {
	opts Options
	// chains holds the open and the recent final (amendable) chains by auditID, each the head
	// of a sameID list.
	chains map[string]*chainState
	lru    list // open chains, least recently updated first
	done   list // recent final chains, oldest first
	// byPos holds the open chains in order of the spool position of their first record, so
	// that SafePosition reads the oldest without scanning every open chain.
	posHead, posTail *chainState
	nOpen            int
	nDone            int
	in               *interner
	now              int64 // stream time: the latest receipt seen, Unix ns

	// Evicted counts chains finalised early because MaxOpen was reached.
	Evicted int64
	// Reopened counts final chains that a late record reopened.
	Reopened int64
	// Dropped counts records not joined because their chain, or their auditID, already had
	// MaxChainRecords (see there).
	Dropped int64
}

// MaxChainRecords bounds the records one chain takes, and the chains one auditID has in memory
// at a time. One request makes at most 2 sides (an entry and one peer: a forwarded request is
// never forwarded again) x 4 stages (RequestReceived, ResponseStarted, ResponseComplete, Panic)
// records; the apiserver's resends of a batch are dropped as duplicates at ingest, so 8 is the
// real maximum, and 64 leaves room for what we have not seen. A client chooses its own Audit-ID,
// though, and may send one for every request: each record is compared with every chain of its
// auditID, so without a bound 60k such records cost 155 CPU-seconds (quadratic) and starved
// every other reader of the joiner's lock. With it, a record costs at most 64 comparisons.
//
// A record beyond the bound is not joined and is counted in Dropped and in its chain's records
// (the auditID's newest chain when it matches none), which gets FindingAuditIDReused. The record itself is not lost: the store keeps every event.
const MaxChainRecords = 64

// NewJoiner returns an empty joiner.
func NewJoiner(opts Options) *Joiner {
	return &Joiner{opts: opts, chains: map[string]*chainState{}, in: newInterner()}
}

// Open is the number of open chains.
func (j *Joiner) Open() int { return j.nOpen }

// Add joins one record, read from the spool at pos. It returns a chain that had to be finalised
// early to stay within MaxOpen, if any.
func (j *Joiner) Add(r *record.Record, pos spool.Position) *chainState {
	recv := r.ReceivedAt.UnixNano()
	if recv > j.now {
		j.now = recv
	}
	rr := r.RequestReceivedTimestamp.UnixMicro()
	head := j.chains[r.AuditID]
	c, chains := j.find(head, r, rr)
	switch {
	case c == nil && chains >= MaxChainRecords:
		j.drop(head) // the auditID's newest chain answers for it
		return nil
	case c != nil && c.records >= MaxChainRecords:
		j.drop(c)
		return nil
	}
	if c != nil && c.final {
		j.reopen(c)
	}
	var evicted *chainState
	if c == nil {
		if j.opts.MaxOpen > 0 && j.nOpen >= j.opts.MaxOpen {
			evicted = j.lru.head
			j.finalise(evicted)
			evicted.evicted = true
			j.Evicted++
		}
		c = j.newChain(r, pos, recv)
	} else {
		j.lru.remove(c)
		j.lru.pushBack(c)
	}
	if recv > c.last {
		c.last = recv
	}
	c.records++
	j.addToSide(c, r, rr)
	return evicted
}

// drop counts a record that c, or c's auditID, has no room for (MaxChainRecords). It neither
// extends c's window nor reopens it, so a flood cannot keep a chain open, except once: the first
// drop changes a final chain's findings, and it is finalised again to say so.
func (j *Joiner) drop(c *chainState) {
	j.Dropped++
	if !c.reused && c.final {
		j.reopen(c)
	}
	c.reused = true
	if c.records < math.MaxInt32 {
		c.records++
	}
}

// find returns the chain in the sameID list starting at c that r belongs to, and how many
// chains the list holds (at most MaxChainRecords, so this is bounded work).
func (j *Joiner) find(c *chainState, r *record.Record, rr int64) (found *chainState, chains int) {
	window := j.opts.Window.Microseconds()
	// Open chains are preferred over final ones when both match.
	var final *chainState
	var uris uriMatcher
	for ; c != nil; c = c.sameID {
		chains++
		if found != nil || c.verb != r.Verb || !uris.same(c.uri, r.RequestURI, &c.canonURI) {
			continue
		}
		if c.final {
			if final == nil && c.matches(r, rr, window) {
				final = c
			}
			continue
		}
		if c.matches(r, rr, window) {
			found = c
		}
	}
	if found == nil {
		found = final
	}
	return found, chains
}

// matches reports whether r, a record of the same request (verb and URI), belongs to c: its
// apiserver's records share one request time, and another apiserver's fall within the window.
func (c *chainState) matches(r *record.Record, rr, window int64) bool {
	if s := c.side(r.APIServer); s != nil {
		return s.rr == rr
	}
	d := rr - c.sides[0].rr
	return d <= window && d >= -window
}

func (c *chainState) side(apiserver string) *side {
	for i := range c.sides {
		if c.sides[i].apiserver == apiserver {
			return &c.sides[i]
		}
	}
	return nil
}

func (j *Joiner) newChain(r *record.Record, pos spool.Position, recv int64) *chainState {
	c := &chainState{
		auditID:  r.AuditID,
		uri:      r.RequestURI,
		target:   j.in.target(r),
		firstPos: pos,
		first:    recv,
	}
	c.sides = c.inline[:0]
	c.sameID = j.chains[r.AuditID]
	j.chains[r.AuditID] = c
	j.lru.pushBack(c)
	j.posInsert(c)
	j.nOpen++
	return c
}

// posInsert puts c into byPos at its place: at the tail for a new chain (positions only grow),
// further in for a reopened one.
func (j *Joiner) posInsert(c *chainState) {
	at := j.posTail
	for at != nil && at.firstPos > c.firstPos {
		at = at.pprev
	}
	c.pprev = at
	if at == nil {
		c.pnext = j.posHead
		j.posHead = c
	} else {
		c.pnext = at.pnext
		at.pnext = c
	}
	if c.pnext != nil {
		c.pnext.pprev = c
	} else {
		j.posTail = c
	}
}

func (j *Joiner) posRemove(c *chainState) {
	if c.pprev != nil {
		c.pprev.pnext = c.pnext
	} else {
		j.posHead = c.pnext
	}
	if c.pnext != nil {
		c.pnext.pprev = c.pprev
	} else {
		j.posTail = c.pprev
	}
	c.pprev, c.pnext = nil, nil
}

// ID is stable across replays: a hash of the auditID and the first record's apiserver and
// request time. It is computed when asked for, as most chains are only ever counted.
func (c *chainState) ID() string {
	if c.id == "" && len(c.sides) > 0 {
		var b []byte
		b = append(b, c.auditID...)
		b = append(b, 0)
		b = append(b, c.sides[0].apiserver...)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(c.sides[0].rr))
		h := xxh3.Hash128(b).Bytes()
		c.id = hex.EncodeToString(h[:])
	}
	return c.id
}

func (j *Joiner) addToSide(c *chainState, r *record.Record, rr int64) {
	s := c.side(r.APIServer)
	if s == nil {
		c.sides = append(c.sides, side{
			apiserver: j.in.str(r.APIServer),
			rr:        rr,
			user:      j.in.identity(r.UserName, r.UserUID, r.UserGroups, r.UserExtra),
			sourceIPs: j.in.addrs(r.SourceIPs),
			userAgent: j.in.str(r.UserAgent),
		})
		s = &c.sides[len(c.sides)-1]
	}
	// Impersonation is resolved after the RequestReceived stage is written: later stages carry it.
	if s.imp == nil && (r.ImpersonatedUser != "" || len(r.ImpersonatedGroups) > 0) {
		s.imp = j.in.identity(r.ImpersonatedUser, r.ImpersonatedUID, r.ImpersonatedGroups, r.ImpersonatedExtra)
	}
	bit := stageBit(r.Stage)
	// Once the response has started, the client has its status code; a Panic after that (a
	// watch the client cancelled: "net/http: abort Handler") does not change what it got.
	keepCode := bit == stagePanic && s.stages&stageStarted != 0
	s.stages |= bit
	if ts := r.StageTimestamp.UnixMicro(); ts > s.done {
		s.done = ts
	}
	if r.Code != 0 && !keepCode {
		s.code = r.Code
	}
	if (r.Message != "" || r.Reason != "") && !keepCode {
		if s.rare == nil {
			s.rare = &rareFields{}
		}
		s.rare.message, s.rare.reason = r.Message, j.in.str(r.Reason)
	}
	// objectRef.name: the entry of a forwarded create has none, the peer has it.
	if c.name == "" {
		c.name = r.Name
	}
	if r.HasRequestObject || r.HasResponseObject {
		s.hasObjects = true
	}
}

// uriMatcher compares one record's request URI with the URIs of several chains the way a
// forwarded request changes them (the peer re-encodes the query string with its keys sorted),
// re-encoding the record's query at most once and each chain's at most once in its life: a
// client reusing its Audit-ID sends many URIs with one path, and parsing both queries on every
// comparison was most of the cost of such a flood.
type uriMatcher struct {
	canon string // the record's URI with its query re-encoded, once known
	done  bool
	ok    bool // the record's query parses
}

// same reports whether the record's URI b names the request a, whose re-encoded form is
// cached in *aCanon when aCanon is not nil ("" until computed).
func (u *uriMatcher) same(a, b string, aCanon *string) bool {
	if a == b {
		return true
	}
	pa, _, _ := strings.Cut(a, "?")
	pb, _, _ := strings.Cut(b, "?")
	if pa != pb {
		return false
	}
	if !u.done {
		u.canon, u.ok = canonicalURI(b)
		u.done = true
	}
	if !u.ok {
		return false
	}
	var ca string
	if aCanon != nil && *aCanon != "" {
		ca = *aCanon
	} else {
		var ok bool
		if ca, ok = canonicalURI(a); !ok {
			ca = "\x00" // unparseable: matches nothing but itself (a == b above)
		}
		if aCanon != nil {
			*aCanon = ca
		}
	}
	return ca == u.canon
}

// canonicalURI is uri with its query parsed and re-encoded (keys sorted), or false when the
// query does not parse.
func canonicalURI(uri string) (string, bool) {
	p, q, _ := strings.Cut(uri, "?")
	v, err := url.ParseQuery(q)
	if err != nil {
		return "", false
	}
	return p + "?" + v.Encode(), true
}

func (j *Joiner) reopen(c *chainState) {
	j.done.remove(c)
	j.nDone--
	c.final = false
	j.lru.pushBack(c)
	j.posInsert(c)
	j.nOpen++
	j.Reopened++
}

// hold takes back the finalisation of c, which Due has just returned: its verdict waits for
// evidence the classifier does not have yet (Chain.undecided). It stays open for one more
// chain window, once: the wait is bounded, and a chain is decided at its second due time
// whatever is known then.
func (j *Joiner) hold(c *chainState) bool {
	if c.held || c.evicted || !c.final {
		return false
	}
	j.done.remove(c)
	j.nDone--
	c.final = false
	c.emitted--
	c.held = true
	c.checked = j.now
	j.lru.pushBack(c)
	j.posInsert(c)
	j.nOpen++
	return true
}

// Due finalises and returns the chains whose window has passed at stream time now (Unix ns; a
// later time than any record's receipt moves the stream on when the spool is idle).
func (j *Joiner) Due(now int64) []*chainState {
	if now > j.now {
		j.now = now
	}
	var out []*chainState
	window, watch := j.opts.Window.Nanoseconds(), j.opts.WatchWindow.Nanoseconds()
	for c := j.lru.head; c != nil; c = j.lru.head {
		if max(c.last, c.checked) > j.now-window {
			break // the list is ordered by last update; nothing after this is due
		}
		if c.watching() && c.last > j.now-watch {
			// A running watch: look at it again a window from now.
			c.checked = j.now
			j.lru.remove(c)
			j.lru.pushBack(c)
			continue
		}
		j.finalise(c)
		out = append(out, c)
	}
	j.expireRecent()
	return out
}

// finalise moves c from the open chains to the recent final ones.
func (j *Joiner) finalise(c *chainState) {
	j.lru.remove(c)
	j.posRemove(c)
	j.nOpen--
	c.final = true
	c.emitted++
	j.done.pushBack(c)
	j.nDone++
}

func unlink(m map[string]*chainState, c *chainState) {
	head := m[c.auditID]
	if head == c {
		if c.sameID == nil {
			delete(m, c.auditID)
		} else {
			m[c.auditID] = c.sameID
		}
		c.sameID = nil
		return
	}
	for p := head; p != nil; p = p.sameID {
		if p.sameID == c {
			p.sameID = c.sameID
			break
		}
	}
	c.sameID = nil
}

// forget drops a final chain for good.
func (j *Joiner) forget(c *chainState) {
	j.done.remove(c)
	unlink(j.chains, c)
	j.nDone--
}

func (j *Joiner) expireRecent() {
	late := j.opts.LateWindow.Nanoseconds()
	for c := j.done.head; c != nil && (c.last < j.now-late || j.nDone > j.opts.MaxRecent); c = j.done.head {
		j.forget(c)
	}
}

// SafePosition is the spool position before which no open chain has a record: after a
// restart, replaying from it rebuilds every open chain. Running watches do not hold it back
// (their completion record alone is enough to classify them). ok is false when nothing is open.
func (j *Joiner) SafePosition() (pos spool.Position, ok bool) {
	for c := j.posHead; c != nil; c = c.pnext {
		if !c.watching() {
			return c.firstPos, true
		}
	}
	return 0, false
}

// lookup returns the chains (open first, then recent final ones) with auditID.
func (j *Joiner) lookup(auditID string) []*chainState {
	var out []*chainState
	for c := j.chains[auditID]; c != nil; c = c.sameID {
		out = append(out, c)
	}
	return out
}

// each calls f for every open chain, then every recent final chain, newest first, until f
// returns false.
func (j *Joiner) each(f func(*chainState) bool) {
	for c := j.lru.tail; c != nil; c = c.prev {
		if !f(c) {
			return
		}
	}
	for c := j.done.tail; c != nil; c = c.prev {
		if !f(c) {
			return
		}
	}
}
