package store

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
)

// WriteChains writes chains into the chains table; it is the correlator's sink. It is
// idempotent: a chain version the table already holds (the same id with a version at least as
// high, see ChainVersion, and as many records) is not written again; a chain that joined more
// records than the row the table holds is written one revision above it, whatever revision it
// came with (a replay after a restart numbers revisions afresh). When a chain supersedes a final row the table
// holds (a late record reopened and reclassified it, or a replay after a restart), the same
// insert writes that row again as StateRetracted: the rollups count it -1 where they counted
// it, so they count each chain once, in its final class. Safe for concurrent use.
//
// What the table holds of a chain is known without asking it for the chains this writer wrote
// and for those first received after the newest first receipt the table held when it started
// (see writtenChains); the store is asked only about the rest: replays after a restart, final
// rows a later revision supersedes (whose row the retraction repeats), and what a failed insert
// may have left. Like the events, this assumes the writer is the only writer of the table.
func (w *Writer) WriteChains(ctx context.Context, chains []chain.Chain) error {
	if len(chains) == 0 {
		return nil
	}
	w.chainMu.Lock()
	defer w.chainMu.Unlock()
	rec := w.written

	// The newest version of each chain in this batch.
	keys := make([]chainKey, len(chains))
	latest := make(map[chainKey]int, len(chains))
	for i := range chains {
		c := &chains[i]
		if c.ID == "" {
			return fmt.Errorf("store: chain of auditID %q has no id", c.AuditID)
		}
		keys[i] = rec.key(c.ID)
		if j, ok := latest[keys[i]]; !ok || ChainVersion(c) > ChainVersion(&chains[j]) {
			latest[keys[i]] = i
		}
	}
	if !rec.known {
		newest, err := w.newestChainReceived(ctx)
		if err != nil {
			return fmt.Errorf("store: find where the chains table ends: %w", err)
		}
		rec.setFloor(newest)
	}
	// Decide each chain from the record, or set it aside to ask the store.
	write := make([]*chain.Chain, 0, len(latest))
	var lookup []int
	for i := range chains {
		c := &chains[i]
		if latest[keys[i]] != i {
			continue
		}
		v, records, ok := rec.version(keys[i])
		switch {
		case ok && v >= ChainVersion(c) && records >= c.Records:
			continue // written already
		case ok && v >= ChainVersion(c):
			// The row lacks records this chain joined, at a revision no higher than the row's
			// (a restart numbers revisions afresh): it supersedes the row one revision above
			// it, and the lookup gives the row to retract.
			lookup = append(lookup, i)
		case ok && !versionFinal(v):
			write = append(write, c) // over an open row, which no rollup counted
		case ok || rec.mayBeStored(c.FirstReceived):
			lookup = append(lookup, i)
		default:
			write = append(write, c) // first received after anything the table can hold
		}
	}
	if len(lookup) > 0 {
		w.chainMetrics.lookedUp.Add(float64(len(lookup)))
		stored, err := w.storedChainVersions(ctx, chains, lookup)
		if err != nil {
			return err
		}
		for _, i := range lookup {
			c := &chains[i]
			prev, ok := stored[c.ID]
			if ok && prev.version >= ChainVersion(c) {
				if int(prev.records) >= c.Records {
					rec.put(keys[i], prev.version, int(prev.records), c.FirstReceived)
					continue
				}
				// The stored row lacks records this one joined: a replay after a restart
				// joins in one pass, at a lower revision, the records a correlator had joined
				// over several (and two aggregators number their revisions apart). It
				// supersedes the row, one revision above it.
				c.Revision = int(min(prev.version>>54, 1<<10-2)) + 1
			}
			if prev.final != nil {
				r := *prev.final
				r.State = StateRetracted
				write = append(write, &r)
			}
			write = append(write, c)
		}
	}
	written, retracted := 0, 0
	var newest time.Time
	for _, c := range write {
		if c.State == StateRetracted {
			retracted++
			continue
		}
		written++
		if c.LastReceived.After(newest) {
			newest = c.LastReceived
		}
	}
	if skipped := len(chains) - written; skipped > 0 {
		w.metrics.rowsSkipped.WithLabelValues("chains").Add(float64(skipped))
	}
	defer w.chainMetrics.observe(rec)
	if len(write) == 0 {
		return nil
	}
	start := time.Now()
	err := w.insertChains(ctx, write)
	w.metrics.insertDuration.WithLabelValues("chains").Observe(time.Since(start).Seconds())
	if err != nil {
		// Some of it may have landed: what the table holds of these chains is unknown until
		// it is read again.
		for _, c := range write {
			if c.State != StateRetracted {
				rec.forget(rec.key(c.ID))
			}
		}
		rec.unsure()
		w.metrics.insertErrors.WithLabelValues("chains").Inc()
		return fmt.Errorf("store: insert %d chains: %w", len(write), err)
	}
	for _, c := range write {
		if c.State != StateRetracted {
			rec.put(rec.key(c.ID), ChainVersion(c), c.Records, c.FirstReceived)
		}
	}
	w.metrics.chainsRetracted.Add(float64(retracted))
	w.metrics.rowsWritten.WithLabelValues("chains").Add(float64(len(write)))
	w.metrics.newest.WithLabelValues("chains").Set(float64(newest.UnixNano()) / 1e9)
	return nil
}

// newestChainReceived is max(first_received) of the chains table (zero when empty), answered
// from the parts' partition min/max (the table is partitioned by it).
func (w *Writer) newestChainReceived(ctx context.Context) (time.Time, error) {
	return w.newestIn(ctx, ChainsTable, "first_received")
}

// chainLookupChunk bounds the chains whose stored versions one query looks up: the ids travel
// as a query parameter, which the HTTP protocol puts in the URL (ClickHouse accepts 1 MiB).
const chainLookupChunk = 5000

// StateRetracted is the state of a chain row the writer writes again when a newer version
// supersedes it: the rollups take back what they counted of it.
const StateRetracted chain.State = "retracted"

// storedChain is what the table holds of a chain: its highest version, how many records that row
// joined, and that row when it is final (what the rollups counted).
type storedChain struct {
	version uint64
	records uint32
	final   *chain.Chain
}

// storedChainVersions returns what the table holds of the chains at idx (which it sorts).
func (w *Writer) storedChainVersions(ctx context.Context, chains []chain.Chain, idx []int) (map[string]storedChain, error) {
	// In order of first receipt, so that each chunk spans a short time range.
	sort.Slice(idx, func(a, b int) bool { return chains[idx[a]].FirstReceived.Before(chains[idx[b]].FirstReceived) })
	out := make(map[string]storedChain, len(idx))
	for len(idx) > 0 {
		n := min(len(idx), chainLookupChunk)
		if err := w.lookupChainVersions(ctx, chains, idx[:n], out); err != nil {
			return nil, err
		}
		idx = idx[n:]
	}
	return out, nil
}

func (w *Writer) lookupChainVersions(ctx context.Context, chains []chain.Chain, idx []int, out map[string]storedChain) error {
	var lo, hi time.Time
	ids := make([]string, 0, len(idx))
	auditIDs := map[string]bool{}
	for _, i := range idx {
		c := &chains[i]
		ids = append(ids, c.ID)
		auditIDs[c.AuditID] = true
		if lo.IsZero() || c.FirstReceived.Before(lo) {
			lo = c.FirstReceived
		}
		if c.FirstReceived.After(hi) {
			hi = c.FirstReceived
		}
	}
	aids := make([]string, 0, len(auditIDs))
	for a := range auditIDs {
		aids = append(aids, a)
	}
	// The conditions follow the sorting key (hour of first_received, audit_id, id), so this
	// reads only the granules of these chains.
	res, err := w.store.Query(ctx, `SELECT * FROM `+ChainsTable+`
WHERE first_received >= {lo:DateTime64(6, 'UTC')} AND first_received <= {hi:DateTime64(6, 'UTC')}
  AND audit_id IN {audit_ids:Array(String)} AND id IN {ids:Array(String)}
ORDER BY version DESC
LIMIT 1 BY id`,
		map[string]string{"lo": FormatTime(lo), "hi": FormatTime(hi), "audit_ids": arrayLiteral(aids), "ids": arrayLiteral(ids)})
	if err != nil {
		return fmt.Errorf("store: look up stored chain versions: %w", err)
	}
	for i := range res.Rows {
		v, err := strconv.ParseUint(res.Value(i, "version"), 10, 64)
		if err != nil {
			return fmt.Errorf("store: stored chain version %q: %w", res.Value(i, "version"), err)
		}
		n, err := strconv.ParseUint(res.Value(i, "records"), 10, 32)
		if err != nil {
			return fmt.Errorf("store: stored chain records %q: %w", res.Value(i, "records"), err)
		}
		sc := storedChain{version: v, records: uint32(n)}
		if chain.State(res.Value(i, "state")) == chain.StateFinal {
			if sc.final, err = ChainFromRow(res, i); err != nil {
				return fmt.Errorf("store: stored chain: %w", err)
			}
		}
		out[res.Value(i, "id")] = sc
	}
	return nil
}

// The chains table's rows, in the order of ChainColumns; store/COLUMNS.md documents each, and
// schema_test.go checks the list against the live table.

// ChainColumns are the columns of the chains table, in the order of ChainRow.
var ChainColumns = []Column{
	{"id", "String"},
	{"audit_id", "String"},
	{"version", "UInt64"},
	{"revision", "UInt32"},
	{"evicted", "Bool"},
	{"state", "LowCardinality(String)"},
	{"class", "LowCardinality(String)"},
	{"findings", "Array(LowCardinality(String))"},
	{"explanation", "String"},
	{"verb", "LowCardinality(String)"},
	{"request_uri", "String"},
	{"api_group", "LowCardinality(String)"},
	{"api_version", "LowCardinality(String)"},
	{"resource", "LowCardinality(String)"},
	{"subresource", "LowCardinality(String)"},
	{"namespace", "LowCardinality(String)"},
	{"name", "String"},
	{"user_name", "LowCardinality(String)"},
	{"real_user", "LowCardinality(String)"},
	{"code", "Int32"},
}

// sideColumns are the columns of one side, after its prefix ("entry_" or "peer_") and the
// has_entry/has_peer flag.
var sideColumns = []Column{
	{"apiserver", "LowCardinality(String)"},
	{"code", "Int32"},
	{"user", "LowCardinality(String)"},
	{"uid", "String"},
	{"groups", "Array(LowCardinality(String))"},
	{"extra", "Map(LowCardinality(String), Array(String))"},
	{"impersonated_user", "LowCardinality(String)"},
	{"impersonated_groups", "Array(LowCardinality(String))"},
	{"impersonated_extra", "Map(LowCardinality(String), Array(String))"},
	{"source_ips", "Array(String)"},
	{"user_agent", "LowCardinality(String)"},
	{"message", "String"},
	{"reason", "LowCardinality(String)"},
	{"request_received", "DateTime64(6, 'UTC')"},
	{"completed", "DateTime64(6, 'UTC')"},
	{"stages", "Array(LowCardinality(String))"},
	{"has_objects", "Bool"},
	{"apiserver_version", "LowCardinality(String)"}, // migration 0011
}

func init() {
	for _, side := range []string{"entry", "peer"} {
		ChainColumns = append(ChainColumns, Column{"has_" + side, "Bool"})
		for _, c := range sideColumns {
			ChainColumns = append(ChainColumns, Column{side + "_" + c.Name, c.Type})
		}
	}
	ChainColumns = append(ChainColumns,
		Column{"other_apiservers", "Array(LowCardinality(String))"},
		Column{"other_codes", "Array(Int32)"},
		Column{"other_sides", "String"},
		Column{"entry_duration_seconds", "Float64"},
		Column{"peer_duration_seconds", "Float64"},
		Column{"forwarding_overhead_seconds", "Float64"},
		Column{"request_time", "DateTime64(6, 'UTC')"},
		Column{"first_received", "DateTime64(6, 'UTC')"},
		Column{"last_received", "DateTime64(6, 'UTC')"},
		Column{"records", "UInt32"},
	)
}

// ChainVersion orders the rows written for one chain; ReplacingMergeTree keeps the highest. A
// higher Revision wins (the correlator finalised the chain again after a late record), then a
// later last_received, then a final chain over an open one:
//
//	revision (10 bits) | last_received in µs since 1970 (53 bits, to the year 2255) | final (1 bit)
func ChainVersion(c *chain.Chain) uint64 {
	rev := uint64(min(max(c.Revision, 0), 1<<10-1))
	last := uint64(min(max(c.LastReceived.UnixMicro(), 0), 1<<53-1))
	v := rev<<54 | last<<1
	if c.State == chain.StateFinal {
		v |= 1
	}
	return v
}

// versionFinal reports whether a ChainVersion is of a final chain (its lowest bit).
func versionFinal(v uint64) bool { return v&1 == 1 }

// ChainRow returns c's row for the chains table.
func ChainRow(c *chain.Chain) []any {
	findings := make([]string, len(c.Findings))
	for i, f := range c.Findings {
		findings[i] = string(f)
	}
	row := make([]any, 0, len(ChainColumns))
	row = append(row,
		c.ID, c.AuditID, ChainVersion(c), uint32(max(c.Revision, 0)), c.Evicted, string(c.State), string(c.Class), findings, c.Explanation,
		c.Verb, c.RequestURI, c.Group, c.Version, c.Resource, c.Subresource, c.Namespace, c.Name,
		c.User, c.RealUser, c.Code)
	row = appendSide(row, c.Entry)
	row = appendSide(row, c.Peer)
	others, codes := []string{}, []int32{}
	for _, o := range c.Others {
		if o != nil {
			others = append(others, o.APIServer)
			codes = append(codes, o.Code)
		}
	}
	return append(row, others, codes, otherSides(c),
		c.EntryDurationSeconds, c.PeerDurationSeconds, c.ForwardingOverheadSeconds,
		c.RequestTime().UTC(), c.FirstReceived.UTC(), c.LastReceived.UTC(), uint32(max(c.Records, 0)))
}

// otherSides is the JSON of c.Others (loops only), "" when there are none.
func otherSides(c *chain.Chain) string {
	if len(c.Others) == 0 {
		return ""
	}
	b, err := json.Marshal(c.Others)
	if err != nil {
		return "" // a Side is strings, numbers and times: it always marshals
	}
	return string(b)
}

func appendSide(row []any, s *chain.Side) []any {
	if s == nil {
		var zero time.Time
		return append(row, false, "", int32(0), "", "", []string{}, map[string][]string{}, "", []string{}, map[string][]string{},
			[]string{}, "", "", "", zero, zero, []string{}, false, "")
	}
	return append(row, true, s.APIServer, s.Code, s.User, s.UID, strs(s.Groups), extra(s.Extra),
		s.ImpersonatedUser, strs(s.ImpersonatedGroups), extra(s.ImpersonatedExtra), strs(s.SourceIPs), s.UserAgent, s.Message, s.Reason,
		s.RequestReceived.UTC(), s.Completed.UTC(), strs(s.Stages), s.HasObjects, s.APIServerVersion)
}

// Chain rows go to the embedded engine as Native blocks (chainblock.go), not as ChainRow's []any
// rows, which box every value and all live until the insert returns (BENCHMARKS.md, "Chains:
// the writer next to the engine's own insert"); chainStream encodes the rows as the engine reads
// them, so a batch costs its chains and a block, whatever its size.
// TestChainNativeBlocksMatchChainRow keeps what the table holds the same as from ChainRow.

// chainStream streams the rows of chains as Native blocks, encoded in block.
func chainStream(block *chainBlock, chains []*chain.Chain) *blockStream {
	return &blockStream{n: len(chains), block: block, add: func(i int) { block.add(chains[i]) }}
}

// insertChains writes the rows of chains (retraction rows included): into the embedded engine
// in one insert, streamed as Native blocks; into another store as ChainRow rows through
// Store.Insert, in chunks that bound the memory of the boxed rows (a retraction row and the row
// that supersedes it stay in one chunk, one insert, as the rollups expect). On an error, any
// part of it may have landed.
func (w *Writer) insertChains(ctx context.Context, chains []*chain.Chain) error {
	if s, ok := w.store.(blockStreamer); ok {
		if w.chainBlock == nil {
			w.chainBlock = newChainBlock()
		}
		w.chainBlock.reset() // a stream that failed may have left rows in it
		return w.insertStream(ctx, s, ChainsTable, ChainColumns, chainStream(w.chainBlock, chains))
	}
	for len(chains) > 0 {
		n := min(len(chains), chainInsertChunk)
		for n < len(chains) && chains[n-1].State == StateRetracted {
			n++ // keep the superseding row with its retraction
		}
		rows := make([][]any, n)
		for i, c := range chains[:n] {
			rows[i] = ChainRow(c)
		}
		if err := w.store.Insert(ctx, ChainsTable, ChainColumns, rows); err != nil {
			return fmt.Errorf("%d of %d rows: %w", n, len(chains), err)
		}
		chains = chains[n:]
	}
	return nil
}

// chainInsertChunk is how many chain rows one Store.Insert takes when they go as []any rows
// (a server store): about 3 KiB each while they wait.
const chainInsertChunk = 10_000

// writtenChains is the chain sink's bounded record of what the chains table holds of the chains
// this writer wrote (or found there): the highest version, by chain id. With the floor it lets
// WriteChains decide without asking the store, which it did for every chain of every batch:
//
//   - a chain in the record with a version at least as high is written already: skipped;
//   - a chain in the record whose version there is lower and not final is written over (the
//     open row was never counted by the rollups);
//   - a chain first received after the floor and not in the record cannot be in the store:
//     written;
//   - anything else (a final row superseded, whose row must be written again as retracted; a
//     chain first received at or before the floor: a replay after a restart, a chain the record
//     dropped, a failed insert that may have landed) is looked up in the store as before.
//
// The record is bounded (maxEntries): the oldest entries go first, and the floor rises to the
// first receipt of each one dropped, so a chain it no longer knows is looked up, never taken for
// new. Its size decides only how often a late revision costs a lookup, not what is written.
//
// Keys are 128-bit hashes of the ids (two seeds), so an entry has the same size whatever the
// id's length; two ids sharing a key is a 2^-128 event per pair. The record holds no pointer
// for the garbage collector to follow: entries sit in a ring in the order they were first
// recorded (the order they are dropped in), found through an open-addressing index of ring
// positions: 32 bytes an entry and 8 of index (at most half full), a fraction of the Go map and
// drop queue it replaced (BENCHMARKS.md, "A fourth session").
type writtenChains struct {
	seeds      [2]maphash.Seed
	maxEntries int
	// ring holds the entries, oldest at head; it grows to maxEntries and then wraps. An entry
	// forgotten (or dropped and recorded again) stays until it comes round, unindexed.
	ring []writtenEntry
	head int
	// index holds 1 + the ring position of each live entry, 0 in an empty slot, at the slot
	// its key's low bits name or the next free one after it (linear probing). Its size is a
	// power of two at least twice the live entries.
	index []int32
	live  int
	// floor is a time at or before which a chain may be in the store without being in the
	// record; zero (before the first read of the table) means every chain may be.
	floor time.Time
	known bool // floor was read from the table since the start or the last failed insert
	// shared says another writer writes the table too (WriterOptions.Deduplicate): any chain
	// this one did not write may be there.
	shared bool
}

type chainKey [2]uint64

type writtenEntry struct {
	key     chainKey
	version uint64
	// first is the first receipt in whole seconds since 1970, rounded up: a floor raised to it
	// covers the chain (a few more chains are looked up), and the entry stays 32 bytes.
	first   uint32
	records uint32 // the records the row of version joined
}

// minIndex is the index's size while the record is small.
const minIndex = 1 << 10

func newWrittenChains(maxEntries int) *writtenChains {
	return &writtenChains{
		seeds:      [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		maxEntries: maxEntries,
		index:      make([]int32, minIndex),
	}
}

func (r *writtenChains) key(id string) chainKey {
	return chainKey{maphash.String(r.seeds[0], id), maphash.String(r.seeds[1], id)}
}

// find returns the index slot of k and its ring position + 1, or the empty slot where k
// would go and 0.
func (r *writtenChains) find(k chainKey) (slot int, pos int32) {
	mask := len(r.index) - 1
	for i := int(k[0]) & mask; ; i = (i + 1) & mask {
		p := r.index[i]
		if p == 0 || r.ring[p-1].key == k {
			return i, p
		}
	}
}

// unindex empties slot i, moving later entries of its probe run back so that none is cut off
// from its home slot (deletion without tombstones).
func (r *writtenChains) unindex(i int) {
	mask := len(r.index) - 1
	for j := (i + 1) & mask; r.index[j] != 0; j = (j + 1) & mask {
		home := int(r.ring[r.index[j]-1].key[0]) & mask
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			r.index[i] = r.index[j]
			i = j
		}
	}
	r.index[i] = 0
	r.live--
}

// grow doubles the index and places the live entries again.
func (r *writtenChains) grow() {
	old := r.index
	r.index = make([]int32, 2*len(old))
	for _, p := range old {
		if p != 0 {
			slot, _ := r.find(r.ring[p-1].key)
			r.index[slot] = p
		}
	}
}

// version returns the version the record holds of the chain with key k and how many records
// that row joined.
func (r *writtenChains) version(k chainKey) (v uint64, records int, ok bool) {
	if _, p := r.find(k); p != 0 {
		e := &r.ring[p-1]
		return e.version, int(e.records), true
	}
	return 0, 0, false
}

// mayBeStored reports whether a chain first received at first may be in the store without
// being in the record. The floor was read from the table: a chain first received in its
// microsecond is not newer.
func (r *writtenChains) mayBeStored(first time.Time) bool {
	return r.shared || !r.known || !asStored(first).After(r.floor)
}

// put records that the store holds version v of the chain with key k, a row that joined
// records records, first received at first.
func (r *writtenChains) put(k chainKey, v uint64, records int, first time.Time) {
	n := uint32(min(max(records, 0), math.MaxUint32))
	if _, p := r.find(k); p != 0 {
		e := &r.ring[p-1]
		if v > e.version {
			e.version, e.records = v, n
		}
		return
	}
	if r.maxEntries <= 0 {
		r.raiseFloor(first)
		return
	}
	sec := first.Unix()
	if first.Nanosecond() > 0 {
		sec++
	}
	e := writtenEntry{key: k, version: v, first: uint32(min(max(sec, 0), math.MaxUint32)), records: n}
	var pos int
	if len(r.ring) < r.maxEntries {
		if len(r.ring) == cap(r.ring) { // double up to the bound, not past it as append would
			ring := make([]writtenEntry, len(r.ring), min(max(2*len(r.ring), minIndex), r.maxEntries))
			copy(ring, r.ring)
			r.ring = ring
		}
		r.ring = append(r.ring, e)
		pos = len(r.ring) - 1
	} else {
		pos = r.head
		old := r.ring[pos]
		if slot, p := r.find(old.key); p == int32(pos+1) {
			r.unindex(slot)
		}
		r.raiseFloor(time.Unix(int64(old.first), 0))
		r.ring[pos] = e
		r.head = (r.head + 1) % len(r.ring)
	}
	if 2*(r.live+1) > len(r.index) {
		r.grow()
	}
	slot, _ := r.find(k)
	r.index[slot] = int32(pos + 1)
	r.live++
}

// forget drops the chain with key k: what the store holds of it is unknown (an insert of it
// failed and may have landed). Its place in the ring stays until it comes round; the floor
// must cover it, which the caller sees to (raiseFloor after reading the table again).
func (r *writtenChains) forget(k chainKey) {
	if slot, p := r.find(k); p != 0 {
		r.unindex(slot)
	}
}

func (r *writtenChains) raiseFloor(t time.Time) {
	if t.After(r.floor) {
		r.floor = t
	}
}

// setFloor is the newest first receipt the table holds, read at the start or after a failed
// insert: nothing first received after it can be stored but what the record holds.
func (r *writtenChains) setFloor(newest time.Time) {
	r.raiseFloor(newest)
	r.known = true
}

// unsure says that the store may hold rows the record does not know (a failed insert may
// have landed): the floor is read again before the next decision.
func (r *writtenChains) unsure() { r.known = false }

// entries is how many chains the record holds.
func (r *writtenChains) entries() int { return r.live }

// bytes is the record's memory: the ring and the index.
func (r *writtenChains) bytes() int {
	return cap(r.ring)*int(unsafe.Sizeof(writtenEntry{})) + len(r.index)*4
}

// chainMetrics say how big the record is and how often the store is still asked. They are set
// after each batch, not read from the record at scrape time: a scrape must not wait for the
// chain sink's lock while a batch is written.
type chainMetrics struct {
	remembered, rememberedBytes prometheus.Gauge
	lookedUp                    prometheus.Counter
}

func newChainMetrics() *chainMetrics {
	return &chainMetrics{
		remembered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.StoreChainsRemembered,
			Help: "Chains whose stored version the chain sink remembers, so that it need not ask the store (bounded).",
		}),
		rememberedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metrics.StoreChainsRememberedBytes,
			Help: "Estimated bytes of the chain sink's record of the chains it wrote.",
		}),
		lookedUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metrics.StoreChainsLookedUpTotal,
			Help: "Chains whose stored version the chain sink read from the store before writing them (a replay after a restart, a late revision of a final chain, a chain it no longer remembers).",
		}),
	}
}

func (m *chainMetrics) observe(r *writtenChains) {
	m.remembered.Set(float64(r.entries()))
	m.rememberedBytes.Set(float64(r.bytes()))
}

func (m *chainMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.remembered, m.rememberedBytes, m.lookedUp}
}
