package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/peertrail/peertrail/internal/fsutil"
)

// Segments: made at full size and written with zeros ahead of use (the spare), so that an
// append changes neither a file's size nor its allocation.

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

func (s *Spool) segPath(base Position) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%020d.seg", uint64(base)))
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
// frames' syncs nothing but data (BENCHMARKS.md, "A twelfth session"). It stops when the
// spool closes.
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
