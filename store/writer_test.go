package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// flaky wraps a Store and fails on demand, the ways a ClickHouse outage fails.
type flaky struct {
	store.Store
	mu sync.Mutex
	// failInserts fails that many inserts before they reach the engine.
	failInserts int
	// failQueries fails that many queries.
	failQueries int
	// lostAnswers inserts that many times and then reports an error anyway (the server
	// committed, the connection broke before the answer).
	lostAnswers int
	// partial inserts the first half of that many inserts' rows, then fails.
	partial int
	// okBeforeLost lets that many inserts through before lostAnswers applies.
	okBeforeLost int
	inserts      int
	// sizes are the row counts of the inserts asked for.
	sizes []int
}

var errOutage = errors.New("connection refused (simulated outage)")

func (f *flaky) Insert(ctx context.Context, table string, cols []store.Column, rows [][]any) error {
	f.mu.Lock()
	f.inserts++
	f.sizes = append(f.sizes, len(rows))
	switch {
	case f.okBeforeLost > 0:
		f.okBeforeLost--
		f.mu.Unlock()
		return f.Store.Insert(ctx, table, cols, rows)
	case f.failInserts > 0:
		f.failInserts--
		f.mu.Unlock()
		return errOutage
	case f.lostAnswers > 0:
		f.lostAnswers--
		f.mu.Unlock()
		if err := f.Store.Insert(ctx, table, cols, rows); err != nil {
			return err
		}
		return errors.New("read: connection reset by peer (simulated, after the insert committed)")
	case f.partial > 0:
		f.partial--
		f.mu.Unlock()
		if err := f.Store.Insert(ctx, table, cols, rows[:len(rows)/2]); err != nil {
			return err
		}
		return errors.New("unexpected EOF (simulated, half the rows committed)")
	}
	f.mu.Unlock()
	return f.Store.Insert(ctx, table, cols, rows)
}

func (f *flaky) Query(ctx context.Context, q string, params map[string]string) (*store.Result, error) {
	f.mu.Lock()
	if f.failQueries > 0 {
		f.failQueries--
		f.mu.Unlock()
		return nil, errOutage
	}
	f.mu.Unlock()
	return f.Store.Query(ctx, q, params)
}

// traffic is webhook batches from its own apiservers, received in its own hour.
type traffic struct {
	apiservers []string
	batches    []record.Batch
	records    int
}

// newTraffic makes n batches of per events from each of the named apiservers (names unique
// to the test keep its rows apart from other tests').
func newTraffic(t *testing.T, prefix string, hoursAgo, n, per int) *traffic {
	t.Helper()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(hoursAgo) * time.Hour)
	tr := &traffic{apiservers: []string{prefix + "-a", prefix + "-b"}}
	clock := base
	g := simulate.NewEvents(uint64(hoursAgo), func() time.Time { clock = clock.Add(time.Millisecond); return clock })
	for i := range n {
		for _, a := range tr.apiservers {
			// A receiver's clock has nanoseconds; the table keeps microseconds.
			received := base.Add(time.Duration(i+1)*time.Second + 345_678_901)
			recs, err := simulatedRecords(g, a, received, per)
			if err != nil {
				t.Fatal(err)
			}
			tr.batches = append(tr.batches, record.Batch{APIServer: a, ReceivedAt: received, Records: recs})
			tr.records += len(recs)
		}
	}
	return tr
}

// simulatedRecords are n of simulate's audit events, as the receiver decodes a batch of them
// from apiserver received at received.
func simulatedRecords(g *simulate.Events, apiserver string, received time.Time, n int) ([]record.Record, error) {
	body, _, err := g.EventList(n)
	if err != nil {
		return nil, err
	}
	recs, invalid, err := record.Decode(body, apiserver, received)
	if err != nil || len(invalid) > 0 {
		return nil, fmt.Errorf("decode: %v %v", err, invalid)
	}
	return recs, nil
}

// modeOptions gives the writer's options one of the two ways it keeps the frames it gathers.
type modeOptions func(store.WriterOptions) store.WriterOptions

// inEachMode runs test once for each way the writer keeps the frames it gathers for an insert
// (a subtest each): a copy of each payload, or only their positions, read back from the spool
// (WriterOptions.Spool, as serve runs it). Each gets its own traffic, newTraffic(name-mode,
// hoursAgo, n, per), in a spool of its own, and mode, which sets the writer's options to it.
func inEachMode(t *testing.T, name string, hoursAgo, n, per int, test func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions)) {
	for _, m := range []struct {
		name  string
		spool bool
	}{{"copies", false}, {"spool", true}} {
		t.Run(m.name, func(t *testing.T) {
			codec := newCodec(t)
			tr := newTraffic(t, name+"-"+m.name, hoursAgo, n, per)
			sp := spoolOf(t, codec, tr)
			test(t, codec, tr, sp, func(o store.WriterOptions) store.WriterOptions {
				if m.spool {
					o.Spool = sp
				}
				return o
			})
		})
	}
}

// spoolOf appends the traffic to a new spool as the receiver would.
func spoolOf(t *testing.T, codec *record.Codec, tr *traffic) *spool.Spool {
	t.Helper()
	return spoolIn(t, t.TempDir(), codec, tr)
}

// spoolIn is spoolOf with the spool in dir.
func spoolIn(t *testing.T, dir string, codec *record.Codec, tr *traffic) *spool.Spool {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: dir, MaxBytes: 1 << 30, Sync: spool.SyncNever, Consumers: []string{store.ConsumerName}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	for _, b := range tr.batches {
		keys := make([]record.Key, len(b.Records))
		for i := range b.Records {
			keys[i] = b.Records[i].Key()
		}
		frame, err := codec.AppendFrame(nil, b.APIServer, b.ReceivedAt, b.Records, keys)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Append(frame); err != nil {
			t.Fatal(err)
		}
	}
	return sp
}

// entriesOf reads every frame of sp, each payload its own.
func entriesOf(t *testing.T, sp *spool.Spool) []spool.Entry {
	t.Helper()
	var entries []spool.Entry
	r := sp.NewReader(0)
	defer r.Close()
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return entries
		}
		entries = append(entries, e)
	}
}

func newCodec(t *testing.T) *record.Codec {
	t.Helper()
	c, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (tr *traffic) params() map[string]string {
	return map[string]string{"a": tr.apiservers[0], "b": tr.apiservers[1]}
}

// stored counts the traffic's rows in events without FINAL (duplicates would count) and in the
// per-minute rollup.
func (tr *traffic) stored(t *testing.T) (events, rollup int) {
	t.Helper()
	s := engine(t)
	e := scalar(t, s, "SELECT count() FROM peertrail.events WHERE apiserver IN ({a:String}, {b:String})", tr.params())
	r := scalar(t, s, "SELECT sum(events) FROM peertrail.events_per_minute WHERE apiserver IN ({a:String}, {b:String})", tr.params())
	events, _ = strconv.Atoi(e)
	rollup, _ = strconv.Atoi(r)
	return events, rollup
}

// runUntilStored runs the writer from the spool until the traffic is stored or the deadline.
func runUntilStored(t *testing.T, sp *spool.Spool, w *store.Writer, tr *traffic) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sp.Run(ctx, store.ConsumerName, w, spool.RunOptions{Idle: 20 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, CommitEvery: time.Millisecond})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Stored, and the runner committed a position past the whole spool.
		if n, _ := tr.stored(t); n >= tr.records && sp.Stats().Lag[store.ConsumerName] == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			n, _ := tr.stored(t)
			t.Fatalf("after 30s %d of %d records are stored", n, tr.records)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("spool.Run: %v", err)
	}
}

func counter(t testing.TB, w *store.Writer, name, table string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if table == "" || labelValue(m, metrics.LabelTable) == table {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func assertExactlyOnce(t *testing.T, tr *traffic) {
	t.Helper()
	events, rollup := tr.stored(t)
	if events != tr.records || rollup != tr.records {
		t.Fatalf("events has %d rows and the rollup counts %d; want exactly the %d records once", events, rollup, tr.records)
	}
	// And FINAL agrees (no duplicates left for the backstop to fold).
	final := scalar(t, engine(t), "SELECT count() FROM peertrail.events FINAL WHERE apiserver IN ({a:String}, {b:String})", tr.params())
	if final != strconv.Itoa(tr.records) {
		t.Fatalf("FINAL count %s, want %d", final, tr.records)
	}
}

// assertStoredAsSent checks what the events table holds of the traffic, row by row: each
// record's raw JSON, user agent and receipt time under its apiserver, auditID and stage.
func assertStoredAsSent(t *testing.T, tr *traffic) {
	t.Helper()
	want := map[string]string{}
	for _, b := range tr.batches {
		for _, r := range b.Records {
			want[r.APIServer+" "+r.AuditID+" "+r.Stage] = string(r.Raw) + " " + r.UserAgent + " " + store.FormatTime(r.ReceivedAt)
		}
	}
	res := query(t, engine(t), `SELECT apiserver, audit_id, stage, raw, user_agent, received_at FROM peertrail.events FINAL
WHERE apiserver IN ({a:String}, {b:String})`, tr.params())
	if len(res.Rows) != len(want) {
		t.Fatalf("%d rows stored, want %d", len(res.Rows), len(want))
	}
	for _, row := range res.Rows {
		at, err := store.ParseTime(row[5])
		if err != nil {
			t.Fatal(err)
		}
		k := row[0] + " " + row[1] + " " + row[2]
		if got := row[3] + " " + row[4] + " " + store.FormatTime(at); got != want[k] {
			t.Fatalf("%s stored as %.200q, want %.200q", k, got, want[k])
		}
	}
}

// While ClickHouse refuses inserts and queries, nothing is lost: Consume fails, the spool keeps
// the entries and the runner retries; once it is back everything lands once.
func TestWriterOutageLosesNothing(t *testing.T) {
	inEachMode(t, "outage", 4, 20, 50, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		f := &flaky{Store: engine(t), failInserts: 4, failQueries: 3}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 500}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		// Each failure keeps the frames of earlier calls while the call's own are copied again.
		assertStoredAsSent(t, tr)
		if got := counter(t, w, metrics.StoreInsertErrorsTotal, "events"); got != 4 {
			t.Errorf("insert errors %v, want 4", got)
		}
		if got := counter(t, w, metrics.StoreRowsWrittenTotal, "events"); got != float64(tr.records) {
			t.Errorf("rows written %v, want %d", got, tr.records)
		}
		// The spool position passed everything.
		if lag := sp.Stats().Lag[store.ConsumerName]; lag != 0 {
			t.Errorf("consumer lag %d bytes after catching up, want 0", lag)
		}
	})
}

// A Consume of many frames inserts as soon as it holds FlushRows records, so the writer never
// holds a whole delivery (up to 256 frames) of decoded records.
func TestWriterInsertsWithinOneDelivery(t *testing.T) {
	const per = 50
	inEachMode(t, "withincall", 8, 20, per, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		// The spool is filled before Run: the first Consume gets all 40 frames.
		f := &flaky{Store: engine(t)}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 300, FlushInterval: 20 * time.Millisecond}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		assertStoredAsSent(t, tr)
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.sizes) < tr.records/(300+per) {
			t.Fatalf("%d inserts %v for %d records with FlushRows 300", len(f.sizes), f.sizes, tr.records)
		}
		for _, n := range f.sizes {
			if n > 300+per {
				t.Errorf("an insert of %d rows (%v): over FlushRows and one frame (%d)", n, f.sizes, 300+per)
			}
		}
	})
}

// The same, with the third insert failing after it committed: the call is delivered again from
// its first frame, and what its first two inserts wrote is skipped, not written twice.
func TestWriterFailureWithinOneDeliveryDuplicatesNothing(t *testing.T) {
	inEachMode(t, "withincallfail", 9, 20, 50, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		f := &flaky{Store: engine(t), okBeforeLost: 2, lostAnswers: 1}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 300, FlushInterval: 20 * time.Millisecond}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		if got := counter(t, w, metrics.StoreRowsSkippedTotal, "events"); got < 600 {
			t.Errorf("%v rows skipped as stored; want at least the 600 of the call's first two inserts", got)
		}
	})
}

// An insert that committed but reported an error is retried without duplicating a row.
func TestWriterLostAnswerDuplicatesNothing(t *testing.T) {
	inEachMode(t, "lostanswer", 5, 10, 40, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		f := &flaky{Store: engine(t), lostAnswers: 2}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 300}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		if got := counter(t, w, metrics.StoreRowsSkippedTotal, "events"); got == 0 {
			t.Errorf("no rows were skipped, yet two inserts committed before failing")
		}
	})
}

// The embedded engine's streamed inserts, which decode the gathered frames as the engine reads
// them: one that failed and committed nothing is written again, one that committed and lost
// its answer is looked up and skipped; every event is stored once.
func TestWriterStreamFailuresDuplicateNothing(t *testing.T) {
	inEachMode(t, "streamfail", 11, 20, 40, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		f := &store.StreamFaults{Embedded: engine(t), Aborted: 2, Lost: 2}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 300}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		assertStoredAsSent(t, tr)
		if f.Aborted != 0 || f.Lost != 0 {
			t.Fatalf("%d aborted and %d lost answers left: the writer never streamed that often", f.Aborted, f.Lost)
		}
		// A fault that meets a stream the writer stops itself (its retry reached records the table
		// may hold, after a lost answer) is not the insert's error.
		if got := counter(t, w, metrics.StoreInsertErrorsTotal, "events"); got < 2 || got > 4 {
			t.Errorf("insert errors %v, want 2 to 4", got)
		}
		if got := counter(t, w, metrics.StoreRowsSkippedTotal, "events"); got == 0 {
			t.Errorf("no rows were skipped, yet two inserts committed before failing")
		}
		if got := counter(t, w, metrics.StoreRowsWrittenTotal, "events") + counter(t, w, metrics.StoreRowsSkippedTotal, "events"); got < float64(tr.records) {
			t.Errorf("rows written and skipped %v, want at least %d", got, tr.records)
		}
	})
}

// An insert that failed midway (half its rows committed) is completed, not repeated.
func TestWriterPartialInsertCompletedOnce(t *testing.T) {
	inEachMode(t, "partial", 6, 10, 40, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		f := &flaky{Store: engine(t), partial: 3}
		w := store.NewWriter(f, codec, mode(store.WriterOptions{FlushRows: 300}))

		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
	})
}

// After a crash the spool delivers again what the writer wrote but did not commit; a new
// writer (no memory of the old one) writes none of it twice.
func TestWriterRestartRedeliveryDuplicatesNothing(t *testing.T) {
	codec := newCodec(t)
	tr := newTraffic(t, "restart", 7, 10, 40)
	sp := spoolOf(t, codec, tr)
	ctx := context.Background()

	// The first writer consumes everything but "crashes" before the spool records its
	// position: read the entries directly, never commit.
	w1 := store.NewWriter(engine(t), codec, store.WriterOptions{FlushRows: 1})
	r := sp.NewReader(0)
	defer r.Close()
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if _, err := w1.Consume(ctx, []spool.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := tr.stored(t); n != tr.records {
		t.Fatalf("first writer stored %d of %d", n, tr.records)
	}
	if pos, _ := sp.Committed(store.ConsumerName); pos != 0 {
		t.Fatalf("committed position %d; the test needs none", pos)
	}

	w2 := store.NewWriter(engine(t), codec, store.WriterOptions{})
	runUntilStored(t, sp, w2, tr)
	assertExactlyOnce(t, tr)
	if got := counter(t, w2, metrics.StoreRowsSkippedTotal, "events"); got != float64(tr.records) {
		t.Errorf("second writer skipped %v rows, want all %d", got, tr.records)
	}
	if got := counter(t, w2, metrics.StoreRowsWrittenTotal, "events"); got != 0 {
		t.Errorf("second writer wrote %v rows, want 0", got)
	}
}

// The same entries delivered twice, the two ways the spool does it: Run hands the same
// entries back after a failed Consume (here one whose insert committed anyway), and a
// restarted process reads from the last committed position again.
func TestWriterSameEntriesTwice(t *testing.T) {
	codec := newCodec(t)
	tr := newTraffic(t, "twice", 8, 5, 30)
	sp := spoolOf(t, codec, tr)
	ctx := context.Background()
	entries := entriesOf(t, sp)
	end := entries[len(entries)-1].End
	f := &flaky{Store: engine(t), lostAnswers: 1}
	// One insert of the whole call.
	w := store.NewWriter(f, codec, store.WriterOptions{FlushRows: tr.records})
	if _, err := w.Consume(ctx, entries); err == nil {
		t.Fatal("Consume succeeded though its insert reported an error")
	}
	if n, _ := tr.stored(t); n != tr.records {
		t.Fatalf("the failed insert should have committed all %d rows, found %d", tr.records, n)
	}
	if pos, err := w.Consume(ctx, entries); err != nil || pos != end {
		t.Fatalf("retry: Consume = %d, %v; want %d, nil", pos, err, end)
	}
	w2 := store.NewWriter(engine(t), codec, store.WriterOptions{FlushRows: 1})
	if pos, err := w2.Consume(ctx, entries); err != nil || pos != end {
		t.Fatalf("after a restart: Consume = %d, %v; want %d, nil", pos, err, end)
	}
	assertExactlyOnce(t, tr)
}

// Records wait in memory until FlushRows or FlushInterval; until then Consume returns the
// position of the first waiting entry, so a crash loses nothing.
func TestWriterBuffersUntilFlush(t *testing.T) {
	codec := newCodec(t)
	tr := newTraffic(t, "buffer", 9, 3, 10)
	sp := spoolOf(t, codec, tr)
	ctx := context.Background()
	r := sp.NewReader(0)
	defer r.Close()
	w := store.NewWriter(engine(t), codec, store.WriterOptions{FlushRows: 1000, FlushInterval: time.Hour})
	var first spool.Position
	for i := 0; ; i++ {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if i == 0 {
			first = e.Pos
		}
		pos, err := w.Consume(ctx, []spool.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		if pos != first {
			t.Fatalf("entry %d: Consume returned %d while records wait; want the first waiting entry's %d", i, pos, first)
		}
	}
	if n, _ := tr.stored(t); n != 0 {
		t.Fatalf("%d rows stored before the flush", n)
	}
	if w.Pending() != tr.records {
		t.Fatalf("%d records pending, want %d", w.Pending(), tr.records)
	}
	// An idle call (no entries) after the interval flushes.
	w = store.NewWriter(engine(t), codec, store.WriterOptions{FlushRows: 1000, FlushInterval: 10 * time.Millisecond})
	r2 := sp.NewReader(0)
	defer r2.Close()
	var last spool.Position
	for {
		e, ok, err := r2.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if _, err := w.Consume(ctx, []spool.Entry{e}); err != nil {
			t.Fatal(err)
		}
		last = e.End
	}
	time.Sleep(20 * time.Millisecond)
	pos, err := w.Consume(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Pending() != 0 {
		t.Fatalf("%d records still pending after the interval", w.Pending())
	}
	if pos != last {
		t.Fatalf("the flushing idle Consume returned %d, want the last entry's end %d", pos, last)
	}
	assertExactlyOnce(t, tr)
}

// A frame that does not decode is counted and skipped; the rest is written.
func TestWriterSkipsBadFrames(t *testing.T) {
	inEachMode(t, "badframe", 10, 4, 10, func(t *testing.T, codec *record.Codec, tr *traffic, sp *spool.Spool, mode modeOptions) {
		if _, err := sp.Append([]byte("\x01not a frame")); err != nil {
			t.Fatal(err)
		}
		w := store.NewWriter(engine(t), codec, mode(store.WriterOptions{FlushRows: 1}))
		runUntilStored(t, sp, w, tr)
		assertExactlyOnce(t, tr)
		if got := counter(t, w, metrics.StoreBadFramesTotal, ""); got != 1 {
			t.Errorf("bad frames %v, want 1", got)
		}
	})
}

// The events table folds rows inserted more than once by any other path (the backstop), in its
// merges and under FINAL.
func TestEventsTableFoldsDuplicates(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	tr := newTraffic(t, "fold", 11, 3, 20)
	var rows [][]any
	for _, b := range tr.batches {
		for i := range b.Records {
			rows = append(rows, store.EventRow(&b.Records[i]))
		}
	}
	// A background merge between the inserts and the count would fold the copies already (the
	// test failed so, now and then, in a full run of the package).
	if err := s.Exec(ctx, "SYSTEM STOP MERGES peertrail.events"); err != nil {
		t.Fatal(err)
	}
	// Three copies: one in a first insert, two in a second. The engine must not merge the
	// second as it writes it (optimize_on_insert off, see insertSettings): the copy within it
	// stays, as the copy in the other insert does, until the table's merges fold them.
	for _, ins := range [][][]any{rows, append(rows[:len(rows):len(rows)], rows...)} {
		if err := s.Insert(ctx, store.EventsTable, store.EventColumns, ins); err != nil {
			t.Fatal(err)
		}
	}
	p := tr.params()
	got := scalar(t, s, "SELECT count() FROM peertrail.events WHERE apiserver IN ({a:String}, {b:String})", p)
	if err := s.Exec(ctx, "SYSTEM START MERGES peertrail.events"); err != nil {
		t.Fatal(err)
	}
	if got != strconv.Itoa(3*len(rows)) {
		t.Fatalf("before merging: %s rows, want %d (the row inserted twice in one insert was folded as it was written?)", got, 3*len(rows))
	}
	if got := scalar(t, s, "SELECT count() FROM peertrail.events FINAL WHERE apiserver IN ({a:String}, {b:String})", p); got != strconv.Itoa(len(rows)) {
		t.Fatalf("FINAL: %s rows, want %d", got, len(rows))
	}
	day := tr.batches[0].ReceivedAt.Format("20060102")
	if err := s.Exec(ctx, "OPTIMIZE TABLE peertrail.events PARTITION ID '"+day+"' FINAL"); err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, s, "SELECT count() FROM peertrail.events WHERE apiserver IN ({a:String}, {b:String})", p); got != strconv.Itoa(len(rows)) {
		t.Fatalf("after merging: %s rows, want %d", got, len(rows))
	}
}

// An insert of chains may hold two rows of one chain (a retraction and the new revision).
// The engine keeps both as it writes the insert (optimize_on_insert off, see insertSettings),
// so the chains table must fold them as it folds rows of separate inserts: FINAL and its
// merges keep the highest version.
func TestChainsTableFoldsVersionsOfOneInsert(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	if err := s.Exec(ctx, "SYSTEM STOP MERGES peertrail.chains"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Exec(context.Background(), "SYSTEM START MERGES peertrail.chains") })
	at := time.Now().UTC().Truncate(time.Hour).Add(-20*time.Hour + 345_678_901)
	var rows [][]any
	for i := range 20 {
		c := chainAt(fmt.Sprintf("fold-chain-%02d", i), at.Add(time.Duration(i)*time.Second), chain.StateFinal, at.Add(time.Minute))
		// Sides of their own: other tests count the chains of chainAt's apiservers.
		entry, peer := *c.Entry, *c.Peer
		entry.APIServer, peer.APIServer = "fold-chains-a", "fold-chains-c"
		c.Entry, c.Peer = &entry, &peer
		old := c
		old.State = store.StateRetracted
		c.Revision = 2
		rows = append(rows, store.ChainRow(&old), store.ChainRow(&c))
	}
	if err := s.Insert(ctx, store.ChainsTable, store.ChainColumns, rows); err != nil {
		t.Fatal(err)
	}
	p := map[string]string{"p": "fold-chains-c"}
	if got := scalar(t, s, "SELECT count() FROM peertrail.chains WHERE peer_apiserver = {p:String}", p); got != "40" {
		t.Fatalf("before merging: %s rows, want 40 (were the two versions folded as the insert was written?)", got)
	}
	// Only the new revisions are left, read as the table's readers read it, or merged.
	onlyNewRevisions := func(when, from string) {
		t.Helper()
		res := query(t, s, "SELECT state, revision, count() AS n FROM "+from+" WHERE peer_apiserver = {p:String} GROUP BY state, revision", p)
		if len(res.Rows) != 1 || res.Value(0, "state") != "final" || res.Value(0, "revision") != "2" || res.Value(0, "n") != "20" {
			t.Fatalf("%s: %v, want 20 final chains of revision 2", when, res.Rows)
		}
	}
	onlyNewRevisions("FINAL", "peertrail.chains FINAL")
	if err := s.Exec(ctx, "SYSTEM START MERGES peertrail.chains"); err != nil {
		t.Fatal(err)
	}
	if err := s.Exec(ctx, "OPTIMIZE TABLE peertrail.chains PARTITION ID '"+at.Add(time.Second).Format("20060102")+"' FINAL"); err != nil {
		t.Fatal(err)
	}
	onlyNewRevisions("after merging", "peertrail.chains")
}

// chainAt is a final chain of a proxied request received at t.
func chainAt(id string, t time.Time, state chain.State, last time.Time) chain.Chain {
	entry := &chain.Side{APIServer: "chains-a", Code: 200, User: "alice", RequestReceived: t, Completed: t.Add(5 * time.Millisecond), Stages: []string{"RequestReceived", "ResponseComplete"}}
	peer := &chain.Side{APIServer: "chains-c", Code: 200, User: "alice", RequestReceived: t.Add(time.Millisecond), Completed: t.Add(4 * time.Millisecond), Stages: []string{"RequestReceived", "ResponseComplete"}, HasObjects: true}
	return chain.Chain{
		ID: id + "/chains-a/" + strconv.FormatInt(t.UnixMicro(), 10), AuditID: id, State: state, Class: chain.ClassProxied,
		Entry: entry, Peer: peer, Verb: "get", Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups",
		User: "alice", Code: 200, EntryDurationSeconds: 0.005, PeerDurationSeconds: 0.003, ForwardingOverheadSeconds: 0.002,
		FirstReceived: t.Add(time.Second), LastReceived: last, Records: 4,
	}
}

// finalChainRows are n chains' rows of the chains table, final, auditIDs prefix-0000000 on,
// received a millisecond apart from at.
func finalChainRows(prefix string, at time.Time, n int) [][]any {
	rows := make([][]any, n)
	for i := range rows {
		c := chainAt(fmt.Sprintf("%s-%07d", prefix, i), at.Add(time.Duration(i)*time.Millisecond), chain.StateFinal, at.Add(time.Minute))
		rows[i] = store.ChainRow(&c)
	}
	return rows
}

// The correlator emits a chain several times (open, final, again after a restart): the table
// ends with the final version, and the rollup counts the chain once.
func TestWriteChainsIdempotent(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	// The test counts the rows written, which a background merge would fold (ReplacingMergeTree).
	if err := s.Exec(ctx, "SYSTEM STOP MERGES peertrail.chains"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Exec(context.Background(), "SYSTEM START MERGES peertrail.chains") })
	base := time.Now().UTC().Truncate(time.Hour).Add(-12 * time.Hour)
	var open, final []chain.Chain
	for i := range 50 {
		at := base.Add(time.Duration(i) * time.Second)
		id := fmt.Sprintf("chain-test-%04d", i)
		o := chainAt(id, at, chain.StateOpen, at.Add(time.Second))
		o.Peer, o.Class, o.Records = nil, chain.ClassBroken, 2
		open = append(open, o)
		final = append(final, chainAt(id, at, chain.StateFinal, at.Add(2*time.Second)))
	}
	w := store.NewWriter(s, codec, store.WriterOptions{})
	for _, batch := range [][]chain.Chain{open, final, final, open} {
		if err := w.WriteChains(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	// A restarted correlator (new writer) replays the final chains again.
	w2 := store.NewWriter(s, codec, store.WriterOptions{})
	if err := w2.WriteChains(ctx, final); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, w2, metrics.StoreRowsSkippedTotal, "chains"); got != 50 {
		t.Errorf("the replay skipped %v chains, want 50", got)
	}
	p := map[string]string{"a": "chains-a"}
	res := query(t, s, "SELECT class, state, count() AS n FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} GROUP BY class, state", p)
	if len(res.Rows) != 1 || res.Value(0, "class") != "proxied" || res.Value(0, "state") != "final" || res.Value(0, "n") != "50" {
		t.Fatalf("chains FINAL: %v", res.Rows)
	}
	// Written: 50 open + 50 final; the repeated batches wrote nothing.
	if got := scalar(t, s, "SELECT count() FROM peertrail.chains WHERE entry_apiserver = {a:String}", p); got != "100" {
		t.Errorf("%s chain rows, want 100 (open and final once each)", got)
	}
	if got := scalar(t, s, "SELECT sum(chains) FROM peertrail.chains_per_minute WHERE entry_apiserver = {a:String}", p); got != "50" {
		t.Errorf("the rollup counts %s chains, want 50", got)
	}
	// A late record reopened some chains: the correlator finalises them again with revision 2
	// (and another class). Chains FINAL has revision 2; the rollup still counts each once.
	var reopened []chain.Chain
	for _, c := range final[:10] {
		c.Revision, c.Class, c.LastReceived = 2, chain.ClassBroken, c.LastReceived.Add(30*time.Second)
		reopened = append(reopened, c)
	}
	for range 2 {
		if err := w.WriteChains(ctx, reopened); err != nil {
			t.Fatal(err)
		}
	}
	res = query(t, s, "SELECT class, revision, count() AS n FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} GROUP BY class, revision ORDER BY class", p)
	if len(res.Rows) != 2 || res.Value(0, "class") != "broken" || res.Value(0, "revision") != "2" || res.Value(0, "n") != "10" || res.Value(1, "n") != "40" {
		t.Fatalf("after reopening: %v", res.Rows)
	}
	// The rollups count each chain once, in its final class: the ten reclassified ones moved
	// from proxied to broken, with their findings.
	res = query(t, s, "SELECT class, sum(chains) AS n, sumMap(findings) AS f FROM peertrail.chains_per_minute WHERE entry_apiserver = {a:String} GROUP BY class ORDER BY class", p)
	if len(res.Rows) != 2 || res.Value(0, "class") != "broken" || res.Value(0, "n") != "10" || res.Value(1, "class") != "proxied" || res.Value(1, "n") != "40" {
		t.Errorf("after reopening, the rollup counts %v, want broken 10 and proxied 40", res.Rows)
	}
	res = query(t, s, "SELECT class, sum(chains) AS n FROM peertrail.chain_latency_per_minute WHERE entry_apiserver = {a:String} GROUP BY class ORDER BY class", p)
	if len(res.Rows) != 2 || res.Value(0, "n") != "10" || res.Value(1, "n") != "40" {
		t.Errorf("after reopening, the latency rollup counts %v, want broken 10 and proxied 40", res.Rows)
	}
	if got := counter(t, w, metrics.StoreChainsRetractedTotal, ""); got != 10 {
		t.Errorf("%v chains retracted, want 10", got)
	}
	// Chains FINAL never shows a retracted row.
	if got := scalar(t, s, "SELECT count() FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} AND state != 'final'", p); got != "0" {
		t.Errorf("%s chains FINAL rows not final", got)
	}
	// Within one batch, the newest version of a chain wins.
	mixed := []chain.Chain{final[0], open[0]}
	mixed[0].ID, mixed[1].ID = "mixed", "mixed"
	if err := w.WriteChains(ctx, mixed); err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, s, "SELECT state FROM peertrail.chains FINAL WHERE id = 'mixed'", nil); got != "final" {
		t.Errorf("chain written from a batch with two versions: state %s, want final", got)
	}
}

func TestChainVersionOrder(t *testing.T) {
	at := time.Now()
	open := chainAt("v", at, chain.StateOpen, at.Add(time.Second))
	final := chainAt("v", at, chain.StateFinal, at.Add(time.Second))
	later := chainAt("v", at, chain.StateOpen, at.Add(2*time.Second))
	rev2 := chainAt("v", at, chain.StateFinal, at.Add(time.Second))
	rev2.Revision = 2
	rev2.LastReceived = at // even with an earlier last record (clock trouble), a revision wins
	order := []chain.Chain{open, final, later, rev2}
	for i := 1; i < len(order); i++ {
		if store.ChainVersion(&order[i-1]) >= store.ChainVersion(&order[i]) {
			t.Fatalf("version %d: %d, not above the one before (%d)", i, store.ChainVersion(&order[i]), store.ChainVersion(&order[i-1]))
		}
	}
}

// Clients choose their own Audit-IDs: quotes, backslashes, tabs and newlines in them must not
// break the chain sink's lookups (the ids travel as an array parameter, in the URL over HTTP),
// through either store.
func TestWriteChainsOddAuditIDs(t *testing.T) {
	ctx := context.Background()
	codec := newCodec(t)
	srv := httpServer(t, sqlhttp.Options{UnsafeAllowWrites: true})
	server, err := store.OpenServer(ctx, store.ServerOptions{DSN: "http://" + hostPort(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	odd := []string{`it's`, `back\slash`, "tab\there", "new\nline", `[']`, `\'`, "ünïcødé", `{"json":1}`, `a,b`, "%2F&x=1"}
	for n, s := range map[string]store.Store{"embedded": engine(t), "server": server} {
		t.Run(n, func(t *testing.T) {
			base := time.Now().UTC().Truncate(time.Hour).Add(-15 * time.Hour)
			apiserver := "odd-" + n
			var chains []chain.Chain
			for i, id := range odd {
				c := chainAt(id, base.Add(time.Duration(i)*time.Second), chain.StateFinal, base.Add(time.Duration(i+2)*time.Second))
				c.ID = n + "/" + c.ID
				c.Entry.APIServer = apiserver
				chains = append(chains, c)
			}
			w := store.NewWriter(s, codec, store.WriterOptions{})
			for range 2 {
				if err := w.WriteChains(ctx, chains); err != nil {
					t.Fatal(err)
				}
			}
			if got := counter(t, w, metrics.StoreRowsSkippedTotal, "chains"); got != float64(len(odd)) {
				t.Errorf("the second write skipped %v chains, want %d", got, len(odd))
			}
			r := query(t, engine(t), "SELECT audit_id FROM peertrail.chains WHERE entry_apiserver = {a:String} ORDER BY first_received", map[string]string{"a": apiserver})
			if len(r.Rows) != len(odd) {
				t.Fatalf("%d rows, want %d", len(r.Rows), len(odd))
			}
			for i, row := range r.Rows {
				if row[0] != odd[i] {
					t.Errorf("audit_id %q came back as %q", odd[i], row[0])
				}
			}
		})
	}
}

// A large batch of chains (the correlator hands over whatever is pending) is looked up in
// chunks, small enough for a URL when the store speaks HTTP, and inserted in chunks.
func TestWriteChainsLargeBatch(t *testing.T) {
	ctx := context.Background()
	codec := newCodec(t)
	srv := httpServer(t, sqlhttp.Options{UnsafeAllowWrites: true})
	server, err := store.OpenServer(ctx, store.ServerOptions{DSN: "http://" + hostPort(t, srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	base := time.Now().UTC().Truncate(time.Hour).Add(-16 * time.Hour)
	const n = 12_000
	chains := make([]chain.Chain, n)
	for i := range chains {
		at := base.Add(time.Duration(i) * 200 * time.Millisecond)
		chains[i] = chainAt(fmt.Sprintf("large-%06d-4a1b2c3d-0000-4000-8000-00000000abcd", i), at, chain.StateFinal, at.Add(2*time.Second))
		chains[i].Entry.APIServer = "large-a"
	}
	w := store.NewWriter(server, codec, store.WriterOptions{})
	for range 2 {
		if err := w.WriteChains(ctx, chains); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, w, metrics.StoreRowsSkippedTotal, "chains"); got != n {
		t.Errorf("the second write skipped %v chains, want %d", got, n)
	}
	// The writer knew what it wrote; a restarted one asks the store, in chunks.
	w2 := store.NewWriter(server, codec, store.WriterOptions{})
	if err := w2.WriteChains(ctx, chains); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, w2, metrics.StoreChainsLookedUpTotal, ""); got != n {
		t.Errorf("the restarted writer looked up %v chains, want %d", got, n)
	}
	if got := counter(t, w2, metrics.StoreRowsSkippedTotal, "chains"); got != n {
		t.Errorf("the restarted writer skipped %v chains, want %d", got, n)
	}
	if got := scalar(t, engine(t), "SELECT count() FROM peertrail.chains WHERE entry_apiserver = 'large-a'", nil); got != strconv.Itoa(n) {
		t.Errorf("%s rows, want %d", got, n)
	}
}

// TestReplayedChainWithMoreRecordsSupersedes: a correlator finalised a chain (its peer's record
// alone), judged it again (revision 2), and died before a late record it had joined reached the
// store. After the restart the replay joins both records in one pass and emits the chain at
// revision 1: it holds more than the stored row, so it is written one revision above it, and
// the rollups move the chain to its new class. Found by TestHALayoutSurvivesEveryPeertrailProcess.
func TestReplayedChainWithMoreRecordsSupersedes(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	at := time.Now().UTC().Truncate(time.Hour).Add(-9 * time.Hour)
	alone := chainAt("replayed-more", at, chain.StateFinal, at.Add(time.Second))
	alone.ID = "replayed-more-id"
	alone.Entry, alone.Class, alone.Records, alone.Revision = nil, chain.ClassLocal, 1, 2
	alone.Peer.APIServer = "replay-c"
	before := store.NewWriter(s, codec, store.WriterOptions{})
	if err := before.WriteChains(ctx, []chain.Chain{alone}); err != nil {
		t.Fatal(err)
	}
	both := chainAt("replayed-more", at, chain.StateFinal, at.Add(time.Second))
	both.ID, both.Revision, both.Records = "replayed-more-id", 1, 2
	both.Peer.APIServer = "replay-c"
	after := store.NewWriter(s, codec, store.WriterOptions{}) // the restarted process
	if err := after.WriteChains(ctx, []chain.Chain{both}); err != nil {
		t.Fatal(err)
	}
	res := query(t, s, "SELECT class, revision, records FROM peertrail.chains FINAL WHERE id = 'replayed-more-id'", nil)
	if len(res.Rows) != 1 || res.Rows[0][0] != "proxied" || res.Rows[0][1] != "3" || res.Rows[0][2] != "2" {
		t.Fatalf("chains FINAL: %v, want proxied at revision 3 with 2 records", res.Rows)
	}
	counted := query(t, s, "SELECT class, sum(chains) FROM peertrail.chains_per_minute WHERE peer_apiserver = 'replay-c' GROUP BY class ORDER BY class", nil)
	if fmt.Sprint(counted.Rows) != "[[local 0] [proxied 1]]" {
		t.Fatalf("chains_per_minute: %v, want the chain counted once, as proxied", counted.Rows)
	}
	// The same chain again, as many records, a lower revision: written already.
	if err := store.NewWriter(s, codec, store.WriterOptions{}).WriteChains(ctx, []chain.Chain{both}); err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(scalar(t, s, "SELECT count() FROM peertrail.chains WHERE id = 'replayed-more-id' AND state = 'final'", nil)); n > 2 {
		t.Fatalf("%d final rows of the chain after it came again, want at most 2 (one per version written)", n)
	}
}

// Large records are inserted by their decoded size (FlushBytes), not only by their count: the
// engine holds an insert's rows whole, so FlushRows alone would let events of megabytes make
// an insert of gigabytes.
func TestWriterInsertsWithinFlushBytes(t *testing.T) {
	codec := newCodec(t)
	const per = 50
	tr := newTraffic(t, "flushbytes", 10, 20, per)
	sp := spoolOf(t, codec, tr) // filled before Run: the first Consume gets all 40 frames
	r := sp.NewReader(0)
	e, ok, err := r.TryNext()
	r.Close()
	if err != nil || !ok {
		t.Fatalf("first frame: %v %v", ok, err)
	}
	h, err := record.ParseHeader(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	frameBytes, err := h.BodyLen()
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{Store: engine(t)}
	w := store.NewWriter(f, codec, store.WriterOptions{FlushRows: 1_000_000, FlushBytes: 3 * frameBytes, FlushInterval: 20 * time.Millisecond})

	runUntilStored(t, sp, w, tr)
	assertExactlyOnce(t, tr)
	assertStoredAsSent(t, tr)
	f.mu.Lock()
	defer f.mu.Unlock()
	// Three frames' worth, give or take the frames' sizes, and one frame more at most.
	if len(f.sizes) < tr.records/(5*per) {
		t.Fatalf("%d inserts %v for %d records of about %d bytes a frame with FlushBytes %d", len(f.sizes), f.sizes, tr.records, frameBytes, 3*frameBytes)
	}
	for _, n := range f.sizes {
		if n > 5*per {
			t.Errorf("an insert of %d rows (%v): over FlushBytes by more than a frame", n, f.sizes)
		}
	}
	t.Logf("%d inserts %v, a frame about %d bytes decoded", len(f.sizes), f.sizes, frameBytes)
}

// A frame the writer gathered and then found corrupt when it read it back from the spool for
// the insert (WriterOptions.Spool) is counted as a bad frame and skipped; every other frame of
// the insert is stored once.
func TestWriterFrameCorruptOnReadBack(t *testing.T) {
	codec := newCodec(t)
	ctx := context.Background()
	tr := newTraffic(t, "readback", 12, 6, 20)
	dir := t.TempDir()
	sp := spoolIn(t, dir, codec, tr)
	entries := entriesOf(t, sp)
	if len(entries) != len(tr.batches) {
		t.Fatalf("%d frames read, want %d", len(entries), len(tr.batches))
	}

	const interval = time.Second
	w := store.NewWriter(engine(t), codec, store.WriterOptions{Spool: sp, FlushInterval: interval})
	consumed := time.Now()
	if _, err := w.Consume(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if n, _ := tr.stored(t); n != 0 {
		t.Fatalf("%d rows stored before the flush: the test says nothing", n)
	}
	// Flip a byte in the middle of the fourth frame's payload, where the spool holds it.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	seg, at := "", -1
	for _, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, entries[3].Payload); i >= 0 {
			if seg != "" || bytes.Count(data, entries[3].Payload) != 1 {
				t.Fatal("the fourth frame's payload is in the spool more than once")
			}
			seg, at = p, i
		}
	}
	if seg == "" {
		t.Fatal("the fourth frame's payload is in no segment")
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	mid := int64(at + len(entries[3].Payload)/2)
	if _, err := f.ReadAt(b, mid); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, mid); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The idle spool's call once the interval has passed: the gathered frames' insert.
	time.Sleep(time.Until(consumed.Add(interval + 10*time.Millisecond)))
	if _, err := w.Consume(ctx, nil); err != nil {
		t.Fatal(err)
	}
	lost := len(tr.batches[3].Records)
	if events, rollup := tr.stored(t); events != tr.records-lost || rollup != tr.records-lost {
		t.Fatalf("events %d, rollup %d after the flush; want the %d records of every frame but the corrupt one", events, rollup, tr.records-lost)
	}
	if got := counter(t, w, metrics.StoreBadFramesTotal, ""); got != 1 {
		t.Errorf("bad frames %v, want 1", got)
	}
}

// With WriterOptions.Spool the writer keeps only where the frames it gathers are, not a copy of
// each: Consume's buffered frames hold no payload bytes. Without it each payload is copied.
func TestWriterKeepsNoPayloadsWithTheSpool(t *testing.T) {
	codec := newCodec(t)
	tr := newTraffic(t, "nopayloads", 14, 4, 10)
	sp := spoolOf(t, codec, tr)
	entries := entriesOf(t, sp)
	for _, fromSpool := range []bool{false, true} {
		opts := store.WriterOptions{FlushInterval: time.Hour}
		if fromSpool {
			opts.Spool = sp
		}
		// No store: nothing is inserted before FlushRows or the interval.
		w := store.NewWriter(nil, codec, opts)
		if _, err := w.Consume(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
		if w.Pending() != tr.records {
			t.Fatalf("spool %v: %d records gathered, want %d", fromSpool, w.Pending(), tr.records)
		}
		held := w.HeldPayloadBytes()
		if fromSpool && held != 0 {
			t.Errorf("with the spool the writer holds %d bytes of payloads, want none", held)
		}
		if !fromSpool && held == 0 {
			t.Errorf("without the spool the writer holds no payloads: the comparison says nothing")
		}
	}
}
