package store_test

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

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

// The column lists the writer inserts match the live tables, in order and type.
func TestColumnListsMatchTables(t *testing.T) {
	s := engine(t)
	for table, cols := range map[string][]store.Column{store.EventsTable: store.EventColumns, store.ChainsTable: store.ChainColumns} {
		r := query(t, s, "SELECT name, type FROM system.columns WHERE database = 'peertrail' AND table = {t:String} ORDER BY position",
			map[string]string{"t": strings.TrimPrefix(table, "peertrail.")})
		var live []store.Column
		for _, row := range r.Rows {
			live = append(live, store.Column{Name: row[0], Type: row[1]})
		}
		if !reflect.DeepEqual(live, cols) {
			t.Errorf("%s: the table has\n%v\nthe writer inserts\n%v", table, live, cols)
		}
	}
}

// Every column of every table is documented in COLUMNS.md.
func TestColumnsDocumented(t *testing.T) {
	doc, err := os.ReadFile("COLUMNS.md")
	if err != nil {
		t.Fatal(err)
	}
	r := query(t, engine(t), "SELECT table, name FROM system.columns WHERE database = 'peertrail' AND table NOT LIKE '%_mv' ORDER BY table, position", nil)
	for _, row := range r.Rows {
		if !strings.Contains(string(doc), "| `"+row[1]+"` |") {
			t.Errorf("COLUMNS.md does not document %s.%s", row[0], row[1])
		}
	}
	for _, table := range []string{"events", "audit_ids", "chains", "events_per_minute", "request_latency_per_minute",
		"apiserver_versions_per_minute", "chains_per_minute", "chain_latency_per_minute", "schema_migrations"} {
		if !strings.Contains(string(doc), "## `peertrail."+table+"`") {
			t.Errorf("COLUMNS.md has no section for %s", table)
		}
	}
}

// The cluster DDL: replicated engines, ON CLUSTER everywhere, Distributed tables under the
// single-server names, sharded by auditID; every statement parses (formatQuery parses without
// running; the embedded engine has no cluster to run it on).
func TestClusterDDL(t *testing.T) {
	ddl, err := store.DDL(store.SchemaOptions{Cluster: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS peertrail.events_local ON CLUSTER `audit`",
		"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/peertrail/events', '{replica}')",
		"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/peertrail/chains', '{replica}', version)",
		"CREATE TABLE IF NOT EXISTS peertrail.events ON CLUSTER `audit` AS peertrail.events_local\nENGINE = Distributed('audit', peertrail, events_local, cityHash64(audit_id))",
		"CREATE TABLE IF NOT EXISTS peertrail.chains ON CLUSTER `audit` AS peertrail.chains_local\nENGINE = Distributed('audit', peertrail, chains_local, cityHash64(audit_id))",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS peertrail.events_per_minute_mv_local ON CLUSTER `audit`\nTO peertrail.events_per_minute_local",
		"FROM peertrail.events_local",
		"CREATE DATABASE IF NOT EXISTS peertrail ON CLUSTER `audit`",
	} {
		if !strings.Contains(ddl, want) {
			t.Errorf("cluster DDL lacks %q", want)
		}
	}
	stmts, err := store.SplitStatements(ddl)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stmts {
		if !strings.Contains(st, "ON CLUSTER `audit`") {
			t.Errorf("statement without ON CLUSTER:\n%s", st)
		}
		if _, err := engine(t).Query(context.Background(), "SELECT formatQuery({q:String})", map[string]string{"q": store.EscapeTSV(st)}); err != nil {
			t.Errorf("does not parse: %v\n%s", err, st)
		}
	}
	single, err := store.DDL(store.SchemaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(single, "ON CLUSTER") || strings.Contains(single, "Replicated") || strings.Contains(single, "_local") {
		t.Error("the single-server DDL mentions a cluster")
	}
}

func TestSchemaRetentionAndHistory(t *testing.T) {
	out := runSubprocess(t, "schema", 120*time.Second)
	if !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("helper output:\n%s", out)
	}
}
