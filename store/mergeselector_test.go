package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
)

// mergeSelectorSettings are migration 0014's: what makes the engine wait for ten parts of a
// size before it merges them.
const mergeSelectorSettings = "merge_selector_base, merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once"

// The tables that take every event and every chain carry migration 0014's merge settings, and
// the engine acts on them: eight small parts are left alone with them and merged without.
func TestMergeSelectorWaitsForMoreParts(t *testing.T) {
	s := engine(t)
	for _, table := range []string{"events", "chains", "audit_ids", "report_chains"} {
		e := scalar(t, s, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
			map[string]string{"db": store.Database, "t": table})
		for _, want := range []string{"merge_selector_base = 10", "merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0"} {
			if !strings.Contains(e, want) {
				t.Errorf("%s: want %q in its settings; engine: %s", table, want, e)
			}
		}
	}

	// The engine's defaults merge five parts of a size: once the copy with them has, the copy
	// with 0014's settings must still have all eight.
	parts, rows := heldWhileMerged(t, s, "events_selector_set", "events_selector_default",
		[]string{"ALTER TABLE {merged} RESET SETTING " + mergeSelectorSettings}, nil)
	if parts != "8" || rows != "8" {
		t.Errorf("events_selector_set: %s active parts and %s rows after the copy with the default settings merged, want all 8 (ten parts of a size before a merge)", parts, rows)
	}
}

// heldWhileMerged makes two copies of events, held and merged, runs before's statements
// ({held} and {merged} name the copies), inserts eight one-row parts into each with merges
// stopped, runs after's statements, starts merges and waits until merged has merged some: it
// returns held's active parts and rows then. The copies are dropped when the test ends.
func heldWhileMerged(t *testing.T, s *store.Embedded, held, merged string, before []string, after func() []string) (parts, rows string) {
	t.Helper()
	ctx := context.Background()
	name := strings.NewReplacer("{held}", store.Database+"."+held, "{merged}", store.Database+"."+merged)
	exec := func(qs []string) {
		for _, q := range qs {
			if err := s.Exec(ctx, name.Replace(q)); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	t.Cleanup(func() {
		for _, x := range []string{held, merged} {
			_ = s.Exec(context.Background(), "DROP TABLE IF EXISTS "+store.Database+"."+x+" SYNC")
		}
	})
	exec([]string{
		"CREATE TABLE {held} AS " + store.Database + ".events",
		"CREATE TABLE {merged} AS " + store.Database + ".events",
		"SYSTEM STOP MERGES {held}",
		"SYSTEM STOP MERGES {merged}",
	})
	exec(before)
	eight, err := simulatedEventRows(8)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []string{held, merged} {
		for i := range 8 {
			if err := s.Insert(ctx, store.Database+"."+x, store.EventColumns, eight[i:i+1]); err != nil {
				t.Fatalf("insert %d into %s: %v", i, x, err)
			}
		}
	}
	if after != nil {
		exec(after())
	}
	exec([]string{"SYSTEM START MERGES {held}", "SYSTEM START MERGES {merged}"})
	active := func(x string) string {
		return scalar(t, s, "SELECT count() FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active",
			map[string]string{"db": store.Database, "t": x})
	}
	deadline := time.Now().Add(60 * time.Second)
	for active(merged) == "8" {
		if time.Now().After(deadline) {
			t.Fatalf("%s: eight parts after a minute; the comparison says nothing", merged)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return active(held), scalar(t, s, "SELECT count() FROM "+store.Database+"."+held, nil)
}

// Migration 0015: an insert of events or chains below the table's threshold is written as a
// compact part, and a merge of such parts past it as a wide one (merged a column at a time),
// where 0013's 256 MiB made the same merge a compact part (every column at once).
func TestMergesPastAnInsertWriteWideParts(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Minute)
	tables := []struct {
		name      string
		threshold int64 // migration 0015's min_bytes_for_wide_part
		columns   []store.Column
		rows      func(n int) ([][]any, error)
	}{
		{"events", 128 << 20, store.EventColumns, simulatedEventRows},
		{"chains", 64 << 20, store.ChainColumns, func(n int) ([][]any, error) { return finalChainRows("wide", at, n), nil }},
	}
	for _, tb := range tables {
		e := scalar(t, s, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
			map[string]string{"db": store.Database, "t": tb.name})
		if want := fmt.Sprintf("min_bytes_for_wide_part = %d", tb.threshold); !strings.Contains(e, want) {
			t.Errorf("%s: want %q in its settings; engine: %s", tb.name, want, e)
		}
		// Copies with the table's settings and with 0013's; merges only when asked.
		now, before := tb.name+"_wide_now", tb.name+"_wide_0013"
		for _, q := range []string{
			"CREATE TABLE " + store.Database + "." + now + " AS " + store.Database + "." + tb.name,
			"CREATE TABLE " + store.Database + "." + before + " AS " + store.Database + "." + tb.name,
			"ALTER TABLE " + store.Database + "." + before + " MODIFY SETTING min_bytes_for_wide_part = 268435456",
			"SYSTEM STOP MERGES " + store.Database + "." + now,
			"SYSTEM STOP MERGES " + store.Database + "." + before,
		} {
			if err := s.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() {
			for _, x := range []string{now, before} {
				_ = s.Exec(context.Background(), "DROP TABLE IF EXISTS "+store.Database+"."+x+" SYNC")
			}
		})
		parts := func(x string) [][]string {
			return query(t, s, "SELECT part_type, toString(data_uncompressed_bytes) FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active ORDER BY name",
				map[string]string{"db": store.Database, "t": x}).Rows
		}
		// Inserts of about a quarter of the threshold each, five of them: the merge is past it.
		probe, err := tb.rows(1000)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Insert(ctx, store.Database+"."+now, tb.columns, probe); err != nil {
			t.Fatal(err)
		}
		size, err := strconv.ParseInt(parts(now)[0][1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Exec(ctx, "TRUNCATE TABLE "+store.Database+"."+now); err != nil {
			t.Fatal(err)
		}
		// Rows of their own for each insert: copies would fold into one in the merge.
		n := int(int64(1000) * tb.threshold / 4 / size)
		rows, err := tb.rows(5 * n)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []string{now, before} {
			for i := range 5 {
				if err := s.Insert(ctx, store.Database+"."+x, tb.columns, rows[i*n:(i+1)*n]); err != nil {
					t.Fatalf("insert into %s: %v", x, err)
				}
			}
			var sum int64
			for _, p := range parts(x) {
				bytes, _ := strconv.ParseInt(p[1], 10, 64)
				sum += bytes
				if p[0] != "Compact" {
					t.Errorf("%s: an insert of %s bytes was written as a %s part, want Compact (below %d)", x, p[1], p[0], tb.threshold)
				}
			}
			if sum <= tb.threshold {
				t.Fatalf("%s: five inserts hold %d bytes, not past %d: the test says nothing", x, sum, tb.threshold)
			}
			for _, q := range []string{"SYSTEM START MERGES " + store.Database + "." + x, "OPTIMIZE TABLE " + store.Database + "." + x + " FINAL"} {
				if err := s.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			got := parts(x)
			want := map[string]string{now: "Wide", before: "Compact"}[x]
			if len(got) != 1 || got[0][0] != want {
				t.Errorf("%s: merging five parts of %d bytes in all gave %v, want one %s part", x, sum, got, want)
			}
			if c := scalar(t, s, "SELECT count() FROM "+store.Database+"."+x, nil); c != strconv.Itoa(5*n) {
				t.Errorf("%s: %s rows after the merge, want %d", x, c, 5*n)
			}
		}
	}
}

// Migration 0016: background merges of the four tables stop at parts of about 2 GiB, and the
// engine acts on the limit: eight small parts are merged under the engine's defaults and left
// alone when the limit is below two of them.
func TestMergesStopAtTheSizeCap(t *testing.T) {
	s := engine(t)
	for _, table := range []string{"events", "chains", "audit_ids", "report_chains"} {
		e := scalar(t, s, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
			map[string]string{"db": store.Database, "t": table})
		if want := "max_bytes_to_merge_at_max_space_in_pool = 2147483648"; !strings.Contains(e, want) {
			t.Errorf("%s: want %q in its settings; engine: %s", table, want, e)
		}
	}

	// Both copies merge five parts of a size (the engine's default), so that one merges soon;
	// the other gets a limit of one and a half of its smallest part: no two fit in a merge.
	parts, rows := heldWhileMerged(t, s, "events_cap_small", "events_cap_default",
		[]string{
			"ALTER TABLE {held} RESET SETTING " + mergeSelectorSettings,
			"ALTER TABLE {merged} RESET SETTING " + mergeSelectorSettings + ", max_bytes_to_merge_at_max_space_in_pool",
		},
		func() []string {
			smallest, err := strconv.ParseInt(scalar(t, s, "SELECT min(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND table = 'events_cap_small' AND active",
				map[string]string{"db": store.Database}), 10, 64)
			if err != nil || smallest <= 0 {
				t.Fatalf("smallest part of events_cap_small: %d bytes, %v", smallest, err)
			}
			return []string{fmt.Sprintf("ALTER TABLE {held} MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = %d", smallest*3/2)}
		})
	if parts != "8" || rows != "8" {
		t.Errorf("events_cap_small: %s active parts and %s rows after the copy without the limit merged, want all 8 (no two fit under its limit)", parts, rows)
	}
}
