package correlate

import (
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/bits"
	"net/url"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/zeebo/xxh3"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// JoinOptions tune the Joiner: when a chain is final, how long it stays amendable, and how many
// chains memory holds. (Config assembles the whole Correlator and carries these as Join.)
type JoinOptions struct {
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

// DefaultJoinOptions are the defaults of peertrail serve.
func DefaultJoinOptions() JoinOptions {
	return JoinOptions{
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

	stageAll = stageReceived | stageStarted | stageComplete | stagePanic | stageOther
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

// side is one apiserver's records of a request. Its strings and shared values are numbers in
// the Joiner's tables (see layout.go): chains are many.
type side struct {
	rr         int64 // requestReceivedTimestamp, Unix µs
	done       int64 // stageTimestamp of the latest stage, Unix µs
	apiserver  sym   // strs
	user, imp  sym   // ids
	sourceIPs  sym   // addrs
	userAgent  sym   // strs
	message    sym   // strs: only few records carry a message or a reason
	reason     sym   // strs
	code       int32
	stages     uint8
	hasObjects bool
	// version (strs) is the apiserver's version the chain's result was given with
	// (Correlator.apply), so that a final chain shows from memory the version the store
	// has. It fits in the struct's padding.
	version sym
}

// result is a final chain's classification, kept with its state for the API and for taking
// back what the window counted of it if a late record reclassifies it.
type result struct {
	verdict sym // Joiner.verdicts: class, findings, explanation
	code    int32
	// roles index the chain's sides; -1 when absent. The other sides are the rest, in order.
	entry, peer int8
	set         bool // the chain has been classified
	resource    bool // a resource request
	noise       bool // a restart-noise finding explains it
}

// chainState is a chain being joined (open), or final but still amendable. It holds no
// pointer, so that the pages holding chains are never scanned by the garbage collector; the
// first two sides are inline (most chains have one or two), a third moves them all to
// Joiner.more.
type chainState struct {
	key      [16]byte // the auditID (see auditKey)
	firstPos spool.Position
	first    int64 // receipt of the first record, Unix ns
	last     int64 // receipt of the latest record, Unix ns
	checked  int64 // when a running watch was last looked at, Unix ns; orders the LRU with last
	// inline holds the first two sides (Joiner.sidesOf gives them all).
	inline [2]side

	auditText sym // strs: the auditID, when it is not a canonical UUID (uuid false)
	uri       sym // strs
	// canonURI (strs) is uri with its query re-encoded, kept once a record of the same path but
	// another URI was compared with it (see uriMatcher).
	canonURI sym
	name     sym // strs, unless nameInURI
	target   sym // targets

	self         ref    // this chain's slot
	gen          uint32 // changes when the slot is freed (Correlator.undecided keeps it)
	prev, next   ref    // LRU of open chains, or FIFO of recent final chains
	pprev, pnext ref    // open chains in order of firstPos (see Joiner.posHead)
	backAt       int32  // 1 + its index in Joiner.back while it is there, else 0
	sameID       ref    // other chains with the same auditID key

	records int32
	emitted int32 // how many times it was finalised
	nsides  uint8
	uuid    bool // key is the auditID's UUID, not a hash of it
	// nameInURI says that the name is the last segment of the URI's path (a request for one
	// object): it is read from there rather than held twice.
	nameInURI bool
	final     bool
	evicted   bool
	// reuse says how its auditID served more than this one request (reuseDropped,
	// reuseShared, reuseSplit): FindingAuditIDReused.
	reuse   uint8
	held    bool // it was kept open once to wait for evidence (Joiner.hold)
	waiting bool // final without the evidence it waited for (Correlator.undecided)
	// fresh says a record of it lies at or past Joiner.replayEnd: not all of it is a replay
	// of what the last process joined (see remnant.go).
	fresh bool
	// silent says it is a replayed remnant of a chain stored whole (remnant.go): final,
	// unjudged, unseen, kept only for a record that may still join it.
	silent bool
	// kept says its records are in the watch journal, synced (watchlog.go): the spool may
	// pass them.
	kept bool
	res  result
}

// The bits of chainState.reuse.
const (
	// reuseDropped: a record of its auditID was dropped against it (MaxChainRecords).
	reuseDropped uint8 = 1 << iota
	// reuseShared: another request's chain had its auditID while it was in memory.
	reuseShared
	// reuseSplit: it was split from records of another apiserver that shared its auditID
	// without the evidence of a forward (Joiner.split): a request of its own, which teaches
	// nothing.
	reuseSplit
)

// chainStateSize is the bytes of one chain's slot.
const chainStateSize = int(unsafe.Sizeof(chainState{}))

// list is an intrusive doubly linked list of chains.
type list struct{ head, tail ref }

func (j *Joiner) pushBack(l *list, c *chainState) {
	c.prev, c.next = l.tail, 0
	if l.tail != 0 {
		j.at(l.tail).next = c.self
	} else {
		l.head = c.self
	}
	l.tail = c.self
}

func (j *Joiner) remove(l *list, c *chainState) {
	if c.prev != 0 {
		j.at(c.prev).next = c.next
	} else {
		l.head = c.next
	}
	if c.next != 0 {
		j.at(c.next).prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = 0, 0
}

// Joiner joins the records of one request from every apiserver into a chain. It is a plain data
// structure without goroutines or locks: one goroutine feeds it (the Correlator holds the lock).
// Time is receipt time as carried by the records, so replaying the spool after a restart
// rebuilds the same chains.
//
// Its memory is bounded by the chains it holds (MaxOpen open, MaxRecent final), not by what it
// has seen: the tables hold a value only while a chain refers to it.
type Joiner struct {
	opts JoinOptions
	// chains holds the open and the recent final (amendable) chains by auditID key, each the
	// head of a sameID list.
	chains auditIndex
	slab   slab
	// more holds every side of the few chains with more than two (loops).
	more map[ref][]side
	lru  list // open chains, least recently updated first
	done list // recent final chains, oldest first
	// posHead..posTail list the chains in memory, open and recent final (which a late record can reopen),
	// in order of the spool position of their first record, so that SafePosition reads the
	// oldest without scanning every chain (through pprev, pnext). A chain stays from when it is made until it is
	// forgotten. Positions only grow, so a new chain goes to the tail. A chain a split makes
	// has an old position; walking the list to its place cost a walk past every younger chain,
	// which after a burst (hundreds of thousands open at once) held the correlator's lock for
	// tens of seconds. Those go to back, a min-heap by position.
	posHead, posTail ref
	back             []ref
	nOpen            int
	nDone            int
	now              int64 // stream time: the latest receipt seen, Unix ns

	strs     table[text]
	ids      table[identity]
	addrs    table[addrList]
	targets  table[target]
	verdicts table[verdict]
	h        xxh3.Hasher

	// Evicted counts chains finalised early because MaxOpen was reached.
	Evicted int64
	// Reopened counts final chains that a late record reopened.
	Reopened int64
	// Dropped counts records not joined because their chain, or their auditID, already had
	// MaxChainRecords (see there).
	Dropped int64
	// Remnants counts chains of a replay that left memory unseen, remnants of chains stored
	// whole (remnant.go).
	Remnants int64
	// shared are final chains that another request's chain of their auditID has just made
	// reuseShared: their verdict gains FindingAuditIDReused (Correlator.markSharedLocked).
	shared []chainRef
	// leaving, when set, is called with each final chain just before it leaves memory for good
	// (past the late window, or beyond MaxRecent): from then on nothing changes its verdict.
	leaving func(*chainState)
	// departedLast is the latest receipt (Unix ns) of a chain that left memory; replayEnd and
	// horizon are the last process's account of the spool it had joined (see remnant.go).
	departedLast int64
	replayEnd    spool.Position
	horizon      int64
	// touchedLast is the earliest latest receipt (Unix ns) of a chain a record joined since the
	// replay account last walked the chains in memory (remnant.go's horizonLocked).
	touchedLast int64
	// journaled says the correlator journals watches' chains (watchlog.go): SafePosition
	// passes a chain once it is kept. Without a journal it passes running watches, and after a
	// restart their completion is joined alone.
	journaled bool
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
func NewJoiner(opts JoinOptions) *Joiner {
	return &Joiner{opts: opts, chains: newAuditIndex(), more: map[ref][]side{}, touchedLast: math.MaxInt64,
		strs: newTable[text](), ids: newTable[identity](), addrs: newTable[addrList](), targets: newTable[target](), verdicts: newTable[verdict]()}
}

func (j *Joiner) at(r ref) *chainState { return j.slab.at(r) }

// Open is the number of open chains.
func (j *Joiner) Open() int { return j.nOpen }

// str interns s; "" is 0.
func (j *Joiner) str(s string) sym {
	if s == "" {
		return 0
	}
	return j.strs.add(xxh3.HashString(s), text(s))
}

func (j *Joiner) text(s sym) string { return string(*j.strs.get(s)) }

func (j *Joiner) identity(name, uid string, groups []string, extra map[string][]string) sym {
	if name == "" && uid == "" && len(groups) == 0 && len(extra) == 0 {
		return 0
	}
	id := identity{name: name, uid: uid, groups: groups, extra: extra}
	return j.ids.add(hashIdentity(&j.h, name, uid, groups, extra), id)
}

func (j *Joiner) addrList(ips []string) sym {
	if len(ips) == 0 {
		return 0
	}
	return j.addrs.add(hashAddrs(&j.h, ips), addrList(ips))
}

func (j *Joiner) targetOf(c *chainState) *target { return j.targets.get(c.target) }

// sidesOf returns c's sides in arrival order; they may be changed in place.
func (j *Joiner) sidesOf(c *chainState) []side {
	if c.nsides > 2 {
		return j.more[c.self]
	}
	return c.inline[:c.nsides]
}

func (j *Joiner) appendSide(c *chainState, s side) *side {
	switch {
	case c.nsides < 2:
		c.inline[c.nsides] = s
		c.nsides++
		return &c.inline[c.nsides-1]
	case c.nsides == 2:
		j.more[c.self] = []side{c.inline[0], c.inline[1], s}
		c.inline = [2]side{}
	default:
		j.more[c.self] = append(j.more[c.self], s)
	}
	c.nsides++
	m := j.more[c.self]
	return &m[len(m)-1]
}

// auditID is c's auditID as the apiserver wrote it.
func (j *Joiner) auditID(c *chainState) string {
	if c.uuid {
		return formatUUID(&c.key)
	}
	return j.text(c.auditText)
}

// sameAudit reports whether c is of auditID id, whose key c has (uuid: whether it was parsed).
func (j *Joiner) sameAudit(c *chainState, id string, uuid bool) bool {
	if c.uuid != uuid {
		return false
	}
	return uuid || j.text(c.auditText) == id
}

// Add joins one record, read from the spool at pos. It returns the chain the record joined (or
// was counted against, MaxChainRecords), and a chain that had to be finalised early to stay
// within MaxOpen, if any.
func (j *Joiner) Add(r *record.Record, pos spool.Position) (joined, evicted *chainState) {
	recv := r.ReceivedAt.UnixNano()
	if recv > j.now {
		j.now = recv
	}
	rr := r.RequestReceivedTimestamp.UnixMicro()
	key, uuid := auditKey(r.AuditID)
	c, newest, chains := j.find(j.chains.get(&j.slab, key), r, rr, uuid)
	switch {
	case c == nil && chains >= MaxChainRecords:
		j.drop(newest) // the auditID's newest chain answers for it
		return newest, nil
	case c != nil && c.records >= MaxChainRecords:
		j.drop(c)
		return c, nil
	}
	if c != nil && c.final {
		j.reopen(c)
	}
	if c == nil {
		if j.opts.MaxOpen > 0 && j.nOpen >= j.opts.MaxOpen {
			evicted = j.at(j.lru.head)
			j.finalise(evicted)
			evicted.evicted = true
			j.Evicted++
		}
		c = j.newChain(r, pos, recv, key, uuid)
		if newest != nil {
			j.share(c)
		}
	} else {
		j.remove(&j.lru, c)
		j.pushBack(&j.lru, c)
	}
	if recv > c.last {
		c.last = recv
	}
	if pos >= j.replayEnd {
		c.fresh = true
	}
	if c.fresh || c.last >= j.horizon { // a remnant does not hold the horizon back (remnant.go)
		j.touchedLast = min(j.touchedLast, c.last)
	}
	c.records++
	j.addToSide(c, r, rr)
	return c, evicted
}

// drop counts a record that c, or c's auditID, has no room for (MaxChainRecords). It neither
// extends c's window nor reopens it, so a flood cannot keep a chain open, except once: the first
// drop changes a final chain's findings, and it is finalised again to say so.
func (j *Joiner) drop(c *chainState) {
	j.Dropped++
	if c.reuse&reuseDropped == 0 && c.final {
		j.reopen(c)
	}
	c.reuse |= reuseDropped
	if c.records < math.MaxInt32 {
		c.records++
	}
}

// find returns the chain in the sameID list starting at head that r belongs to, the newest
// chain of r's auditID, and how many chains of it the list holds (at most MaxChainRecords, so
// this is bounded work). A chain that holds r's apiserver's side of the same request (its
// request time) comes first, then an open chain, then a final one, each the newest: once a
// pair without the evidence of a forward was split (Joiner.split), each apiserver's later
// records go to its own part.
func (j *Joiner) find(head ref, r *record.Record, rr int64, uuid bool) (found, newest *chainState, chains int) {
	window := j.opts.Window.Microseconds()
	var exact, open, final *chainState
	var uris uriMatcher
	for at := head; at != 0; {
		c := j.at(at)
		at = c.sameID
		if !j.sameAudit(c, r.AuditID, uuid) {
			continue // another auditID with the same hash
		}
		if newest == nil {
			newest = c
		}
		chains++
		if exact != nil && !exact.final || j.targetOf(c).verb != r.Verb || !j.sameURI(&uris, c, r.RequestURI) {
			continue
		}
		if s := j.side(c, r.APIServer); s != nil {
			// Its apiserver's records of one request share the request time.
			if s.rr == rr && (exact == nil || !c.final) {
				exact = c
			}
			continue
		}
		if d := rr - j.sidesOf(c)[0].rr; d > window || d < -window {
			continue
		}
		if c.final {
			if final == nil {
				final = c
			}
		} else if open == nil {
			open = c
		}
	}
	switch {
	case exact != nil:
		return exact, newest, chains
	case open != nil:
		return open, newest, chains
	}
	return final, newest, chains
}

// share marks c, a new chain whose auditID has other chains in memory, and those chains as
// requests that share their auditID (reuseShared); the final ones among them are noted in
// shared, for their verdicts to say so.
func (j *Joiner) share(c *chainState) {
	c.reuse |= reuseShared
	id := j.auditID(c)
	for at := c.sameID; at != 0; {
		o := j.at(at)
		at = o.sameID
		if o.reuse&reuseShared != 0 || !j.sameAudit(o, id, c.uuid) {
			continue
		}
		o.reuse |= reuseShared
		if o.final {
			j.shared = append(j.shared, chainRef{o.self, o.gen})
		}
	}
}

// sameURI compares the record's URI with c's through u, keeping c's re-encoded URI once made.
func (j *Joiner) sameURI(u *uriMatcher, c *chainState, uri string) bool {
	canon := j.text(c.canonURI)
	had := canon != ""
	same := u.same(j.text(c.uri), uri, &canon)
	if !had && canon != "" {
		c.canonURI = j.str(canon)
	}
	return same
}

func (j *Joiner) side(c *chainState, apiserver string) *side {
	sides := j.sidesOf(c)
	for i := range sides {
		if j.text(sides[i].apiserver) == apiserver {
			return &sides[i]
		}
	}
	return nil
}

func (j *Joiner) watching(c *chainState) bool {
	if j.targetOf(c).verb != "watch" {
		return false
	}
	for _, s := range j.sidesOf(c) {
		if s.stages&stageStarted != 0 && s.stages&(stageComplete|stagePanic) == 0 {
			return true
		}
	}
	return false
}

// incomplete reports whether a side of c has not ended (no ResponseComplete nor Panic yet).
func (j *Joiner) incomplete(c *chainState) bool {
	for _, s := range j.sidesOf(c) {
		if s.stages&(stageComplete|stagePanic) == 0 {
			return true
		}
	}
	return false
}

func (j *Joiner) newChain(r *record.Record, pos spool.Position, recv int64, key [16]byte, uuid bool) *chainState {
	c := j.slab.alloc()
	c.key, c.uuid = key, uuid
	if !uuid {
		c.auditText = j.str(r.AuditID)
	}
	c.uri = j.str(r.RequestURI)
	t := target{verb: r.Verb, group: r.Group, version: r.Version, resource: r.Resource, subres: r.Subresource, ns: r.Namespace}
	c.target = j.targets.add(hashTarget(&j.h, &t), t)
	c.firstPos, c.first = pos, recv
	c.sameID = j.chains.set(&j.slab, key, c.self)
	j.pushBack(&j.lru, c)
	j.posInsert(c)
	j.nOpen++
	return c
}

// chainID is stable across replays: a hash of the auditID and the first record's apiserver and
// request time. It is computed when asked for, as most chains are only ever counted.
func (j *Joiner) chainID(c *chainState) string {
	sides := j.sidesOf(c)
	if len(sides) == 0 {
		return ""
	}
	return j.chainIDOf(c, &sides[0])
}

// chainIDOf is the ID of c's chain were s its first side: that of the part of c's records a
// split (Joiner.split) would begin with s.
func (j *Joiner) chainIDOf(c *chainState, s *side) string {
	var buf [128]byte
	b := buf[:0]
	b = append(b, j.auditID(c)...)
	b = append(b, 0)
	b = append(b, j.text(s.apiserver)...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(s.rr))
	h := xxh3.Hash128(b).Bytes()
	return hex.EncodeToString(h[:])
}

func (j *Joiner) addToSide(c *chainState, r *record.Record, rr int64) {
	s := j.side(c, r.APIServer)
	if s == nil {
		s = j.appendSide(c, side{
			apiserver: j.str(r.APIServer),
			rr:        rr,
			user:      j.identity(r.UserName, r.UserUID, r.UserGroups, r.UserExtra),
			sourceIPs: j.addrList(r.SourceIPs),
			userAgent: j.str(r.UserAgent),
		})
	}
	// Impersonation is resolved after the RequestReceived stage is written: later stages carry it.
	if s.imp == 0 && (r.ImpersonatedUser != "" || len(r.ImpersonatedGroups) > 0) {
		s.imp = j.identity(r.ImpersonatedUser, r.ImpersonatedUID, r.ImpersonatedGroups, r.ImpersonatedExtra)
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
		// The new values are taken before the old are let go, so that an unchanged one stays.
		msg, reason := j.str(r.Message), j.str(r.Reason)
		j.strs.release(s.message)
		j.strs.release(s.reason)
		s.message, s.reason = msg, reason
	}
	// objectRef.name: the entry of a forwarded create has none, the peer has it.
	if c.name == 0 && !c.nameInURI && r.Name != "" {
		if lastSegment(j.text(c.uri)) == r.Name {
			c.nameInURI = true
		} else {
			c.name = j.str(r.Name)
		}
	}
	if r.HasRequestObject || r.HasResponseObject {
		s.hasObjects = true
	}
}

// lastSegment is the last segment of uri's path.
func lastSegment(uri string) string {
	p, _, _ := strings.Cut(uri, "?")
	return p[strings.LastIndexByte(p, '/')+1:]
}

// chainName is c's objectRef.name.
func (j *Joiner) chainName(c *chainState) string {
	if c.nameInURI {
		return lastSegment(j.text(c.uri))
	}
	return j.text(c.name)
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

// split moves the sides of c listed in parts (each a list of indexes into its sides, in
// arrival order) into new chains of their own, one a part, and returns them: the records of
// one auditID that are not one request (no evidence of a forward joins them). The new chains
// are in c's state (open or final, then with revision 1, as finalised now), with c's request
// and receipt times and spool position (so that SafePosition stays as low as before), and
// every part, c included, is marked reuseShared and reuseSplit. Their IDs follow from their
// own first sides (chainID), the same whichever order the records came in.
func (j *Joiner) split(c *chainState, parts [][]int) []*chainState {
	sides := slices.Clone(j.sidesOf(c))
	moved := make([]bool, len(sides))
	out := make([]*chainState, 0, len(parts))
	for _, part := range parts {
		if len(part) == 0 {
			continue
		}
		n := j.slab.alloc()
		n.key, n.uuid, n.nameInURI = c.key, c.uuid, c.nameInURI
		n.auditText = j.strs.retain(c.auditText)
		n.uri, n.canonURI, n.name = j.strs.retain(c.uri), j.strs.retain(c.canonURI), j.strs.retain(c.name)
		n.target = j.targets.retain(c.target)
		n.firstPos, n.first, n.last, n.checked = c.firstPos, c.first, c.last, c.checked
		n.evicted, n.held, n.fresh = c.evicted, c.held, c.fresh
		n.reuse = c.reuse&^reuseDropped | reuseShared | reuseSplit // the drops stay counted in c
		n.sameID = j.chains.set(&j.slab, n.key, n.self)
		var own []side
		for _, i := range part {
			own = append(own, sides[i])
			moved[i] = true
			n.records += int32(bits.OnesCount8(sides[i].stages))
		}
		j.setSides(n, own)
		if c.final {
			n.final, n.emitted = true, 1
			j.pushBack(&j.done, n)
			j.nDone++
		} else {
			j.pushBack(&j.lru, n)
			j.nOpen++
		}
		j.posInsert(n)
		out = append(out, n)
	}
	var keep []side
	for i, s := range sides {
		if !moved[i] {
			keep = append(keep, s)
		}
	}
	j.setSides(c, keep)
	c.reuse |= reuseShared | reuseSplit
	for _, n := range out {
		c.records = max(c.records-n.records, int32(len(keep)))
	}
	return out
}

// setSides makes sides c's sides (taking over their references into the tables).
func (j *Joiner) setSides(c *chainState, sides []side) {
	if c.nsides > 2 {
		delete(j.more, c.self)
	}
	c.inline = [2]side{}
	c.nsides = uint8(len(sides))
	if len(sides) <= 2 {
		copy(c.inline[:], sides)
		return
	}
	j.more[c.self] = slices.Clone(sides)
}

func (j *Joiner) reopen(c *chainState) {
	c.silent = false
	j.remove(&j.done, c)
	j.nDone--
	c.final = false
	j.pushBack(&j.lru, c)
	j.nOpen++
	j.Reopened++
}

// hold takes back the finalisation of c, which Due has just returned: its verdict waits for
// evidence the classifier does not have yet (draft.undecided). It stays open for one more
// chain window, once: the wait is bounded, and a chain is decided at its second due time
// whatever is known then.
func (j *Joiner) hold(c *chainState) bool {
	if c.held || c.evicted || !c.final {
		return false
	}
	j.remove(&j.done, c)
	j.nDone--
	c.final = false
	c.emitted--
	c.held = true
	c.checked = j.now
	j.pushBack(&j.lru, c)
	j.nOpen++
	return true
}

// Due finalises and returns the chains whose window has passed at stream time now (Unix ns; a
// later time than any record's receipt moves the stream on when the spool is idle). The
// chains returned stay in memory at least until the next call: final chains past the late
// window (or beyond MaxRecent) leave before the new ones are finalised.
func (j *Joiner) Due(now int64) []*chainState {
	if now > j.now {
		j.now = now
	}
	j.expireRecent()
	var out []*chainState
	window, watch := j.opts.Window.Nanoseconds(), j.opts.WatchWindow.Nanoseconds()
	for j.lru.head != 0 {
		c := j.at(j.lru.head)
		if max(c.last, c.checked) > j.now-window {
			break // the list is ordered by last update; nothing after this is due
		}
		if j.watching(c) && c.last > j.now-watch {
			// A running watch: look at it again a window from now.
			c.checked = j.now
			j.remove(&j.lru, c)
			j.pushBack(&j.lru, c)
			continue
		}
		j.finalise(c)
		out = append(out, c)
	}
	return out
}

// finalise moves c from the open chains to the recent final ones.
func (j *Joiner) finalise(c *chainState) {
	j.remove(&j.lru, c)
	j.nOpen--
	c.final = true
	c.emitted++
	j.pushBack(&j.done, c)
	j.nDone++
}

// unlink takes c out of its auditID's sameID list.
func (j *Joiner) unlink(c *chainState) {
	head := j.chains.get(&j.slab, c.key)
	if head == c.self {
		if c.sameID == 0 {
			j.chains.del(&j.slab, c.key)
		} else {
			j.chains.set(&j.slab, c.key, c.sameID)
		}
		c.sameID = 0
		return
	}
	for p := head; p != 0; {
		pc := j.at(p)
		if pc.sameID == c.self {
			pc.sameID = c.sameID
			break
		}
		p = pc.sameID
	}
	c.sameID = 0
}

// forget drops a final chain for good, and with it its references into the tables.
func (j *Joiner) forget(c *chainState) {
	j.remove(&j.done, c)
	j.posRemove(c)
	j.unlink(c)
	j.nDone--
	j.strs.release(c.auditText)
	j.strs.release(c.uri)
	j.strs.release(c.canonURI)
	j.strs.release(c.name)
	j.targets.release(c.target)
	for _, s := range j.sidesOf(c) {
		j.strs.release(s.apiserver)
		j.strs.release(s.userAgent)
		j.strs.release(s.message)
		j.strs.release(s.reason)
		j.strs.release(s.version)
		j.ids.release(s.user)
		j.ids.release(s.imp)
		j.addrs.release(s.sourceIPs)
	}
	if c.nsides > 2 {
		delete(j.more, c.self)
	}
	j.verdicts.release(c.res.verdict)
	j.slab.release(c)
}

func (j *Joiner) expireRecent() {
	late := j.opts.LateWindow.Nanoseconds()
	for j.done.head != 0 {
		c := j.at(j.done.head)
		if c.last >= j.now-late && j.nDone <= j.opts.MaxRecent {
			return
		}
		if j.leaving != nil {
			j.leaving(c)
		}
		j.departedLast = max(j.departedLast, c.last)
		if c.silent {
			j.Remnants++
		}
		j.forget(c)
	}
}

// lookup returns the chains (open first, then recent final ones) with auditID.
func (j *Joiner) lookup(auditID string) []*chainState {
	key, uuid := auditKey(auditID)
	var out []*chainState
	for r := j.chains.get(&j.slab, key); r != 0; {
		c := j.at(r)
		if j.sameAudit(c, auditID, uuid) {
			out = append(out, c)
		}
		r = c.sameID
	}
	return out
}

// each calls f for every open chain, then every recent final chain, newest first, until f
// returns false.
func (j *Joiner) each(f func(*chainState) bool) {
	for r := j.lru.tail; r != 0; {
		c := j.at(r)
		if !f(c) {
			return
		}
		r = c.prev
	}
	for r := j.done.tail; r != 0; {
		c := j.at(r)
		if !f(c) {
			return
		}
		r = c.prev
	}
}

// joinerMemory is what the joiner holds, for the metrics.
type joinerMemory struct {
	chains, slots int
	slabBytes     int64 // the chains' slots and their auditID index
	tables        [5]struct {
		name    string
		entries int
		bytes   int64
	}
}

func (j *Joiner) memory() joinerMemory {
	m := joinerMemory{chains: j.slab.used, slots: j.slab.pagesHeld() * pageSize, slabBytes: j.slab.bytes() + j.chains.bytes()}
	m.tables[0].name, m.tables[0].entries, m.tables[0].bytes = "strings", j.strs.len(), j.strs.bytes
	m.tables[1].name, m.tables[1].entries, m.tables[1].bytes = "identities", j.ids.len(), j.ids.bytes
	m.tables[2].name, m.tables[2].entries, m.tables[2].bytes = "addresses", j.addrs.len(), j.addrs.bytes
	m.tables[3].name, m.tables[3].entries, m.tables[3].bytes = "targets", j.targets.len(), j.targets.bytes
	m.tables[4].name, m.tables[4].entries, m.tables[4].bytes = "verdicts", j.verdicts.len(), j.verdicts.bytes
	return m
}
