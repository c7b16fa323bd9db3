package spool

import (
	"context"
	"errors"
	"time"
)

// Consumer is a stage that reads everything the receiver spooled: the duplicate index's
// persister, the correlator, the store writer.
//
// Run calls Consume from a single goroutine, with the entries that follow the previous call's
// in spool order; with none when the spool has been idle for RunOptions.Idle, so that a consumer
// can act on time passing (closing chains, flushing buffers). The entries and their payloads
// are lent: valid until Consume succeeds (through its retries after errors), then reused for
// the entries that follow, so a consumer copies what it keeps of a payload.
//
// Consume returns the position before which the consumer needs nothing more, even after a
// crash: a consumer that writes each entry durably returns the last entry's End; one that keeps
// state in memory returns the Pos of the oldest entry that state still depends on. After a
// restart delivery resumes at the last committed such position, so a consumer sees some entries
// again and must tolerate that. When Consume returns an error, Run waits and passes the same
// entries again: a consumer that cannot process an entry at all (it is malformed) must count it,
// report it, and move past it rather than fail forever.
type Consumer interface {
	Consume(ctx context.Context, entries []Entry) (Position, error)
}

// RunOptions tune Run; zero values take defaults.
type RunOptions struct {
	// MaxEntries and MaxBytes bound one Consume call (defaults 256 entries and defaultCallBytes;
	// a call may pass MaxBytes by one frame).
	MaxEntries int
	MaxBytes   int
	// Idle is how long Run waits for new entries before calling Consume with none.
	Idle time.Duration
	// CommitEvery bounds how often the position is persisted (each commit is an fsync). A
	// commit due is made after a Consume that succeeds, or during the retries of one that fails.
	CommitEvery time.Duration
	// RetryMin and RetryMax bound the exponential backoff after a failed Consume.
	RetryMin, RetryMax time.Duration
	// OnError is told about each failed Consume (for metrics); may be nil.
	OnError func(error)
	// RetrySooner, if set, is asked each time the spool grows while a failed Consume waits out
	// its backoff; true retries at once. It is called from Run's goroutine, between Consume
	// calls. (The agent's shipper: its backoff must not let the spool fill while it would give
	// up an away aggregator's frames instead of posting them.)
	RetrySooner func() bool
}

func (o *RunOptions) defaults() {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 256
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultCallBytes
	}
	if o.Idle <= 0 {
		o.Idle = time.Second
	}
	if o.CommitEvery <= 0 {
		o.CommitEvery = time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
}

// Run feeds consumer name's entries to c until ctx ends, committing the positions c returns.
// It returns nil when ctx ends (after a last commit) and an error only when the spool itself
// fails or closes.
func (s *Spool) Run(ctx context.Context, name string, c Consumer, opts RunOptions) error {
	opts.defaults()
	log := s.log.With("consumer", name)
	from, err := s.Committed(name)
	if err != nil {
		return err
	}
	r := s.NewReader(from)
	defer r.Close()

	committed, safe := from, from
	lastCommit := time.Now()
	commit := func(force bool) {
		if safe <= committed || (!force && time.Since(lastCommit) < opts.CommitEvery) {
			return
		}
		if err := s.Commit(name, safe); err != nil {
			log.Error("spool: commit consumer position", "err", err)
			return
		}
		committed, lastCommit = safe, time.Now()
	}
	defer commit(true)

	var batch []Entry
	for {
		// The last batch was consumed: its payloads' memory takes the next ones.
		r.recycle()
		batch, err = s.collect(ctx, r, batch[:0], opts)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrCorrupt) {
				continue // counted and logged by the reader, which has moved past it
			}
			return err
		}
		backoff := opts.RetryMin
		for {
			pos, err := c.Consume(ctx, batch)
			if err == nil {
				if pos > safe {
					safe = pos
				}
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			if opts.OnError != nil {
				opts.OnError(err)
			}
			log.Warn("spool consumer failed; retrying the same entries", "err", err, "retry_in", backoff, "entries", len(batch))
			// What it passed before is committed while it fails, or a consumer that skips
			// entries it cannot deliver (the agent's shipper) would free nothing.
			commit(false)
			if !s.waitRetry(ctx, backoff, opts.RetrySooner, commit) {
				return nil
			}
			backoff = min(2*backoff, opts.RetryMax)
		}
		commit(false)
	}
}

// waitRetry waits backoff, or less when sooner says so as the spool grows (committing what is
// due meanwhile, which may be what lets sooner say so); false when ctx ended.
func (s *Spool) waitRetry(ctx context.Context, backoff time.Duration, sooner func() bool, commit func(bool)) bool {
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	var grew <-chan struct{} // nil (never ready) without sooner
	if sooner != nil {
		grew = s.grown()
	}
	for {
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		case <-grew:
			grew = s.grown()
			commit(false)
			if sooner() {
				return true
			}
		}
	}
}

// collect waits up to opts.Idle for a first entry, then takes what is immediately available
// within the limits.
func (s *Spool) collect(ctx context.Context, r *Reader, batch []Entry, opts RunOptions) ([]Entry, error) {
	idle, cancel := context.WithTimeout(ctx, opts.Idle)
	e, err := r.Next(idle)
	cancel()
	switch {
	case err == nil:
		batch = append(batch, e)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return batch, nil
	default:
		return batch, err
	}
	size := len(e.Payload)
	for len(batch) < opts.MaxEntries && size < opts.MaxBytes {
		e, ok, err := r.TryNext()
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				break
			}
			return batch, err
		}
		if !ok {
			break
		}
		batch = append(batch, e)
		size += len(e.Payload)
	}
	return batch, nil
}
