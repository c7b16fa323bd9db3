package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/sqlhttp"
)

// lostAnswers is a server store whose first n deduplicated inserts land but answer an error,
// as when a connection breaks after the server committed: the writer sends them again.
type lostAnswers struct {
	*store.Server
	mu sync.Mutex
	n  int
}

func (l *lostAnswers) InsertDeduplicated(ctx context.Context, table string, columns []store.Column, rows [][]any, token string) error {
	if err := l.Server.InsertDeduplicated(ctx, table, columns, rows, token); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n > 0 {
		l.n--
		return errors.New("connection reset after the insert")
	}
	return nil
}

// TestTwoAggregatorsShareOneServerStore: two aggregators of the HA layout, each with its own
// spool holding the same agent frames, write one ClickHouse server (the embedded engine behind
// its HTTP interface in its test-only write mode, through clickhouse-go, as against a server).
// With --clickhouse-deduplicate every event is stored once, and counted once by the rollups fed
// from the events, whatever the batching and the retries; every chain both write is one row
// under FINAL.
func TestTwoAggregatorsShareOneServerStore(t *testing.T) {
	ctx := context.Background()
	srv := httpServer(t, sqlhttp.Options{UnsafeAllowWrites: true})
	open := func() *store.Server {
		s, err := store.OpenServer(ctx, store.ServerOptions{DSN: "http://" + hostPort(t, srv)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	if err := store.Migrate(ctx, a, store.SchemaOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	codec := newCodec(t)

	// Without the tables' deduplication window, a token is no use: one frame inserted twice
	// with its token is stored twice. (This is what makes the rest of the test able to fail.)
	// Merges are held meanwhile: events is a ReplacingMergeTree, whose merge would fold the
	// two copies into one before they are counted.
	if err := engine(t).Exec(ctx, "SYSTEM STOP MERGES peertrail.events"); err != nil {
		t.Fatal(err)
	}
	control := newTraffic(t, "shared-control", 16, 1, 30)
	h := frameHeader(t, codec, control.batches[0])
	rows := make([][]any, len(control.batches[0].Records))
	for i := range rows {
		rows[i] = store.EventRow(&control.batches[0].Records[i])
	}
	for range 2 {
		if err := a.InsertDeduplicated(ctx, store.EventsTable, store.EventColumns, rows, store.FrameToken(h)); err != nil {
			t.Fatal(err)
		}
	}
	if n := scalar(t, engine(t), "SELECT count() FROM peertrail.events WHERE apiserver = {a:String}", control.params()); n != "60" {
		t.Fatalf("without the window, a frame inserted twice is %s rows, want 60", n)
	}
	if err := engine(t).Exec(ctx, "SYSTEM START MERGES peertrail.events"); err != nil {
		t.Fatal(err)
	}

	if err := store.Migrate(ctx, a, store.SchemaOptions{Deduplicate: true}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The engine is shared with the package's other tests, which insert without tokens.
		for _, tb := range []string{"events", "audit_ids", "events_per_minute", "request_latency_per_minute", "apiserver_versions_per_minute",
			"apiserver_latency_per_minute", "errors_per_minute"} {
			engine(t).Exec(context.Background(), "ALTER TABLE peertrail."+tb+" MODIFY SETTING non_replicated_deduplication_window = 0")
		}
	})
	tr := newTraffic(t, "shared", 15, 20, 40)
	spA, spB := spoolOf(t, codec, tr), spoolOf(t, codec, tr)
	wA := store.NewWriter(&lostAnswers{Server: a, n: 3}, codec, store.WriterOptions{Deduplicate: true, FlushRows: 100})
	wB := store.NewWriter(b, codec, store.WriterOptions{Deduplicate: true, FlushRows: 7})
	var wg sync.WaitGroup
	for _, x := range []struct {
		sp *spool.Spool
		w  *store.Writer
	}{{spA, wA}, {spB, wB}} {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			go func() {
				for rctx.Err() == nil && x.sp.Stats().Lag[store.ConsumerName] > 0 {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			}()
			if err := x.sp.Run(rctx, store.ConsumerName, x.w, spool.RunOptions{Idle: 20 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, CommitEvery: time.Millisecond}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if lag := spA.Stats().Lag[store.ConsumerName] + spB.Stats().Lag[store.ConsumerName]; lag != 0 {
		t.Fatalf("the writers did not get through their spools: %d bytes left", lag)
	}
	// Each writer inserted every frame (the first one's lost answers twice); the server kept one.
	assertExactlyOnce(t, tr)
	assertStoredAsSent(t, tr)
	ids := scalar(t, engine(t), "SELECT count() FROM peertrail.audit_ids WHERE apiserver IN ({a:String}, {b:String})", tr.params())
	want := scalar(t, engine(t), "SELECT count() FROM (SELECT DISTINCT audit_id, apiserver, toStartOfHour(stage_timestamp), resource, toStartOfHour(received_at) FROM peertrail.events WHERE apiserver IN ({a:String}, {b:String}))", tr.params())
	if ids != want {
		t.Fatalf("audit_ids holds %s rows, want %s: an insert dropped from events was not dropped from its view", ids, want)
	}

	// Chains: both aggregators judged the same requests alike (same id, same version).
	base := time.Now().UTC().Truncate(time.Hour).Add(-15 * time.Hour)
	var chains []chain.Chain
	for i := range 200 {
		at := base.Add(time.Duration(i) * 100 * time.Millisecond)
		c := chainAt(fmt.Sprintf("shared-chain-%04d", i), at, chain.StateFinal, at.Add(2*time.Second))
		c.Entry.APIServer = "shared-chains-a"
		chains = append(chains, c)
	}
	cA := store.NewWriter(a, codec, store.WriterOptions{Deduplicate: true})
	cB := store.NewWriter(b, codec, store.WriterOptions{Deduplicate: true})
	// One aggregator writes its chains a second before the other (both flush every second).
	if err := cA.WriteChains(ctx, chains); err != nil {
		t.Fatal(err)
	}
	if err := cB.WriteChains(ctx, chains); err != nil {
		t.Fatal(err)
	}
	rowsAll := scalar(t, engine(t), "SELECT count() FROM peertrail.chains WHERE entry_apiserver = 'shared-chains-a'", nil)
	final := scalar(t, engine(t), "SELECT count() FROM peertrail.chains FINAL WHERE entry_apiserver = 'shared-chains-a'", nil)
	counted := scalar(t, engine(t), "SELECT sum(chains) FROM peertrail.chains_per_minute WHERE entry_apiserver = 'shared-chains-a'", nil)
	if rowsAll != "200" || final != "200" || counted != "200" {
		t.Fatalf("chains written by both: %s rows, %s under FINAL, %s counted by the rollup; want 200 each", rowsAll, final, counted)
	}
	// At the same moment, neither sees the other's: rows twice until merged, once under FINAL.
	var more []chain.Chain
	for i := range 50 {
		at := base.Add(30*time.Minute + time.Duration(i)*100*time.Millisecond)
		c := chainAt(fmt.Sprintf("shared-race-%04d", i), at, chain.StateFinal, at.Add(2*time.Second))
		c.Entry.APIServer = "shared-race-a"
		more = append(more, c)
	}
	for _, w := range []*store.Writer{cA, cB} {
		wg.Go(func() {
			if err := w.WriteChains(ctx, more); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	final = scalar(t, engine(t), "SELECT count() FROM peertrail.chains FINAL WHERE entry_apiserver = 'shared-race-a'", nil)
	rowsAll = scalar(t, engine(t), "SELECT count() FROM peertrail.chains WHERE entry_apiserver = 'shared-race-a'", nil)
	if final != "50" {
		t.Fatalf("chains written by both at once: %s under FINAL, want 50", final)
	}
	t.Logf("events: %d records stored once; chains written one after the other: 200 rows; at the same moment: %s rows, 50 under FINAL", tr.records, rowsAll)
}

// frameHeader is the header of b's frame, as a receiver spools it.
func frameHeader(t *testing.T, codec *record.Codec, b record.Batch) record.FrameHeader {
	t.Helper()
	keys := make([]record.Key, len(b.Records))
	for i := range b.Records {
		keys[i] = b.Records[i].Key()
	}
	frame, err := codec.AppendFrame(nil, b.APIServer, b.ReceivedAt, b.Records, keys)
	if err != nil {
		t.Fatal(err)
	}
	h, err := record.ParseHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
