package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
)

// ConsumerName is the spool consumer name of the Persister.
const ConsumerName = "dedup"

const fileMagic = "PTKEYS\x00\x01"

var keyFileName = regexp.MustCompile(`^(\d+)-(\d+)\.keys$`)

// Persister is the spool consumer that writes each finished minute's keys to Dir, so that Load
// can rebuild the index without the spool segments that every other consumer has passed.
type Persister struct {
	Dir     string
	Horizon time.Duration
	Log     *slog.Logger
	// Now is the clock (tests set it); nil means time.Now.
	Now func() time.Time

	minute int64 // the minute being gathered; 0 before the first entry
	keys   []record.Key
	safe   spool.Position // position before which every key is in a file
	end    spool.Position // End of the last entry seen
}

func (p *Persister) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Consume implements spool.Consumer.
func (p *Persister) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	for _, e := range entries {
		h, err := record.ParseHeader(e.Payload)
		if err != nil {
			// The receiver wrote this frame, so a bad header is disk damage that the spool's
			// checksum missed; nothing in it can be a duplicate of anything we can recognise.
			p.Log.Error("dedup: unreadable spool frame skipped", "position", e.Pos, "err", err)
			p.end = e.End
			continue
		}
		m := minuteOf(h.ReceivedAt)
		if p.minute != 0 && m > p.minute && len(p.keys) > 0 {
			if err := p.flush(e.Pos); err != nil {
				return p.safe, err
			}
		}
		if m > p.minute {
			p.minute = m
		}
		p.keys = append(p.keys, h.Keys...)
		p.end = e.End
	}
	// A minute is finished once the clock has left it: nothing received later can belong to it.
	if len(p.keys) > 0 && minuteOf(p.now()) > p.minute {
		if err := p.flush(p.end); err != nil {
			return p.safe, err
		}
	}
	if len(p.keys) == 0 {
		p.safe = p.end
	}
	if err := p.expire(); err != nil {
		p.Log.Warn("dedup: removing expired key files", "err", err)
	}
	return p.safe, nil
}

// flush writes the gathered keys to a file covering the spool up to upTo.
func (p *Persister) flush(upTo spool.Position) error {
	if err := os.MkdirAll(p.Dir, 0o750); err != nil {
		return fmt.Errorf("dedup: create directory: %w", err)
	}
	buf := make([]byte, 0, len(fileMagic)+binary.MaxVarintLen64+16*len(p.keys))
	buf = append(buf, fileMagic...)
	buf = binary.AppendUvarint(buf, uint64(len(p.keys)))
	for _, k := range p.keys {
		buf = append(buf, k[:]...)
	}
	name := filepath.Join(p.Dir, fmt.Sprintf("%d-%d.keys", p.minute, uint64(upTo)))
	if err := fsutil.WriteFileAtomic(name, buf); err != nil {
		return fmt.Errorf("dedup: write key file: %w", err)
	}
	p.keys = p.keys[:0]
	p.safe = upTo
	return nil
}

func (p *Persister) expire() error {
	files, err := listKeyFiles(p.Dir)
	if err != nil {
		return err
	}
	oldest := oldestKept(p.now(), p.Horizon)
	for _, f := range files {
		if f.minute < oldest {
			if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

type keyFile struct {
	path   string
	minute int64
}

func listKeyFiles(dir string) ([]keyFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []keyFile
	for _, e := range entries {
		m := keyFileName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		minute, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, keyFile{path: filepath.Join(dir, e.Name()), minute: minute})
	}
	return out, nil
}

// Load rebuilds the index: the key files in dir younger than the horizon, then the keys of
// every spool frame from the Persister's committed position on. It returns the number of keys
// read from files and from the spool.
func Load(ctx context.Context, log *slog.Logger, dir string, horizon time.Duration, sp *spool.Spool, now time.Time) (ix *Index, fromFiles, fromSpool int, err error) {
	ix = NewIndex(horizon)
	files, err := listKeyFiles(dir)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("dedup: list key files: %w", err)
	}
	oldest := oldestKept(now, horizon)
	for _, f := range files {
		if f.minute < oldest {
			continue
		}
		keys, err := readKeyFile(f.path)
		if err != nil {
			// A damaged key file only weakens duplicate detection for its minute; say so and go on.
			log.Warn("dedup: unreadable key file skipped", "file", f.path, "err", err)
			continue
		}
		ix.addSealed(f.minute, keys)
		fromFiles += len(keys)
	}
	from, err := sp.Committed(ConsumerName)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("dedup: %w", err)
	}
	r := sp.NewReader(from)
	defer r.Close()
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, 0, err
		}
		e, ok, err := r.TryNext()
		if errors.Is(err, spool.ErrCorrupt) {
			continue
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("dedup: rescan spool: %w", err)
		}
		if !ok {
			break
		}
		h, err := record.ParseHeader(e.Payload)
		if err != nil {
			continue
		}
		ix.Add(h.ReceivedAt, h.Keys...)
		fromSpool += len(h.Keys)
	}
	ix.Expire(now)
	return ix, fromFiles, fromSpool, nil
}

func readKeyFile(path string) ([]record.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < len(fileMagic) || string(b[:len(fileMagic)]) != fileMagic {
		return nil, errors.New("not a key file")
	}
	b = b[len(fileMagic):]
	n, w := binary.Uvarint(b)
	if w <= 0 || n*16 != uint64(len(b)-w) {
		return nil, errors.New("truncated key file")
	}
	b = b[w:]
	keys := make([]record.Key, n)
	for i := range keys {
		copy(keys[i][:], b[i*16:])
	}
	return keys, nil
}
