package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store"
)

// The table settings of migration 0012, against the same tables with the engine's defaults:
// an insert of two seconds of events at 10,000 events/s fits in a memory cap that the
// defaults exceed (a compact part, not a wide one), and merges of events and chains gather
// their columns one at a time (the vertical algorithm) where the defaults read them all at
// once. A fresh engine in a subprocess: the engine's merge counters are process-wide, and
// other tests' merges would move them.
func TestEngineMemorySettings(t *testing.T) {
	out := runSubprocess(t, "engine-memory", 2*time.Minute)
	if !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("helper output:\n%s", out)
	}
}

// insertMemoryCap is between what one insert of the test's events takes as a compact part
// (measured 60-80 MiB, with chDB 26.7) and as a wide one (200-400 MiB).
const insertMemoryCap = 128 << 20

func engineMemoryHelper(ctx context.Context, fail func(string, ...any) int) int {
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{})
	if err != nil {
		return fail("open: %v", err)
	}
	defer s.Close()
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		return fail("migrate: %v", err)
	}
	events, err := simulatedEventRows(20_000)
	if err != nil {
		return fail("events: %v", err)
	}
	at := time.Now().UTC().Truncate(time.Minute)
	chains := finalChainRows("memory", at, 20_000)
	tables := []struct {
		name    string
		columns []store.Column
		rows    [][]any
		reset   string
	}{
		{"events", store.EventColumns, events, "vertical_merge_algorithm_min_rows_to_activate, vertical_merge_algorithm_min_columns_to_activate, min_bytes_for_wide_part, merge_max_block_size"},
		{"chains", store.ChainColumns, chains, "vertical_merge_algorithm_min_rows_to_activate, vertical_merge_algorithm_min_columns_to_activate, min_bytes_for_wide_part"},
	}
	// Copies of the tables with their settings (CREATE TABLE AS takes them), without the
	// materialized views, next to copies with the engine's defaults; merges only when asked
	// (OPTIMIZE), so that the counters see those alone.
	stmts := []string{}
	for _, tb := range tables {
		set, rows, def := store.Database+"."+tb.name+"_settings", store.Database+"."+tb.name+"_rows", store.Database+"."+tb.name+"_defaults"
		stmts = append(stmts,
			fmt.Sprintf("CREATE TABLE %s AS %s.%s ENGINE = Memory", rows, store.Database, tb.name),
			fmt.Sprintf("CREATE TABLE %s AS %s.%s", set, store.Database, tb.name),
			fmt.Sprintf("CREATE TABLE %s AS %s.%s", def, store.Database, tb.name),
			fmt.Sprintf("ALTER TABLE %s RESET SETTING %s", def, tb.reset))
		for _, x := range []string{set, def} {
			stmts = append(stmts, "ALTER TABLE "+x+" MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1")
		}
	}
	for _, q := range stmts {
		if err := s.Exec(ctx, q); err != nil {
			return fail("%s: %v", q, err)
		}
	}
	for _, tb := range tables {
		if err := s.Insert(ctx, store.Database+"."+tb.name+"_rows", tb.columns, tb.rows); err != nil {
			return fail("stage %s: %v", tb.name, err)
		}
	}

	insert := func(table string, capped bool) error {
		q := "INSERT INTO " + store.Database + "." + table
		if capped {
			q += fmt.Sprintf(" SETTINGS max_memory_usage = %d", insertMemoryCap)
		}
		src, _, _ := strings.Cut(table, "_")
		return s.Exec(ctx, q+" SELECT * FROM "+store.Database+"."+src+"_rows")
	}
	if err := insert("events_settings", true); err != nil {
		return fail("an insert of %d events with the table's settings under a cap of %d MiB: %v", len(events), insertMemoryCap>>20, err)
	}
	if err := insert("events_defaults", true); err == nil || !strings.Contains(err.Error(), "MEMORY_LIMIT_EXCEEDED") {
		return fail("an insert of %d events with the engine's defaults under a cap of %d MiB: %v, want MEMORY_LIMIT_EXCEEDED (the cap tells the two apart no more)", len(events), insertMemoryCap>>20, err)
	}
	for _, x := range []string{"events_defaults", "chains_settings", "chains_defaults"} {
		if err := insert(x, false); err != nil {
			return fail("insert into %s: %v", x, err)
		}
	}
	// The engine merges one column at a time only into a wide part, and these five small
	// inserts may merge below the tables' thresholds for one (migrations 0013 and 0015), into a
	// compact part, all columns at once. The settings under test are for the merges into wide
	// parts, so the copies write wide parts from where they did before 0013 (events from 32 MiB,
	// migration 0012; chains from the engine's 10 MiB).
	for _, tb := range tables {
		q := "ALTER TABLE " + store.Database + "." + tb.name + "_settings MODIFY SETTING min_bytes_for_wide_part = " + map[string]string{"events": "33554432", "chains": "10485760"}[tb.name]
		if err := s.Exec(ctx, q); err != nil {
			return fail("%s: %v", q, err)
		}
	}
	gathered := func() (int, error) {
		return strconv.Atoi(scalarOf(ctx, s, "SELECT sum(value) FROM system.events WHERE event = 'GatheredColumns'"))
	}
	for _, tb := range tables {
		for _, variant := range []string{"_settings", "_defaults"} {
			x := tb.name + variant
			for range 4 { // five parts in all
				if err := insert(x, false); err != nil {
					return fail("insert into %s: %v", x, err)
				}
			}
			before, err := gathered()
			if err != nil {
				return fail("%v", err)
			}
			if err := s.Exec(ctx, "OPTIMIZE TABLE "+store.Database+"."+x+" FINAL"); err != nil {
				return fail("merge %s: %v", x, err)
			}
			after, err := gathered()
			if err != nil {
				return fail("%v", err)
			}
			vertical := after > before
			if want := variant == "_settings"; vertical != want {
				return fail("merging five parts of %s: columns gathered one at a time %v, want %v (GatheredColumns %d -> %d)", x, vertical, want, before, after)
			}
		}
	}
	fmt.Println("ok")
	return 0
}

// simulatedEventRows are about n rows of the events table, from simulate's audit events.
func simulatedEventRows(n int) ([][]any, error) {
	clock := time.Now().UTC().Truncate(time.Hour)
	g := simulate.NewEvents(7, func() time.Time { clock = clock.Add(time.Millisecond); return clock })
	var rows [][]any
	for len(rows) < n {
		recs, err := simulatedRecords(g, "memory-a", clock, 500)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			rows = append(rows, store.EventRow(&recs[i]))
		}
	}
	return rows, nil
}
