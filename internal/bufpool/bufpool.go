// Package bufpool keeps batch-sized buffers for reuse, across garbage collections.
//
// sync.Pool empties itself every other GC cycle, so the buffers of the acknowledge path (a
// webhook body, its frame, the records being compressed: most of a megabyte each) were
// allocated afresh several times a second. On a VM that hands memory back to its host
// (Firecracker with free-page reporting), touching fresh pages faults, and reallocating one such
// buffer measured 3-12 ms on the acknowledge path (BENCHMARKS.md). A free list here holds its
// values until the process ends, so they stay faulted in; its bounds keep that memory small.
package bufpool

// Free is a bounded free list of reusable values. It is safe for concurrent use. A nil Free
// keeps nothing, so a struct holding one works as its zero value.
type Free[T any] struct {
	free chan T
	keep func(T) bool
}

// NewFree returns a Free that keeps at most n values, and of those only the ones keep accepts.
func NewFree[T any](n int, keep func(T) bool) *Free[T] {
	return &Free[T]{free: make(chan T, n), keep: keep}
}

// Get returns a kept value, or false when none is kept.
func (f *Free[T]) Get() (T, bool) {
	var zero T
	if f == nil {
		return zero, false
	}
	select {
	case v := <-f.free:
		return v, true
	default:
		return zero, false
	}
}

// Put hands v back for reuse. The caller must not touch v afterwards. Values keep refuses, and
// any beyond the count bound, are left to the garbage collector.
func (f *Free[T]) Put(v T) {
	if f == nil || !f.keep(v) {
		return
	}
	select {
	case f.free <- v:
	default:
	}
}

// Pool is a Free of byte slices, bounded in capacity too.
type Pool struct{ free *Free[[]byte] }

// New returns a Pool that keeps at most n buffers, each of at most maxCap bytes of capacity.
func New(n, maxCap int) *Pool {
	return &Pool{free: NewFree(n, func(b []byte) bool { return cap(b) > 0 && cap(b) <= maxCap })}
}

// Get returns an empty slice with a kept buffer's capacity, or nil when none is kept.
func (p *Pool) Get() []byte {
	if p == nil {
		return nil
	}
	b, _ := p.free.Get()
	return b[:0]
}

// Put hands b back for reuse. The caller must not touch b afterwards. Buffers over the
// capacity bound, and any beyond the count bound, are left to the garbage collector.
func (p *Pool) Put(b []byte) {
	if p != nil {
		p.free.Put(b)
	}
}
