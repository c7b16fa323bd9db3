package correlate

import "hash/maphash"

// auditIndex finds, by auditID key, the head of the chains' sameID list. It keeps refs only,
// since the key is in the chain's slot already (a Go map of key to ref held far more:
// BENCHMARKS.md, "A ninth session"): 4 bytes a slot, between an eighth and a half full, found
// by linear probing from a seeded hash of the key. Clients choose their Audit-ID, and with an
// unseeded hash one could pile its chains onto one probe sequence.
//
// Every ref in it names a live slot whose key is the one it is found by: the Joiner takes a
// chain out (del or set to the next of its sameID list) before it frees the slot.
type auditIndex struct {
	seed  maphash.Seed
	slots []ref // 0 is an empty slot
	n     int
}

// minAuditSlots is the index's smallest size.
const minAuditSlots = 1 << 10

func newAuditIndex() auditIndex {
	return auditIndex{seed: maphash.MakeSeed(), slots: make([]ref, minAuditSlots)}
}

func (x *auditIndex) home(k *[16]byte) int {
	return int(maphash.Bytes(x.seed, k[:]) & uint64(len(x.slots)-1))
}

// find returns the slot holding key's head and the head, or the empty slot where it would go
// and 0.
func (x *auditIndex) find(s *slab, key *[16]byte) (int, ref) {
	mask := len(x.slots) - 1
	for i := x.home(key); ; i = (i + 1) & mask {
		r := x.slots[i]
		if r == 0 || s.at(r).key == *key {
			return i, r
		}
	}
}

// get returns the head of key's chains, or 0.
func (x *auditIndex) get(s *slab, key [16]byte) ref {
	_, r := x.find(s, &key)
	return r
}

// set makes r, whose slot holds key, the head of key's chains, and returns the head it
// replaces (0 if none), so that a new chain links to it without a second probe.
func (x *auditIndex) set(s *slab, key [16]byte, r ref) (old ref) {
	i, old := x.find(s, &key)
	x.slots[i] = r
	if old == 0 {
		x.n++
		if 2*x.n > len(x.slots) {
			x.resize(s, 2*len(x.slots))
		}
	}
	return old
}

// del forgets key. The entries after it in its probe run move back (instead of a tombstone),
// so that every entry stays reachable from its home without the run growing.
func (x *auditIndex) del(s *slab, key [16]byte) {
	i, r := x.find(s, &key)
	if r == 0 {
		return
	}
	mask := len(x.slots) - 1
	x.slots[i] = 0
	x.n--
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		h := x.home(&s.at(x.slots[j]).key)
		// The entry at j stays unless the emptied slot i lies on its way from h to j.
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			x.slots[i], x.slots[j] = x.slots[j], 0
			i = j
		}
	}
	if 8*x.n < len(x.slots) && len(x.slots) > minAuditSlots {
		x.resize(s, len(x.slots)/2)
	}
}

func (x *auditIndex) resize(s *slab, size int) {
	old := x.slots
	x.slots = make([]ref, size)
	mask := size - 1
	for _, r := range old {
		if r == 0 {
			continue
		}
		i := x.home(&s.at(r).key)
		for x.slots[i] != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = r
	}
}

func (x *auditIndex) len() int { return x.n }

func (x *auditIndex) bytes() int64 { return int64(len(x.slots)) * 4 }
