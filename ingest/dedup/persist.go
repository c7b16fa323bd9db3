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
	"github.com/peertrail/peertrail/metrics"
)

// ConsumerName is the spool consumer name of the Persister.
const ConsumerName = metrics.ConsumerDedup

// Key files: the magic, then the keys, 16 bytes each. Version 1 put their count (a uvarint)
// after the magic, which meant holding a minute's keys until the minute was over; version 2
// is written as the keys come, and its size says the count. Load reads both.
const (
	fileMagicV1 = "PTKEYS\x00\x01"
	fileMagic   = "PTKEYS\x00\x02"
)

var (
	keyFileName  = regexp.MustCompile(`^(\d+)-(\d+)\.keys$`)
	partFileName = regexp.MustCompile(`^(\d+)\.keys\.part$`)
)

// Persister is the spool consumer that writes each finished minute's keys to Dir, so that Load
// can rebuild the index without the spool segments that every other consumer has passed.
//
// The minute being gathered is appended to a part file call by call rather than held in
// memory (600,000 keys a minute at 10,000 events/s, about 10-19 MB with a slice's growth), and
// becomes a key file, fsynced and renamed, once the minute is over. A part file never counts:
// Load reads key files only, and rescans the spool from the position before the part's first
// key, which is what Consume returns until the minute is finished.
type Persister struct {
	Dir     string
	Horizon time.Duration
	Log     *slog.Logger
	// Now is the clock (tests set it); nil means time.Now.
	Now func() time.Time

	minute  int64          // the minute being gathered; 0 before the first entry
	n       int            // keys of that minute, in its part file or in buf
	partLen int64          // the part file's length
	buf     []byte         // the keys of this call not yet written, reused call to call
	safe    spool.Position // position before which every key is in a key file
	end     spool.Position // End of the last entry seen

	// ok is the part file as the last call that succeeded left it. A call that fails may have
	// written some of its keys, and Run passes its entries again: repair cuts them off first.
	ok struct {
		minute  int64
		n       int
		partLen int64
	}
	failed bool
}

func (p *Persister) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Consume implements spool.Consumer.
func (p *Persister) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	if p.failed {
		if err := p.repair(); err != nil {
			return p.safe, err
		}
	}
	pos, err := p.consume(entries)
	if err != nil {
		p.failed = true
		return pos, err
	}
	p.ok.minute, p.ok.n, p.ok.partLen = p.minute, p.n, p.partLen
	return pos, nil
}

func (p *Persister) consume(entries []spool.Entry) (spool.Position, error) {
	for _, e := range entries {
		if p.n == 0 {
			p.safe = e.Pos // every key before it is in a key file
		}
		h, err := record.ParseHeader(e.Payload)
		if err != nil {
			// The receiver wrote this frame, so a bad header is disk damage that the spool's
			// checksum missed; nothing in it can be a duplicate of anything we can recognise.
			p.Log.Error("dedup: unreadable spool frame skipped", "position", e.Pos, "err", err)
			p.end = e.End
			continue
		}
		m := minuteOf(h.ReceivedAt)
		if p.minute != 0 && m > p.minute && p.n > 0 {
			if err := p.finish(e.Pos); err != nil {
				return p.safe, err
			}
		}
		if m > p.minute {
			p.minute = m
		}
		if len(h.Keys) > 0 && p.partLen == 0 && len(p.buf) == 0 {
			p.buf = append(p.buf, fileMagic...)
		}
		for _, k := range h.Keys {
			p.buf = append(p.buf, k[:]...)
		}
		p.n += len(h.Keys)
		p.end = e.End
	}
	if err := p.write(); err != nil {
		return p.safe, err
	}
	// A minute is finished once the clock has left it: nothing received later can belong to it.
	if p.n > 0 && minuteOf(p.now()) > p.minute {
		if err := p.finish(p.end); err != nil {
			return p.safe, err
		}
	}
	if p.n == 0 {
		p.safe = p.end
	}
	if err := p.expire(); err != nil {
		p.Log.Warn("dedup: removing expired key files", "err", err)
	}
	return p.safe, nil
}

func (p *Persister) partPath() string {
	return filepath.Join(p.Dir, fmt.Sprintf("%d.keys.part", p.minute))
}

// repair cuts the part file back to what the calls before the failed one wrote, so that the
// keys of the entries passed again are not in it twice. If the failed call finished a minute,
// the part file is that call's own and goes back to empty; if it was renamed before the
// failure, the keys passed again start a new one, and a key in two files is harmless.
func (p *Persister) repair() error {
	p.buf = p.buf[:0]
	p.n, p.partLen = 0, 0
	if p.minute == p.ok.minute {
		p.n, p.partLen = p.ok.n, p.ok.partLen
	}
	err := os.Truncate(p.partPath(), p.partLen)
	if errors.Is(err, fs.ErrNotExist) {
		p.n, p.partLen, err = 0, 0, nil
	}
	if err != nil {
		return fmt.Errorf("dedup: cut back the part file: %w", err)
	}
	p.failed = false
	return nil
}

// write appends buf to the minute's part file, creating it with the first keys (which buf
// then starts with the magic): afresh, since one a crash left of the same minute holds keys
// that the spool replays.
func (p *Persister) write() error {
	if len(p.buf) == 0 {
		return nil
	}
	flag := os.O_WRONLY | os.O_APPEND
	if p.partLen == 0 {
		if err := os.MkdirAll(p.Dir, 0o750); err != nil {
			return fmt.Errorf("dedup: create directory: %w", err)
		}
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(p.partPath(), flag, 0o640)
	if err != nil {
		return fmt.Errorf("dedup: open part file: %w", err)
	}
	_, err = f.Write(p.buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dedup: write part file: %w", err)
	}
	p.partLen += int64(len(p.buf))
	p.buf = p.buf[:0]
	return nil
}

// finish makes the minute's part file a key file covering the spool up to upTo.
func (p *Persister) finish(upTo spool.Position) error {
	if err := p.write(); err != nil {
		return err
	}
	part := p.partPath()
	f, err := os.OpenFile(part, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("dedup: open part file: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("dedup: fsync part file: %w", err)
	}
	name := filepath.Join(p.Dir, fmt.Sprintf("%d-%d.keys", p.minute, uint64(upTo)))
	if err := os.Rename(part, name); err != nil {
		return fmt.Errorf("dedup: name key file: %w", err)
	}
	if err := fsutil.SyncDir(p.Dir); err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	p.n, p.partLen = 0, 0
	p.safe = upTo
	return nil
}

// expire removes the key files past the horizon, and the part files that are not the one
// being written: a crash left them, and the spool replays their keys.
func (p *Persister) expire() error {
	files, err := listFiles(p.Dir, keyFileName)
	if err != nil {
		return err
	}
	parts, err := listFiles(p.Dir, partFileName)
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
	for _, f := range parts {
		if f.minute != p.minute || p.partLen == 0 {
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

// listFiles lists the files in dir whose name matches re, whose first group is the minute.
func listFiles(dir string, re *regexp.Regexp) ([]keyFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []keyFile
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
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
// read from files and from the spool. The index spills its sealed minutes to files in dir
// (see Index).
func Load(ctx context.Context, log *slog.Logger, dir string, horizon time.Duration, sp *spool.Spool, now time.Time) (ix *Index, fromFiles, fromSpool int, err error) {
	ix = newSpillingIndex(horizon, dir, log)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		// The Persister will fail on the same directory and say so; the runs stay in memory.
		log.Warn("dedup: create directory", "err", err)
	}
	files, err := listFiles(dir, keyFileName)
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
	var at time.Time
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
		// Under the newest receipt time so far, as the Persister files a frame older than the
		// ones before it (an agent's backlog relayed to an aggregator) under the newest minute:
		// remembered for the horizon from then, not forgotten at once for its own old minute.
		if h.ReceivedAt.After(at) {
			at = h.ReceivedAt
		}
		ix.Add(at, h.Keys...)
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
	if len(b) < len(fileMagic) {
		return nil, errors.New("not a key file")
	}
	switch string(b[:len(fileMagic)]) {
	case fileMagic:
		b = b[len(fileMagic):]
	case fileMagicV1:
		b = b[len(fileMagicV1):]
		n, w := binary.Uvarint(b)
		if w <= 0 || n*16 != uint64(len(b)-w) {
			return nil, errors.New("truncated key file")
		}
		b = b[w:]
	default:
		return nil, errors.New("not a key file")
	}
	if len(b)%16 != 0 {
		return nil, errors.New("truncated key file")
	}
	keys := make([]record.Key, len(b)/16)
	for i := range keys {
		copy(keys[i][:], b[i*16:])
	}
	return keys, nil
}
