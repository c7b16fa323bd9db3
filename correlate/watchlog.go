package correlate

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
)

// The watch journal. A watch runs for minutes or hours, and the spool may commit only past
// records no chain in memory needs: held at a running watch's first record, it would keep every
// frame since on disk. So the records of watches' chains are written here as they are joined,
// and once they are synced the chain is kept (chainState.kept): SafePosition passes it. After a
// restart the kept chains the last process still held are rebuilt from here before the replay,
// so a watch's chain comes out the same whichever process judges it. (Without it the replay
// joined a watch's completion alone: in the HA layout one aggregator stored a one-record chain
// of a watch and the other that and the whole watch.) A chain that leaves memory is marked
// gone, and the file is rewritten without the gone once they are most of it.
//
// An entry is: body length (uint32), CRC-32C of the body (uint32), body. A body is a kind
// byte, the chain's sequence number (uvarint), and for a record its spool position (uint64)
// and a spool frame holding it alone. A torn or corrupt entry ends the file: what follows it
// is dropped at the next open (the chains it held are then judged as before the journal).

// watchLogName is the journal's file in the state file's directory.
const watchLogName = "watches.log"

const (
	wlRecord byte = 1
	wlGone   byte = 2
)

// wlMaxBody bounds an entry a reader believes: a record's frame is at most a spool frame.
const wlMaxBody = record.MaxFrameBody + 64

// wlCompactAt is the least size the journal is rewritten at (when gone entries are most of it).
const wlCompactAt = 4 << 20

var wlCRC = crc32.MakeTable(crc32.Castagnoli)

// watchLog is the journal. It is owned by the Correlator and used under its lock.
type watchLog struct {
	path  string
	f     *os.File
	codec *record.Codec
	log   *slog.Logger
	// size is the file's bytes (written and buffered); live of them the entries of the chains
	// in memory (chains).
	size, live int64
	next       uint32
	chains     map[chainRef]*wlChain
	// early are the records of watches' chains not yet running nor ended (a RequestReceived
	// alone), journaled with the chain if it runs.
	early map[chainRef][]wlRec
	// unsynced are the chains appended to since the last sync: kept only after it.
	unsynced []chainRef
	buf      []byte // entries not yet written
	// loaded are the chains the file held at open, until the rebuild takes them.
	loaded   []*wlLoaded
	lastSync time.Time
	// failed says a write failed: nothing more is journaled, and the joiner passes running
	// watches as without a journal.
	failed bool
	// compactAt is the least size the file is rewritten at (wlCompactAt).
	compactAt int64
}

// wlChain is a chain of this process in the journal.
type wlChain struct {
	seq   uint32
	bytes int64
	// upto: the records of positions before it were in the file when it was opened (the
	// replay brings them again; they are not appended twice).
	upto spool.Position
	// bad says a record of it could not be journaled: it is never kept.
	bad bool
}

// wlLoaded is a chain as the file held it at open.
type wlLoaded struct {
	seq   uint32
	bytes int64
	recs  []wlRec
}

type wlRec struct {
	pos spool.Position
	rec record.Record
}

// openWatchLog opens the journal at path, reading the chains it holds. Records at or past
// spoolEnd mean the file was kept for another spool (one made anew): it is started afresh.
func openWatchLog(path string, codec *record.Codec, spoolEnd spool.Position, log *slog.Logger) (*watchLog, error) {
	w := &watchLog{path: path, codec: codec, log: log, chains: map[chainRef]*wlChain{}, early: map[chainRef][]wlRec{}, compactAt: wlCompactAt}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("correlate: watch journal: %w", err)
	}
	good, err := w.load(spoolEnd)
	if err != nil {
		return nil, err
	}
	// Whatever follows the last whole entry (a write torn by a crash) is cut off, so that
	// appends are read again; then the file is made durable as read.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err == nil {
		err = f.Truncate(good)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("correlate: watch journal: %w", err)
	}
	w.f, w.size = f, good
	return w, nil
}

// load reads the file into w.loaded and returns the length of its whole entries (0 when it
// is started afresh).
func (w *watchLog) load(spoolEnd spool.Position) (int64, error) {
	f, err := os.Open(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("correlate: watch journal: %w", err)
	}
	defer f.Close()
	bySeq := map[uint32]*wlLoaded{}
	var foreign bool
	good, err := readWatchLog(bufio.NewReader(f), func(kind byte, seq uint32, pos spool.Position, frame, entry []byte) error {
		w.next = max(w.next, seq+1)
		l := bySeq[seq]
		if l == nil {
			l = &wlLoaded{seq: seq}
			bySeq[seq] = l
		}
		if kind == wlGone {
			delete(bySeq, seq)
			return nil
		}
		if pos >= spoolEnd {
			foreign = true
			return errStopReading
		}
		b, err := w.codec.DecodeFrame(frame)
		if err != nil || len(b.Records) != 1 {
			return errStopReading // written whole and checked, so not ours: read no further
		}
		l.bytes += int64(len(entry))
		l.recs = append(l.recs, wlRec{pos: pos, rec: b.Records[0]})
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("correlate: watch journal: %w", err)
	}
	if foreign {
		w.log.Warn("correlate: the watch journal reaches past the spool's end: kept for another spool, started afresh", "file", w.path, "spool_end", spoolEnd)
		w.next = 0
		return 0, nil
	}
	for _, l := range bySeq {
		if len(l.recs) > 0 {
			w.loaded = append(w.loaded, l)
		}
	}
	slices.SortFunc(w.loaded, func(a, b *wlLoaded) int { return int(a.seq) - int(b.seq) })
	return good, nil
}

var errStopReading = errors.New("stop reading")

// readWatchLog calls fn with each whole entry of r (entry: its bytes as written, valid until fn
// returns) until the end, a torn or corrupt entry, or fn returns errStopReading; it returns the
// bytes of the entries before that. Other errors of fn or r are returned.
func readWatchLog(r *bufio.Reader, fn func(kind byte, seq uint32, pos spool.Position, frame, entry []byte) error) (int64, error) {
	var good int64
	entry := make([]byte, 8)
	for {
		if _, err := io.ReadFull(r, entry[:8]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return good, nil
			}
			return good, err
		}
		size := binary.LittleEndian.Uint32(entry[:4])
		if size < 2 || size > wlMaxBody {
			return good, nil
		}
		entry = slices.Grow(entry[:8], int(size))[:8+size]
		body := entry[8:]
		if _, err := io.ReadFull(r, body); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return good, nil
			}
			return good, err
		}
		if crc32.Checksum(body, wlCRC) != binary.LittleEndian.Uint32(entry[4:8]) {
			return good, nil
		}
		kind := body[0]
		seq, k := binary.Uvarint(body[1:])
		if k <= 0 || seq > 1<<32-1 {
			return good, nil
		}
		rest := body[1+k:]
		var pos spool.Position
		switch kind {
		case wlGone:
			if len(rest) != 0 {
				return good, nil
			}
		case wlRecord:
			if len(rest) < 8 {
				return good, nil
			}
			pos, rest = spool.Position(binary.LittleEndian.Uint64(rest)), rest[8:]
		default:
			return good, nil
		}
		if err := fn(kind, uint32(seq), pos, rest, entry); err != nil {
			if errors.Is(err, errStopReading) {
				return good, nil
			}
			return good, err
		}
		good += int64(len(entry))
	}
}

// appendEntry buffers an entry of kind for seq and returns its bytes; for a record, r
// (read at pos) is its frame.
func (w *watchLog) appendEntry(kind byte, seq uint32, pos spool.Position, r *record.Record) (int64, error) {
	start := len(w.buf)
	w.buf = append(w.buf, make([]byte, 8)...)
	w.buf = append(w.buf, kind)
	w.buf = binary.AppendUvarint(w.buf, uint64(seq))
	if kind == wlRecord {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(pos))
		var err error
		if w.buf, err = w.codec.AppendFrame(w.buf, r.APIServer, r.ReceivedAt, []record.Record{*r}, []record.Key{r.Key()}); err != nil {
			w.buf = w.buf[:start]
			return 0, err
		}
	}
	body := w.buf[start+8:]
	binary.LittleEndian.PutUint32(w.buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(w.buf[start+4:], crc32.Checksum(body, wlCRC))
	n := int64(len(w.buf) - start)
	w.size += n
	return n, nil
}

// note journals r, just joined at pos to c (a watch's chain), once c is a running watch: its
// records from before it ran wait in early until then, and a watch that ends without running
// costs the journal nothing. c is not kept until the next sync.
func (w *watchLog) note(j *Joiner, c *chainState, r *record.Record, pos spool.Position) {
	ref := chainRef{c.self, c.gen}
	wc := w.chains[ref]
	if wc == nil {
		switch {
		case j.watching(c):
			wc = &wlChain{seq: w.next}
			w.next++
			w.chains[ref] = wc
			for _, e := range w.early[ref] {
				w.write(c, wc, &e.rec, e.pos)
			}
			delete(w.early, ref)
		case j.incomplete(c):
			w.early[ref] = append(w.early[ref], wlRec{pos: pos, rec: *r})
			return
		default:
			delete(w.early, ref)
			return
		}
	}
	w.write(c, wc, r, pos)
}

// write journals r, joined at pos to c, whose entry is wc.
func (w *watchLog) write(c *chainState, wc *wlChain, r *record.Record, pos spool.Position) {
	if pos < wc.upto {
		return // the replay of a record the file has
	}
	c.kept = false
	if w.failed || wc.bad {
		wc.bad = true
		return
	}
	n, err := w.appendEntry(wlRecord, wc.seq, pos, r)
	if err != nil {
		wc.bad = true
		w.log.Warn("correlate: a watch's record could not be journaled; its chain holds the spool until it leaves memory", "audit_id", r.AuditID, "err", err)
		return
	}
	wc.bytes += n
	w.live += n
	w.unsynced = append(w.unsynced, chainRef{c.self, c.gen})
}

// gone marks c, leaving memory, gone from the journal.
func (w *watchLog) gone(c *chainState) {
	ref := chainRef{c.self, c.gen}
	delete(w.early, ref)
	wc := w.chains[ref]
	if wc == nil {
		return
	}
	delete(w.chains, ref)
	w.live -= wc.bytes
	if !w.failed && wc.bytes > 0 {
		if _, err := w.appendEntry(wlGone, wc.seq, 0, nil); err != nil {
			w.log.Warn("correlate: marking a watch's chain gone in the journal", "err", err)
		}
	}
}

// rebuild joins the loaded chains' records read before from (where the replay begins) into
// j, in spool order, and keeps the chains they make; finish takes a chain j evicts meanwhile.
// Loaded chains with no record before from are dropped: the replay brings them whole, to be
// journaled again.
func (w *watchLog) rebuild(j *Joiner, from spool.Position, finish func(*chainState)) int {
	type pending struct {
		l *wlLoaded
		r *wlRec
	}
	var recs []pending
	for _, l := range w.loaded {
		for i := range l.recs {
			if l.recs[i].pos < from {
				recs = append(recs, pending{l, &l.recs[i]})
			}
		}
	}
	slices.SortStableFunc(recs, func(a, b pending) int { return cmp.Compare(a.r.pos, b.r.pos) })
	mapped := map[uint32]chainRef{}
	var made []chainRef
	for _, p := range recs {
		c, ev := j.Add(&p.r.rec, p.r.pos)
		if ev != nil {
			finish(ev)
		}
		ref := chainRef{c.self, c.gen}
		m, ok := mapped[p.l.seq]
		wc := w.chains[ref]
		switch {
		case ok && m == ref:
		case !ok && wc == nil:
			upto := spool.Position(0)
			for _, r := range p.l.recs {
				upto = max(upto, r.pos+1)
			}
			w.chains[ref] = &wlChain{seq: p.l.seq, bytes: p.l.bytes, upto: upto}
			mapped[p.l.seq] = ref
			made = append(made, ref)
		default:
			// The file's chains and the rebuilt ones differ (an auditID other requests shared):
			// the chains whose records the file holds under another's number are never kept.
			if wc == nil {
				wc = &wlChain{seq: w.next}
				w.next++
				w.chains[ref] = wc
			}
			wc.bad = true
			if ok {
				w.chains[m].bad = true
			}
		}
	}
	// The loaded chains that made no chain of their own are gone from the file: the replay
	// brings their records again, journaled anew.
	for _, l := range w.loaded {
		if _, ok := mapped[l.seq]; ok {
			w.live += l.bytes
			continue
		}
		if _, err := w.appendEntry(wlGone, l.seq, 0, nil); err != nil {
			w.log.Warn("correlate: marking a watch's chain gone in the journal", "err", err)
		}
	}
	// What the file held is durable (opening synced it): those chains are kept at once.
	for _, ref := range made {
		if c := j.slab.live(ref.r, ref.gen); c != nil && !w.chains[ref].bad {
			c.kept = true
		}
	}
	w.loaded = nil
	return len(made)
}

// sync writes the buffered entries and fsyncs them, at most every saveEvery unless forced,
// and keeps the chains they were of; it rewrites the file when gone entries are most of it.
func (w *watchLog) sync(j *Joiner, now time.Time, force bool) {
	if w.failed || (!force && now.Sub(w.lastSync) < saveEvery) {
		return
	}
	if len(w.buf) > 0 {
		_, err := w.f.Write(w.buf)
		if err == nil {
			err = w.f.Sync()
		}
		if err != nil {
			// A torn entry would end the file for every later read: nothing more is written,
			// and running watches no longer hold the spool (the disk may be full), as without
			// a journal.
			w.failed, j.journaled = true, false
			w.log.Warn("correlate: writing the watch journal failed; from now on a restart joins a running watch's completion alone", "file", w.path, "err", err)
			return
		}
		w.buf = w.buf[:0]
	}
	w.lastSync = now
	for _, ref := range w.unsynced {
		if c := j.slab.live(ref.r, ref.gen); c != nil {
			if wc := w.chains[ref]; wc != nil && !wc.bad {
				c.kept = true
			}
		}
	}
	clear(w.unsynced)
	w.unsynced = w.unsynced[:0]
	if w.size > w.compactAt && w.size > 2*w.live && len(w.loaded) == 0 {
		if err := w.compact(); err != nil {
			w.log.Warn("correlate: rewriting the watch journal without its gone chains", "file", w.path, "err", err)
		}
		if w.failed {
			j.journaled = false
		}
	}
}

// compact rewrites the file with only the entries of the chains in memory.
func (w *watchLog) compact() error {
	live := make(map[uint32]bool, len(w.chains))
	for _, wc := range w.chains {
		live[wc.seq] = true
	}
	src, err := os.Open(w.path)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := w.path + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	out := bufio.NewWriter(dst)
	var size int64
	_, err = readWatchLog(bufio.NewReader(src), func(kind byte, seq uint32, _ spool.Position, _, entry []byte) error {
		if kind != wlRecord || !live[seq] {
			return nil
		}
		_, err := out.Write(entry) // as read, its checksum with it
		size += int64(len(entry))
		return err
	})
	if err == nil {
		err = out.Flush()
	}
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, w.path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(w.path))
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		w.failed = true
		return fmt.Errorf("reopening after the rewrite (nothing more is journaled): %w", err)
	}
	w.f.Close()
	w.f, w.size = f, size
	return nil
}

// close syncs what is buffered and closes the file; nothing is journaled after it.
func (w *watchLog) close(j *Joiner, now time.Time) error {
	if w.f == nil {
		return nil
	}
	w.sync(j, now, true)
	err := w.f.Close()
	w.f, w.failed = nil, true
	return err
}
