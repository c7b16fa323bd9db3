package record

import (
	"hash/maphash"
	"unsafe"
)

// Interner gives a decoder one copy of each value that recurs from record to record (an
// apiserver's name, a verb, a user and its groups and extra, a user agent, an address list),
// so that a consumer which keeps records' values (the correlator, for up to a late window)
// does not allocate them afresh for every record. Decoding every frame's values fresh was
// about half of what the whole process allocated at a steady rate, and so about half of
// what its collector ran for.
//
// The values it hands out are shared by every record that decodes to them, in this batch and
// the ones after: nobody may change a returned list or map. Values that are new with nearly
// every request (auditID, request URI, object name, message) are never interned, so they
// cannot push out the ones that recur.
//
// The memory it holds is bounded: a fixed number of slots, each holding one value whose hash
// fell in it, of at most maxInterned bytes encoded: 1.2 MB of slots and a few MB of values
// for a control plane's traffic, tens of MB at most (Stats says how much). A value that meets
// a slot held by another costs only the allocation it would have cost without an interner. A
// value once read replaces the one in its slot only if that one was not asked for again since
// it came (else it is only marked so): a stream of values that never recur (the synthetic
// load gives every request a token of its own) does not push out the ones that do. Not safe
// for concurrent use; the zero value is not usable (NewInterner).
type Interner struct {
	seed  maphash.Seed
	strs  [internSlots]interned[string]
	lists [internSlots]interned[[]string]
	maps  [internSlots]interned[map[string][]string]
	// values and bytes are what the slots hold: how many values, and about how many bytes
	// besides the slots themselves.
	values int
	bytes  int64
}

// internSlots is the number of slots of each kind: more than the recurring values of a
// control plane's traffic (its apiservers, verbs, resources, agents, addresses, and the
// identities of its busiest clients) are expected to be.
const internSlots = 1 << 13

// maxInterned is the longest encoding kept: a longer value is decoded fresh each time. A
// service account's extra with its token, pod and node is under 400 bytes.
const maxInterned = 512

// interned is a decoded value with its encoding (a string is its own), to tell it from
// another that hashes to the same slot, and whether it was asked for again since it came.
type interned[V any] struct {
	enc  string
	v    V
	cost int // bytes held besides the slot
	used bool
}

// replace puts v, read from enc, in e, unless e's value was asked for since it came: then it
// only loses that mark. cost is v's bytes besides the slot (enc's are added).
func replace[V any](in *Interner, e *interned[V], enc []byte, v V, cost int) {
	if e.used {
		e.used = false
		return
	}
	if e.cost == 0 {
		in.values++
	}
	cost += len(enc)
	in.bytes += int64(cost - e.cost)
	*e = interned[V]{enc: string(enc), v: v, cost: cost}
}

// NewInterner returns an empty Interner.
func NewInterner() *Interner { return &Interner{seed: maphash.MakeSeed()} }

// Stats returns how many values the interner holds and about how many bytes: the values and
// the slots.
func (in *Interner) Stats() (values int, bytes int64) {
	return in.values, in.bytes + int64(unsafe.Sizeof(in.strs)+unsafe.Sizeof(in.lists)+unsafe.Sizeof(in.maps))
}

// listCost is about the bytes a decoded list holds: its array and its strings.
func listCost(l []string) int {
	n := 24 + 16*len(l)
	for _, s := range l {
		n += len(s)
	}
	return n
}

// mapCost is about the bytes a decoded extra holds: its map's entries, keys and lists.
func mapCost(m map[string][]string) int {
	n := 48
	for k, l := range m {
		n += 48 + len(k) + listCost(l)
	}
	return n
}

func (in *Interner) slot(p []byte) uint64 { return maphash.Bytes(in.seed, p) % internSlots }

// sym reads a string as str does, shared through r.in when it is set.
func (r *reader) sym() string {
	if r.in == nil {
		return r.str()
	}
	p := r.take(r.uvarint())
	if len(p) == 0 {
		return ""
	}
	if len(p) > maxInterned {
		return string(p)
	}
	e := &r.in.strs[r.in.slot(p)]
	if e.v == string(p) {
		e.used = true
		return e.v
	}
	s := string(p)
	// A string is its own encoding: the slot keeps s as v alone.
	replace(r.in, e, nil, s, len(s))
	return s
}

// span returns the bytes a list (or with extra, a map of lists) would take to read, without
// reading them; nil if they are not there (the read itself then reports the error). The calls
// are direct, so that q stays on the stack.
func (r *reader) span(extra bool) []byte {
	q := reader{b: r.b}
	if extra {
		skipExtra(&q)
	} else {
		skipStrs(&q)
	}
	if q.err != nil {
		return nil
	}
	return r.b[:len(r.b)-len(q.b)]
}

func skipStrs(r *reader) {
	n, _ := r.count()
	for range n {
		r.take(r.uvarint())
	}
}

func skipExtra(r *reader) {
	n, _ := r.count()
	for range n {
		r.take(r.uvarint())
		skipStrs(r)
	}
}

// lookup finds the encoding of the list (or map) at r in table: hit, or the slot to keep it in
// (nil when it is not to be kept) once read.
func lookup[V any](r *reader, table *[internSlots]interned[V], extra bool) (e *interned[V], enc []byte, hit bool) {
	enc = r.span(extra)
	if len(enc) == 0 || len(enc) > maxInterned {
		return nil, nil, false
	}
	e = &table[r.in.slot(enc)]
	if e.enc == string(enc) {
		r.b = r.b[len(enc):]
		e.used = true
		return e, enc, true
	}
	return e, enc, false
}

// keep offers e v, just read from enc; cost is v's bytes.
func keep[V any](r *reader, e *interned[V], enc []byte, v V, cost func(V) int) {
	if e != nil && r.err == nil {
		replace(r.in, e, enc, v, cost(v))
	}
}

// sharedStrs reads a string list as strs does, shared through r.in when it is set.
func (r *reader) sharedStrs() []string {
	if r.in == nil {
		return r.strs()
	}
	e, enc, hit := lookup(r, &r.in.lists, false)
	if hit {
		return e.v
	}
	v := r.strs()
	keep(r, e, enc, v, listCost)
	return v
}

// sharedExtra reads a user's extra as extra does, shared through r.in when it is set.
func (r *reader) sharedExtra() map[string][]string {
	if r.in == nil {
		return r.extra()
	}
	e, enc, hit := lookup(r, &r.in.maps, true)
	if hit {
		return e.v
	}
	v := r.extra()
	keep(r, e, enc, v, mapCost)
	return v
}
