package ingest

import (
	"errors"
	"io"
	"sync"
)

// errOverBudget is a body read refused because the bodies in memory hold the whole budget.
var errOverBudget = errors.New("memory budget of bodies being read exhausted")

// byteBudget bounds the bytes of request bodies held at once, across all requests, so that
// many slow or large senders together cannot exhaust memory. Safe for concurrent use.
type byteBudget struct {
	mu        sync.Mutex
	used, max int64
}

func newByteBudget(max int64) *byteBudget { return &byteBudget{max: max} }

// tryTake takes n bytes if they fit, without waiting: a request that does not fit is refused
// (503, retried by the apiserver) rather than queued behind the ones holding the memory.
func (b *byteBudget) tryTake(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// budgetStep is how much budget a reader takes at a time beyond what it was promised: a slow
// sender holds at most one step more than it has sent.
const budgetStep = 64 << 10

// budgetReader takes budget ahead of the bytes it returns; its owner releases reserved.
type budgetReader struct {
	r        io.Reader
	budget   *byteBudget
	read     int64
	reserved int64
}

func (br *budgetReader) reserve(n int64) bool {
	if n <= br.reserved {
		return true
	}
	if !br.budget.tryTake(n - br.reserved) {
		return false
	}
	br.reserved = n
	return true
}

func (br *budgetReader) Read(p []byte) (int, error) {
	if avail := br.reserved - br.read; int64(len(p)) > avail {
		// bytes.Buffer offers its whole free capacity; take budget for a step at a time.
		if int64(len(p)) > budgetStep {
			p = p[:max(budgetStep, avail)]
		}
		if !br.reserve(br.read + int64(len(p))) {
			if avail <= 0 {
				return 0, errOverBudget
			}
			p = p[:avail]
		}
	}
	n, err := br.r.Read(p)
	br.read += int64(n)
	return n, err
}
