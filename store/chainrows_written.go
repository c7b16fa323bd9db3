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
// Keys are 128-bit hashes of the ids (two seeds): 24 bytes an entry in the map and 24 in the
// queue, whatever the id's length, and no pointer for the garbage collector to follow. Two ids
// sharing a key is a 2^-128 event per pair.
type writtenChains struct {
	seeds      [2]maphash.Seed
	maxEntries int
	versions   map[chainKey]uint64
	// queue holds the entries in the order they were first recorded, oldest at head, for
	// dropping; it grows to maxEntries and then wraps.
	queue []queuedChain
	head  int
	// floor is a time at or before which a chain may be in the store without being in the
	// record; zero (before the first read of the table) means every chain may be.
	floor time.Time
	known bool // floor was read from the table since the start or the last failed insert
}

type chainKey [2]uint64

type queuedChain struct {
	key   chainKey
	first int64 // first receipt, µs since 1970
}

func newWrittenChains(maxEntries int) *writtenChains {
	return &writtenChains{
		seeds:      [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		maxEntries: maxEntries,
		versions:   map[chainKey]uint64{},
	}
}

func (r *writtenChains) key(id string) chainKey {
	return chainKey{maphash.String(r.seeds[0], id), maphash.String(r.seeds[1], id)}
}

// version returns the version the record holds of the chain with key k.
func (r *writtenChains) version(k chainKey) (uint64, bool) {
	v, ok := r.versions[k]
	return v, ok
}

// mayBeStored reports whether a chain first received at first may be in the store without
// being in the record.
func (r *writtenChains) mayBeStored(first time.Time) bool {
	return !r.known || !first.After(r.floor)
}

// put records that the store holds version v of the chain with key k, first received at first.
func (r *writtenChains) put(k chainKey, v uint64, first time.Time) {
	if old, ok := r.versions[k]; ok {
		r.versions[k] = max(old, v)
		return
	}
	if r.maxEntries <= 0 {
		r.raiseFloor(first)
		return
	}
	q := queuedChain{key: k, first: first.UnixMicro()}
	if len(r.queue) < r.maxEntries {
		r.queue = append(r.queue, q)
	} else {
		old := r.queue[r.head]
		delete(r.versions, old.key)
		r.raiseFloor(time.UnixMicro(old.first))
		r.queue[r.head] = q
		r.head = (r.head + 1) % len(r.queue)
	}
	r.versions[k] = v
}

// forget drops the chain with key k: what the store holds of it is unknown (an insert of it
// failed and may have landed). Its place in the queue stays until it comes round; the floor
// must cover it, which the caller sees to (raiseFloor after reading the table again).
func (r *writtenChains) forget(k chainKey) { delete(r.versions, k) }

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
func (r *writtenChains) entries() int { return len(r.versions) }

// bytes estimates the record's memory: a map slot per entry (key and version, 24 bytes, plus
// the map's control bytes and spare capacity, about a third more) and the queue.
func (r *writtenChains) bytes() int {
	return len(r.versions)*24*4/3 + cap(r.queue)*int(unsafe.Sizeof(queuedChain{}))
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
