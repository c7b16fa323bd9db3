package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store"
)

// chainsAfterStored are n final proxied chains of entry apiserver a, first received after every
// chain the table holds (so a writer started now knows they cannot be stored).
func chainsAfterStored(t *testing.T, s store.Store, a string, n int) []chain.Chain {
	t.Helper()
	newest, err := store.ParseTime(scalar(t, s, "SELECT max(first_received) FROM peertrail.chains", nil))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().UTC().Add(-time.Hour)
	if newest.After(base) {
		base = newest
	}
	base = base.Truncate(time.Second).Add(time.Minute)
	chains := make([]chain.Chain, n)
	for i := range chains {
		// With nanoseconds, as a receiver's clock gives them; the table keeps microseconds.
		at := base.Add(time.Duration(i)*time.Second + 345_678_901)
		chains[i] = chainAt(fmt.Sprintf("%s-%04d", a, i), at, chain.StateFinal, at.Add(2*time.Second))
		chains[i].Entry.APIServer = a
	}
	return chains
}

// rollupByClass is what chains_per_minute counts of entry apiserver a, by class.
func rollupByClass(t *testing.T, s store.Store, a string) map[string]string {
	t.Helper()
	res := query(t, s, "SELECT class, sum(chains) AS n FROM peertrail.chains_per_minute WHERE entry_apiserver = {a:String} GROUP BY class HAVING n != 0", map[string]string{"a": a})
	out := map[string]string{}
	for i := range res.Rows {
		out[res.Value(i, "class")] = res.Value(i, "n")
	}
	return out
}

func revised(chains []chain.Chain, class chain.Class) []chain.Chain {
	out := make([]chain.Chain, len(chains))
	for i, c := range chains {
		c.Revision, c.Class, c.LastReceived = 2, class, c.LastReceived.Add(30*time.Second)
		out[i] = c
	}
	return out
}

// New chains are written without asking the store; a writer that starts again (a restart: the
// correlator replays the spool from its oldest open chain) asks about the chains received
// before the table's end, skips those it holds and retracts the final rows a later revision
// supersedes, so the rollups count every chain once; and it asks nothing about the chains
// received after that.
func TestWriteChainsReplayAfterRestart(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	const a = "restart-a"
	chains := chainsAfterStored(t, s, a, 40)

	w := store.NewWriter(s, codec, store.WriterOptions{})
	if err := w.WriteChains(ctx, chains[:30]); err != nil {
		t.Fatal(err)
	}
	// Ten of them reopened by a late record, in this process: the record knows they are
	// final, the store gives the rows to retract.
	if err := w.WriteChains(ctx, revised(chains[:10], chain.ClassBroken)); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, w, metrics.StoreChainsLookedUpTotal, ""); got != 10 {
		t.Errorf("the first writer looked up %v chains, want 10 (the final rows superseded)", got)
	}
	if got := rollupByClass(t, s, a); len(got) != 2 || got["broken"] != "10" || got["proxied"] != "20" {
		t.Fatalf("rollup after the first writer: %v, want broken 10, proxied 20", got)
	}

	// A restart: the replay brings every chain again, some revised in between (20-24 now
	// broken), and chains the first process never wrote (30-39).
	w2 := store.NewWriter(s, codec, store.WriterOptions{})
	replay := append(append(revised(chains[:10], chain.ClassBroken), chains[10:20]...), revised(chains[20:25], chain.ClassBroken)...)
	replay = append(append(replay, chains[25:30]...), chains[30:]...)
	if err := w2.WriteChains(ctx, replay); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, w2, metrics.StoreChainsLookedUpTotal, ""); got != 30 {
		t.Errorf("the restarted writer looked up %v chains, want 30 (those the table can hold)", got)
	}
	if got := counter(t, w2, metrics.StoreRowsSkippedTotal, "chains"); got != 25 {
		t.Errorf("the restarted writer skipped %v chains, want 25", got)
	}
	if got := counter(t, w2, metrics.StoreChainsRetractedTotal, ""); got != 5 {
		t.Errorf("the restarted writer retracted %v chains, want 5", got)
	}
	want := map[string]string{"broken": "15", "proxied": "25"}
	if got := rollupByClass(t, s, a); len(got) != 2 || got["broken"] != want["broken"] || got["proxied"] != want["proxied"] {
		t.Fatalf("rollup after the replay: %v, want %v", got, want)
	}
	// The same replay again asks the store nothing: the writer knows what it holds now.
	if err := w2.WriteChains(ctx, replay); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, w2, metrics.StoreChainsLookedUpTotal, ""); got != 30 {
		t.Errorf("the second replay looked up %v chains more", got-30)
	}
	if got := rollupByClass(t, s, a); len(got) != 2 || got["broken"] != want["broken"] || got["proxied"] != want["proxied"] {
		t.Fatalf("rollup after the second replay: %v, want %v", got, want)
	}
	if got := scalar(t, s, "SELECT count() FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} AND state = 'final'", map[string]string{"a": a}); got != "40" {
		t.Errorf("chains FINAL holds %s final chains, want 40", got)
	}
}

// A restart numbers revisions afresh, so a chain that a late record reopens after it can come
// at a revision no higher than the row the last process wrote (judged again there, a revision
// per verdict). The replayed chain with the same records as that row is skipped, and the writer
// then knows the row; the reopened chain, which joined records the row lacks, must still
// supersede it (found in TestHALayoutSurvivesEveryPeertrailProcess: one aggregator kept the
// peer's record alone, "local", where the other had the forward).
func TestWriteChainsReopenedAfterARestartBelowTheStoredRevision(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	const a = "reopened-a"
	chains := chainsAfterStored(t, s, a, 10)
	lone := make([]chain.Chain, len(chains))
	for i, c := range chains {
		c.Peer, c.Class, c.Records, c.Revision = nil, chain.ClassLocal, 2, 3
		lone[i] = c
	}
	w := store.NewWriter(s, codec, store.WriterOptions{})
	if err := w.WriteChains(ctx, lone); err != nil {
		t.Fatal(err)
	}
	// The restart: the replay joins the lone records first and judges them once (revision 1),
	// then the late records come (revision 2).
	w2 := store.NewWriter(s, codec, store.WriterOptions{})
	replayed := make([]chain.Chain, len(lone))
	for i, c := range lone {
		c.Revision = 1
		replayed[i] = c
	}
	if err := w2.WriteChains(ctx, replayed); err != nil {
		t.Fatal(err)
	}
	if err := w2.WriteChains(ctx, revised(chains, chain.ClassProxied)); err != nil {
		t.Fatal(err)
	}
	if got := rollupByClass(t, s, a); len(got) != 1 || got["proxied"] != "10" {
		t.Errorf("rollup: %v, want proxied 10", got)
	}
	if got := scalar(t, s, "SELECT toString(countIf(class = 'proxied' AND records = 4)) || '/' || toString(count()) FROM peertrail.chains FINAL WHERE audit_id LIKE 'reopened-a-%' AND state = 'final'", nil); got != "10/10" {
		t.Errorf("chains FINAL: %s proxied with every record, want 10/10", got)
	}
}

// An insert of chains that landed but answered an error (the connection broke after the commit)
// leaves the writer unsure: offered again, the batch is looked up and not written twice, neither
// new chains nor a revision that retracted a final row.
func TestWriteChainsLostAnswer(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	const a = "lost-answer-a"
	chains := chainsAfterStored(t, s, a, 20)
	f := &flaky{Store: s}
	w := store.NewWriter(f, newCodec(t), store.WriterOptions{})
	f.lostAnswers = 1
	if err := w.WriteChains(ctx, chains); err == nil {
		t.Fatal("the lost answer was not reported")
	}
	if err := w.WriteChains(ctx, chains); err != nil {
		t.Fatal(err)
	}
	f.lostAnswers = 1
	if err := w.WriteChains(ctx, revised(chains[:5], chain.ClassBroken)); err == nil {
		t.Fatal("the lost answer was not reported")
	}
	if err := w.WriteChains(ctx, revised(chains[:5], chain.ClassBroken)); err != nil {
		t.Fatal(err)
	}
	if got := rollupByClass(t, s, a); len(got) != 2 || got["broken"] != "5" || got["proxied"] != "15" {
		t.Fatalf("rollup: %v, want broken 5, proxied 15", got)
	}
	if got := scalar(t, s, "SELECT toString(countIf(revision = 2)) || '/' || toString(count()) FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} AND state = 'final'", map[string]string{"a": a}); got != "5/20" {
		t.Errorf("chains FINAL: %s final chains revised, want 5/20", got)
	}
}

// A record smaller than the chains written forgets the oldest; a late revision of one of them
// is looked up and retracted like any other, never taken for a new chain.
func TestWriteChainsRecordBound(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	const a = "small-record-a"
	chains := chainsAfterStored(t, s, a, 30)
	w := store.NewWriter(s, newCodec(t), store.WriterOptions{RememberChains: 10})
	for i := 0; i < len(chains); i += 5 {
		if err := w.WriteChains(ctx, chains[i:i+5]); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, w, metrics.StoreChainsRemembered, ""); got != 10 {
		t.Errorf("the writer remembers %v chains, want its bound, 10", got)
	}
	// Forgotten (0-19) and remembered (20-29), revised and replayed.
	if err := w.WriteChains(ctx, append(revised(chains[:5], chain.ClassBroken), revised(chains[25:], chain.ClassBroken)...)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteChains(ctx, chains[5:25]); err != nil {
		t.Fatal(err)
	}
	if got := rollupByClass(t, s, a); len(got) != 2 || got["broken"] != "10" || got["proxied"] != "20" {
		t.Fatalf("rollup: %v, want broken 10, proxied 20", got)
	}
	if got := scalar(t, s, "SELECT toString(countIf(revision = 2)) || '/' || toString(count()) FROM peertrail.chains FINAL WHERE entry_apiserver = {a:String} AND state = 'final'", map[string]string{"a": a}); got != "10/30" {
		t.Errorf("chains FINAL: %s final chains revised, want 10/30", got)
	}
}
