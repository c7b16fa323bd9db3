package correlate

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestMemoryDoesNotGrowWithWhatWasSeen: once chains leave memory (past the late window),
// nothing of them stays: the slots are reused and the tables hold no value for them. A long
// stream holds at most what one late window of it needs.
func TestMemoryDoesNotGrowWithWhatWasSeen(t *testing.T) {
	opts := DefaultJoinOptions()
	opts.Window, opts.LateWindow = 10*time.Second, 30*time.Second
	co := New(Config{Join: opts, Caps: NewCapabilities(15 * time.Minute)})
	ctx := context.Background()
	templates := benchRecords(t, 1000) // 0.3 s of stream
	span := templates[len(templates)-1].ReceivedAt.Sub(t0) + time.Millisecond
	slots := 0
	for p := range 300 { // 90 s of stream, a new object and auditID for every request
		shift := time.Duration(p) * span
		for i := range templates {
			r := decoded(&templates[i])
			r.AuditID = fmt.Sprintf("req-%d-%d", p, i-i%2) // not a UUID: the table keeps it
			r.Name = fmt.Sprintf("web-%d-%d", p, i-i%2)
			r.RequestURI = fmt.Sprintf("/api/v1/namespaces/default/pods/%s/status", r.Name) // name not last
			r.UserAgent = fmt.Sprintf("agent/%d", p)
			r.RequestReceivedTimestamp = r.RequestReceivedTimestamp.Add(shift)
			r.StageTimestamp = r.StageTimestamp.Add(shift)
			r.ReceivedAt = r.ReceivedAt.Add(shift)
			if _, ev := co.j.Add(&r, 0); ev != nil {
				co.finishLocked(ctx, ev)
			}
		}
		for _, c := range co.j.Due(0) {
			co.finishLocked(ctx, c)
		}
		if p == 150 { // past the chain and the late window
			slots = len(co.j.slab.pages)
		}
	}
	if got := len(co.j.slab.pages); got != slots {
		t.Errorf("the chains grew from %d to %d pages after the late window: memory grows with what was seen", slots, got)
	}
	m := co.j.memory()
	held := co.j.Open() + co.j.nDone
	if m.chains != held {
		t.Errorf("%d slots in use for %d chains", m.chains, held)
	}
	for _, tb := range m.tables {
		// Per chain: its auditID, URI, name and (per pass) user agent; a handful of others.
		if tb.entries > 4*held+16 {
			t.Errorf("table %s holds %d values for %d chains", tb.name, tb.entries, held)
		}
	}
	// Everything leaves: the stream goes idle past the late window (chains waiting for
	// evidence stay open once more).
	for range 3 {
		for _, c := range co.j.Due(co.j.now + int64(time.Hour)) {
			co.finishLocked(ctx, c)
		}
	}
	m = co.j.memory()
	if m.chains != 0 || co.j.chains.len() != 0 || len(co.j.more) != 0 {
		t.Errorf("after the late window: %d chains, %d auditIDs, %d loops held", m.chains, co.j.chains.len(), len(co.j.more))
	}
	for _, tb := range m.tables {
		if tb.entries != 0 || tb.bytes != 0 {
			t.Errorf("after the late window, table %s holds %d values, %d bytes", tb.name, tb.entries, tb.bytes)
		}
	}
	if n := co.j.slab.pagesHeld(); n > 1 {
		t.Errorf("after the late window the chains' slab holds %d pages (of %d it had), want the one spare", n, slots)
	}
	if n := len(co.j.strs.vals); n != 1 {
		t.Errorf("after the late window the strings' arrays hold %d entries, want only the zero value", n)
	}
}

// TestTableAgreesWithAModelThroughABurst runs a burst of distinct values through a table, then
// a steady stream whose values each live a while, the burst's leaving in the order it came, as
// chains do; every value held must be read back by its number all along, and once the burst
// has left the arrays and the index must be the stream's size, not the burst's.
func TestTableAgreesWithAModelThroughABurst(t *testing.T) {
	tb := newTable[text]()
	type held struct {
		id sym
		v  string
	}
	var live []held // in the order added
	add := func(v string) {
		id := tb.add(uint64(len(v))*1e9+uint64(len(live))+uint64(v[len(v)-1]), text(v))
		live = append(live, held{id, v})
	}
	check := func(step string) {
		t.Helper()
		if tb.len() != len(live) {
			t.Fatalf("%s: the table holds %d values, the model %d", step, tb.len(), len(live))
		}
		for _, h := range live {
			if got := string(*tb.get(h.id)); got != h.v {
				t.Fatalf("%s: number %d reads %q, want %q", step, h.id, got, h.v)
			}
		}
	}
	for i := range 50_000 {
		add(fmt.Sprintf("burst-%d", i))
	}
	check("after the burst")
	burstCap := cap(tb.vals)
	for i := range 200_000 {
		add(fmt.Sprintf("steady-%d", i))
		// The oldest leave, the burst's first, two for each one added until 1,000 are held.
		for range 2 {
			if len(live) > 1_000 {
				tb.release(live[0].id)
				live = live[1:]
			}
		}
		if i%20_000 == 0 {
			check(fmt.Sprintf("step %d", i))
		}
	}
	check("at the end")
	t.Logf("%d values held: arrays of %d (capacity %d; %d after the burst), index made for %d", len(live), len(tb.vals), cap(tb.vals), burstCap, tb.peakIndex)
	if len(tb.vals) > 4*len(live) || cap(tb.vals) > burstCap/4 {
		t.Errorf("%d values held in arrays of %d (capacity %d; %d after the burst)", len(live), len(tb.vals), cap(tb.vals), burstCap)
	}
	if tb.peakIndex > 4*len(live) {
		t.Errorf("the index was last made for %d entries, %d held", tb.peakIndex, len(tb.index))
	}
}

// TestSlabGivesBackPagesAfterABurst: a burst fills many pages; once most of its chains have
// left, the ones that stay and the new ones are in the low pages, and the rest are given
// back. A (ref, generation) kept from a chain that left never finds another chain, even in a
// page made again where one was given back.
func TestSlabGivesBackPagesAfterABurst(t *testing.T) {
	var s slab
	type kept struct {
		r   ref
		gen uint32
	}
	var burst []*chainState
	for range 20 * pageSize {
		burst = append(burst, s.alloc())
	}
	if s.pagesHeld() != 21 { // page 0 has one slot fewer
		t.Fatalf("%d pages for %d chains", s.pagesHeld(), len(burst))
	}
	var gone []kept
	// Every chain leaves but one in 100 (in every page), in the order they came.
	for i, c := range burst {
		if i%100 == 0 {
			continue
		}
		gone = append(gone, kept{c.self, c.gen})
		s.release(c)
	}
	// A steady stream: each new chain stays a while, then leaves.
	var steady []*chainState
	for i := range 50 * pageSize {
		steady = append(steady, s.alloc())
		if i >= pageSize {
			s.release(steady[i-pageSize])
		}
	}
	for i, c := range burst {
		if i%100 == 0 {
			s.release(c)
		}
	}
	held := s.pagesHeld()
	// pageSize open chains of the stream fit in two pages, with the spare three.
	if held > 3 {
		t.Errorf("%d pages held for %d chains after the burst left", held, s.used)
	}
	if s.used != pageSize {
		t.Fatalf("%d slots used, want %d", s.used, pageSize)
	}
	// Fill again past the burst's size: pages given back are made again.
	for range 25 * pageSize {
		s.alloc()
	}
	for _, k := range gone {
		if c := s.live(k.r, k.gen); c != nil {
			t.Fatalf("slot %d of a chain that left answers for another (generation %d)", k.r, c.gen)
		}
	}
	if s.pagesHeld() < 25 {
		t.Fatalf("%d pages for %d chains", s.pagesHeld(), s.used)
	}
}

// TestChainKeepsTheAuditIDAsWritten: an auditID is given back exactly as the apiserver wrote
// it, whether it is a canonical UUID (kept as 16 bytes), an uppercase one, or no UUID at all;
// a chain of three apiservers keeps every side.
func TestChainKeepsTheAuditIDAsWritten(t *testing.T) {
	h := newHarness(t, DefaultJoinOptions())
	ids := []string{"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D", "client-chosen id", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4"}
	for _, id := range ids {
		h.feed(pods(id, t0).local("kas-a", 200, ""))
	}
	loop := podgroups("loop", t0)
	h.feed(loop.entry("kas-a", 200), loop.peer("kas-b", addrA, 200), loop.peer("kas-c", addrB, 200))
	for _, id := range ids {
		c, ok := h.co.Chain(id)
		if !ok || c.AuditID != id {
			t.Errorf("chain of %q: %v %+v", id, ok, c)
		}
	}
	h.settle()
	for _, id := range ids {
		if c := h.chain(id); c.AuditID != id || c.ID == "" || c.Name != "web-1" {
			t.Errorf("final chain of %q: audit ID %q, id %q, name %q", id, c.AuditID, c.ID, c.Name)
		}
	}
	c, ok := h.co.Chain("loop")
	if !ok || len(c.Others)+btoi(c.Entry != nil)+btoi(c.Peer != nil) != 3 {
		t.Fatalf("a chain of three apiservers: %+v", c)
	}
	if got := h.chain("loop"); got.Class != c.Class || got.ID != c.ID {
		t.Errorf("memory and sink disagree: %s %s vs %s %s", c.Class, c.ID, got.Class, got.ID)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAuditKeyOnlyTakesCanonicalUUIDs: formatting the key gives the very string back.
func TestAuditKeyOnlyTakesCanonicalUUIDs(t *testing.T) {
	for id, uuid := range map[string]bool{
		"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d":  true,
		"0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D":  false,
		"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4dx": false,
		"0a1b2c3d04e5f-4a6b-8c7d-9e0f1a2b3c4d":  false,
		"":                                      false,
	} {
		key, got := auditKey(id)
		if got != uuid {
			t.Errorf("%q: uuid %v", id, got)
		}
		if got && formatUUID(&key) != id {
			t.Errorf("%q formats back as %q", id, formatUUID(&key))
		}
	}
}

// TestChainStateHasNoPointers: the pages of chains are the bulk of the correlator's memory; a
// pointer in a chain would make the garbage collector scan all of them in every cycle.
func TestChainStateHasNoPointers(t *testing.T) {
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				walk(path+"."+ty.Field(i).Name, ty.Field(i).Type)
			}
		case reflect.Array:
			walk(path+"[]", ty.Elem())
		case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		default:
			t.Errorf("%s is a %s: chains must hold no pointer", path, ty.Kind())
		}
	}
	walk("chainState", reflect.TypeFor[chainState]())
	t.Logf("a chain's slot: %d bytes", chainStateSize)
}
