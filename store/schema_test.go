package store_test

import (
	"context"
	"testing"

	"github.com/peertrail/peertrail/store"
)

func TestMigrateIsIdempotent(t *testing.T) {
	s := engine(t)
	if err := store.Migrate(context.Background(), s, store.SchemaOptions{}, nil); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	ms, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	got := scalar(t, s, "SELECT count() FROM peertrail.schema_migrations FINAL", nil)
	if want := len(ms); got != itoa(want) {
		t.Fatalf("schema_migrations has %s rows, want %d", got, want)
	}
}
