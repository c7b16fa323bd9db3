// Package dedup remembers which audit events peertrail has already accepted, so that a batch
// the apiserver resends (after a timeout, a 5xx, or a crash of peertrail before its answer
// arrived) is recognised and counted instead of stored twice.
//
// Keys are kept in memory in one bucket per minute of receipt and forgotten once older than
// the horizon. The memory survives restarts without a log of its own: the Persister, a spool
// consumer, writes each finished minute's keys to a small file and only then lets the spool move
// on, so on start Load reads the files and rescans the spool frames that came after them.
package dedup

import (
	"sync"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
)

const bucketWidth = time.Minute

// Index is the set of remembered keys. It is safe for concurrent use.
type Index struct {
	horizon time.Duration

	mu      sync.RWMutex
	buckets map[int64]map[record.Key]struct{} // by Unix minute of receipt
	size    int
}

// NewIndex returns an empty index that remembers keys for at least horizon.
func NewIndex(horizon time.Duration) *Index {
	return &Index{horizon: horizon, buckets: make(map[int64]map[record.Key]struct{})}
}

// Horizon is how long keys are remembered at least.
func (ix *Index) Horizon() time.Duration { return ix.horizon }

func minuteOf(t time.Time) int64 { return t.Unix() / int64(bucketWidth/time.Second) }

// Contains reports whether k was added and not yet forgotten.
func (ix *Index) Contains(k record.Key) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.containsLocked(k)
}

func (ix *Index) containsLocked(k record.Key) bool {
	for _, b := range ix.buckets {
		if _, ok := b[k]; ok {
			return true
		}
	}
	return false
}

// Add remembers keys as received at t.
func (ix *Index) Add(t time.Time, keys ...record.Key) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	m := minuteOf(t)
	b := ix.buckets[m]
	if b == nil {
		b = make(map[record.Key]struct{}, len(keys))
		ix.buckets[m] = b
	}
	for _, k := range keys {
		if _, ok := b[k]; !ok {
			b[k] = struct{}{}
			ix.size++
		}
	}
}

// Filter returns, for each key, whether it is a duplicate: remembered already, or equal to an
// earlier key of the same slice. It adds the new keys as received at t. Checking and adding
// under one lock makes concurrent batches carrying the same event agree on which one is first.
func (ix *Index) Filter(t time.Time, keys []record.Key) (dup []bool, dups int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	dup = make([]bool, len(keys))
	m := minuteOf(t)
	b := ix.buckets[m]
	if b == nil {
		b = make(map[record.Key]struct{}, len(keys))
		ix.buckets[m] = b
	}
	for i, k := range keys {
		if ix.containsLocked(k) {
			dup[i] = true
			dups++
			continue
		}
		b[k] = struct{}{}
		ix.size++
	}
	return dup, dups
}

// Forget removes keys added by a Filter whose batch could not be stored after all, so that a
// resend of it is accepted.
func (ix *Index) Forget(keys []record.Key, dup []bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, k := range keys {
		if dup != nil && dup[i] {
			continue
		}
		for _, b := range ix.buckets {
			if _, ok := b[k]; ok {
				delete(b, k)
				ix.size--
				break
			}
		}
	}
}

// Expire forgets the buckets that are wholly older than the horizon at now.
func (ix *Index) Expire(now time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	oldest := minuteOf(now.Add(-ix.horizon)) - 1
	for m, b := range ix.buckets {
		if m < oldest {
			ix.size -= len(b)
			delete(ix.buckets, m)
		}
	}
}

// Len is the number of remembered keys.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.size
}
