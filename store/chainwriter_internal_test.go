package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The record forgets its oldest chains beyond its bound, and the floor rises past them, so a
// chain it forgot is one that may be stored (looked up), never one taken for new.
func TestWrittenChainsBound(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := newWrittenChains(3)
	r.setFloor(base)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	ids := []string{"c1", "c2", "c3", "c4", "c5"}
	for i, id := range ids {
		if r.mayBeStored(at(i + 1)) {
			t.Fatalf("%s, first received after the floor, may be stored", id)
		}
		r.put(r.key(id), uint64(i+1), 2, at(i+1))
		r.put(r.key(id), 0, 4, at(i+1)) // a lower version does not replace a higher one, nor its records
	}
	if r.entries() != 3 {
		t.Errorf("%d entries, want 3", r.entries())
	}
	for i, id := range ids {
		v, records, ok := r.version(r.key(id))
		if remembered := i >= 2; ok != remembered || (ok && (v != uint64(i+1) || records != 2)) {
			t.Errorf("%s: version %d, records %d, %v", id, v, records, ok)
		}
		if forgotten := i < 2; forgotten && !r.mayBeStored(at(i+1)) {
			t.Errorf("%s was forgotten, but a chain first received with it is not looked up", id)
		}
	}
	if r.mayBeStored(at(3)) {
		t.Errorf("the floor rose past the chains still remembered")
	}
	r.forget(r.key("c5"))
	r.unsure()
	if !r.mayBeStored(at(100)) {
		t.Errorf("after a failed insert, a chain is taken for new before the table is read again")
	}
	if r.bytes() <= 0 {
		t.Errorf("bytes %d", r.bytes())
	}
}

// The record against a model of what it promises, over random puts, forgets and drops: a chain
// is remembered, with the highest version put, if it was recorded among the last maxEntries
// chains recorded and not forgotten since, with the records of its highest version's row; the
// floor is the latest first receipt of a chain that fell out, rounded up to the second.
func TestWrittenChainsModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, maxEntries := range []int{1, 7, 100, 5000} {
		r := newWrittenChains(maxEntries)
		type entry struct {
			version uint64
			records int
			seq     int // when it was last recorded as new
			first   time.Time
		}
		model := map[chainKey]*entry{}
		var recordings []time.Time // the first receipt of each chain recorded as new, in order
		var recorded []chainKey    // and its key
		byKey := map[chainKey]time.Time{}
		ids := 3 * maxEntries
		for op := range 20 * maxEntries {
			k := r.key(fmt.Sprint("chain-", rng.IntN(ids)))
			switch {
			case rng.IntN(10) == 0:
				r.forget(k)
				delete(model, k)
			default:
				v, records := uint64(rng.IntN(50)), 1+rng.IntN(64)
				first, ok := byKey[k]
				if !ok {
					first = base.Add(time.Duration(op) * time.Millisecond)
					byKey[k] = first
				}
				if e := model[k]; e != nil {
					if v > e.version {
						e.version, e.records = v, records
					}
				} else {
					recordings, recorded = append(recordings, first), append(recorded, k)
					model[k] = &entry{version: v, records: records, seq: len(recordings), first: first}
					// The ring's oldest place comes round.
					if out := len(recorded) - maxEntries - 1; out >= 0 {
						if e := model[recorded[out]]; e != nil && e.seq == out+1 {
							delete(model, recorded[out])
						}
					}
				}
				r.put(k, v, records, first)
			}
		}
		// The floor: the newest first receipt of the chains recorded before the last
		// maxEntries, forgotten or not: their places in the ring have come round.
		var floor time.Time
		for _, first := range recordings[:max(len(recordings)-maxEntries, 0)] {
			if up := first.Truncate(time.Second); up.Before(first) {
				first = up.Add(time.Second)
			}
			if first.After(floor) {
				floor = first
			}
		}
		if !r.floor.Equal(floor) {
			t.Errorf("max %d: floor %v, model %v", maxEntries, r.floor, floor)
		}
		if r.entries() != len(model) {
			t.Errorf("max %d: %d entries, model %d", maxEntries, r.entries(), len(model))
		}
		for id := range ids {
			k := r.key(fmt.Sprint("chain-", id))
			v, records, ok := r.version(k)
			e := model[k]
			if ok != (e != nil) || ok && (v != e.version || records != e.records) {
				t.Fatalf("max %d: chain-%d: record (%d, %d, %v), model %+v", maxEntries, id, v, records, ok, e)
			}
		}
		if perEntry := r.bytes() / maxEntries; maxEntries >= 5000 && perEntry > 48 {
			t.Errorf("max %d: %d bytes an entry (ring %d, index %d)", maxEntries, perEntry, cap(r.ring), len(r.index))
		}
	}
}
