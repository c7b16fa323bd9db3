package store

import (
	"hash/maphash"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/metrics"
)

// writtenChains is the chain sink's bounded record of what the chains table holds of the chains
// this writer wrote (or found there): the highest version, by chain id. With the floor it lets
// WriteChains decide without asking the store, which it did for every chain of every batch:
//
//   - a chain in the record with a version at least as high is written already: skipped;
//   - a chain in the record whose version there is lower and not final is written over (the
//     open row was never counted by the rollups);
//   - a chain first received after the floor and not in the record cannot be in the store:
//     written;
//   - anything else (a final row superseded, whose row must be written again as retracted; a
//     chain first received at or before the floor: a replay after a restart, a chain the record
//     dropped, a failed insert that may have landed) is looked up in the store as before.
//
// The record is bounded (maxEntries): the oldest entries go first, and the floor rises to the
// first receipt of each one dropped, so a chain it no longer knows is looked up, never taken for
// new. Its size decides only how often a late revision costs a lookup, not what is written.
//
// Keys are 128-bit hashes of the ids (two seeds), so an entry has the same size whatever the
// id's length; two ids sharing a key is a 2^-128 event per pair. The record holds no pointer
// for the garbage collector to follow: entries sit in a ring in the order they were first
// recorded (the order they are dropped in), found through an open-addressing index of ring
// positions. That is 32 bytes an entry and 8 of index (at most half full), against about 84
// for the Go map and drop queue it replaced (42 MB at the default bound, measured).
type writtenChains struct {
	seeds      [2]maphash.Seed
	maxEntries int
	// ring holds the entries, oldest at head; it grows to maxEntries and then wraps. An entry
	// forgotten (or dropped and recorded again) stays until it comes round, unindexed.
	ring []writtenEntry
	head int
	// index holds 1 + the ring position of each live entry, 0 in an empty slot, at the slot
	// its key's low bits name or the next free one after it (linear probing). Its size is a
	// power of two at least twice the live entries.
	index []int32
	live  int
	// floor is a time at or before which a chain may be in the store without being in the
	// record; zero (before the first read of the table) means every chain may be.
	floor time.Time
	known bool // floor was read from the table since the start or the last failed insert
	// shared says another writer writes the table too (WriterOptions.Deduplicate): any chain
	// this one did not write may be there.
	shared bool
}

type chainKey [2]uint64

type writtenEntry struct {
	key     chainKey
	version uint64
	first   int64 // first receipt, µs since 1970
}

// minIndex is the index's size while the record is small.
const minIndex = 1 << 10

func newWrittenChains(maxEntries int) *writtenChains {
	return &writtenChains{
		seeds:      [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		maxEntries: maxEntries,
		index:      make([]int32, minIndex),
	}
}

func (r *writtenChains) key(id string) chainKey {
	return chainKey{maphash.String(r.seeds[0], id), maphash.String(r.seeds[1], id)}
}

// find returns the index slot of k and its ring position + 1, or the empty slot where k
// would go and 0.
func (r *writtenChains) find(k chainKey) (slot int, pos int32) {
	mask := len(r.index) - 1
	for i := int(k[0]) & mask; ; i = (i + 1) & mask {
		p := r.index[i]
		if p == 0 || r.ring[p-1].key == k {
			return i, p
		}
	}
}

// unindex empties slot i, moving later entries of its probe run back so that none is cut off
// from its home slot (deletion without tombstones).
func (r *writtenChains) unindex(i int) {
	mask := len(r.index) - 1
	for j := (i + 1) & mask; r.index[j] != 0; j = (j + 1) & mask {
		home := int(r.ring[r.index[j]-1].key[0]) & mask
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			r.index[i] = r.index[j]
			i = j
		}
	}
	r.index[i] = 0
	r.live--
}

// grow doubles the index and places the live entries again.
func (r *writtenChains) grow() {
	old := r.index
	r.index = make([]int32, 2*len(old))
	for _, p := range old {
		if p != 0 {
			slot, _ := r.find(r.ring[p-1].key)
			r.index[slot] = p
		}
	}
}

// version returns the version the record holds of the chain with key k.
func (r *writtenChains) version(k chainKey) (uint64, bool) {
	if _, p := r.find(k); p != 0 {
		return r.ring[p-1].version, true
	}
	return 0, false
}

// mayBeStored reports whether a chain first received at first may be in the store without
// being in the record. The floor was read from the table: a chain first received in its
// microsecond is not newer.
func (r *writtenChains) mayBeStored(first time.Time) bool {
	return r.shared || !r.known || !asStored(first).After(r.floor)
}

// put records that the store holds version v of the chain with key k, first received at first.
func (r *writtenChains) put(k chainKey, v uint64, first time.Time) {
	if _, p := r.find(k); p != 0 {
		e := &r.ring[p-1]
		e.version = max(e.version, v)
		return
	}
	if r.maxEntries <= 0 {
		r.raiseFloor(first)
		return
	}
	e := writtenEntry{key: k, version: v, first: first.UnixMicro()}
	var pos int
	if len(r.ring) < r.maxEntries {
		if len(r.ring) == cap(r.ring) { // double up to the bound, not past it as append would
			ring := make([]writtenEntry, len(r.ring), min(max(2*len(r.ring), minIndex), r.maxEntries))
			copy(ring, r.ring)
			r.ring = ring
		}
		r.ring = append(r.ring, e)
		pos = len(r.ring) - 1
	} else {
		pos = r.head
		old := r.ring[pos]
		if slot, p := r.find(old.key); p == int32(pos+1) {
			r.unindex(slot)
		}
		r.raiseFloor(time.UnixMicro(old.first))
		r.ring[pos] = e
		r.head = (r.head + 1) % len(r.ring)
	}
	if 2*(r.live+1) > len(r.index) {
		r.grow()
	}
	slot, _ := r.find(k)
	r.index[slot] = int32(pos + 1)
	r.live++
}

// forget drops the chain with key k: what the store holds of it is unknown (an insert of it
// failed and may have landed). Its place in the ring stays until it comes round; the floor
// must cover it, which the caller sees to (raiseFloor after reading the table again).
func (r *writtenChains) forget(k chainKey) {
	if slot, p := r.find(k); p != 0 {
		r.unindex(slot)
	}
}

func (r *writtenChains) raiseFloor(t time.Time) {
	if t.After(r.floor) {
		r.floor = t
	}
}

// setFloor is the newest first receipt the table holds, read at the start or after a failed
// insert: nothing first received after it can be stored but what the record holds.
func (r *writtenChains) setFloor(newest time.Time) {
	r.raiseFloor(newest)
	r.known = true
}

// unsure says that the store may hold rows the record does not know (a failed insert may
// have landed): the floor is read again before the next decision.
func (r *writtenChains) unsure() { r.known = false }

// entries is how many chains the record holds.
func (r *writtenChains) entries() int { return r.live }

// bytes is the record's memory: the ring and the index.
func (r *writtenChains) bytes() int {
	return cap(r.ring)*int(unsafe.Sizeof(writtenEntry{})) + len(r.index)*4
}

// chainMetrics say how big the record is and how often the store is still asked. They are set
// after each batch, not read from the record at scrape time: a scrape must not wait for the
// chain sink's lock while a batch is written.
type chainMetrics struct {
	remembered, rememberedBytes prometheus.Gauge
	lookedUp                    prometheus.Counter
}

func newChainMetrics() *chainMetrics {
	return &chainMetrics{
		remembered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.StoreChainsRemembered,
			Help: "Chains whose stored version the chain sink remembers, so that it need not ask the store (bounded).",
		}),
		rememberedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.StoreChainsRememberedBytes,
			Help: "Estimated bytes of the chain sink's record of the chains it wrote.",
		}),
		lookedUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.StoreChainsLookedUpTotal,
			Help: "Chains whose stored version the chain sink read from the store before writing them (a replay after a restart, a late revision of a final chain, a chain it no longer remembers).",
		}),
	}
}

func (m *chainMetrics) observe(r *writtenChains) {
	m.remembered.Set(float64(r.entries()))
	m.rememberedBytes.Set(float64(r.bytes()))
}

func (m *chainMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.remembered, m.rememberedBytes, m.lookedUp}
}
