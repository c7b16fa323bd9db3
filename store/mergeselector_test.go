package store_test

import (
	"context"
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
	ctx := context.Background()
	for _, table := range []string{"events", "chains", "audit_ids", "report_chains"} {
		e := scalar(t, s, "SELECT engine_full FROM system.tables WHERE database = {db:String} AND name = {t:String}",
			map[string]string{"db": store.Database, "t": table})
		for _, want := range []string{"merge_selector_base = 10", "merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0"} {
			if !strings.Contains(e, want) {
				t.Errorf("%s: want %q in its settings; engine: %s", table, want, e)
			}
		}
	}

	rows, err := simulatedEventRows(8)
	if err != nil {
		t.Fatal(err)
	}
	// The copies by name in system.parts, and qualified in statements.
	setName, defName := "events_selector_set", "events_selector_default"
	set, def := store.Database+"."+setName, store.Database+"."+defName
	for _, q := range []string{
		"CREATE TABLE " + set + " AS " + store.Database + ".events",
		"CREATE TABLE " + def + " AS " + store.Database + ".events",
		"ALTER TABLE " + def + " RESET SETTING " + mergeSelectorSettings,
	} {
		if err := s.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, x := range []string{set, def} {
			_ = s.Exec(context.Background(), "DROP TABLE IF EXISTS "+x+" SYNC")
		}
	})
	for _, x := range []string{set, def} {
		for i := range 8 {
			if err := s.Insert(ctx, x, store.EventColumns, rows[i:i+1]); err != nil {
				t.Fatalf("insert %d into %s: %v", i, x, err)
			}
		}
	}
	parts := func(name string) string {
		return scalar(t, s, "SELECT count() FROM system.parts WHERE database = {db:String} AND table = {t:String} AND active",
			map[string]string{"db": store.Database, "t": name})
	}
	// The engine's defaults merge five parts of a size: wait until it has (it picks merges a
	// few times a second), then the table with 0014's settings must still have all eight.
	deadline := time.Now().Add(60 * time.Second)
	for parts(defName) == "8" {
		if time.Now().After(deadline) {
			t.Fatalf("%s: eight parts after a minute with the engine's default merge settings; the comparison says nothing", def)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := parts(setName); got != "8" {
		t.Errorf("%s: %s active parts after %s merged, want all 8 (ten parts of a size before a merge)", set, got, def)
	}
	if got := scalar(t, s, "SELECT count() FROM "+set, nil); got != "8" {
		t.Errorf("%s: %s rows, want 8", set, got)
	}
}
