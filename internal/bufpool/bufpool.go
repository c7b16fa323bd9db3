// Package bufpool keeps batch-sized byte buffers for reuse, across garbage collections.
//
// sync.Pool empties itself every other GC cycle, so the buffers of the acknowledge path (a
// webhook body, its frame, the records being compressed: most of a megabyte each) were
// allocated afresh several times a second. On a VM that hands memory back to its host
// (Firecracker with free-page reporting), touching fresh pages faults, and reallocating one such
// buffer measured 3-12 ms on the acknowledge path (BENCHMARKS.md). A Pool holds its buffers
// until the process ends, so they stay faulted in; its bounds keep that memory small.
package bufpool

// Pool is a bounded free list of byte slices. It is safe for concurrent use. A nil Pool keeps
// nothing, so a struct holding one works as its zero value.
type Pool struct {
	free   chan []byte
	maxCap int
}

// New returns a Pool that keeps at most n buffers, each of at most maxCap bytes of capacity.
func New(n, maxCap int) *Pool {
	return &Pool{free: make(chan []byte, n), maxCap: maxCap}
}

// Get returns an empty slice with a kept buffer's capacity, or nil when none is kept.
func (p *Pool) Get() []byte {
	if p == nil {
		return nil
	}
	select {
	case b := <-p.free:
		return b[:0]
	default:
		return nil
	}
}

// Put hands b back for reuse. The caller must not touch b afterwards. Buffers over the
// capacity bound, and any beyond the count bound, are left to the garbage collector.
func (p *Pool) Put(b []byte) {
	if p == nil || cap(b) == 0 || cap(b) > p.maxCap {
		return
	}
	select {
	case p.free <- b:
	default:
	}
}
