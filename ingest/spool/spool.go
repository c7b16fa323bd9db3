// Package spool is peertrail's on-disk write-ahead log: the receiver appends each accepted
// webhook batch as one frame before it acknowledges the batch, and consumers (the duplicate
// index, the correlator, the store writer) read the frames in order from their own recorded
// positions. After a crash or restart every acknowledged frame a consumer had not yet passed is
// delivered to it again. A segment file is deleted only once every registered consumer has
// passed it.
//
// Layout under Dir: segments named by the position of their first byte (%020d.seg), each a
// magic header followed by frames of [length u32][crc32c u32][payload]; one file per
// consumer under consumers/ holding its committed position; and identity, the name of the
// spool's address space (Identity).
//
// A segment is made at its full size before it is written, and the next one is made (written
// with zeros and synced) while the current one fills, so that writing a frame changes neither
// a file's size nor its allocation and its sync is an fdatasync that need not wait for the
// filesystem's journal (see BENCHMARKS.md). A segment is therefore its frames followed by
// zeros; a zero length ends its frames. Positions follow the files' sizes, so a segment's
// unwritten end is a gap in the positions that readers step over. Where the filesystem cannot
// allocate ahead (no fallocate, no space), segments grow as they are written.
package spool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/internal/fsutil"
	"github.com/peertrail/peertrail/metrics"
)

// Errors returned by the spool, possibly wrapped.
var (
	// ErrFull means an append would exceed the size limit; retry after consumers catch up.
	ErrFull = errors.New("spool is full")
	// ErrClosed means the spool was closed.
	ErrClosed = errors.New("spool is closed")
	// ErrFailed means an earlier write or sync failed; the spool accepts nothing more until
	// it is reopened (after a failed fsync the page cache can no longer be trusted).
	ErrFailed = errors.New("spool failed")
	// ErrCorrupt means a frame failed its checksum or framing; the reader skips the rest of
	// that segment.
	ErrCorrupt = errors.New("spool frame is corrupt")
	// ErrUnknownConsumer means a consumer name was not registered in Options.Consumers.
	ErrUnknownConsumer = errors.New("unknown spool consumer")
)

// Position is a byte offset in the spool's address space, which runs on across segments.
// Differences of positions are byte counts, which makes consumer lag a size.
type Position uint64

// SyncPolicy says when appended data is fsynced.
type SyncPolicy int

const (
	// SyncAlways fsyncs before Wait returns: an acknowledged batch survives a power loss.
	// Concurrent appends share one fsync (group commit).
	SyncAlways SyncPolicy = iota
	// SyncInterval fsyncs every Options.SyncInterval; a crash of the machine (not of the
	// process) can lose that much acknowledged data.
	SyncInterval
	// SyncNever leaves flushing to the operating system.
	SyncNever
)

// ParseSyncPolicy parses "always", "interval" or "never".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	switch s {
	case "always":
		return SyncAlways, nil
	case "interval":
		return SyncInterval, nil
	case "never":
		return SyncNever, nil
	}
	return 0, fmt.Errorf("unknown fsync policy %q (want always, interval or never)", s)
}

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNever:
		return "never"
	}
	return "SyncPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Options configure a spool.
type Options struct {
	// Dir holds the segments and consumer positions; it is created if missing.
	Dir string
	// SegmentBytes is the size at which the active segment is closed and a new one begun.
	SegmentBytes int64
	// MaxBytes bounds the total size of all segments' frames; appends beyond it fail with
	// ErrFull. The disk holds up to two segments more: the unwritten end of the active one
	// and the next one, both allocated ahead of use.
	MaxBytes int64
	// Sync is the fsync policy; SyncInterval is its period for SyncInterval.
	Sync         SyncPolicy
	SyncInterval time.Duration
	// Consumers are the names of every consumer whose position holds back deletion.
	// Names are file names: letters, digits, '-', '_' and '.'.
	Consumers []string
	Logger    *slog.Logger
}

const (
	segmentMagic  = "PTSPOOL\x01"
	headerLen     = len(segmentMagic)
	frameOverhead = 8
	// FrameOverhead is what a frame takes in the spool beside its payload: an Entry's End is
	// its Pos plus FrameOverhead plus the payload's length.
	FrameOverhead = frameOverhead
	// MaxFrameBytes bounds one frame's payload; it is far above any webhook body limit and
	// keeps a corrupt length from making a reader allocate without bound.
	MaxFrameBytes = 1 << 30

	defaultSegmentBytes = 64 << 20
)

var (
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
	segmentName = regexp.MustCompile(`^(\d{20})\.seg$`)
	consumerRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// Spool is an append-only log of frames. All methods are safe for concurrent use.
type Spool struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	segs     []segment // ascending; the last is active
	active   *os.File
	frameBuf []byte     // the frame being written, kept for the next one when small
	unsynced []*os.File // rotated segments written since the last sync; closed after it
	dirDirty bool       // a segment was created or removed since the last directory sync
	written  Position   // end of the data written to the active segment
	durable  Position   // end of the data that readers may see (synced, or written when not syncing)
	total    int64      // bytes in all segments
	// advanced is closed and replaced whenever durable moves or the spool closes or fails.
	advanced  chan struct{}
	failed    error
	closed    bool
	committed map[string]Position
	identity  string

	syncMu  sync.Mutex // serialises fsyncs
	kick    chan struct{}
	done    chan struct{}
	stopped chan struct{}

	// prealloc says segments are made at full size; it is turned off when the filesystem
	// cannot (no fallocate) and stays off.
	prealloc atomic.Bool
	// spareMu is held while the spare segment is made and to take it; it is taken after mu
	// when both are held, and mu is never waited for while holding it.
	spareMu   sync.Mutex
	spare     *os.File // a segment made ahead of use (header written, synced) at spareBase
	spareBase Position
	spareKick chan struct{}
	spareDone chan struct{}

	stats        statCounters
	syncDuration prometheus.Histogram
	closeOnce    sync.Once
}

type statCounters struct {
	writtenBytes   int64
	truncatedBytes int64
	corruptFrames  int64
}

// Open opens or creates the spool in opts.Dir, recovering from a crash: a torn frame at the
// end of the last segment (never acknowledged under SyncAlways) is cut off.
func Open(opts Options) (*Spool, error) { return openSpool(opts, true) }

// openSpool is Open, with making segments ahead of use left to the caller (tests of the segments
// that grow as they are written).
func openSpool(opts Options, prealloc bool) (*Spool, error) {
	if opts.Dir == "" {
		return nil, errors.New("spool: no directory")
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.MaxBytes <= 0 {
		return nil, errors.New("spool: MaxBytes must be positive")
	}
	if opts.MaxBytes < opts.SegmentBytes {
		opts.SegmentBytes = opts.MaxBytes
	}
	if opts.Sync == SyncInterval && opts.SyncInterval <= 0 {
		opts.SyncInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	for _, c := range opts.Consumers {
		if !consumerRE.MatchString(c) {
			return nil, fmt.Errorf("spool: invalid consumer name %q", c)
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "consumers"), 0o750); err != nil {
		return nil, fmt.Errorf("spool: create directory: %w", err)
	}
	s := &Spool{
		opts:      opts,
		log:       opts.Logger,
		advanced:  make(chan struct{}),
		committed: make(map[string]Position),
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
		spareKick: make(chan struct{}, 1),
		spareDone: make(chan struct{}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metrics.SpoolSyncDurationSeconds,
			Help:    "Time to sync the spool's written segments to disk (one sync, an fdatasync, covers every batch written meanwhile).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	s.prealloc.Store(prealloc)
	if err := s.recover(); err != nil {
		return nil, err
	}
	if err := s.loadIdentity(); err != nil {
		s.active.Close()
		return nil, err
	}
	if err := s.loadPositions(); err != nil {
		s.active.Close()
		return nil, err
	}
	go s.syncLoop()
	go s.spareLoop()
	s.kickSpare()
	return s, nil
}

// maxKeptFrameBuf bounds the frame buffer the spool keeps, so one huge batch does not stay.
const maxKeptFrameBuf = 4 << 20

// Append writes payload as one frame and returns the position just past it. The frame is not
// necessarily durable yet: call Wait(ctx, end) before acknowledging it to anyone. Append fails
// with ErrFull when the frame would take the spool over its size limit.
func (s *Spool) Append(payload []byte) (Position, error) {
	if len(payload) == 0 || len(payload) > MaxFrameBytes {
		return 0, fmt.Errorf("spool: frame of %d bytes (want 1..%d)", len(payload), MaxFrameBytes)
	}
	size := int64(frameOverhead + len(payload))
	var header [frameOverhead]byte
	binary.BigEndian.PutUint32(header[0:4], uint32(len(payload)))
	binary.BigEndian.PutUint32(header[4:8], crc32.Checksum(payload, castagnoli))

	s.mu.Lock()
	defer s.mu.Unlock()
	// One write per frame, from a buffer kept across appends: a fresh one per batch was a
	// sixth of the acknowledge path's garbage.
	buf := append(append(s.frameBuf[:0], header[:]...), payload...)
	if cap(buf) <= maxKeptFrameBuf {
		s.frameBuf = buf
	}
	if err := s.usableLocked(); err != nil {
		return 0, err
	}
	if s.total+size > s.opts.MaxBytes {
		return 0, fmt.Errorf("%w: %d of %d bytes used, frame needs %d", ErrFull, s.total, s.opts.MaxBytes, size)
	}
	activeSeg := &s.segs[len(s.segs)-1]
	if activeSeg.used > int64(headerLen) {
		if activeSeg.fixed && activeSeg.used+size > activeSeg.size || !activeSeg.fixed && activeSeg.used+size > s.opts.SegmentBytes {
			if err := s.createSegment(activeSeg.end()); err != nil {
				return 0, err
			}
			activeSeg = &s.segs[len(s.segs)-1]
		}
	}
	if activeSeg.fixed && activeSeg.used+size > activeSeg.size {
		// A frame larger than a whole segment: this one grows to hold it, over where the spare
		// was made, so the spare goes first, durably.
		if err := s.dropSpareLocked(); err != nil {
			s.failLocked(fmt.Errorf("%w: %v", ErrFailed, err))
			return 0, s.failed
		}
		activeSeg.fixed = false
	}
	if _, err := s.active.WriteAt(buf, activeSeg.used); err != nil {
		// Undo a partial frame so the segment stays whole frames then zeros; if even that
		// fails the spool is unusable until reopened (reopening cuts the tail).
		if uerr := undoWrite(s.active, activeSeg.used, activeSeg.size, len(buf)); uerr != nil {
			s.failLocked(fmt.Errorf("%w: write: %v; undo: %v", ErrFailed, err, uerr))
		}
		return 0, fmt.Errorf("spool: write frame: %w", err)
	}
	activeSeg.used += size
	activeSeg.size = max(activeSeg.size, activeSeg.used)
	s.total += size
	s.written += Position(size)
	s.stats.writtenBytes += size
	if s.opts.Sync != SyncAlways {
		s.advanceLocked(s.written)
	}
	return s.written, nil
}

// undoWrite restores a segment file whose frame of n bytes at used failed to be written
// whole: the file back to its size, and zeros where the frame went in it.
func undoWrite(f *os.File, used, size int64, n int) error {
	if used+int64(n) > size {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	if zeros := min(int64(n), size-used); zeros > 0 {
		if _, err := f.WriteAt(make([]byte, zeros), used); err != nil {
			return err
		}
	}
	return nil
}

func (s *Spool) usableLocked() error {
	if s.closed {
		return ErrClosed
	}
	return s.failed
}

func (s *Spool) failLocked(err error) {
	if s.failed == nil {
		s.failed = err
		s.log.Error("spool failed; it accepts nothing until restarted", "err", err)
		close(s.advanced)
		s.advanced = make(chan struct{})
	}
}

// grown is closed when durable next moves (or the spool closes or fails).
func (s *Spool) grown() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.advanced
}

func (s *Spool) advanceLocked(p Position) {
	if p > s.durable {
		s.durable = p
		close(s.advanced)
		s.advanced = make(chan struct{})
	}
}

// Wait blocks until everything before end is durable under the sync policy, the spool fails,
// or ctx ends. Under SyncAlways concurrent waiters share fsyncs.
func (s *Spool) Wait(ctx context.Context, end Position) error {
	for {
		s.mu.Lock()
		if s.durable >= end {
			s.mu.Unlock()
			return nil
		}
		if err := s.usableLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
		ch := s.advanced
		s.mu.Unlock()
		select {
		case s.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Written returns the end of everything appended so far.
func (s *Spool) Written() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

func (s *Spool) syncLoop() {
	defer close(s.stopped)
	var tick <-chan time.Time
	if s.opts.Sync == SyncInterval {
		t := time.NewTicker(s.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.done:
			return
		case <-s.kick:
		case <-tick:
		}
		s.sync()
	}
}

// sync makes everything written so far durable and publishes it to readers.
func (s *Spool) sync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	target := s.written
	files := append(s.unsynced, s.active)
	rotated := len(s.unsynced)
	s.unsynced = nil
	dirDirty := s.dirDirty
	s.dirDirty = false
	s.mu.Unlock()

	start := time.Now()
	var err error
	if s.opts.Sync != SyncNever {
		for _, f := range files {
			if e := syncData(f); e != nil && err == nil {
				err = fmt.Errorf("fdatasync %s: %w", f.Name(), e)
			}
		}
		if err == nil && dirDirty {
			err = fsutil.SyncDir(s.opts.Dir)
		}
	}
	for _, f := range files[:rotated] {
		f.Close()
	}
	elapsed := time.Since(start).Seconds()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.Sync != SyncNever {
		s.syncDuration.Observe(elapsed)
	}
	if err != nil {
		s.failLocked(fmt.Errorf("%w: %v", ErrFailed, err))
		return s.failed
	}
	s.advanceLocked(target)
	return nil
}

// Stats is a snapshot of the spool's state.
type Stats struct {
	Bytes, MaxBytes int64
	Segments        int
	Oldest, Durable Position
	// Lag is, per consumer, how many bytes of durable data it has not committed.
	Lag            map[string]int64
	WrittenBytes   int64
	TruncatedBytes int64
	CorruptFrames  int64
	Failed         error
	Closed         bool
}

// Stats returns a snapshot.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Bytes: s.total, MaxBytes: s.opts.MaxBytes, Segments: len(s.segs),
		Oldest: s.segs[0].base, Durable: s.durable,
		Lag:          make(map[string]int64, len(s.committed)),
		WrittenBytes: s.stats.writtenBytes, TruncatedBytes: s.stats.truncatedBytes,
		CorruptFrames: s.stats.corruptFrames, Failed: s.failed, Closed: s.closed,
	}
	for name, p := range s.committed {
		st.Lag[name] = int64(s.durable - p)
	}
	return st
}

// Close syncs what was written (unless the policy is SyncNever) and closes the spool.
// Readers blocked in Next return ErrClosed.
func (s *Spool) Close() error {
	err := ErrClosed
	s.closeOnce.Do(func() { err = s.close() })
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

func (s *Spool) close() error {
	close(s.done)
	<-s.stopped
	<-s.spareDone
	s.spareMu.Lock()
	if s.spare != nil {
		s.removeFile(s.spare)
		s.spare = nil
	}
	s.spareMu.Unlock()
	err := s.sync()
	if errors.Is(err, ErrFailed) {
		err = nil // already reported; closing must still release the files
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.advanced)
	s.advanced = make(chan struct{})
	for _, f := range s.unsynced {
		f.Close()
	}
	s.unsynced = nil
	if cerr := s.active.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("spool: close: %w", cerr)
	}
	return err
}
