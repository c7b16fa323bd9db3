package correlate

import (
	"slices"
	"sort"
	"time"
)

// The stretches of time each apiserver's audit stream covers: what it recorded (its activity)
// and what its webhook delivered.

// span is a stretch of time.
type span struct{ from, to time.Time }

// activityGap is the longest silence of an apiserver's audit stream that still counts as
// one stretch of activity. A live apiserver audits its own loopback calls (lease renewals,
// informers) besides its clients' requests, and its webhook sends a batch every batch wait
// (1 s in the tests; the records carry their own times, so the batch wait does not add
// gaps); a SIGKILLed one is silent from the last 0-1 s before the kill until its new
// process starts, which takes seconds (a kube-apiserver is ready about 4 s after start).
const activityGap = 2 * time.Second

// maxSpans bounds the stretches of activity kept per apiserver.
const maxSpans = 64

// NoteActivity records that apiserver's audit stream holds records from from to to (their
// own times): a webhook batch's span.
func (c *Capabilities) NoteActivity(apiserver string, from, to time.Time) {
	if from.IsZero() || to.Before(from) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	spans := c.active[apiserver]
	// Batches mostly come in order: look from the end for the place of the new span.
	i := len(spans)
	for i > 0 && spans[i-1].from.After(from) {
		i--
	}
	spans = slices.Insert(spans, i, span{from, to})
	// Merge the spans around i that overlap or lie within activityGap of each other.
	lo := max(i-1, 0)
	for lo+1 < len(spans) && lo <= i+1 {
		a, b := spans[lo], spans[lo+1]
		if b.from.Sub(a.to) <= activityGap {
			if b.to.After(a.to) {
				a.to = b.to
			}
			spans[lo] = a
			spans = slices.Delete(spans, lo+1, lo+2)
			continue
		}
		lo++
	}
	if len(spans) > maxSpans {
		spans = slices.Delete(spans, 0, len(spans)-maxSpans)
	}
	c.active[apiserver] = spans
}

// NoteDelivered records that a webhook batch of apiserver's was delivered whose events were
// written (their stages' own times) from from to to. A batch is a run of the events the
// apiserver wrote one after the other, so within its span no event of the apiserver is
// missing; batches are merged where they overlap or lie within activityGap of each other.
func (c *Capabilities) NoteDelivered(apiserver string, from, to time.Time) {
	if from.IsZero() || to.Before(from) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	spans := c.delivered[apiserver]
	i := len(spans)
	for i > 0 && spans[i-1].from.After(from) {
		i--
	}
	spans = slices.Insert(spans, i, span{from, to})
	// Merge backwards from i while the span before reaches it, then forwards.
	for i > 0 && !spans[i].from.After(spans[i-1].to.Add(activityGap)) {
		if spans[i].to.After(spans[i-1].to) {
			spans[i-1].to = spans[i].to
		}
		spans = slices.Delete(spans, i, i+1)
		i--
	}
	for i+1 < len(spans) && !spans[i+1].from.After(spans[i].to.Add(activityGap)) {
		if spans[i+1].to.After(spans[i].to) {
			spans[i].to = spans[i+1].to
		}
		spans = slices.Delete(spans, i+1, i+2)
	}
	if len(spans) > maxSpans {
		spans = slices.Delete(spans, 0, len(spans)-maxSpans)
	}
	c.delivered[apiserver] = spans
	c.deliveredChanges++
}

// Delivered reports whether apiserver's delivered batches cover from to to without a gap
// longer than activityGap (NoteDelivered): every event it wrote in that time has arrived.
func (c *Capabilities) Delivered(apiserver string, from, to time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, s := range c.delivered[apiserver] {
		if !s.from.After(from) && !s.to.Before(to) {
			return true
		}
	}
	return false
}

// DeliveredChanges counts the batches NoteDelivered took: what Delivered answers may change
// whenever it grows.
func (c *Capabilities) DeliveredChanges() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.deliveredChanges
}

// DownAt reports whether apiserver's audit stream was silent at t: t lies in a gap of its
// activity longer than activityGap, or after its last activity when now (the stream time)
// is more than activityGap past that. It returns the gap (to is zero while the silence
// lasts). An apiserver whose stream was never seen is not known to be down.
func (c *Capabilities) DownAt(apiserver string, t, now time.Time) (from, to time.Time, down bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	spans := c.active[apiserver]
	if len(spans) == 0 || t.Before(spans[0].from) {
		return time.Time{}, time.Time{}, false
	}
	i := sort.Search(len(spans), func(i int) bool { return spans[i].from.After(t) }) // first span after t
	prev := spans[i-1]
	if !t.After(prev.to) {
		return time.Time{}, time.Time{}, false // inside a stretch of activity
	}
	if i < len(spans) {
		return prev.to, spans[i].from, true // between two stretches: a gap longer than activityGap
	}
	if now.Sub(prev.to) > activityGap && t.Sub(prev.to) >= 0 {
		return prev.to, time.Time{}, true
	}
	return time.Time{}, time.Time{}, false
}
