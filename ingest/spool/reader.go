package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
)

// Entry is one frame read from the spool.
type Entry struct {
	// Pos is where the frame starts and End where the next one starts; committing End means
	// the frame is done with.
	Pos, End Position
	// Payload is the frame's content. It belongs to the receiver of the Entry, except that
	// Run lends it to a Consumer only until Consume succeeds (see Consumer).
	Payload []byte
}

// Reader reads frames in order from a position. A Reader is used by one goroutine at a time.
type Reader struct {
	s   *Spool
	pos Position
	f   *os.File
	seg segment // the segment f is open on

	// slab holds the payloads read since the last recycle, when lending is on (Run's reader).
	slab    []byte
	lending bool
	// used is the payload bytes read since the last recycle; calls counts the recycles since
	// the slab last had a call that needed a quarter of it, peak the most any of them needed.
	used, peak, calls int
}

// defaultCallBytes bounds the payloads of one Consume call. Each consumer holds a call's
// payloads at once, so this is also the payload memory of each: at 64 MiB a burst had three
// consumers holding about 200 MB of frames, allocated anew for every call because it was more
// than a reader keeps; 8 MiB is still a hundred webhook batches a call.
const defaultCallBytes = 8 << 20

// maxKeptSlab bounds the payload memory a lending reader keeps for the next batch, so that one
// long catch-up does not stay resident. A call of defaultCallBytes (with the frame that passes
// it, the slab doubling as it grows) fits, and is reused call after call.
const maxKeptSlab = 4 * defaultCallBytes

// shrinkAfter is how many calls in a row must need under a quarter of the slab before it is
// replaced by one twice the most they needed. A slab grows in a catch-up (the start, a burst)
// and was then kept at that size for good: three consumers held 25 MB of slabs at a steady
// 10,000 events/s whose calls needed a few hundred kilobytes.
const shrinkAfter = 64

// recycle lends the memory of every payload read so far to the next ones: their entries must
// be done with. From the first call on, payloads are lent, not given.
func (r *Reader) recycle() {
	r.lending = true
	used := r.used
	r.used = 0
	switch {
	case cap(r.slab) > maxKeptSlab:
		r.slab, r.calls, r.peak = nil, 0, 0
	case used >= cap(r.slab)/4:
		r.calls, r.peak = 0, 0
	default:
		r.peak = max(r.peak, used)
		if r.calls++; r.calls >= shrinkAfter {
			r.slab, r.calls, r.peak = make([]byte, 0, 2*r.peak), 0, 0
		}
	}
	r.slab = r.slab[:0]
}

// Lend makes the memory of every payload this reader has returned serve the next ones: the
// caller is done with their entries. Run's reader does it between calls; a reader that takes
// one frame at a time and lets each go before the next can too, and allocates nothing then.
func (r *Reader) Lend() { r.recycle() }

// payload returns n bytes for a frame's payload.
func (r *Reader) payload(n int) []byte {
	if !r.lending {
		return make([]byte, n)
	}
	r.used += n
	if cap(r.slab)-len(r.slab) < n {
		// The payloads read so far stay where they are until the next recycle, so the next ones
		// go to a new array and nothing is copied (growing the slice would copy every earlier
		// payload).
		r.slab = make([]byte, 0, max(2*cap(r.slab), n))
	}
	from := len(r.slab)
	r.slab = r.slab[:from+n]
	return r.slab[from : from+n : from+n]
}

// NewReader returns a reader starting at from, which must be a position handed out by the
// spool (an Entry's Pos or End, a committed position) or 0 for the oldest data.
func (s *Spool) NewReader(from Position) *Reader {
	return &Reader{s: s, pos: from}
}

// Position is where the next Next starts.
func (r *Reader) Position() Position { return r.pos }

// Close releases the reader's file.
func (r *Reader) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Next returns the next durable frame, waiting for one until ctx ends or the spool closes. A
// corrupt frame yields an error wrapping ErrCorrupt, after which the reader has moved on to the
// next segment.
func (r *Reader) Next(ctx context.Context) (Entry, error) {
	for {
		e, ok, wait, err := r.tryNext()
		if err != nil || ok {
			return e, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Entry{}, ctx.Err()
		}
	}
}

// TryNext returns the next durable frame if there is one, without waiting.
func (r *Reader) TryNext() (Entry, bool, error) {
	e, ok, _, err := r.tryNext()
	return e, ok, err
}

func (r *Reader) tryNext() (Entry, bool, <-chan struct{}, error) {
	s := r.s
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return Entry{}, false, nil, ErrClosed
		}
		durable := s.durable
		wait := s.advanced
		seg, ok := s.locateLocked(r.pos)
		active := ok && seg.base == s.segs[len(s.segs)-1].base
		s.mu.Unlock()
		if !ok || seg.base+Position(headerLen) > durable {
			return Entry{}, false, wait, nil
		}
		if r.pos < seg.base+Position(headerLen) {
			r.pos = seg.base + Position(headerLen)
		}
		if r.pos >= durable {
			return Entry{}, false, wait, nil
		}
		if err := r.open(seg); err != nil {
			return Entry{}, false, nil, err
		}
		off := int64(r.pos - seg.base)
		var fh [frameOverhead]byte
		if !active && off+frameOverhead > seg.size {
			r.pos = seg.end() // too little left for a frame: the end of a full segment
			continue
		}
		if _, err := r.f.ReadAt(fh[:], off); err != nil {
			return Entry{}, false, nil, r.corrupt(seg, fmt.Errorf("read frame header: %w", err))
		}
		n := binary.BigEndian.Uint32(fh[0:4])
		sum := binary.BigEndian.Uint32(fh[4:8])
		if n == 0 && !active {
			// The zeros after the last frame of a segment made at full size.
			r.pos = seg.end()
			continue
		}
		end := r.pos + frameOverhead + Position(n)
		if n == 0 || n > MaxFrameBytes || end > durable || end > seg.end() {
			return Entry{}, false, nil, r.corrupt(seg, fmt.Errorf("frame length %d", n))
		}
		payload := r.payload(int(n))
		if _, err := r.f.ReadAt(payload, off+frameOverhead); err != nil {
			return Entry{}, false, nil, r.corrupt(seg, fmt.Errorf("read frame: %w", err))
		}
		if crc32.Checksum(payload, castagnoli) != sum {
			return Entry{}, false, nil, r.corrupt(seg, errors.New("checksum mismatch"))
		}
		e := Entry{Pos: r.pos, End: end, Payload: payload}
		r.pos = end
		return e, true, nil, nil
	}
}

// locateLocked finds the segment holding p, moving on to the next segment when p is at a
// segment's end or in a hole left by deleted segments.
func (s *Spool) locateLocked(p Position) (segment, bool) {
	for i, sg := range s.segs {
		last := i == len(s.segs)-1
		if p < sg.base {
			return sg, true // before the oldest retained segment, or in a hole
		}
		if p < sg.end() || last {
			return sg, true
		}
	}
	return segment{}, false
}

func (r *Reader) open(seg segment) error {
	if r.f != nil && r.seg.base == seg.base {
		r.seg = seg
		return nil
	}
	r.Close()
	f, err := os.Open(r.s.segPath(seg.base))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: segment %d was deleted under a reader at %d: %w", seg.base, r.pos, err)
		}
		return fmt.Errorf("spool: open segment: %w", err)
	}
	r.f, r.seg = f, seg
	return nil
}

// corrupt counts a bad frame and moves the reader past the segment that holds it, so that one
// damaged frame cannot stall every consumer.
func (r *Reader) corrupt(seg segment, cause error) error {
	s := r.s
	s.mu.Lock()
	s.stats.corruptFrames++
	next := seg.end()
	if len(s.segs) > 0 && s.segs[len(s.segs)-1].base == seg.base {
		// The active segment: only what is durable is known to be whole; skip to its end.
		next = s.durable
	}
	s.mu.Unlock()
	at := r.pos
	r.pos = next
	r.Close()
	s.log.Error("spool: corrupt frame; skipping the rest of its segment", "position", at, "skipped_to", next, "err", cause)
	return fmt.Errorf("%w at %d: %v", ErrCorrupt, at, cause)
}
