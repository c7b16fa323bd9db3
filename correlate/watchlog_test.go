package correlate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// watchSpool is a spool's entries: a watch w on kas-a from 1s to 300s, and a request of its own
// each second from 2s to 420s. w's RequestReceived and ResponseStarted come in one batch, or
// (rrApart) in two.
type watchSpool struct {
	entries  []spool.Entry
	received []time.Time
	end      spool.Position
	complete int // the index of w's completion
}

// newTestCodec is a codec for t.
func newTestCodec(t testing.TB) *record.Codec {
	t.Helper()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	return codec
}

// encodeFrame is recs as the receiver spools them: one batch of recs[0]'s apiserver.
func encodeFrame(t testing.TB, codec *record.Codec, recs []record.Record) []byte {
	t.Helper()
	keys := make([]record.Key, len(recs))
	for i := range recs {
		keys[i] = recs[i].Key()
	}
	b, err := codec.AppendFrame(nil, recs[0].APIServer, recs[0].ReceivedAt, recs, keys)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newWatchSpool(t *testing.T, codec *record.Codec, rrApart bool) *watchSpool {
	t.Helper()
	ws := &watchSpool{}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	frame := func(recs []record.Record) {
		b := encodeFrame(t, codec, recs)
		ws.entries = append(ws.entries, spool.Entry{Pos: ws.end, End: ws.end + spool.Position(len(b)), Payload: b})
		ws.received = append(ws.received, recs[0].ReceivedAt)
		ws.end += spool.Position(len(b))
	}
	w := req{id: "w", verb: "watch", uri: "/api/v1/namespaces/default/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: at(time.Second)}
	started := w.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"RequestReceived", "ResponseStarted"}, end: 5 * time.Millisecond, received: at(1500 * time.Millisecond)})
	if rrApart {
		frame(started[:1])
		started[1].ReceivedAt = at(1600 * time.Millisecond)
		frame(started[1:])
	} else {
		frame(started)
	}
	for s := 2; s <= 420; s++ {
		f := pods(fmt.Sprintf("f-%d", s), at(time.Duration(s)*time.Second-500*time.Millisecond))
		frame(f.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, objects: true, end: 5 * time.Millisecond, received: at(time.Duration(s) * time.Second)}))
		if s == 300 {
			ws.complete = len(ws.entries)
			frame(w.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"ResponseComplete"}, end: 299 * time.Second, received: at(300*time.Second + 200*time.Millisecond)}))
		}
	}
	return ws
}

// watchRun is one process of a watchSpool: a correlator with its state in dir ("" for none).
type watchRun struct {
	t         *testing.T
	co        *Correlator
	sink      *memSink
	committed spool.Position
}

func startWatchRun(t *testing.T, codec *record.Codec, dir string, spoolEnd spool.Position) *watchRun {
	t.Helper()
	caps := NewCapabilities(15 * time.Minute)
	caps.NoteServer("kas-a", "", addrA, t0)
	state := ""
	if dir != "" {
		state = filepath.Join(dir, "correlate", "capabilities.json")
	}
	opts := JoinOptions{Window: 5 * time.Second, WatchWindow: time.Hour, LateWindow: time.Minute, MaxOpen: 1_000_000, MaxRecent: 200_000}
	sink := &memSink{}
	return &watchRun{t: t, co: New(Config{Join: opts, Codec: codec, Caps: caps, Sink: sink, StateFile: state, SpoolEnd: spoolEnd}), sink: sink}
}

// feed consumes ws's entries [from, to) one at a time, each at its receipt time.
func (r *watchRun) feed(ws *watchSpool, from, to int) {
	r.t.Helper()
	for i := from; i < to; i++ {
		r.co.now = func() time.Time { return ws.received[i] }
		p, err := r.co.Consume(context.Background(), ws.entries[i:i+1])
		if err != nil {
			r.t.Fatal(err)
		}
		r.committed = max(r.committed, p)
	}
}

// finish lets every chain close and be stored (the spool idle, an hour on), then stops.
func (r *watchRun) finish(ws *watchSpool) {
	r.t.Helper()
	r.co.now = func() time.Time { return ws.received[len(ws.received)-1].Add(time.Hour) }
	if _, err := r.co.Consume(context.Background(), nil); err != nil {
		r.t.Fatal(err)
	}
	r.stop()
}

func (r *watchRun) stop() {
	r.t.Helper()
	if err := r.co.Close(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// stored is what the sinks got of w, each distinct row (as a store keeps them apart: chain
// ID, first receipt, records) once.
func storedOfW(sinks ...*memSink) map[string]chain.Class {
	out := map[string]chain.Class{}
	for _, s := range sinks {
		for _, c := range s.chains {
			if c.AuditID == "w" {
				out[fmt.Sprintf("%s first %s records %d", c.ID, c.FirstReceived.Sub(t0), c.Records)] = c.Class
			}
		}
	}
	return out
}

// A watch's chain is the same whichever moment its process restarts. The spool passes a
// running watch's first records (it may run for hours), so a replay after a restart used to
// join its completion alone: stopped after the completion but before the chain was stored, the
// store got a one-record chain of it; stopped after it was stored, the store got that beside
// the whole chain (TestHALayoutSurvivesEveryPeertrailProcess: two aggregators restarted a few
// seconds apart disagreed on two watches). With the watch journal the replay rebuilds it whole.
// The control, without a state directory (no journal), shows both wrong answers.
func TestRestartMidWatchStoresTheWatchWhole(t *testing.T) {
	codec := newTestCodec(t)
	for _, rrApart := range []bool{false, true} {
		t.Run(fmt.Sprintf("rr apart %v", rrApart), func(t *testing.T) { restartMidWatch(t, codec, newWatchSpool(t, codec, rrApart)) })
	}
}

func restartMidWatch(t *testing.T, codec *record.Codec, ws *watchSpool) {
	ref := startWatchRun(t, codec, t.TempDir(), 0)
	ref.feed(ws, 0, len(ws.entries))
	ref.finish(ws)
	want := storedOfW(ref.sink)
	if len(want) != 1 {
		t.Fatalf("without a restart: %v, want one chain of w", want)
	}
	for k, class := range want {
		if class != chain.ClassLocal || !strings.HasSuffix(k, " records 3") {
			t.Fatalf("without a restart: %s %s, want local with its 3 records", k, class)
		}
	}

	for _, tc := range []struct {
		name    string
		stop    int  // how many entries the first process joins
		stored  bool // whether it stored w before it stopped
		journal bool
	}{
		{"completed, not yet stored", ws.complete + 2, false, true},
		{"stored, still in memory", ws.complete + 10, true, true},
		{"control: completed, not yet stored, no journal", ws.complete + 2, false, false},
		{"control: stored, still in memory, no journal", ws.complete + 10, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ""
			if tc.journal {
				dir = t.TempDir()
			}
			first := startWatchRun(t, codec, dir, 0)
			first.feed(ws, 0, tc.stop)
			first.stop()
			if got := len(storedOfW(first.sink)) > 0; got != tc.stored {
				t.Fatalf("the first process stored w: %v, want %v", got, tc.stored)
			}
			if first.committed <= ws.entries[0].Pos {
				t.Fatalf("committed %d: the running watch held the spool at its first record", first.committed)
			}
			from := len(ws.entries)
			for i, e := range ws.entries {
				if e.Pos >= first.committed {
					from = i
					break
				}
			}
			if from > ws.complete {
				t.Fatalf("the replay begins at entry %d, after w's completion (%d): the test tells nothing", from, ws.complete)
			}
			second := startWatchRun(t, codec, dir, ws.end)
			second.feed(ws, from, len(ws.entries))
			second.finish(ws)
			got := storedOfW(first.sink, second.sink)
			same := len(got) == len(want)
			for k, class := range want {
				same = same && got[k] == class
			}
			if tc.journal && !same {
				t.Errorf("stored of w across the restart: %v, want as without one: %v", got, want)
			}
			if !tc.journal && same {
				t.Errorf("control: stored of w across the restart without a journal: %v, the same as without a restart: the test tells nothing", got)
			}
		})
	}
}

// A watch that ran for minutes holds the spool no longer once it completes: the commit goes on
// past its first record while its chain is final in memory (the late window). Without the
// journal the commit stands still for that whole window after every long watch ends.
func TestCommitPassesACompletedWatch(t *testing.T) {
	codec := newTestCodec(t)
	ws := newWatchSpool(t, codec, false)
	for _, journal := range []bool{true, false} {
		dir := ""
		if journal {
			dir = t.TempDir()
		}
		r := startWatchRun(t, codec, dir, 0)
		r.feed(ws, 0, ws.complete+1)
		before := r.committed
		r.feed(ws, ws.complete+1, ws.complete+41) // 40 s on, within w's late window
		after := r.committed
		r.stop()
		switch {
		case journal && after-before < 30*(ws.entries[1].End-ws.entries[1].Pos):
			t.Errorf("with the journal: committed %d at w's completion, %d forty frames on: it stood still", before, after)
		case !journal && after != before:
			t.Errorf("control, no journal: committed moved from %d to %d: the test tells nothing", before, after)
		}
	}
}

// The journal after a crash: a torn last entry is cut off, and the whole ones before it still
// rebuild their chain; an entry for another spool (past its end) starts the journal afresh.
func TestWatchLogTornTailAndForeignSpool(t *testing.T) {
	codec := newTestCodec(t)
	ws := newWatchSpool(t, codec, false)
	dir := t.TempDir()
	first := startWatchRun(t, codec, dir, 0)
	first.feed(ws, 0, 200)
	first.stop()
	path := filepath.Join(dir, "correlate", watchLogName)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A torn entry after the whole ones.
	if err := os.WriteFile(path, append(bytes.Clone(whole), 0x40, 0, 0, 0, 1, 2, 3), 0o640); err != nil {
		t.Fatal(err)
	}
	w, err := openWatchLog(path, codec, ws.end, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if w.size != int64(len(whole)) || len(w.loaded) != 1 || len(w.loaded[0].recs) != 2 || w.loaded[0].recs[1].rec.Stage != "ResponseStarted" {
		t.Fatalf("after a torn tail: %d bytes, %d chains loaded, want %d bytes and w's two records", w.size, len(w.loaded), len(whole))
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(whole)) {
		t.Fatalf("the torn tail was not cut off: %v %v", fi.Size(), err)
	}
	w.f.Close()
	// A spool made anew (empty: the journal names positions past its end): started afresh.
	w, err = openWatchLog(path, codec, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if w.size != 0 || len(w.loaded) != 0 {
		t.Fatalf("for another spool: %d bytes, %d chains loaded, want none", w.size, len(w.loaded))
	}
	w.f.Close()
}

// Watches begin every second and run for a minute: the journal is rewritten without the gone
// ones as they pile up, and a restart after the rewrites still rebuilds the running ones whole.
func TestWatchLogCompactsAndStillRebuilds(t *testing.T) {
	codec := newTestCodec(t)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ws := &watchSpool{}
	frame := func(recs []record.Record) {
		b := encodeFrame(t, codec, recs)
		ws.entries = append(ws.entries, spool.Entry{Pos: ws.end, End: ws.end + spool.Position(len(b)), Payload: b})
		ws.received = append(ws.received, recs[0].ReceivedAt)
		ws.end += spool.Position(len(b))
	}
	watch := func(s int) req {
		return req{id: fmt.Sprintf("w-%d", s), verb: "watch", uri: "/api/v1/namespaces/default/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: at(time.Duration(s) * time.Second)}
	}
	stop := 0
	for s := 1; s <= 600; s++ {
		f := pods(fmt.Sprintf("f-%d", s), at(time.Duration(s)*time.Second-500*time.Millisecond))
		frame(f.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, objects: true, end: 5 * time.Millisecond, received: at(time.Duration(s) * time.Second)}))
		if s <= 500 {
			frame(watch(s).records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"ResponseStarted"}, end: 5 * time.Millisecond, received: at(time.Duration(s)*time.Second + 100*time.Millisecond)}))
		}
		if s > 60 && s <= 560 {
			frame(watch(s - 60).records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"ResponseComplete"}, end: 60 * time.Second, received: at(time.Duration(s)*time.Second + 200*time.Millisecond)}))
		}
		if s == 400 {
			stop = len(ws.entries)
		}
	}
	stored := func(sinks ...*memSink) map[string]string {
		out := map[string]string{}
		for _, sk := range sinks {
			for _, c := range sk.chains {
				if strings.HasPrefix(c.AuditID, "w-") {
					k := fmt.Sprintf("%s first %s records %d", c.ID, c.FirstReceived.Sub(t0), c.Records)
					out[k] += string(c.Class) + " "
				}
			}
		}
		return out
	}

	ref := startWatchRun(t, codec, t.TempDir(), 0)
	ref.feed(ws, 0, len(ws.entries))
	ref.finish(ws)
	want := stored(ref.sink)
	if len(want) != 500 {
		t.Fatalf("without a restart: %d chains of the watches, want 500", len(want))
	}

	dir := t.TempDir()
	first := startWatchRun(t, codec, dir, 0)
	first.co.wl.compactAt = 16 << 10
	var rewrites int
	var most, live int64
	for i := range stop {
		size := first.co.wl.size
		first.feed(ws, i, i+1)
		if first.co.wl.size < size {
			rewrites++
		}
		most, live = max(most, first.co.wl.size), max(live, first.co.wl.live)
	}
	first.stop()
	// Rewritten once the gone are most of it: never much above twice what is live.
	if rewrites == 0 || most > 3*live {
		t.Fatalf("the journal was rewritten %d times and grew to %d bytes, with at most %d live: want it rewritten, and kept near what is live", rewrites, most, live)
	}
	from := len(ws.entries)
	for i, e := range ws.entries {
		if e.Pos >= first.committed {
			from = i
			break
		}
	}
	if ws.received[from].Sub(t0) < 330*time.Second {
		t.Fatalf("the replay begins at %s: before the running watches began, the journal is not needed", ws.received[from].Sub(t0))
	}
	second := startWatchRun(t, codec, dir, ws.end)
	second.feed(ws, from, len(ws.entries))
	second.finish(ws)
	got := stored(first.sink, second.sink)
	var wrong []string
	for k, class := range got {
		if want[k] != class && want[k]+want[k] != class { // stored again across the restart, as it was
			wrong = append(wrong, k+" "+class)
		}
	}
	if len(got) != len(want) || len(wrong) > 0 {
		t.Errorf("across the restart: %d distinct chains of the watches (want %d), %d unlike the run without one: %v", len(got), len(want), len(wrong), wrong[:min(5, len(wrong))])
	}
}

// A journal that cannot be written (a full disk) is given up: the joiner passes running watches
// as without one, rather than hold the spool behind them for as long as they run.
func TestWatchLogWriteFailureFallsBack(t *testing.T) {
	codec := newTestCodec(t)
	ws := newWatchSpool(t, codec, false)
	r := startWatchRun(t, codec, t.TempDir(), 0)
	r.feed(ws, 0, 10)
	if !r.co.j.journaled || len(r.co.wl.chains) != 1 {
		t.Fatalf("journaled %v, %d chains in the journal; want w's", r.co.j.journaled, len(r.co.wl.chains))
	}
	// Every later write fails: the journal's file is swapped for one open only to read.
	ro, err := os.Open(r.co.wl.path)
	if err != nil {
		t.Fatal(err)
	}
	r.co.wl.f.Close()
	r.co.wl.f = ro
	r.feed(ws, 10, ws.complete+3)
	if r.co.j.journaled || !r.co.wl.failed {
		t.Fatalf("after a failed write: journaled %v, failed %v; want the journal given up", r.co.j.journaled, r.co.wl.failed)
	}
	r.feed(ws, ws.complete+3, len(ws.entries))
	// A second watch begins and runs on while every other chain leaves memory: the commit goes
	// past it (a journal that failed would otherwise never keep it).
	last := ws.received[len(ws.received)-1]
	x := req{id: "x", verb: "watch", uri: "/api/v1/namespaces/default/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: last}
	b := encodeFrame(t, codec, x.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, stages: []string{"ResponseStarted"}, end: 5 * time.Millisecond, received: last.Add(time.Second)}))
	for i, e := range []spool.Entry{{Pos: ws.end, End: ws.end + spool.Position(len(b)), Payload: b}, {}, {}} {
		r.co.now = func() time.Time { return last.Add(time.Duration(1+100*i) * time.Second) }
		var entries []spool.Entry
		if e.Payload != nil {
			entries = append(entries, e)
		}
		p, err := r.co.Consume(context.Background(), entries)
		if err != nil {
			t.Fatal(err)
		}
		r.committed = max(r.committed, p)
	}
	if r.committed <= ws.end {
		t.Errorf("committed %d, x's first record at %d: the running watch holds the spool", r.committed, ws.end)
	}
	r.stop()
}

// A watch that ends in the batch it began in (the bench's, and a watch refused at once) is
// never journaled: it never ran, and nothing holds the spool for it.
func TestShortWatchesAreNotJournaled(t *testing.T) {
	codec := newTestCodec(t)
	r := startWatchRun(t, codec, t.TempDir(), 0)
	var pos spool.Position
	for i := range 100 {
		w := req{id: fmt.Sprintf("w-%d", i), verb: "watch", uri: "/api/v1/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: t0.Add(time.Duration(i) * time.Second)}
		stages := []string{"ResponseComplete"}
		if i%2 == 1 {
			stages = []string{"RequestReceived", "ResponseStarted", "ResponseComplete"}
		}
		recs := w.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 410, stages: stages, end: 5 * time.Millisecond})
		b := encodeFrame(t, codec, recs)
		r.co.now = func() time.Time { return recs[0].ReceivedAt }
		if _, err := r.co.Consume(context.Background(), []spool.Entry{{Pos: pos, End: pos + spool.Position(len(b)), Payload: b}}); err != nil {
			t.Fatal(err)
		}
		pos += spool.Position(len(b))
	}
	if n, size := len(r.co.wl.chains)+len(r.co.wl.early), r.co.wl.size; n != 0 || size != 0 {
		t.Errorf("100 watches that ended at once: %d chains and %d bytes in the journal, want none", n, size)
	}
	r.stop()
}

// The journal's reader takes any bytes without panicking, and keeps only whole entries.
func FuzzReadWatchLog(f *testing.F) {
	codec, err := record.NewCodec()
	if err != nil {
		f.Fatal(err)
	}
	w := &watchLog{codec: codec}
	r := pods("p", t0).local("kas-a", 200, "")[0]
	if _, err := w.appendEntry(wlRecord, 3, 42, &r); err != nil {
		f.Fatal(err)
	}
	if _, err := w.appendEntry(wlGone, 3, 0, nil); err != nil {
		f.Fatal(err)
	}
	f.Add(w.buf)
	f.Add(w.buf[:len(w.buf)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var at int
		good, err := readWatchLog(bufio.NewReader(bytes.NewReader(b)), func(kind byte, seq uint32, pos spool.Position, frame, entry []byte) error {
			if !bytes.Equal(entry, b[at:min(len(b), at+len(entry))]) {
				t.Fatalf("entry at %d is not the bytes read there", at)
			}
			at += len(entry)
			if kind == wlRecord {
				codec.DecodeFrame(frame)
			}
			return nil
		})
		if err != nil || good < 0 || good > int64(len(b)) {
			t.Fatalf("read %d of %d bytes: %v", good, len(b), err)
		}
	})
}
