package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/bufpool"
	"github.com/peertrail/peertrail/metrics"
)

// ConsumerName is the writer's spool consumer name; register it in spool.Options.Consumers.
const ConsumerName = metrics.ConsumerStore

// WriterOptions tune a Writer; zero values take defaults.
type WriterOptions struct {
	// FlushRows is how many records the writer gathers before it inserts them (default
	// 50,000): ClickHouse wants few large inserts, not many small ones.
	FlushRows int
	// FlushBytes bounds the records gathered for one insert by their decoded size (default
	// 128 MiB; a frame more at most): the engine holds an insert's rows whole, about twice over
	// at its peak (sorted or not), so it is this, not FlushRows, that bounds an insert's memory
	// when events are large (the RequestResponse level's objects, up to megabytes an event).
	FlushBytes int
	// FlushInterval bounds how long a record waits for a flush (default 15s). It is checked
	// when the spool delivers entries or reports idleness (spool.RunOptions.Idle), so the
	// effective bound is the larger of the two. Each insert costs a part of the events table
	// and of each of its views, and the merges that rewrite them: at 2,000 events/s inserts
	// every five seconds cost a third less CPU than every second, and every fifteen a third
	// less again (migration 0013, BENCHMARKS.md).
	FlushInterval time.Duration
	Logger        *slog.Logger
	// Spool, when set, is the spool the writer consumes: it then keeps only the positions of the
	// frames it gathers and reads them back from the spool for the insert, rather than a copy of
	// each that stays resident between inserts (BENCHMARKS.md, "A thirty-seventh session"). The
	// spool holds them: the writer's committed position stays before every frame it has not
	// stored. Without it each payload is copied.
	Spool *spool.Spool
	// RememberChains bounds how many chains the chain sink remembers having written
	// (DefaultRememberChains, 40 bytes each): WriteChains asks the store only about chains it
	// does not know. A smaller record costs lookups of late revisions, never a wrong write.
	RememberChains int
	// Deduplicate is for two writers (two aggregators of the HA layout) sharing one ClickHouse
	// server, whose tables were migrated with SchemaOptions.Deduplicate: each spool frame's
	// events are one insert with an insert_deduplication_token made of the frame's apiserver
	// and its events' keys, so that the second writer's insert of a frame is dropped by the
	// server, from the table and its rollups; and every chain counts as possibly written
	// (by the other), so WriteChains asks the store before writing a version. The store must
	// implement InsertDeduplicated (*Server does).
	Deduplicate bool
}

// DefaultRememberChains is WriterOptions.RememberChains unless set: what a correlator can still
// revise, the final chains it keeps amendable (200,000 by default) and a batch of them on its
// way (50,000). Twice that held more memory for nothing (BENCHMARKS.md, "A thirty-seventh
// session"): a chain the correlator has let go gets no new revision but from a replay, which is
// looked up in the store anyway.
const DefaultRememberChains = 250_000

func (o *WriterOptions) defaults() {
	if o.FlushRows <= 0 {
		o.FlushRows = 50_000
	}
	if o.FlushBytes <= 0 {
		o.FlushBytes = 128 << 20
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RememberChains <= 0 {
		o.RememberChains = DefaultRememberChains
	}
}

// Writer moves audit records from the spool into the events table (it is the spool consumer
// ConsumerName) and is the correlator's chain sink (WriteChains).
//
// Nothing is lost while ClickHouse is down or slow: a failed insert fails Consume, the spool
// runner retries the same entries with backoff and meanwhile the spool grows; the position
// committed never passes a record that is not in the store.
//
// Nothing is written twice: the spool redelivers entries after a restart or a failed Consume,
// and a failed insert may have landed anyway (the server committed, the answer was lost). So
// whenever the writer is unsure what the store holds (at start, after a failed insert), it
// reads the newest receive time in the events table; records received after it cannot be
// there, and records received before it are looked up by their event key and skipped when
// present. The materialized rollups therefore count each event once. (The events table also
// folds duplicates by its sorting key, as a backstop for anything else.)
//
// A Writer assumes it is the only writer of the events table. Consume must be called from
// one goroutine (Spool.Run does); WriteChains may be called concurrently with it.
type Writer struct {
	store   Store
	codec   *record.Codec
	opts    WriterOptions
	log     *slog.Logger
	metrics *writerMetrics

	// Consume's state (one goroutine). The writer gathers frames, not records: a frame's
	// payload (S2-compressed) is a fraction of its decoded records with their strings and raw
	// JSON, and a flush decodes one frame at a time as the engine reads the rows.
	frames []pendingFrame
	// payloads holds the gathered frames' payloads one after another (without
	// WriterOptions.Spool), each frame's at the same offset whatever array holds it now; its
	// memory serves the next insert's, rather than a copy of its own for each frame.
	payloads []byte
	pending  int                 // records in frames
	pendingB int                 // their decoded size (FrameHeader.BodyLen)
	bufFrom  spool.Position      // Pos of the first entry with records in frames
	bufSince time.Time           // when the first record in frames arrived
	seen     spool.Position      // End of the last entry delivered
	frame    *record.FrameReader // decodes the frame being streamed (writeFrames)
	// known is false while the writer does not know what the store holds; then suspect is
	// read again before the next insert. Records received at or before suspect may be in
	// the store already.
	known   bool
	suspect time.Time

	// rows are the block streams' encoding buffers, kept between inserts (the events' and the
	// chains' run at once) up to a few blocks' size.
	rows *bufpool.Free[[]byte]
	// block holds the events of the Native block being encoded (eventBlock); made at the first
	// insert, used only by Consume's goroutine.
	block *eventBlock

	chainMu sync.Mutex // serialises WriteChains' check-then-insert
	// chainBlock holds the chains of the Native block being encoded; made at the first insert
	// (under chainMu).
	chainBlock *chainBlock
	// written is what the chains table holds of the chains written (under chainMu).
	written      *writtenChains
	chainMetrics *chainMetrics
}

// NewWriter returns a writer into s. codec decodes the spool's frames.
func NewWriter(s Store, codec *record.Codec, opts WriterOptions) *Writer {
	opts.defaults()
	w := &Writer{store: s, codec: codec, frame: record.NewFrameReader(), opts: opts, log: opts.Logger, metrics: newWriterMetrics(),
		written: newWrittenChains(opts.RememberChains), chainMetrics: newChainMetrics(),
		rows: bufpool.NewFree(2, func(b []byte) bool { return cap(b) <= nativeBlockBytes })}
	w.written.shared = opts.Deduplicate
	return w
}

// deduplicatedInserter is a store that can drop an insert whose token it has seen.
type deduplicatedInserter interface {
	InsertDeduplicated(ctx context.Context, table string, columns []Column, rows [][]any, token string) error
}

// FrameToken is the insert_deduplication_token of a frame's events: its apiserver and the
// hash of its events' keys. Two aggregators that took the same agent frame hold the same
// frame, so their inserts of it carry the same token.
func FrameToken(h record.FrameHeader) string {
	b := make([]byte, 0, len(h.Keys)*16)
	for _, k := range h.Keys {
		b = append(b, k[:]...)
	}
	sum := xxh3.Hash128(b).Bytes()
	return h.APIServer + ":" + hex.EncodeToString(sum[:])
}

// writeFramesDeduplicated inserts each gathered frame's events as an insert of its own with
// the frame's token (WriterOptions.Deduplicate). A frame that landed before a failure is
// dropped by the server when it comes again.
func (w *Writer) writeFramesDeduplicated(ctx context.Context, s deduplicatedInserter) error {
	return w.eachFrame(func(f *pendingFrame, payload []byte) error {
		h, err := record.ParseHeader(payload)
		if err != nil {
			w.badFrame(f.pos, err)
			return nil
		}
		batch, err := w.codec.DecodeFrame(payload)
		if err != nil {
			w.badFrame(f.pos, err)
			return nil
		}
		rows := make([][]any, len(batch.Records))
		var newest time.Time
		for j := range batch.Records {
			rows[j] = EventRow(&batch.Records[j])
			if batch.Records[j].ReceivedAt.After(newest) {
				newest = batch.Records[j].ReceivedAt
			}
		}
		start := time.Now()
		err = s.InsertDeduplicated(ctx, EventsTable, EventColumns, rows, FrameToken(h))
		return w.noteInsert(start, len(rows), newest, err)
	})
}

// eachFrame calls fn with each gathered frame and its payload, each the caller's for good, in
// order, until fn returns an error. A frame found corrupt when read back is counted and left
// out (frameSource.payload).
func (w *Writer) eachFrame(fn func(f *pendingFrame, payload []byte) error) error {
	src := w.frameSource(false)
	defer src.close()
	for i := range w.frames {
		f := &w.frames[i]
		payload, ok, err := src.payload(f)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := fn(f, payload); err != nil {
			return err
		}
	}
	return nil
}

// pendingFrame is a frame gathered for the next insert: where it is in the spool, a copy of its
// payload (the spool lends payloads only until Consume returns; none when WriterOptions.Spool
// is set: the frame is read back), where that copy ends in Writer.payloads, how many records it
// holds and their decoded size.
type pendingFrame struct {
	pos     spool.Position
	payload []byte
	end     int
	records int
	bytes   int // decoded
}

// maxKeptPayloads bounds the payload memory kept for the next insert: a burst's does not stay.
const maxKeptPayloads = 16 << 20

// Consume implements spool.Consumer.
//
// The records gathered never pass FlushRows or FlushBytes by more than one frame: a call may
// deliver more records than that (up to 256 frames; in a burst, tens of thousands of records),
// and the writer inserts as soon as it holds either rather than after gathering all of them, so
// that its memory and the engine's do not follow the spool's delivery size.
func (w *Writer) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	keep := len(w.frames) // on failure, drop what this call added since its last insert: Run delivers it again
	for _, e := range entries {
		if w.full() {
			if err := w.flush(ctx, keep); err != nil {
				return 0, err
			}
			keep = 0
		}
		h, err := record.ParseHeader(e.Payload)
		if err != nil {
			w.badFrame(e.Pos, err)
			continue
		}
		if len(h.Keys) == 0 {
			continue
		}
		if len(w.frames) == 0 {
			w.bufFrom, w.bufSince = e.Pos, time.Now()
		}
		size, err := h.BodyLen()
		if err != nil {
			size = len(e.Payload) // the flush finds it undecodable and counts it
		}
		f := pendingFrame{pos: e.Pos, records: len(h.Keys), bytes: size}
		if w.opts.Spool == nil {
			from := len(w.payloads)
			w.payloads = append(w.payloads, e.Payload...)
			f.payload, f.end = w.payloads[from:len(w.payloads):len(w.payloads)], len(w.payloads)
		}
		w.frames = append(w.frames, f)
		w.pending += len(h.Keys)
		w.pendingB += size
	}
	seen := w.seen
	if n := len(entries); n > 0 {
		seen = entries[n-1].End
	}
	if len(w.frames) == 0 {
		w.seen = seen
		return seen, nil
	}
	if !w.full() && time.Since(w.bufSince) < w.opts.FlushInterval {
		// Waiting for more: everything from the first buffered entry on is still needed.
		w.seen = seen
		return w.bufFrom, nil
	}
	if err := w.flush(ctx, keep); err != nil {
		return 0, err
	}
	w.seen = seen
	return seen, nil
}

// full reports whether the gathered records are an insert's worth (FlushRows, FlushBytes).
func (w *Writer) full() bool {
	return w.pending >= w.opts.FlushRows || w.pendingB >= w.opts.FlushBytes
}

// badFrame counts and reports a frame that does not decode. It never will, and retrying would
// stop the writer for good; the spool keeps nothing else of it. (A frame whose header reads but
// whose records do not is found when a flush decodes it, and counted again if that flush is
// retried.)
func (w *Writer) badFrame(pos spool.Position, err error) {
	w.metrics.badFrames.Inc()
	w.log.Error("store: skipping a spool frame that does not decode", "pos", pos, "err", err)
}

// flush inserts the gathered frames' records. On failure it keeps the first keep frames
// (gathered by earlier calls, which Run does not deliver again): Run delivers this call's
// entries again, and since the insert failed the writer no longer trusts what it knew of the
// store, so records an earlier flush of the same call inserted are looked up and skipped, not
// written twice.
func (w *Writer) flush(ctx context.Context, keep int) error {
	if err := w.writeFrames(ctx); err != nil {
		clear(w.frames[keep:])
		w.frames = w.frames[:keep]
		w.pending, w.pendingB = 0, 0
		for _, f := range w.frames {
			w.pending += f.records
			w.pendingB += f.bytes
		}
		// The kept frames' payloads stay where they are (in this array or one it outgrew);
		// the redelivered entries are copied after them again, not after their first copies.
		w.payloads = w.payloads[:0]
		if keep > 0 {
			w.payloads = w.payloads[:w.frames[keep-1].end]
		}
		return err
	}
	clear(w.frames)
	w.frames, w.pending, w.pendingB = w.frames[:0], 0, 0
	if w.payloads = w.payloads[:0]; cap(w.payloads) > maxKeptPayloads {
		w.payloads = nil
	}
	return nil
}

// errUnsure stops a frame stream at a record the events table may hold already.
var errUnsure = errors.New("store: a record received before the newest in the events table")

// writeFrames inserts the records of the gathered frames. Into the embedded engine it streams
// them, one frame decoded at a time as the engine reads (into the writer's reused records), as
// long as every record is newer than what the table held when the writer last looked; at the
// first that is not (a redelivery after a restart or a failed insert) it stops that insert and
// takes the careful path of writeEvents, which decodes all of them and looks up the ones the
// table may hold.
func (w *Writer) writeFrames(ctx context.Context) error {
	if w.opts.Deduplicate {
		s, ok := w.store.(deduplicatedInserter)
		if !ok {
			return errors.New("store: deduplicated inserts need a ClickHouse server store")
		}
		return w.writeFramesDeduplicated(ctx, s)
	}
	if s, ok := w.store.(blockStreamer); ok {
		if err := w.findTableEnd(ctx); err != nil {
			return err
		}
		var (
			rows   int
			newest time.Time
			block  = w.eventBlock()
			rs     = &blockStream{n: len(w.frames), block: block}
			src    = w.frameSource(true) // the records alias the payload until the next frame
		)
		rs.add = func(i int) {
			f := &w.frames[i]
			payload, ok, err := src.payload(f)
			if err != nil {
				rs.err = err
				return
			}
			if !ok {
				return
			}
			// The records alias the reader's memory until the next frame; the block copies what it keeps.
			batch, err := w.frame.Decode(payload)
			if err != nil {
				w.badFrame(f.pos, err)
				return
			}
			for j := range batch.Records {
				r := &batch.Records[j]
				if !w.newerThanTable(r) {
					rs.err = errUnsure
					return
				}
				block.add(r)
				rows++
				if r.ReceivedAt.After(newest) {
					newest = r.ReceivedAt
				}
			}
		}
		start := time.Now()
		err := w.insertStream(ctx, s, EventsTable, EventColumns, rs)
		src.close()
		if rs.err != nil && !errors.Is(rs.err, errUnsure) {
			// A frame could not be read back: the stopped insert is looked up like the rest
			// when the frames come again.
			w.known = false
			w.metrics.insertErrors.WithLabelValues("events").Inc()
			return rs.err
		}
		if rs.err == nil {
			if err == nil && !rs.done() {
				err = fmt.Errorf("the engine stopped reading after %d rows without an error", rows)
			}
			if err != nil {
				rows = w.pending
			}
			return w.noteInsert(start, rows, newest, err)
		}
		// errUnsure. Whatever the stopped insert may have left is looked up like the rest.
		w.known = false
	}
	records := make([]record.Record, 0, w.pending)
	err := w.eachFrame(func(f *pendingFrame, payload []byte) error {
		b, err := w.codec.DecodeFrame(payload)
		if err != nil {
			w.badFrame(f.pos, err)
			return nil
		}
		records = append(records, b.Records...)
		return nil
	})
	if err != nil {
		return err
	}
	return w.writeEvents(ctx, records)
}

// frameSource hands the gathered frames' payloads, in order: their copies, or (with
// WriterOptions.Spool) the frames read back from the spool, each payload the caller's for good,
// or, when lent, only until the next call.
type frameSource struct {
	w    *Writer
	rd   *spool.Reader
	lent bool
}

// frameSource returns the gathered frames' source; lent says the caller is done with each
// payload by the next call, so that one buffer serves them all.
func (w *Writer) frameSource(lent bool) *frameSource { return &frameSource{w: w, lent: lent} }

// payload returns f's payload; ok is false for a frame found corrupt on disk (counted as a bad
// frame, as one that does not decode). An error is one of reading the spool: the insert waits
// for it like for the store.
func (s *frameSource) payload(f *pendingFrame) (p []byte, ok bool, err error) {
	sp := s.w.opts.Spool
	if sp == nil {
		return f.payload, true, nil
	}
	if s.rd == nil || s.rd.Position() != f.pos {
		// Frames without records (not gathered) lie between: start again at this one.
		s.close()
		s.rd = sp.NewReader(f.pos)
	}
	if s.lent {
		s.rd.Lend()
	}
	e, found, err := s.rd.TryNext()
	switch {
	case errors.Is(err, spool.ErrCorrupt):
		s.close()
		s.w.badFrame(f.pos, err)
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("store: read back the frame at %d: %w", f.pos, err)
	case !found || e.Pos != f.pos:
		return nil, false, fmt.Errorf("store: read back the frame at %d: the spool has none there", f.pos)
	}
	return e.Payload, true, nil
}

// close lets the spool's file go.
func (s *frameSource) close() {
	if s.rd != nil {
		_ = s.rd.Close()
		s.rd = nil
	}
}

// eventBlock returns the writer's events block, empty.
func (w *Writer) eventBlock() *eventBlock {
	if w.block == nil {
		w.block = newEventBlock()
	}
	// A stream that stopped early (errUnsure, a failed insert) may have left rows in it.
	w.block.reset()
	return w.block
}

// newerThanTable says r cannot be in the events table: it was received after the newest
// record there when the writer last looked. Compared with its nanoseconds, the batch stored
// last before a crash was newer than itself and written again.
func (w *Writer) newerThanTable(r *record.Record) bool {
	return asStored(r.ReceivedAt).After(w.suspect)
}

// findTableEnd reads where the events table ends (suspect) when the writer does not know.
func (w *Writer) findTableEnd(ctx context.Context) error {
	if w.known {
		return nil
	}
	hw, err := w.newestReceived(ctx)
	if err != nil {
		return fmt.Errorf("store: find where the events table ends: %w", err)
	}
	w.suspect, w.known = hw, true
	return nil
}

// noteInsert counts an insert of rows events, the newest received at newest, begun at start,
// that ended with err.
func (w *Writer) noteInsert(start time.Time, rows int, newest time.Time, err error) error {
	w.metrics.insertDuration.WithLabelValues("events").Observe(time.Since(start).Seconds())
	if err != nil {
		// Some of it may have landed: look again before the next insert.
		w.known = false
		w.metrics.insertErrors.WithLabelValues("events").Inc()
		return fmt.Errorf("store: insert %d events: %w", rows, err)
	}
	w.metrics.rowsWritten.WithLabelValues("events").Add(float64(rows))
	if rows > 0 {
		w.metrics.newest.WithLabelValues("events").Set(float64(newest.UnixNano()) / 1e9)
	}
	return nil
}

// WriteEvents inserts records into the events table, skipping those the store already holds
// when it may hold some (see Writer). Consume takes this path when it cannot stream (a
// ClickHouse server) or is unsure what the table holds; tests and tools may call it too, from
// the same goroutine as Consume.
func (w *Writer) WriteEvents(ctx context.Context, records []record.Record) error {
	return w.writeEvents(ctx, records)
}

func (w *Writer) writeEvents(ctx context.Context, records []record.Record) error {
	if err := w.findTableEnd(ctx); err != nil {
		return err
	}
	records, err := w.skipStored(ctx, records)
	if err != nil {
		// Look again before the next insert: what is delivered again may include records
		// this writer inserted since it last looked.
		w.known = false
		return err
	}
	if len(records) == 0 {
		return nil
	}
	var newest time.Time
	for i := range records {
		if records[i].ReceivedAt.After(newest) {
			newest = records[i].ReceivedAt
		}
	}
	start := time.Now()
	if s, ok := w.store.(blockStreamer); ok {
		err = w.insertStream(ctx, s, EventsTable, EventColumns, eventStream(w.eventBlock(), records))
	} else {
		rows := make([][]any, len(records))
		for i := range records {
			rows[i] = EventRow(&records[i])
		}
		err = w.store.Insert(ctx, EventsTable, EventColumns, rows)
	}
	return w.noteInsert(start, len(records), newest, err)
}

// newestReceived is max(received_at) of the events table (zero when empty). ClickHouse answers
// it from the parts' min/max index, without reading the column.
func (w *Writer) newestReceived(ctx context.Context) (time.Time, error) {
	return w.newestIn(ctx, EventsTable, "received_at")
}

// newestIn is max(column) of table, zero when the table is empty.
func (w *Writer) newestIn(ctx context.Context, table, column string) (time.Time, error) {
	res, err := w.store.Query(ctx, "SELECT max("+column+") AS newest, count() AS n FROM "+table, nil)
	if err != nil {
		return time.Time{}, err
	}
	if len(res.Rows) != 1 || res.Rows[0][1] == "0" {
		return time.Time{}, nil
	}
	return ParseTime(res.Rows[0][0])
}

// skipStored drops the records that may be stored already and are.
func (w *Writer) skipStored(ctx context.Context, records []record.Record) ([]record.Record, error) {
	var lo, hi time.Time
	apiservers := map[string]bool{}
	for i := range records {
		r := &records[i]
		if w.newerThanTable(r) {
			continue
		}
		if lo.IsZero() || r.ReceivedAt.Before(lo) {
			lo = r.ReceivedAt
		}
		if r.ReceivedAt.After(hi) {
			hi = r.ReceivedAt
		}
		apiservers[r.APIServer] = true
	}
	if lo.IsZero() {
		return records, nil
	}
	names := make([]string, 0, len(apiservers))
	for a := range apiservers {
		names = append(names, a)
	}
	res, err := w.store.Query(ctx, `SELECT apiserver, audit_id, stage, stage_timestamp FROM `+EventsTable+`
WHERE received_at >= {lo:DateTime64(6, 'UTC')} AND received_at <= {hi:DateTime64(6, 'UTC')}
  AND apiserver IN {apiservers:Array(String)}`,
		map[string]string{"lo": FormatTime(lo), "hi": FormatTime(hi), "apiservers": arrayLiteral(names)})
	if err != nil {
		return nil, fmt.Errorf("store: look up events that may be stored already: %w", err)
	}
	stored := make(map[record.Key]bool, len(res.Rows))
	for _, row := range res.Rows {
		ts, err := ParseTime(row[3])
		if err != nil {
			return nil, fmt.Errorf("store: stored stage_timestamp %q: %w", row[3], err)
		}
		stored[record.KeyOf(row[0], row[1], row[2], ts)] = true
	}
	kept := make([]record.Record, 0, len(records))
	for i := range records {
		if w.newerThanTable(&records[i]) || !stored[records[i].Key()] {
			kept = append(kept, records[i])
		}
	}
	if skipped := len(records) - len(kept); skipped > 0 {
		w.metrics.rowsSkipped.WithLabelValues("events").Add(float64(skipped))
		w.log.Info("store: skipped events already stored (redelivered)", "skipped", skipped, "of", len(records))
	}
	return kept, nil
}

// arrayLiteral is a ClickHouse Array(String) literal, the text form of an array parameter.
func arrayLiteral(ss []string) string {
	b := []byte{'['}
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, QuoteString(s)...)
	}
	return string(append(b, ']'))
}

// Pending is how many records wait in memory for the next flush.
func (w *Writer) Pending() int { return w.pending }

var _ spool.Consumer = (*Writer)(nil)
