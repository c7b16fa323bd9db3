package correlate

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
)

// A restart replays the spool from the first record of the oldest chain still in memory. A
// frame there may hold the later record of a chain that had already left memory, stored whole:
// here y's peer record, behind x's entry (x stays in memory: its peer's record comes late).
// Joined alone after the restart it made a second chain of y, broken ("entry audit missing"),
// beside the stored proxied one (found in TestHALayoutSurvivesEveryPeertrailProcess: the two
// aggregators, restarted at other moments, disagreed). With the last process's account of
// what it had joined, the replay drops it unseen; without one (the control) it comes back.
func TestReplayDropsRemnantsOfStoredChains(t *testing.T) {
	opts := JoinOptions{Window: 5 * time.Second, WatchWindow: time.Hour, LateWindow: time.Minute, MaxOpen: 1_000_000, MaxRecent: 200_000}
	dir := t.TempDir()
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	start := func(stateFile string, spoolEnd spool.Position) (*Correlator, *memSink) {
		caps := NewCapabilities(15 * time.Minute)
		for name, addr := range map[string]string{"kas-a": addrA, "kas-b": addrB, "kas-c": addrC} {
			caps.NoteServer(name, "", addr, t0)
		}
		sink := &memSink{}
		co := New(Config{Join: opts, Codec: codec, Caps: caps, Sink: sink, StateFile: stateFile, SpoolEnd: spoolEnd})
		return co, sink
	}

	var entries []spool.Entry
	var pos spool.Position
	frame := func(recs []record.Record) {
		b := encodeFrame(t, codec, recs)
		entries = append(entries, spool.Entry{Pos: pos, End: pos + spool.Position(len(b)), Payload: b})
		pos += spool.Position(len(b))
	}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	y, x := podgroups("y", t0), podgroups("x", at(200*time.Millisecond))
	frame(y.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: at(time.Second)}))
	// With x's entry, a watch that runs on past the restart: its old receipt must not hold back
	// the horizon, or no remnant would ever be recognised in a cluster (watches run for hours).
	w := req{id: "w", verb: "watch", uri: "/api/v1/namespaces/default/pods?watch=true", version: "v1", resource: "pods", user: "alice", at: at(100 * time.Millisecond)}
	frame(append(x.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: at(1200 * time.Millisecond)}),
		w.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, stages: []string{"RequestReceived", "ResponseStarted"}, received: at(1200 * time.Millisecond)})...))
	frame(y.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrA}, code: 200, objects: true, start: 2 * time.Millisecond, end: 15 * time.Millisecond, uri: sortedQuery(y.uri), received: at(1500 * time.Millisecond)}))
	for s := 2; s <= 90; s++ {
		if s == 50 {
			frame(x.records(sideOpts{apiserver: "kas-c", sourceIPs: []string{client, addrB}, code: 200, objects: true, start: 2 * time.Millisecond, end: 15 * time.Millisecond, uri: sortedQuery(x.uri), received: at(50 * time.Second)}))
		}
		f := pods(fmt.Sprintf("f-%d", s), at(time.Duration(s)*time.Second-500*time.Millisecond))
		frame(f.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, objects: true, end: 5 * time.Millisecond, received: at(time.Duration(s) * time.Second)}))
	}

	// The first process joins it all, a frame at a time, and stops.
	state := filepath.Join(dir, "correlate", "capabilities.json")
	first, firstSink := start(state, 0)
	var committed spool.Position
	for _, e := range entries {
		b, err := codec.DecodeFrame(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		first.now = func() time.Time { return b.Records[0].ReceivedAt }
		p, err := first.Consume(context.Background(), []spool.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		committed = max(committed, p)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if committed != entries[1].Pos {
		t.Fatalf("committed %d, want x's first record at %d (y has left memory, x not)", committed, entries[1].Pos)
	}
	stored := map[string]chain.Class{}
	for _, c := range firstSink.chains {
		if c.AuditID == "y" || c.AuditID == "x" {
			stored[c.AuditID+" "+c.ID] = c.Class
		}
	}

	replay := func(co *Correlator, sink *memSink) map[string]chain.Class {
		for _, e := range entries {
			if e.Pos < committed {
				continue
			}
			if _, err := co.Consume(context.Background(), []spool.Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
		co.now = func() time.Time { return at(200 * time.Second) }
		if _, err := co.Consume(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		got := map[string]chain.Class{}
		for _, c := range sink.chains {
			if c.AuditID == "y" || c.AuditID == "x" {
				got[c.AuditID+" "+c.ID] = c.Class
			}
		}
		return got
	}
	// The control: without the account the replay makes y's peer record a chain of its own.
	control, controlSink := start("", 0)
	if got := replay(control, controlSink); len(got) != 2 {
		t.Fatalf("control: chains of x and y %v (stored before: %v), want x's again and y's remnant", got, stored)
	}
	again, againSink := start(state, pos)
	got := replay(again, againSink)
	for k, class := range got {
		if stored[k] != class {
			t.Errorf("after the restart: %s %s, stored before as %q (all stored: %v)", k, class, stored[k], stored)
		}
	}
	if len(got) != 1 || again.j.Remnants == 0 {
		t.Errorf("after the restart: %v, %d remnants left unseen; want x's chain again and y's remnant unseen", got, again.j.Remnants)
	}

	// Restarts a few seconds apart: the second process stops after a few frames of its replay,
	// before any chain of its own left memory; its account still covers what the first stored.
	brief, _ := start(state, pos)
	for _, e := range entries {
		if e.Pos >= committed && e.Pos < entries[6].Pos {
			if _, err := brief.Consume(context.Background(), []spool.Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := brief.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	third, thirdSink := start(state, pos)
	if got := replay(third, thirdSink); len(got) != 1 {
		t.Errorf("after two restarts: %v, want x's chain again and y's remnant unseen", got)
	}
}

// Between two walks of the chains in memory the account's horizon is the last walk's bound
// lowered by every chain joined since: a chain that came after the walk with an older receipt
// (an agent's backlog) holds it back at once, as a walk would, and a walk raises it again once
// the chains that held it back have left.
func TestReplayHorizonBetweenWalks(t *testing.T) {
	opts := JoinOptions{Window: 5 * time.Second, WatchWindow: time.Hour, LateWindow: time.Minute, MaxOpen: 1_000_000, MaxRecent: 200_000}
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(codec.Close)
	caps := NewCapabilities(15 * time.Minute)
	caps.NoteServer("kas-a", "", addrA, t0)
	co := New(Config{Join: opts, Codec: codec, Caps: caps, Sink: &memSink{}, StateFile: filepath.Join(t.TempDir(), "correlate", "capabilities.json")})
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var pos spool.Position
	consume := func(now time.Time, name string, received time.Time) {
		t.Helper()
		co.now = func() time.Time { return now }
		var entries []spool.Entry
		if name != "" {
			recs := pods(name, received.Add(-time.Second)).records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, objects: true, end: 5 * time.Millisecond, received: received})
			keys := make([]record.Key, len(recs))
			for i := range recs {
				keys[i] = recs[i].Key()
			}
			b, err := codec.AppendFrame(nil, "kas-a", received, recs, keys)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, spool.Entry{Pos: pos, End: pos + spool.Position(len(b)), Payload: b})
			pos += spool.Position(len(b))
		}
		if _, err := co.Consume(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
	}
	horizon := func() time.Duration {
		t.Helper()
		co.mu.Lock()
		defer co.mu.Unlock()
		return time.Duration(co.horizonLocked(false) - t0.UnixNano())
	}

	// a comes and leaves memory (final, stored, past the late window): nothing is in memory at
	// the walk, and the horizon is just past a's receipt.
	consume(at(100*time.Second), "a", at(100*time.Second))
	for s := 110; s <= 200; s += 10 {
		consume(at(time.Duration(s)*time.Second), "", time.Time{})
		co.flush(context.Background())
	}
	if co.j.Open() != 0 || co.j.departedLast != at(100*time.Second).UnixNano() {
		t.Fatalf("a still in memory at 200s: %d open, departed up to %v", co.j.Open(), time.Duration(co.j.departedLast-t0.UnixNano()))
	}
	if h := horizon(); h != 100*time.Second+1 {
		t.Fatalf("horizon with nothing in memory: %v, want just past a's receipt", h)
	}
	// A second later, before the next walk, an agent's backlog brings a chain received at 50s.
	consume(at(201*time.Second), "backlog", at(50*time.Second))
	if h := horizon(); h != 50*time.Second {
		t.Fatalf("horizon a second after the walk, with a chain received at 50s joined since: %v, want 50s", h)
	}
	// Once it has left memory too, the next walk raises the horizon again.
	for s := 210; s <= 300; s += 10 {
		consume(at(time.Duration(s)*time.Second), "", time.Time{})
		co.flush(context.Background())
	}
	if h := horizon(); h != 100*time.Second+1 {
		t.Fatalf("horizon once the backlog left memory: %v, want just past a's receipt again", h)
	}
}

// A record of the replay joining a remnant (before the last account's end, its chain received
// before the horizon) leaves the horizon where it was, as a walk would; one after the account's
// end, or received past the horizon, lowers it to its chain's receipt.
func TestReplayRemnantsDoNotLowerTheHorizon(t *testing.T) {
	j := NewJoiner(DefaultJoinOptions())
	j.replayEnd, j.horizon = 1000, t0.Add(time.Minute).UnixNano()
	add := func(id string, pos spool.Position, received time.Duration) {
		r := pods(id, t0).local("kas-a", 200, "")[1]
		r.ReceivedAt = t0.Add(received)
		j.Add(&r, pos)
	}
	add("remnant", 100, 10*time.Second)
	if j.touchedLast != math.MaxInt64 {
		t.Fatalf("a remnant's record lowered the horizon to %v", time.Duration(j.touchedLast-t0.UnixNano()))
	}
	add("replayed-late", 200, 70*time.Second)
	if want := t0.Add(70 * time.Second).UnixNano(); j.touchedLast != want {
		t.Fatalf("a replayed chain received past the horizon: %v, want 70s", time.Duration(j.touchedLast-t0.UnixNano()))
	}
	add("new", 1000, 20*time.Second)
	if want := t0.Add(20 * time.Second).UnixNano(); j.touchedLast != want {
		t.Fatalf("a chain from after the account's end: %v, want its receipt, 20s", time.Duration(j.touchedLast-t0.UnixNano()))
	}
}
