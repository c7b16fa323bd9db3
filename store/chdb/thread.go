package chdb

import "runtime"

// DefaultNice is the nice value of the engine's threads unless Options.Nice says otherwise.
const DefaultNice = 10

// thread runs the engine's C calls on one OS thread of its own, whose nice value is raised
// before the engine starts. Threads inherit their creator's nice value, so every thread the
// engine starts from there (its query pipelines, merges, materialized views, flushes) runs
// below the rest of the process: under load the scheduler gives the webhook's acknowledgements
// the cores first, and the store's work, which can wait, the rest: at the same priority the
// store's inserts put acknowledgements at the back of the run queue (BENCHMARKS.md, "Under
// load").
//
// Only the calls into the engine go to the thread, with the copying of their arguments and
// results: longer Go work there (encoding an insert's data) would hold one of the runtime's Ps
// while the kernel deprioritises the thread.
//
// The threads the engine starts go further down, to SCHED_IDLE, once the idler finds them; the
// thread itself runs Go code and stays at nice (see idler).
type thread struct {
	jobs chan func()
	nice int // the nice value the thread got; 0 when it could not be raised
}

// startThread starts the thread with nice value nice (none when nice <= 0), exempt from idle's
// sweeps (idle may be nil), confined by rs (nil: not confined).
func startThread(nice int, idle *idler, rs *ruleset) (*thread, error) {
	t := &thread{jobs: make(chan func())}
	started := make(chan int)
	failed := make(chan error)
	var run func()
	run = func() {
		runtime.LockOSThread()
		if isMainThread() {
			// Its nice value is the one ps shows for the process. While this goroutine holds
			// it, the next one starts on another thread; then it goes back unchanged.
			go run()
			runtime.UnlockOSThread()
			return
		}
		// Never unlocked: an unprivileged thread cannot lower its nice value again, so it must
		// not go back to the runtime's pool; it exits with this goroutine. (The runtime never
		// clones a locked thread for a new one of its own.)
		if err := rs.restrictThread(); err != nil {
			failed <- err
			return
		}
		if idle != nil {
			idle.exempt(threadID())
		}
		got := 0
		if nice > 0 && setThreadNice(nice) == nil {
			got = nice
		}
		started <- got
		for fn := range t.jobs {
			fn()
		}
	}
	go run()
	select {
	case t.nice = <-started:
		return t, nil
	case err := <-failed:
		return nil, err
	}
}

// do runs fn on the thread and returns when it is done.
func (t *thread) do(fn func()) {
	done := make(chan struct{})
	t.jobs <- func() {
		defer close(done)
		fn()
	}
	<-done
}

// stop ends the thread once the jobs handed to it are done.
func (t *thread) stop() { close(t.jobs) }
