package chdb

import (
	"sync"
	"time"
)

// idler moves the threads the engine starts from nice (see thread) to SCHED_IDLE, which the
// kernel runs only on CPU time that no other thread wants and which any other thread of the
// process preempts the moment it wakes. At nice 10 alone, a webhook goroutine that wakes while
// the engine's inserts and merges hold both cores waits for the engine's thread to use up its
// slice first (measured: BENCHMARKS.md, "A fifteenth session").
//
// Only threads that never run Go code may be idle. A thread running Go code holds one of the
// runtime's Ps; at SCHED_IDLE with the cores busy (another process on the node will do) it may
// wait long enough to hold up the collector's stop-the-world, and every goroutine with it. The
// engine's call threads (thread) run Go code, so they are exempt and stay at nice; the threads
// the engine starts from them inherit nice, not SCHED_IDLE, so the idler finds them and moves
// them one by one, every idleSweep: each thread at the engine's nice value and the normal
// policy that is not a call thread. The Go runtime never starts its own threads from a call
// thread (they are locked), so its threads stay at the process's nice value and are never
// taken for the engine's.
//
// Concurrency: exempt may be called from any goroutine; sweeps run on the idler's own.
// Lifecycle: newIdler, start, any number of exempt calls, stop.
type idler struct {
	nice int // the engine's nice value, which tells its threads from the runtime's

	mu    sync.Mutex   // held by exempt and by a whole sweep
	calls map[int]bool // the call threads' ids: never moved
	seen  map[int]bool // threads looked at already, moved or not

	quit, done chan struct{}
}

// idleSweep is how often the idler looks for new engine threads. The engine starts most of its
// threads at once (at its start, and when a pool grows under load); until the next sweep a new
// one runs at nice, as before.
const idleSweep = time.Second

func newIdler(nice int) *idler {
	return &idler{nice: nice, calls: map[int]bool{}, seen: map[int]bool{},
		quit: make(chan struct{}), done: make(chan struct{})}
}

// exempt keeps thread tid at nice for good. A call thread calls it with its own id before it
// raises its nice value, so no sweep can find it at the engine's nice value first.
func (d *idler) exempt(tid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls[tid] = true
}

func (d *idler) start() {
	go func() {
		defer close(d.done)
		t := time.NewTicker(idleSweep)
		defer t.Stop()
		for {
			d.sweep()
			select {
			case <-d.quit:
				return
			case <-t.C:
			}
		}
	}()
}

// stop ends the sweeps.
func (d *idler) stop() {
	close(d.quit)
	<-d.done
}

// sweep moves the engine threads started since the last one. A thread it cannot read or move
// (gone meanwhile, or not permitted) is left as it is.
//
// It holds mu throughout, so no call thread exempts itself during a sweep: one that did after
// the sweep looked at it was still at the process's nice value then (it exempts itself first),
// and one that did before is in the list of threads, unless it has ended.
func (d *idler) sweep() {
	d.mu.Lock()
	defer d.mu.Unlock()
	tids, err := threadIDs()
	if err != nil {
		return
	}
	present := make(map[int]bool, len(tids))
	for _, tid := range tids {
		present[tid] = true
		if d.seen[tid] || d.calls[tid] {
			continue
		}
		nice, normal, err := threadPriority(tid)
		if err != nil {
			continue
		}
		d.seen[tid] = true
		// Another policy is one the engine chose for the thread itself.
		if nice == d.nice && normal {
			_ = setThreadIdle(tid, nice) // not permitted: it stays at nice
		}
	}
	// Thread ids are reused: forget the threads that ended, so that a new one with an old id is
	// looked at, and so that the maps stay as small as the process.
	for tid := range d.seen {
		if !present[tid] {
			delete(d.seen, tid)
		}
	}
	for tid := range d.calls {
		if !present[tid] {
			delete(d.calls, tid)
		}
	}
}
