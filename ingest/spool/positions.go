package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peertrail/peertrail/internal/fsutil"
)

// Consumer positions: each consumer's committed position, kept durably, and the deletion of
// the segments every consumer has passed.

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
