package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store"
)

// TestEventNativeBlocksMatchEventRow checks that the engine stores the same rows from the
// writer's Native blocks as from EventRow's values through the generic encoder, for every
// event of the real kube-apiserver captures (impersonation, denials, objects, annotations),
// the simulator's, and records with every field set or none, over several blocks.
func TestEventNativeBlocksMatchEventRow(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	paths, _ := filepath.Glob("../test/testdata/real/*/kas-*.json")
	if len(paths) == 0 {
		t.Fatal("no real captures under test/testdata/real")
	}
	synthetic, _, err := simulate.NewEvents(5, nil).EventList(500)
	if err != nil {
		t.Fatal(err)
	}
	bodies := [][]byte{synthetic}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	at := time.Date(2026, 12, 1, 2, 3, 4, 567891000, time.UTC)
	records := []record.Record{{}, {
		APIServer: "kas-a", AuditID: "x", Stage: "ResponseComplete", Level: "RequestResponse", Verb: "impersonate",
		UserName: "alice", UserGroups: []string{"g1", "g2"}, UserExtra: map[string][]string{"b": {"1", "2"}, "a": nil, "c": {}},
		ImpersonatedUser: "bob", ImpersonatedUID: "u", ImpersonatedGroups: []string{"ops"},
		ImpersonatedExtra: map[string][]string{"k": {"v"}}, ImpersonationConstraint: "impersonate:user-info",
		SourceIPs: []string{"10.0.0.1", "10.0.0.2"}, Code: -7, Message: "ünïcødé\ttab\nline\x00nul",
		RequestReceivedTimestamp: at, StageTimestamp: at.Add(time.Millisecond), ReceivedAt: at.In(time.FixedZone("x", 3600)),
		Annotations:      map[string]string{"i": "9", "h": "8", "g": "7", "f": "6", "e": "5", "d": "4", "c": "3", "b": "2", "a": "1"},
		HasRequestObject: true, RequestObjectBytes: 1 << 40, HasResponseObject: true, ResponseObjectBytes: -1,
		Raw: []byte(`{"kind":"Event"}`),
	}}
	for _, body := range bodies {
		recs, _, err := record.Decode(body, "kas-x", at)
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, recs...)
	}
	// A LowCardinality column's keys are as narrow as its block's dictionary allows: more than
	// 256 distinct values in a block take 16-bit keys, more than 65,536 32-bit ones.
	for i := range 600 {
		records = append(records, record.Record{APIServer: "kas-many", AuditID: fmt.Sprint("many-", i),
			UserName: fmt.Sprint("user-", i), UserGroups: []string{fmt.Sprint("g-", i), "system:authenticated"},
			UserExtra: map[string][]string{fmt.Sprint("key-", i%300): {"v"}}})
	}
	wide := make([]string, 70000)
	for i := range wide {
		wide[i] = fmt.Sprint("group-", i)
	}
	records = append(records, record.Record{APIServer: "kas-wide", AuditID: "wide", ImpersonatedGroups: wide})
	for len(records) < 3000 {
		records = append(records, records...)
	}
	rows := make([][]any, len(records))
	for i := range records {
		rows[i] = store.EventRow(&records[i])
	}
	blocks := sameAsRows(t, s, "events", store.EventColumns, rows, func(table string) error {
		data, err := store.EncodeEventsNative(records)
		if err != nil {
			return err
		}
		return s.InsertNative(ctx, table, store.EventColumns, data)
	})
	t.Logf("%d records, %s", len(records), blocks)
	// Every value came through, not only equally on both sides: spot-check the full record.
	res, err := s.Query(ctx, "SELECT user_extra, impersonated_extra, annotations, message, received_at, request_object_bytes, code FROM peertrail.events_blocks WHERE audit_id = 'x' LIMIT 1", nil)
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("the full record: %v %v", res, err)
	}
	got := res.Rows[0]
	for i, want := range []string{`{'a':[],'b':['1','2'],'c':[]}`, `{'k':['v']}`, `{'a':'1','b':'2','c':'3','d':'4','e':'5','f':'6','g':'7','h':'8','i':'9'}`,
		"ünïcødé\ttab\nline\x00nul", "2026-12-01 02:03:04.567891", "1099511627776", "-7"} {
		if got[i] != want {
			t.Errorf("column %d = %q, want %q", i, got[i], want)
		}
	}
}

// sameAsRows fills a copy of like (a table of peertrail) with insertBlocks, another with rows
// through the generic encoder, fails t unless every row is the same in both (compared by the
// count, sum, maximum and distinct count of the rows' hashes), and returns those figures. The
// copy made from blocks stays, as peertrail.<like>_blocks, until the test ends.
func sameAsRows(t *testing.T, s *store.Embedded, like string, columns []store.Column, rows [][]any, insertBlocks func(table string) error) string {
	t.Helper()
	ctx := context.Background()
	blocks, generic := "peertrail."+like+"_blocks", "peertrail."+like+"_rows"
	for _, table := range []string{blocks, generic} {
		if err := s.Exec(ctx, "CREATE OR REPLACE TABLE "+table+" AS peertrail."+like+" ENGINE = MergeTree ORDER BY tuple() PRIMARY KEY tuple()"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	}
	if err := insertBlocks(blocks); err != nil {
		t.Fatalf("native blocks: %v", err)
	}
	if err := s.Insert(ctx, generic, columns, rows); err != nil {
		t.Fatalf("generic rows: %v", err)
	}
	read := func(table string) string {
		t.Helper()
		res, err := s.Query(ctx, "SELECT count(), sum(cityHash64(toString(tuple(*)))), max(cityHash64(toString(tuple(*)))), "+
			"uniqExact(toString(tuple(*))) FROM "+table, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(res.Rows[0], " ")
	}
	got, want := read(blocks), read(generic)
	if got != want {
		t.Fatalf("%s from Native blocks differs from the generic encoder's rows: count, sum, max and distinct of row hashes %s, want %s", like, got, want)
	}
	return got
}
