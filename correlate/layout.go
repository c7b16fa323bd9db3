package correlate

import (
	"encoding/hex"
	"maps"
	"math/bits"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/peertrail/peertrail/chain"
)

// The memory layout of the chains the joiner holds (every open chain, and every recently final
// one for the late window): a chain is a fixed-size struct without pointers (chainState), in
// pages the garbage collector does not scan (slab), naming its strings and shared values by
// number (sym) in tables that hold each distinct value once, for as long as a chain refers to
// it (table). The collector walks none of it, and nothing grows with what the process has
// seen: a slot and a table entry are reused once their chain leaves memory, and a page of slots
// or the end of a table's arrays that empties is given back (the figures: BENCHMARKS.md,
// "correlate").

// ref names a chain: a slot in the Joiner's pages. 0 is none.
type ref int32

// sym names a value in a table. 0 is the zero value ("" or none).
type sym uint32

// pageBits sizes the pages of chains: 4096 slots of a few hundred bytes, so that a page is a
// single allocation of about a megabyte, and the slab grows without moving what it holds.
const (
	pageBits = 12
	pageSize = 1 << pageBits
)

// slab holds chains in pages that never move, so that a *chainState stays valid while other
// chains are added. A new chain takes a free slot of the lowest page that has one, so that
// after a burst the chains that stay gather in the low pages and the high ones empty: an
// empty page is given back to the runtime (one is kept for the next chains), so the slab holds
// what its chains need now, not the most it ever held.
type slab struct {
	pages [][]chainState // nil: a page given back
	free  []ref          // per page: its free slots, linked through next
	nfree []int32        // per page: how many
	avail []uint64       // bit p: page p has a free slot
	used  int
	spare int    // 1 + the index of the empty page kept; 0 if none
	made  uint32 // pages made so far: each new page's slots start at a generation of their own
}

func (s *slab) at(r ref) *chainState {
	return &s.pages[r>>pageBits][r&(pageSize-1)]
}

// live returns the chain at r if its slot still has generation gen: a chain kept by (ref,
// generation) beyond the call that found it may have left memory, and its page with it.
func (s *slab) live(r ref, gen uint32) *chainState {
	if p := s.pages[r>>pageBits]; p != nil && p[r&(pageSize-1)].gen == gen {
		return &p[r&(pageSize-1)]
	}
	return nil
}

// slots is the number of slots a page p has: ref 0 is none, so page 0 has one fewer.
func slots(p int) int32 {
	if p == 0 {
		return pageSize - 1
	}
	return pageSize
}

// alloc returns a zeroed slot that knows its ref, with the generation it had.
func (s *slab) alloc() *chainState {
	p := s.lowestAvail()
	if p < 0 {
		p = s.newPage()
	}
	c := s.at(s.free[p])
	s.free[p] = c.next
	c.next = 0
	if s.nfree[p]--; s.nfree[p] == 0 {
		s.avail[p/64] &^= 1 << (p % 64)
	}
	if s.spare == p+1 {
		s.spare = 0
	}
	s.used++
	return c
}

func (s *slab) lowestAvail() int {
	for i, w := range s.avail {
		if w != 0 {
			return i*64 + bits.TrailingZeros64(w)
		}
	}
	return -1
}

// newPage makes a page where one was given back, or a new one at the end.
func (s *slab) newPage() int {
	p := slices.IndexFunc(s.pages, func(pg []chainState) bool { return pg == nil })
	if p < 0 {
		p = len(s.pages)
		s.pages = append(s.pages, nil)
		s.free = append(s.free, 0)
		s.nfree = append(s.nfree, 0)
		if p/64 == len(s.avail) {
			s.avail = append(s.avail, 0)
		}
	}
	s.pages[p] = make([]chainState, pageSize)
	// A (ref, generation) kept from a chain of the page given back must not name a chain of
	// this one: its generations start at 2^20 times the pages made (a slot is reused far fewer
	// times than that while such a pair is kept).
	gen := s.made << 20
	s.made++
	first := p * pageSize
	if p == 0 {
		first = 1
	}
	// Linked in reverse so that the lowest slot is taken first.
	for i := p*pageSize + pageSize - 1; i >= first; i-- {
		c := s.at(ref(i))
		c.self, c.gen, c.next = ref(i), gen, s.free[p]
		s.free[p] = ref(i)
	}
	s.nfree[p] = slots(p)
	s.avail[p/64] |= 1 << (p % 64)
	return p
}

// release zeroes c's slot and makes it free; its generation changes, so that a (ref,
// generation) kept elsewhere sees that the chain is gone.
func (s *slab) release(c *chainState) {
	self, gen := c.self, c.gen+1
	p := int(self >> pageBits)
	*c = chainState{self: self, gen: gen, next: s.free[p]}
	s.free[p] = self
	s.nfree[p]++
	s.avail[p/64] |= 1 << (p % 64)
	s.used--
	if s.nfree[p] == slots(p) {
		s.emptied(p)
	}
}

// emptied keeps page p, now empty, as the spare, or gives back the higher of it and the spare.
func (s *slab) emptied(p int) {
	if s.spare == 0 {
		s.spare = p + 1
		return
	}
	drop := max(p, s.spare-1)
	s.spare = min(p, s.spare-1) + 1
	s.pages[drop] = nil
	s.free[drop], s.nfree[drop] = 0, 0
	s.avail[drop/64] &^= 1 << (drop % 64)
}

// pagesHeld is the number of pages the slab holds.
func (s *slab) pagesHeld() int {
	n := 0
	for _, pg := range s.pages {
		if pg != nil {
			n++
		}
	}
	return n
}

// bytes is the memory of the pages.
func (s *slab) bytes() int64 {
	return int64(s.pagesHeld()) * pageSize * int64(chainStateSize)
}

// value is what a table holds: comparable by same, with a cost in bytes for the metrics.
type value[V any] interface {
	same(V) bool
	cost() int
}

// table holds distinct values by number, each as long as something refers to it (refs), found
// by a hash (index). A value whose hash is taken by a different one (a collision) is still
// held, just not found again: only sharing is lost.
//
// A new value takes the lowest free number, so that the values held gather at the low numbers
// and, once the values at the end are freed (after a burst, when its chains leave), the arrays
// are cut back and given back: a table holds what its chains refer to now, not the most it
// ever held. Numbers in use never change.
type table[V value[V]] struct {
	vals   []V
	refs   []int32
	hashes []uint64
	// free holds freed numbers as a min-heap. It may also hold numbers cut off since (at least
	// len(vals)), which take skips; add appends only once it is empty, so a number in it is
	// never one in use, which take checks all the same (one handed out twice would mix two
	// chains' values without a sign).
	free  []sym
	index map[uint64]sym
	// peakIndex is the most entries index has had since it was made: a Go map never shrinks,
	// so it is made again once it holds a quarter of that.
	peakIndex int
	n         int // values held
	bytes     int64
}

// minShrink is the size below which a table's arrays and index are not made smaller.
const minShrink = 1 << 12

func newTable[V value[V]]() table[V] {
	// Entry 0 is the zero value, never counted or freed.
	return table[V]{vals: make([]V, 1), refs: make([]int32, 1), hashes: make([]uint64, 1), index: map[uint64]sym{}}
}

func (t *table[V]) get(s sym) *V { return &t.vals[s] }

// add returns the number of v (hash h), taking a reference to it.
func (t *table[V]) add(h uint64, v V) sym {
	id, found := t.index[h]
	if found && t.vals[id].same(v) {
		t.refs[id]++
		return id
	}
	if id = t.take(); id != 0 {
		t.vals[id], t.refs[id], t.hashes[id] = v, 1, h
	} else {
		id = sym(len(t.vals))
		t.vals, t.refs, t.hashes = append(t.vals, v), append(t.refs, 1), append(t.hashes, h)
	}
	if !found {
		t.index[h] = id
		t.peakIndex = max(t.peakIndex, len(t.index))
	}
	t.n++
	t.bytes += int64(v.cost())
	return id
}

// take returns the lowest free number, or 0 if there is none.
func (t *table[V]) take() sym {
	for len(t.free) > 0 {
		id := popMin(&t.free)
		if int(id) < len(t.vals) && t.refs[id] == 0 {
			return id
		}
	}
	return 0
}

// retain takes one more reference to s, and returns it.
func (t *table[V]) retain(s sym) sym {
	if s != 0 {
		t.refs[s]++
	}
	return s
}

// release drops a reference to s; the last one frees it.
func (t *table[V]) release(s sym) {
	if s == 0 {
		return
	}
	if t.refs[s]--; t.refs[s] > 0 {
		return
	}
	if h := t.hashes[s]; t.index[h] == s {
		delete(t.index, h)
		if t.peakIndex >= minShrink && len(t.index) < t.peakIndex/4 {
			index := make(map[uint64]sym, len(t.index)) // maps.Clone keeps the old one's size
			maps.Copy(index, t.index)
			t.index, t.peakIndex = index, len(index)
		}
	}
	t.bytes -= int64(t.vals[s].cost())
	var zero V
	t.vals[s] = zero
	t.n--
	pushMin(&t.free, s)
	if int(s) == len(t.vals)-1 {
		t.trim()
	}
}

// trim cuts the free values off the end of the arrays, and makes the arrays and the free heap
// anew when they are mostly unused.
func (t *table[V]) trim() {
	l := len(t.vals)
	for l > 1 && t.refs[l-1] == 0 {
		l--
	}
	t.vals, t.refs, t.hashes = t.vals[:l], t.refs[:l], t.hashes[:l]
	if cap(t.vals) < minShrink || cap(t.vals) <= 4*l {
		return
	}
	t.vals, t.refs, t.hashes = slices.Clone(t.vals), slices.Clone(t.refs), slices.Clone(t.hashes)
	free := make([]sym, 0, t.n/4+1)
	for _, id := range t.free {
		if int(id) < l && t.refs[id] == 0 {
			free = append(free, id)
		}
	}
	slices.Sort(free) // a sorted slice is a min-heap
	t.free = slices.Compact(free)
}

// len is the number of values held.
func (t *table[V]) len() int { return t.n }

// pushMin adds x to the min-heap h.
func pushMin(h *[]sym, x sym) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// popMin removes and returns the least of the min-heap h, which must not be empty.
func popMin(h *[]sym) sym {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l] < s[m] {
			m = l
		}
		if r < len(s) && s[r] < s[m] {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// text is a string in a table.
type text string

func (a text) same(b text) bool { return a == b }
func (a text) cost() int        { return len(a) + 16 + 28 } // the bytes, the header, the table's row

// identity is a user as recorded.
type identity struct {
	name, uid string
	groups    []string
	extra     map[string][]string
}

func (a identity) same(b identity) bool {
	return a.name == b.name && a.uid == b.uid && slices.Equal(a.groups, b.groups) && equalExtra(a.extra, b.extra)
}

func (a identity) cost() int {
	n := 80 + len(a.name) + len(a.uid)
	for _, g := range a.groups {
		n += 16 + len(g)
	}
	for k, vs := range a.extra {
		n += 64 + len(k)
		for _, v := range vs {
			n += 16 + len(v)
		}
	}
	return n
}

var sep = []byte{0}

func hashIdentity(h *xxh3.Hasher, name, uid string, groups []string, extra map[string][]string) uint64 {
	h.Reset()
	h.WriteString(name)
	h.Write(sep)
	h.WriteString(uid)
	for _, g := range groups {
		h.Write(sep)
		h.WriteString(g)
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
	return h.Sum64() ^ ex*0x9e3779b97f4a7c15
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

// addrList is a record's sourceIPs.
type addrList []string

func (a addrList) same(b addrList) bool { return slices.Equal(a, b) }
func (a addrList) cost() int {
	n := 24 + 28
	for _, s := range a {
		n += 16 + len(s)
	}
	return n
}

func hashAddrs(h *xxh3.Hasher, ips []string) uint64 {
	h.Reset()
	for _, ip := range ips {
		h.WriteString(ip)
		h.Write(sep)
	}
	return h.Sum64()
}

// target is what a request was for; many chains share one.
type target struct {
	verb, group, version, resource, subres, ns string
}

func (a target) same(b target) bool { return a == b }
func (a target) cost() int {
	return 96 + 28 + len(a.verb) + len(a.group) + len(a.version) + len(a.resource) + len(a.subres) + len(a.ns)
}

func hashTarget(h *xxh3.Hasher, t *target) uint64 {
	h.Reset()
	for _, s := range [...]string{t.verb, t.group, t.version, t.resource, t.subres, t.ns} {
		h.WriteString(s)
		h.Write(sep)
	}
	return h.Sum64()
}

// verdict is a final chain's class, findings and explanation: few distinct ones among many
// chains (the explanation names apiservers, codes and resources, rarely the request).
type verdict struct {
	class       chain.Class
	findings    []chain.Finding
	explanation string
}

func (a verdict) same(b verdict) bool {
	return a.class == b.class && slices.Equal(a.findings, b.findings) && a.explanation == b.explanation
}

func (a verdict) cost() int { return 64 + 28 + len(a.explanation) + 16*len(a.findings) }

func hashVerdict(h *xxh3.Hasher, v *verdict) uint64 {
	h.Reset()
	h.WriteString(string(v.class))
	for _, f := range v.findings {
		h.Write(sep)
		h.WriteString(string(f))
	}
	h.Write(sep)
	h.Write(sep)
	h.WriteString(v.explanation)
	return h.Sum64()
}

// auditKey is how the joiner finds an auditID's chains: the 16 bytes of a UUID in its
// canonical lowercase form (what the apiserver makes up), else a hash of the string, which the
// chain then keeps in full (chainState.auditText). uuid says which.
func auditKey(id string) (key [16]byte, uuid bool) {
	if parseUUID(id, &key) {
		return key, true
	}
	return xxh3.HashString128(id).Bytes(), false
}

// parseUUID reads a UUID written as 8-4-4-4-12 lowercase hex digits: only that form, because
// the chain gives the auditID back by formatting the bytes, and it must be the string the
// apiserver wrote.
func parseUUID(s string, out *[16]byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return false
		}
		out[j] = hi<<4 | lo
		j++
		i += 2
	}
	return true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func formatUUID(b *[16]byte) string {
	var sb strings.Builder
	sb.Grow(36)
	var buf [32]byte
	hex.Encode(buf[:], b[:])
	sb.Write(buf[0:8])
	sb.WriteByte('-')
	sb.Write(buf[8:12])
	sb.WriteByte('-')
	sb.Write(buf[12:16])
	sb.WriteByte('-')
	sb.Write(buf[16:20])
	sb.WriteByte('-')
	sb.Write(buf[20:32])
	return sb.String()
}
