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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

type segment struct {
	base Position
	// size is the file's size and the segment's span of positions: the next segment begins
	// at base+size. A segment made ahead of use has its full size before anything is written.
	size int64
	// used is what the segment counts against MaxBytes: its header and frames, which end at
	// base+used. A segment found on disk before the last counts its size (the zeros after its
	// last frame are less than one frame, and finding them would mean reading it).
	used int64
	// fixed says the segment was made at full size: it is not grown while it holds frames
	// (the spare may already sit at its end), and the spare is made only after such a one.
	fixed bool
}

func (s segment) end() Position { return s.base + Position(s.size) }

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

func (s *Spool) segPath(base Position) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%020d.seg", uint64(base)))
}

func (s *Spool) recover() error {
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("spool: read directory: %w", err)
	}
	for _, e := range entries {
		m := segmentName.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		base, err := strconv.ParseUint(m[1], 10, 64)
		if err != nil {
			return fmt.Errorf("spool: segment name %s: %w", e.Name(), err)
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("spool: stat %s: %w", e.Name(), err)
		}
		s.segs = append(s.segs, segment{base: Position(base), size: info.Size(), used: info.Size()})
	}
	sort.Slice(s.segs, func(i, j int) bool { return s.segs[i].base < s.segs[j].base })
	for i := 1; i < len(s.segs); i++ {
		if prev := s.segs[i-1]; prev.end() != s.segs[i].base {
			// Segments are removed oldest first, so a hole means files were lost or moved by
			// hand; say so, and read on from the next segment.
			s.log.Warn("spool segments are not contiguous", "after", prev.base, "expected", prev.end(), "next", s.segs[i].base)
		}
	}
	if len(s.segs) == 0 {
		return s.createSegment(0)
	}
	f, good, tail, err := s.scanLast()
	for err == nil && good <= int64(headerLen) && tail <= int64(headerLen) && len(s.segs) > 1 &&
		s.segs[len(s.segs)-2].end() == s.segs[len(s.segs)-1].base {
		// No frame, nothing but zeros after the header's place, after another segment: the
		// segment made ahead of use that a crash left behind, or one made on rotation before
		// its first frame was written. Writing goes on after the frames of the one before it,
		// rather than leaving the rest of that one unused for good.
		f.Close()
		if err := os.Remove(f.Name()); err != nil {
			return fmt.Errorf("spool: remove an empty last segment: %w", err)
		}
		if err := fsutil.SyncDir(s.opts.Dir); err != nil {
			return fmt.Errorf("spool: sync the directory: %w", err)
		}
		s.segs = s.segs[:len(s.segs)-1]
		f, good, tail, err = s.scanLast()
	}
	if err != nil {
		return err
	}
	last := &s.segs[len(s.segs)-1]
	if good < int64(headerLen) {
		// The header itself was torn: rewrite it.
		if err := writeHeader(f); err != nil {
			f.Close()
			return err
		}
		good = int64(headerLen)
	}
	if tail > good {
		// After the last frame should be only zeros, where the segment was made at full
		// size; these bytes are a frame a crash tore, never acknowledged under SyncAlways.
		// They are kept beside the segment in case they were disk damage rather than a tear.
		// Cutting them makes this a segment that grows as it is written.
		kept, kerr := keepTail(f, good, tail)
		s.log.Warn("spool: cut off a torn or corrupt tail", "segment", s.segPath(last.base), "bytes", tail-good, "kept_in", kept, "keep_err", kerr)
		s.stats.truncatedBytes += tail - good
		if err := f.Truncate(good); err != nil {
			f.Close()
			return fmt.Errorf("spool: truncate torn tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("spool: sync after truncation: %w", err)
		}
		last.size = good
	}
	last.used = good
	last.fixed = last.size > good
	s.active = f
	for _, sg := range s.segs {
		s.total += sg.used
	}
	s.written = last.base + Position(good)
	s.durable = s.written
	return nil
}

// nonZeroEnd returns the offset just past the last byte in [from, to) of f that is not zero,
// or from if there is none.
func nonZeroEnd(f *os.File, from, to int64) (int64, error) {
	end := from
	buf := make([]byte, 1<<20)
	for off := from; off < to; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		for i := n - 1; i >= 0; i-- {
			if buf[i] != 0 {
				end = off + int64(i) + 1
				break
			}
		}
		off += int64(n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, err
		}
	}
	return end, nil
}

// scanLast opens the last segment and reads it once: good is the end of its intact frames
// (0 when its header is not whole), tail the end of what is not zero from there (from the
// header's end at least) on.
func (s *Spool) scanLast() (f *os.File, good, tail int64, err error) {
	last := s.segs[len(s.segs)-1]
	if f, err = os.OpenFile(s.segPath(last.base), os.O_RDWR, 0); err != nil {
		return nil, 0, 0, fmt.Errorf("spool: open active segment: %w", err)
	}
	if good, err = validEnd(f, last.size); err != nil {
		f.Close()
		return nil, 0, 0, fmt.Errorf("spool: scan active segment %s: %w", f.Name(), err)
	}
	if tail, err = nonZeroEnd(f, max(good, int64(headerLen)), last.size); err != nil {
		f.Close()
		return nil, 0, 0, fmt.Errorf("spool: scan the end of %s: %w", f.Name(), err)
	}
	return f, good, tail, nil
}

// validEnd returns the offset just past the last intact frame of a segment file of size bytes.
func validEnd(f *os.File, size int64) (int64, error) {
	hdr := make([]byte, headerLen)
	if n, _ := f.ReadAt(hdr, 0); n < headerLen || string(hdr) != segmentMagic {
		return 0, nil
	}
	off := int64(headerLen)
	var fh [frameOverhead]byte
	buf := make([]byte, 0, 1<<20)
	for off+frameOverhead <= size {
		if _, err := f.ReadAt(fh[:], off); err != nil {
			return off, nil
		}
		n := int64(binary.BigEndian.Uint32(fh[0:4]))
		sum := binary.BigEndian.Uint32(fh[4:8])
		if n == 0 || n > MaxFrameBytes || off+frameOverhead+n > size {
			return off, nil
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := f.ReadAt(buf, off+frameOverhead); err != nil {
			return off, nil
		}
		if crc32.Checksum(buf, castagnoli) != sum {
			return off, nil
		}
		off += frameOverhead + n
	}
	return off, nil
}

// keepTail copies bytes [from, to) of f to a .corrupt file next to it and returns its name.
func keepTail(f *os.File, from, to int64) (string, error) {
	name := fmt.Sprintf("%s.%d.corrupt", f.Name(), from)
	out, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, from, to-from)); err != nil {
		out.Close()
		return "", err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return "", err
	}
	return name, out.Close()
}

func writeHeader(f *os.File) error {
	if _, err := f.WriteAt([]byte(segmentMagic), 0); err != nil {
		return fmt.Errorf("spool: write segment header: %w", err)
	}
	return nil
}

// makeSegment creates the segment file at base with its header, at full size unless the
// filesystem cannot; it returns the file and its size. The file is not synced.
func (s *Spool) makeSegment(base Position) (*os.File, int64, error) {
	f, err := os.OpenFile(s.segPath(base), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, 0, fmt.Errorf("spool: create segment: %w", err)
	}
	size := int64(headerLen)
	if s.prealloc.Load() {
		if err := allocate(f, s.opts.SegmentBytes); err != nil {
			// No space for a whole segment, or no fallocate: this one grows as it is written
			// (and a full disk is met frame by frame, as the receiver expects).
			s.log.Info("spool: a segment could not be allocated ahead; it grows as it is written", "segment", f.Name(), "err", err)
			if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) {
				s.prealloc.Store(false)
			}
			if terr := f.Truncate(0); terr != nil {
				f.Close()
				os.Remove(f.Name())
				return nil, 0, fmt.Errorf("spool: undo a failed allocation: %w", terr)
			}
		} else {
			size = s.opts.SegmentBytes
		}
	}
	if err := writeHeader(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, 0, err
	}
	return f, size, nil
}

// createSegment starts a new active segment at base, taking the spare when it was made for
// base. Callers hold mu (or own s exclusively).
func (s *Spool) createSegment(base Position) error {
	s.spareMu.Lock()
	f, size := s.takeSpareLocked(base)
	s.spareMu.Unlock()
	if f == nil {
		var err error
		if f, size, err = s.makeSegment(base); err != nil {
			return err
		}
		s.dirDirty = true
	}
	if s.active != nil {
		s.unsynced = append(s.unsynced, s.active)
	}
	s.active = f
	s.segs = append(s.segs, segment{base: base, size: size, used: int64(headerLen), fixed: size > int64(headerLen)})
	s.total += int64(headerLen)
	s.written = base + Position(headerLen)
	s.kickSpare()
	return nil
}

// takeSpareLocked returns the spare segment when it was made at base, and removes a spare made
// anywhere else. Callers hold spareMu.
func (s *Spool) takeSpareLocked(base Position) (*os.File, int64) {
	if s.spare == nil {
		return nil, 0
	}
	f := s.spare
	s.spare = nil
	if s.spareBase == base {
		return f, s.opts.SegmentBytes
	}
	s.removeFile(f)
	s.dirDirty = true
	return nil, 0
}

// removeFile closes and deletes a segment file that never held a frame.
func (s *Spool) removeFile(f *os.File) {
	f.Close()
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("spool: remove an unused segment", "segment", f.Name(), "err", err)
	}
}

func (s *Spool) kickSpare() {
	select {
	case s.spareKick <- struct{}{}:
	default:
	}
}

// spareLoop makes the segment that follows the active one, at full size, synced and named
// durably, so that moving on to it changes no file's size and no directory.
func (s *Spool) spareLoop() {
	defer close(s.spareDone)
	for {
		select {
		case <-s.done:
			return
		case <-s.spareKick:
		}
		// mu, then spareMu: the order createSegment takes them in. The target cannot move
		// while the spare is made, since moving it (rotating, growing the active segment past
		// its size) waits for spareMu.
		s.mu.Lock()
		active := s.segs[len(s.segs)-1]
		if !s.prealloc.Load() || !active.fixed || s.closed || s.failed != nil {
			s.mu.Unlock()
			continue
		}
		s.spareMu.Lock()
		s.mu.Unlock()
		base := active.end()
		if s.spare == nil || s.spareBase != base {
			if s.spare != nil {
				s.removeFile(s.spare)
				s.spare = nil
			}
			if err := s.makeSpareLocked(base); err != nil && !errors.Is(err, ErrClosed) {
				s.log.Warn("spool: could not make the next segment ahead of use; it will be made when needed", "err", err)
			}
		}
		s.spareMu.Unlock()
	}
}

// writeZeros writes zeros over [from, to) of f. Allocated space is only reserved: ext4 marks
// it unwritten, and the first sync after writing into it must commit, through the journal,
// that it was written. Zeros written here, and synced before the segment is used, leave the
// frames' syncs nothing but data (BENCHMARKS.md, twelfth session: segments only allocated
// had as many syncs over 50 ms as appended ones; written with zeros, a few times fewer). It
// stops when the spool closes.
func (s *Spool) writeZeros(f *os.File, from, to int64) error {
	zero := make([]byte, min(1<<20, to-from))
	for off := from; off < to; off += int64(len(zero)) {
		select {
		case <-s.done:
			return ErrClosed
		default:
		}
		if _, err := f.WriteAt(zero[:min(int64(len(zero)), to-off)], off); err != nil {
			return fmt.Errorf("spool: write zeros into the next segment: %w", err)
		}
	}
	return nil
}

// makeSpareLocked makes the spare at base. Callers hold spareMu.
func (s *Spool) makeSpareLocked(base Position) error {
	f, size, err := s.makeSegment(base)
	if err != nil {
		return err
	}
	if size != s.opts.SegmentBytes {
		// Not allocated: no better than making it when it is needed.
		s.removeFile(f)
		return nil
	}
	if err := s.writeZeros(f, int64(headerLen), size); err != nil {
		s.removeFile(f)
		return err
	}
	if err := f.Sync(); err != nil {
		s.removeFile(f)
		return fmt.Errorf("spool: sync the next segment: %w", err)
	}
	if err := fsutil.SyncDir(s.opts.Dir); err != nil {
		s.removeFile(f)
		return fmt.Errorf("spool: sync the directory of the next segment: %w", err)
	}
	s.spare, s.spareBase = f, base
	return nil
}

// identityFile holds the spool's Identity.
const identityFile = "identity"

// loadIdentity reads the spool's identity, or makes a new one: when there is none, and at every
// open under a policy other than SyncAlways, where a crash of the machine can lose frames that
// readers had been given and the positions they had are then written again with other frames.
func (s *Spool) loadIdentity() error {
	path := filepath.Join(s.opts.Dir, identityFile)
	if s.opts.Sync == SyncAlways {
		b, err := os.ReadFile(path)
		if err == nil && identityRE.Match(bytes.TrimSpace(b)) {
			s.identity = string(bytes.TrimSpace(b))
			return nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: read identity: %w", err)
		}
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("spool: make an identity: %w", err)
	}
	s.identity = hex.EncodeToString(id[:])
	if err := fsutil.WriteFileAtomic(path, []byte(s.identity+"\n")); err != nil {
		return fmt.Errorf("spool: write identity: %w", err)
	}
	return nil
}

var identityRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Identity names the spool's address space: a frame is known by the spool's identity and its
// position, and no two frames ever share both. It is 32 lowercase hex digits, made when the
// directory is first used and kept from then on under SyncAlways; under another policy it is
// made anew at every Open, since a crash of the machine there can lose frames readers were
// given, and their positions are then written again with other frames.
func (s *Spool) Identity() string { return s.identity }

func (s *Spool) positionFile(name string) string {
	return filepath.Join(s.opts.Dir, "consumers", name+".pos")
}

func (s *Spool) loadPositions() error {
	first := s.segs[0].base
	for _, name := range s.opts.Consumers {
		b, err := os.ReadFile(s.positionFile(name))
		if errors.Is(err, fs.ErrNotExist) {
			s.committed[name] = first
			continue
		}
		if err != nil {
			return fmt.Errorf("spool: read position of %s: %w", name, err)
		}
		p, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return fmt.Errorf("spool: position of %s: %w", name, err)
		}
		pos := Position(p)
		if pos < first {
			// Segments this consumer had not passed are gone: it was added after they were
			// deleted, or its file was restored from elsewhere.
			s.log.Warn("spool: consumer position is before the oldest segment; starting at the oldest", "consumer", name, "position", pos, "oldest", first)
			pos = first
		}
		if pos > s.durable {
			return fmt.Errorf("spool: consumer %s is at %d, past the end of the spool (%d): the spool directory does not belong to these positions", name, pos, s.durable)
		}
		s.committed[name] = pos
	}
	return nil
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

// dropSpareLocked removes the spare segment durably. Callers hold mu.
func (s *Spool) dropSpareLocked() error {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if s.spare == nil {
		return nil
	}
	s.removeFile(s.spare)
	s.spare = nil
	if err := fsutil.SyncDir(s.opts.Dir); err != nil {
		return fmt.Errorf("spool: sync the directory after removing the next segment: %w", err)
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

// Committed returns the position a consumer resumes from.
func (s *Spool) Committed(consumer string) (Position, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.committed[consumer]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownConsumer, consumer)
	}
	return p, nil
}

// Commit records that consumer no longer needs anything before pos, durably, and deletes the
// segments that every consumer has passed. pos must be a position the consumer was given
// (an Entry's Pos or End); it never moves backwards.
func (s *Spool) Commit(consumer string, pos Position) error {
	s.mu.Lock()
	old, ok := s.committed[consumer]
	durable := s.durable
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownConsumer, consumer)
	}
	if pos > durable {
		return fmt.Errorf("spool: consumer %s commits %d beyond the durable end %d", consumer, pos, durable)
	}
	if pos <= old {
		return nil
	}
	if err := fsutil.WriteFileAtomic(s.positionFile(consumer), []byte(strconv.FormatUint(uint64(pos), 10)+"\n")); err != nil {
		return fmt.Errorf("spool: commit position of %s: %w", consumer, err)
	}
	s.mu.Lock()
	if pos > s.committed[consumer] {
		s.committed[consumer] = pos
	}
	s.mu.Unlock()
	return s.deletePassed()
}

// deletePassed removes every segment, other than the active one, that ends at or before the
// lowest committed position.
func (s *Spool) deletePassed() error {
	s.mu.Lock()
	low := s.durable
	for _, name := range s.opts.Consumers {
		if p := s.committed[name]; p < low {
			low = p
		}
	}
	var doomed []segment
	for len(s.segs) > 1 && s.segs[0].end() <= low {
		doomed = append(doomed, s.segs[0])
		s.total -= s.segs[0].used
		s.segs = s.segs[1:]
	}
	s.mu.Unlock()
	if len(doomed) == 0 {
		return nil
	}
	for _, sg := range doomed {
		if err := os.Remove(s.segPath(sg.base)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("spool: delete passed segment: %w", err)
		}
	}
	return fsutil.SyncDir(s.opts.Dir)
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
