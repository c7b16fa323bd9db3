package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/peertrail/peertrail/store"
)

// runHelper runs one helper mode in a subprocess (see runSubprocess) and returns the exit code.
func runHelper(mode string) int {
	ctx := context.Background()
	fail := func(format string, args ...any) int {
		fmt.Printf("FAIL: "+format+"\n", args...)
		return 1
	}
	switch mode {
	case "schema":
		// A fresh in-memory engine: retention changes, and the migration history guarded.
		s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{})
		if err != nil {
			return fail("open: %v", err)
		}
		defer s.Close()
		engineOf := func(table string) string {
			out, err := s.Query(ctx, "SELECT engine_full FROM system.tables WHERE database = 'peertrail' AND name = {t:String}", map[string]string{"t": table})
			if err != nil || len(out.Rows) != 1 {
				return fmt.Sprintf("error %v %v", err, out)
			}
			return out.Rows[0][0]
		}
		if err := store.Migrate(ctx, s, store.SchemaOptions{Retention: 7 * 24 * time.Hour, RollupRetention: 90 * 24 * time.Hour}, nil); err != nil {
			return fail("migrate: %v", err)
		}
		if e := engineOf("events"); !strings.Contains(e, "TTL toDateTime(received_at) + toIntervalDay(7)") {
			return fail("events after migrating with 7 days: %s", e)
		}
		if e := engineOf("chains_per_minute"); !strings.Contains(e, "TTL minute + toIntervalDay(90)") {
			return fail("chains_per_minute after migrating with 90 days: %s", e)
		}
		if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
			return fail("migrate with the default retention: %v", err)
		}
		for table, want := range map[string]string{
			"events": "toIntervalDay(30)", "chains": "toIntervalDay(30)", "audit_ids": "toIntervalDay(30)",
			"events_per_minute": "toIntervalDay(400)", "apiserver_versions_per_minute": "toIntervalDay(400)", "chains_per_minute": "toIntervalDay(400)",
			"request_latency_per_minute": "toIntervalDay(400)", "chain_latency_per_minute": "toIntervalDay(400)",
		} {
			if e := engineOf(table); !strings.Contains(e, want) {
				return fail("%s after changing the retention: %s", table, e)
			}
		}
		// An applied migration edited: refused.
		if err := s.Exec(ctx, "ALTER TABLE peertrail.schema_migrations UPDATE checksum = 'edited' WHERE version = 2 SETTINGS mutations_sync = 1"); err != nil {
			return fail("tamper: %v", err)
		}
		if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); !errors.Is(err, store.ErrSchemaChanged) {
			return fail("migrate after an applied migration changed: %v, want ErrSchemaChanged", err)
		}
		if err := s.Exec(ctx, "ALTER TABLE peertrail.schema_migrations DELETE WHERE version = 2 SETTINGS mutations_sync = 1"); err != nil {
			return fail("untamper: %v", err)
		}
		// A migration gone missing from the record runs again, harmlessly (IF NOT EXISTS).
		if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
			return fail("migrate with migration 2 unrecorded: %v", err)
		}
		// A database from a newer peertrail: refused.
		if err := s.Insert(ctx, "peertrail.schema_migrations", []store.Column{{Name: "version", Type: "UInt32"}, {Name: "name", Type: "String"}},
			[][]any{{uint32(999), "from_the_future"}}); err != nil {
			return fail("insert: %v", err)
		}
		if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); !errors.Is(err, store.ErrSchemaTooNew) {
			return fail("migrate a newer database: %v, want ErrSchemaTooNew", err)
		}
		fmt.Println("ok")
		return 0
	case "real":
		return realCaptureHelper(ctx, fail)
	case "cluster":
		return clusterHelper(ctx, fail)
	case "rollup-upgrade":
		return rollupUpgradeHelper(ctx, fail)
	case "engine-memory":
		return engineMemoryHelper(ctx, fail)
	}
	return fail("unknown helper mode %q", mode)
}
