package spool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/peertrail/peertrail/internal/fsutil"
)

// Recovery at open: the segments on disk in order, and the end of the last one's frames (a
// torn frame cut off, the zeros of a segment made ahead told from frames).

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
