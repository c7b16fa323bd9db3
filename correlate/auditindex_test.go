package correlate

import (
	"math/rand/v2"
	"testing"
)

// TestAuditIndexAgreesWithAMap runs random adds, head changes and deletions through the index
// and a Go map side by side, through growth to 64k keys and shrinking back, and checks after
// each step that every key finds its head and deleted keys find none.
func TestAuditIndexAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s slab
	x := newAuditIndex()
	want := map[[16]byte]ref{}
	var keys [][16]byte
	newKey := func() [16]byte {
		var k [16]byte
		for i := range k {
			k[i] = byte(rng.Uint32())
		}
		return k
	}
	check := func(step int) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("step %d: index holds %d keys, want %d", step, x.len(), len(want))
		}
		for _, k := range keys {
			if got := x.get(&s, k); got != want[k] {
				t.Fatalf("step %d: key %x finds %d, want %d", step, k[:4], got, want[k])
			}
		}
	}
	grown := 0
	for step := range 200_000 {
		switch op := rng.IntN(10); {
		case op < 6 || len(want) == 0 || (step < 120_000 && op < 8): // add a key
			c := s.alloc()
			c.key = newKey()
			if prev := x.set(&s, c.key, c.self); prev != 0 {
				t.Fatalf("step %d: a new key replaced head %d", step, prev)
			}
			want[c.key] = c.self
			keys = append(keys, c.key)
		case op < 8: // another chain of a key becomes its head
			k := keys[rng.IntN(len(keys))]
			if old, ok := want[k]; ok {
				c := s.alloc()
				c.key = k
				if prev := x.set(&s, k, c.self); prev != old {
					t.Fatalf("step %d: set replaced head %d, want %d", step, prev, old)
				}
				want[k] = c.self
				s.release(s.at(old))
			}
		default: // a key's last chain leaves
			i := rng.IntN(len(keys))
			k := keys[i]
			if r, ok := want[k]; ok {
				x.del(&s, k)
				delete(want, k)
				s.release(s.at(r))
			}
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
		}
		grown = max(grown, len(x.slots))
		if step%20_000 == 0 {
			check(step)
		}
	}
	check(-1)
	for _, k := range keys {
		if r, ok := want[k]; ok {
			x.del(&s, k)
			delete(want, k)
			s.release(s.at(r))
		}
	}
	keys = nil
	check(-2)
	if grown < 1<<16 || len(x.slots) != minAuditSlots {
		t.Errorf("the index grew to %d slots and shrank back to %d; want growth past 65536 and back to %d", grown, len(x.slots), minAuditSlots)
	}
	if 2*x.n > len(x.slots) {
		t.Errorf("%d keys in %d slots: over half full", x.n, len(x.slots))
	}
}
