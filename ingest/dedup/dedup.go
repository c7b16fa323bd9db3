// Package dedup remembers which audit events peertrail has already accepted, so that a batch
// the apiserver resends (after a timeout, a 5xx, or a crash of peertrail before its answer
// arrived) is recognised and counted instead of stored twice.
//
// Keys are kept by the minute of receipt and forgotten once older than the horizon: the last
// few seconds' in a map, the rest of each minute as a sorted run, whose bulk the index Load
// builds keeps in an unlinked file beside the key files once the minute is over (see Index).
// The index survives restarts without a log of its own: the Persister, a spool consumer,
// appends each minute's keys to a part file as they come, makes it a key file once the minute
// is over, and only then lets the spool move on, so on start Load reads the key files and
// rescans the spool frames that came after them.
package dedup

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
)

const bucketWidth = time.Minute

// Index is the set of remembered keys. It is safe for concurrent use.
//
// Keys are added to a map. Every few seconds (Expire) Seal turns the maps into runs: a
// directory by the keys' leading bits and, sorted under it, the 8 bytes of each key that the
// directory does not say, about 9 bytes a key against about 31 in a map (a map doubles as it
// grows and keeps a control byte a slot). A minute holds 600,000 keys at 10,000 events/s and
// the horizon keeps ten of them, so this is most of the index's memory. A minute has one run,
// which each Seal merges what came since into; sorting and merging take milliseconds to tens of
// them, which Seal spends outside the lock that the receiver's Filter takes, while the maps,
// now read-only, still answer lookups.
//
// An index Load built spills each large run's 8 bytes a key to a file in its directory and
// keeps their first 2 in memory: about 3 bytes a key with the directory, for one read of the
// file (from the page cache: it was written minutes before) in the one lookup of a run in
// about 8,000 whose first 2 bytes match, and in every real duplicate.
type Index struct {
	horizon time.Duration

	mu   sync.RWMutex
	open map[int64]map[record.Key]struct{} // minutes still written, by Unix minute of receipt
	// openStamps are the stamps of the keys in open, by minute (see Filter).
	openStamps map[int64]stamps
	// sealing holds the minutes Seal is sorting: read-only maps, still consulted.
	sealing []minuteMap
	runs    []run
	// forgotten holds the keys Forget removed from a sealed minute (a run or a map being
	// sorted, which are not modified), with that minute, until it expires. A forgotten key
	// added again is taken out.
	forgotten map[record.Key]int64

	// dir is where runs spill their low bytes; "" keeps them in memory.
	dir string
	log *slog.Logger
	// fileErrors counts failed writes and reads of spilled runs (see FileErrors).
	fileErrors atomic.Int64
}

type minuteMap struct {
	minute int64
	keys   map[record.Key]struct{}
	stamps stamps
}

// stamps is the smallest and the largest stamp of a minute's keys (see Filter): a key whose
// stamp lies outside cannot be one of them. Keys added without a stamp make it everything.
type stamps struct{ lo, hi int64 }

var (
	noStamps  = stamps{lo: math.MaxInt64, hi: math.MinInt64}
	anyStamps = stamps{lo: math.MinInt64, hi: math.MaxInt64}
)

func (s stamps) overlaps(o stamps) bool { return s.lo <= o.hi && o.lo <= s.hi }
func (s stamps) with(o stamps) stamps   { return stamps{lo: min(s.lo, o.lo), hi: max(s.hi, o.hi)} }

// stampOf is the stamps of keys[i] as Filter's ts gives it.
func stampOf(ts []int64, i int) stamps {
	if ts == nil {
		return anyStamps
	}
	return stamps{lo: ts[i], hi: ts[i]}
}

// NewIndex returns an empty index that remembers keys for at least horizon, all in memory.
func NewIndex(horizon time.Duration) *Index {
	return &Index{horizon: horizon, open: make(map[int64]map[record.Key]struct{}), openStamps: make(map[int64]stamps)}
}

// newSpillingIndex is NewIndex whose large runs spill to files in dir (see Index).
func newSpillingIndex(horizon time.Duration, dir string, log *slog.Logger) *Index {
	ix := NewIndex(horizon)
	ix.dir, ix.log = dir, log
	return ix
}

// FileErrors counts the spilled runs' failed writes (the run stays in memory) and reads (the
// key is taken as new: an event may then be stored twice, which the events table folds, but
// is never dropped).
func (ix *Index) FileErrors() int64 { return ix.fileErrors.Load() }

// Horizon is how long keys are remembered at least.
func (ix *Index) Horizon() time.Duration { return ix.horizon }

func minuteOf(t time.Time) int64 { return t.Unix() / int64(bucketWidth/time.Second) }

// oldestKept is the oldest minute still within horizon at now (a minute is kept whole).
func oldestKept(now time.Time, horizon time.Duration) int64 {
	return minuteOf(now.Add(-horizon)) - 1
}

// Contains reports whether k was added and not yet forgotten.
func (ix *Index) Contains(k record.Key) bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.containsLocked(k, anyStamps)
}

// containsLocked reports whether k, whose stamp is in ks, is remembered.
func (ix *Index) containsLocked(k record.Key, ks stamps) bool {
	for _, b := range ix.open {
		if _, ok := b[k]; ok {
			return true
		}
	}
	_, sealed := ix.sealedMinuteLocked(k, ks)
	return sealed && !ix.forgottenLocked(k)
}

func (ix *Index) forgottenLocked(k record.Key) bool {
	if len(ix.forgotten) == 0 {
		return false
	}
	_, ok := ix.forgotten[k]
	return ok
}

// addLocked remembers k, whose stamp is in ks, in b, a minute's map, unless it is remembered
// already, and reports whether it was new.
func (ix *Index) addLocked(b map[record.Key]struct{}, k record.Key, ks stamps) bool {
	if ix.containsLocked(k, ks) {
		return false
	}
	b[k] = struct{}{}
	if len(ix.forgotten) > 0 {
		delete(ix.forgotten, k)
	}
	return true
}

func (ix *Index) openLocked(m int64, hint int) map[record.Key]struct{} {
	b := ix.open[m]
	if b == nil {
		b = make(map[record.Key]struct{}, hint)
		ix.open[m] = b
		ix.openStamps[m] = noStamps
	}
	return b
}

// Add remembers keys as received at t, with no stamps (Filter): their minute is looked in for
// every key.
func (ix *Index) Add(t time.Time, keys ...record.Key) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	m := minuteOf(t)
	b := ix.openLocked(m, len(keys))
	ix.openStamps[m] = anyStamps
	for _, k := range keys {
		ix.addLocked(b, k, anyStamps)
	}
}

// addSealed remembers keys, all distinct and none remembered yet, as a sealed minute. Load
// reads each finished minute's key file this way, without building a map first, and merges a
// minute read from two files into one run.
func (ix *Index) addSealed(minute int64, keys []record.Key) {
	ix.mu.Lock()
	var prev []*run
	if i := ix.runOfLocked(minute); i >= 0 {
		p := ix.runs[i]
		prev = []*run{&p}
	}
	ix.mu.Unlock()
	r, merged := ix.build(minute, keys, anyStamps, prev, true, 0)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.installLocked(r, merged)
}

// installLocked adds r to the runs; in place of the minute's run when r holds its keys too.
func (ix *Index) installLocked(r run, merged bool) {
	if i := ix.runOfLocked(r.minute); i >= 0 && merged {
		ix.runs[i] = r
		return
	}
	ix.runs = append(ix.runs, r)
}

// build is the run of minute's keys (their stamps in ks) and of prev (the minute's run, if it
// has one), sized for at least expect keys; spilled when the minute is final and the index has
// a directory, else left partial, to be merged into and spilled later. merged is false when
// prev could not be read back from its file: the run then holds keys alone, to be kept beside
// prev.
func (ix *Index) build(minute int64, keys []record.Key, ks stamps, prev []*run, final bool, expect int) (r run, merged bool) {
	mem := make([]*run, 0, len(prev))
	for _, p := range prev {
		m, err := p.inMemory()
		if err != nil {
			ix.fileError("read back a sealed minute to merge into it (its keys stay apart)", minute, err)
			mem = nil
			break
		}
		mem = append(mem, &m)
	}
	if len(keys) == 0 && len(mem) == 1 {
		r = *mem[0] // only to be spilled: its slices are shared, never written
	} else {
		r = newRun(minute, keys, expect, mem...)
	}
	r.partial = !final
	r.stamps = ks
	if merged = len(mem) == len(prev); merged {
		for _, p := range prev {
			r.stamps = r.stamps.with(p.stamps)
		}
	}
	if final {
		ix.spill(&r)
	}
	return r, merged
}

func (ix *Index) fileError(what string, minute int64, err error) {
	ix.fileErrors.Add(1)
	if ix.log != nil {
		ix.log.Warn("dedup: "+what, "minute", time.Unix(minute*60, 0).UTC(), "err", err)
	}
}

// Filter returns, for each key, whether it is a duplicate: remembered already, or equal to an
// earlier key of the same slice. It adds the new keys as received at t. Checking and adding
// under one lock makes concurrent batches carrying the same event agree on which one is first.
//
// ts, unless nil, holds a stamp of each key: a number that the event of a key always gives, and
// that events received close in time give close values of (the receiver's is the Unix second
// of the event's stageTimestamp, part of its key). Each minute keeps the smallest and largest
// stamp of its keys, and a key is looked for only in the minutes whose stamps surround its own:
// a fresh event in the current minute's alone, rather than in every sealed minute of the
// horizon, which was a lookup of about a microsecond a key under the receiver's lock. Stamps
// only choose where to look, so a wrong one (an apiserver's clock, a crafted timestamp) widens
// its minute's stamps and costs lookups, never a duplicate let through: the same key comes with
// the same stamp.
func (ix *Index) Filter(t time.Time, keys []record.Key, ts []int64) (dup []bool, dups int) {
	if ts != nil && len(ts) != len(keys) {
		panic(fmt.Sprintf("dedup: %d stamps for %d keys", len(ts), len(keys)))
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	dup = make([]bool, len(keys))
	m := minuteOf(t)
	b := ix.openLocked(m, len(keys))
	st := ix.openStamps[m]
	for i, k := range keys {
		ks := stampOf(ts, i)
		st = st.with(ks)
		if !ix.addLocked(b, k, ks) {
			dup[i] = true
			dups++
		}
	}
	ix.openStamps[m] = st
	return dup, dups
}

// Forget removes keys added by a Filter whose batch could not be stored after all, so that a
// resend of it is accepted.
func (ix *Index) Forget(keys []record.Key, dup []bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i, k := range keys {
		if dup != nil && dup[i] {
			continue
		}
		if ix.deleteOpenLocked(k) {
			continue
		}
		// Seal sealed the Filter's minute in between: its keys are in a structure that is not
		// modified, so the key is marked instead.
		if m, ok := ix.sealedMinuteLocked(k, anyStamps); ok && !ix.forgottenLocked(k) {
			if ix.forgotten == nil {
				ix.forgotten = make(map[record.Key]int64)
			}
			ix.forgotten[k] = m
		}
	}
}

func (ix *Index) deleteOpenLocked(k record.Key) bool {
	for _, b := range ix.open {
		if _, ok := b[k]; ok {
			delete(b, k)
			return true
		}
	}
	return false
}

// runOfLocked is the index in runs of minute's run, or -1.
func (ix *Index) runOfLocked(minute int64) int {
	return slices.IndexFunc(ix.runs, func(r run) bool { return r.minute == minute })
}

// sealedMinuteLocked is the minute of the sealed or sealing structure that holds k, whose
// stamp is in ks.
func (ix *Index) sealedMinuteLocked(k record.Key, ks stamps) (int64, bool) {
	for _, s := range ix.sealing {
		if _, ok := s.keys[k]; ok {
			return s.minute, true
		}
	}
	for i := range ix.runs {
		if !ix.runs[i].stamps.overlaps(ks) {
			continue
		}
		found, err := ix.runs[i].contains(k)
		if err != nil {
			// Reading a spilled run's file failed: rather than drop an event the index cannot
			// show it has seen, take it as new. Counted (FileErrors, a metric), not logged: a
			// failing disk would log a line a lookup.
			ix.fileErrors.Add(1)
		}
		if found {
			return ix.runs[i].minute, true
		}
	}
	return 0, false
}

// Expire forgets the minutes that are wholly older than the horizon at now, and seals the
// minutes the clock has left.
func (ix *Index) Expire(now time.Time) {
	ix.mu.Lock()
	oldest := oldestKept(now, ix.horizon)
	for m := range ix.open {
		if m < oldest {
			delete(ix.open, m)
			delete(ix.openStamps, m)
		}
	}
	ix.runs = slices.DeleteFunc(ix.runs, func(r run) bool { return r.minute < oldest })
	for k, m := range ix.forgotten {
		if m < oldest {
			delete(ix.forgotten, k)
		}
	}
	ix.mu.Unlock()
	ix.Seal(now)
}

// Seal turns every minute's map into a run, the current minute's too: a run costs a fraction of
// a map's bytes a key (BENCHMARKS.md, "An eleventh session"). Every call but the first of a
// minute merges what came since into the minute's run, so a minute is one run, kept in memory
// while the clock is in it (it is merged again at the next call) and spilled once it is over. A Seal called while another is sorting returns at once; the next call
// seals what it left. Expire calls it.
func (ix *Index) Seal(now time.Time) {
	current := minuteOf(now)
	ix.mu.Lock()
	if len(ix.sealing) > 0 {
		ix.mu.Unlock()
		return
	}
	for m, b := range ix.open {
		if len(b) > 0 {
			ix.sealing = append(ix.sealing, minuteMap{minute: m, keys: b, stamps: ix.openStamps[m]})
		}
		delete(ix.open, m)
		delete(ix.openStamps, m)
	}
	type job struct {
		minuteMap
		prev  []*run // the minute's run already sealed, if any: runs are never modified
		final bool   // the minute is over
	}
	todo := make([]job, 0, len(ix.sealing)+1)
	for _, s := range ix.sealing {
		j := job{minuteMap: s, final: s.minute < current}
		if i := ix.runOfLocked(s.minute); i >= 0 {
			prev := ix.runs[i]
			j.prev = []*run{&prev}
		}
		todo = append(todo, j)
	}
	// A minute sealed while the clock was in it, and given no key since: it is over now.
	for _, r := range ix.runs {
		if r.partial && r.minute < current && !slices.ContainsFunc(ix.sealing, func(s minuteMap) bool { return s.minute == r.minute }) {
			todo = append(todo, job{minuteMap: minuteMap{minute: r.minute, stamps: noStamps}, prev: []*run{&r}, final: true})
		}
	}
	ix.mu.Unlock()
	if len(todo) == 0 {
		return
	}

	// Outside the lock, the merge with a run of the same minute, and the spill: a run is built
	// from a sorted copy of the map's keys merged with the minute's run, and its file written.
	type result struct {
		r      run
		merged bool
	}
	built := make([]result, 0, len(todo))
	for _, s := range todo {
		keys := make([]record.Key, 0, len(s.keys))
		for k := range s.keys { // read-only now: concurrent readers are fine
			keys = append(keys, k)
		}
		expect := 0
		if !s.final {
			// The minute's first seal sizes its directory for the whole minute, at the rate so
			// far: a merge cannot add directory bits (see newRun).
			elapsed := max(now.Sub(time.Unix(s.minute*60, 0)), time.Second)
			expect = int(float64(len(keys)) * float64(bucketWidth) / float64(elapsed))
		}
		r, merged := ix.build(s.minute, keys, s.stamps, s.prev, s.final, expect)
		built = append(built, result{r, merged})
	}

	oldest := oldestKept(now, ix.horizon)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, b := range built {
		if b.r.minute < oldest {
			continue
		}
		ix.installLocked(b.r, b.merged)
	}
	ix.sealing = nil
}

// Len is the number of remembered keys.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, b := range ix.open {
		n += len(b)
	}
	for _, s := range ix.sealing {
		n += len(s.keys)
	}
	for i := range ix.runs {
		n += ix.runs[i].len()
	}
	return n - len(ix.forgotten)
}

// mapBytesPerKey is what a key costs in a Go map of [16]byte: a 16-byte slot and a control
// byte, at a load between 7/16 and 7/8 (TestBytesPerKey measures about 31).
const mapBytesPerKey = 31

// Bytes is an estimate of the memory the index holds: exact for sealed minutes, an average for
// the maps. A spilled run's file is not memory, and not counted.
func (ix *Index) Bytes() int64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var n int64
	for _, b := range ix.open {
		n += int64(len(b)) * mapBytesPerKey
	}
	for _, s := range ix.sealing {
		n += int64(len(s.keys)) * mapBytesPerKey
	}
	for i := range ix.runs {
		n += ix.runs[i].bytes()
	}
	return n + int64(len(ix.forgotten))*mapBytesPerKey
}

// run is one sealed minute's keys with a directory by their leading bits: dir[p] is the index
// of the first key whose leading bits (the top bits of bytes 0-7) are p or more, and each
// key keeps only what the directory does not say: bytes 8-15, sorted within its slot. Keys are
// xxh3 hashes, so each directory slot covers a handful; within a slot the search is binary, so
// keys crafted to share their leading bits cost a logarithm, not a scan.
//
// A run so tells keys apart by bits+64 of their 128 bits: a new event is taken for a duplicate
// if its key shares them with one of the run's n keys, with probability n/2^(bits+64). The
// directory has a slot per keysPerSlot keys (2^bits >= n/keysPerSlot), so that is at most
// keysPerSlot/2^64, under 10^-18, per run and event whatever the rate: with the eleven runs of
// the default ten-minute horizon, one event in 10^17 (at 10,000 events/s, one in 300,000
// years). A minute merged from runs with smaller directories (read back from two key files)
// keeps the smallest one's bits, never fewer than minRunBits: n/2^74 at worst. The run costs
// 8 bytes a key and its directory about half a byte; keeping 96 bits whatever the directory
// said cost 12.5.
//
// A spilled run keeps those 8 bytes in a file and their first 2 (tags) in memory: a key whose
// slot and tag match is compared with the file's 8 bytes, so it tells keys apart as a run in
// memory does. A key's slot holds about keysPerSlot keys, so a new key's tag matches one in a
// run with probability about 8/2^16: with the eleven runs of the horizon, one event in 750
// reads from a file, some 13 reads a second at 10,000 events/s, each 8 bytes from a page the
// kernel holds (the file was written a few minutes before and is read again every few seconds).
type run struct {
	minute int64
	stamps stamps   // of its keys (see Filter)
	lo     []uint64 // bytes 8-15 of each key, big-endian, sorted within each directory slot
	dir    []uint32
	bits   uint // the directory's: 2^bits slots

	// A spilled run: lo is in f, little-endian, and tags holds the top 16 bits of each.
	tags []uint16
	f    *os.File
	// partial: the run was sealed while the clock was in its minute; Seal spills it once the
	// minute is over.
	partial bool
}

// slotOf is the directory slot of a key whose bytes 0-7 are hi, in a directory of 2^bits.
func slotOf(hi uint64, bits uint) uint64 {
	return hi >> (64 - bits)
}

// shortKey is what a run is built from: a key's slot and bytes 8-15.
type shortKey struct {
	slot uint64
	lo   uint64
}

func compareShort(a, b shortKey) int {
	if c := cmp.Compare(a.slot, b.slot); c != 0 {
		return c
	}
	return cmp.Compare(a.lo, b.lo)
}

// keysPerSlot is the directory's density: about half a byte a key.
const keysPerSlot = 8

// minRunBits is the smallest directory, 4 KiB: a run of a few keys keeps 74 of their bits, so
// that merging it into a large run of the same minute costs little of the large one's.
const minRunBits = 10

// newRun is the run of minute's keys and of the runs prev (of the same minute) together, with
// a directory for at least expect keys. With prev its directory has the bits of the smallest
// one's: theirs are all that is left of their keys' leading bits, and fewer would cost the
// others theirs. (So a minute whose first Seal came early and saw a lower rate than the rest
// keeps the smaller directory: more keys a slot, a longer search and more reads of its file.)
//
// Only keys are sorted: a run in prev whose directory has the new run's bits is in the new
// run's order already, and is merged in one pass. That is the common case, the current
// minute's run taking what came since the last Seal, so sealing a minute ten times costs
// about what sealing it once did.
func newRun(minute int64, keys []record.Key, expect int, prev ...*run) run {
	b := uint(minRunBits)
	if len(prev) > 0 {
		b = prev[0].bits
		for _, p := range prev[1:] {
			b = min(b, p.bits)
		}
	} else if n := max(len(keys), expect) / keysPerSlot; n > 1 {
		b = max(b, uint(bits.Len(uint(n-1))))
	}
	var inOrder *run
	all := make([]shortKey, 0, len(keys)) // sorted here, then merged: a shortKey takes 16 bytes
	for _, k := range keys {
		all = append(all, shortKey{slotOf(binary.BigEndian.Uint64(k[:8]), b), binary.BigEndian.Uint64(k[8:])})
	}
	for _, p := range prev {
		if inOrder == nil && p.bits == b {
			inOrder = p
			continue
		}
		for slot := range uint64(len(p.dir) - 1) {
			for _, lo := range p.lo[p.dir[slot]:p.dir[slot+1]] {
				all = append(all, shortKey{slot >> (p.bits - b), lo})
			}
		}
	}
	slices.SortFunc(all, compareShort)
	all = slices.Compact(all)
	size := len(all)
	if inOrder != nil {
		size += len(inOrder.lo)
	}
	r := run{minute: minute, lo: make([]uint64, 0, size), dir: make([]uint32, 1<<b+1), bits: b}
	next := uint64(0) // the first slot whose dir entry is not set yet
	emit := func(k shortKey) {
		if len(r.lo) > 0 && next == k.slot+1 && r.lo[len(r.lo)-1] == k.lo {
			return // in both
		}
		for ; next <= k.slot; next++ {
			r.dir[next] = uint32(len(r.lo))
		}
		r.lo = append(r.lo, k.lo)
	}
	i := 0
	for slot := range uint64(len(r.dir) - 1) {
		if inOrder == nil {
			break
		}
		for _, lo := range inOrder.lo[inOrder.dir[slot]:inOrder.dir[slot+1]] {
			k := shortKey{slot, lo}
			for ; i < len(all) && compareShort(all[i], k) < 0; i++ {
				emit(all[i])
			}
			emit(k)
		}
	}
	for ; i < len(all); i++ {
		emit(all[i])
	}
	for ; next <= 1<<b; next++ {
		r.dir[next] = uint32(len(r.lo))
	}
	return r
}

// contains reports whether the run holds k. Only a spilled run can fail, reading its file.
func (r *run) contains(k record.Key) (bool, error) {
	p := slotOf(binary.BigEndian.Uint64(k[:8]), r.bits)
	lo := binary.BigEndian.Uint64(k[8:])
	if r.f == nil {
		_, found := slices.BinarySearch(r.lo[r.dir[p]:r.dir[p+1]], lo)
		return found, nil
	}
	tags := r.tags[r.dir[p]:r.dir[p+1]]
	tag := uint16(lo >> 48)
	i, found := slices.BinarySearch(tags, tag)
	if !found {
		return false, nil
	}
	j := i + 1
	for j < len(tags) && tags[j] == tag {
		j++
	}
	var small [8 * 8]byte
	var b []byte
	if n := 8 * (j - i); n <= len(small) {
		b = small[:n]
	} else {
		b = make([]byte, n) // keys crafted to share a tag: one read still
	}
	if _, err := r.f.ReadAt(b, 8*int64(int(r.dir[p])+i)); err != nil {
		return false, fmt.Errorf("dedup: read a sealed minute's file: %w", err)
	}
	for x := 0; x < len(b); x += 8 {
		if binary.LittleEndian.Uint64(b[x:]) == lo {
			return true, nil
		}
	}
	return false, nil
}

// len is the number of keys in the run.
func (r *run) len() int { return len(r.lo) + len(r.tags) }

func (r *run) bytes() int64 {
	return int64(cap(r.lo))*8 + int64(cap(r.tags))*2 + int64(cap(r.dir))*4
}

// spillMinKeys is the smallest run that spills: a minute's stragglers, sealed apart, stay in
// memory, where they cost less than a file.
const spillMinKeys = 4096

// spill moves r's low bytes to a file in the index's directory, keeping their tags. When the
// file cannot be written, r stays in memory whole.
func (ix *Index) spill(r *run) {
	if ix.dir == "" || len(r.lo) < spillMinKeys {
		return
	}
	f, err := writeLows(ix.dir, r.minute, r.lo)
	if err != nil {
		ix.fileError("spill a sealed minute to a file (it stays in memory)", r.minute, err)
		return
	}
	r.tags = make([]uint16, len(r.lo))
	for i, lo := range r.lo {
		r.tags[i] = uint16(lo >> 48)
	}
	r.lo, r.f = nil, f
}

// writeLows writes lo to a new file in dir and returns it open, already unlinked: its data
// lives as long as a run refers to it (the runtime closes an *os.File nobody holds; a run is
// shared by value with a Seal that may be merging it, so nothing closes it earlier), and a
// crash leaves no file to clean up. It needs no fsync: Load rebuilds the runs from the key
// files.
func writeLows(dir string, minute int64, lo []uint64) (*os.File, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("run-%d-*", minute))
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	var b [8]byte
	for _, v := range lo {
		binary.LittleEndian.PutUint64(b[:], v)
		_, _ = w.Write(b[:]) // the error is sticky: Flush returns it
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// inMemory is r with its low bytes in memory, read back from its file if it was spilled.
func (r *run) inMemory() (run, error) {
	if r.f == nil {
		return *r, nil
	}
	b := make([]byte, 8*len(r.tags))
	if _, err := r.f.ReadAt(b, 0); err != nil {
		return run{}, fmt.Errorf("dedup: read a sealed minute's file: %w", err)
	}
	m := run{minute: r.minute, dir: r.dir, bits: r.bits, lo: make([]uint64, len(r.tags))}
	for i := range m.lo {
		m.lo[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return m, nil
}
