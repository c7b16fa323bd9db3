package store_test

import (
	"context"
	"os"
	"path/filepath"
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
	for len(records) < 3000 {
		records = append(records, records...)
	}
	rows := make([][]any, len(records))
	for i := range records {
		rows[i] = store.EventRow(&records[i])
	}
	for _, table := range []string{"native_check_blocks", "native_check_rows"} {
		if err := s.Exec(ctx, "CREATE OR REPLACE TABLE peertrail."+table+" AS peertrail.events ENGINE = MergeTree ORDER BY tuple() PRIMARY KEY tuple()"); err != nil {
			t.Fatal(err)
		}
		defer s.Exec(ctx, "DROP TABLE IF EXISTS peertrail."+table)
	}
	if err := s.InsertEventsNative(ctx, "peertrail.native_check_blocks", records); err != nil {
		t.Fatalf("native blocks: %v", err)
	}
	if err := s.Insert(ctx, "peertrail.native_check_rows", store.EventColumns, rows); err != nil {
		t.Fatalf("generic rows: %v", err)
	}
	read := func(table string) string {
		t.Helper()
		res, err := s.Query(ctx, "SELECT count(), sum(cityHash64(toString(tuple(*)))), max(cityHash64(toString(tuple(*)))), "+
			"uniqExact(toString(tuple(*))) FROM peertrail."+table, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Rows[0][0] + " " + res.Rows[0][1] + " " + res.Rows[0][2] + " " + res.Rows[0][3]
	}
	blocks, want := read("native_check_blocks"), read("native_check_rows")
	if blocks != want {
		t.Fatalf("the table from Native blocks differs from the one from EventRow: count, sum, max and distinct of row hashes %s, want %s", blocks, want)
	}
	t.Logf("%d records, %s", len(records), blocks)
	// Every value came through, not only equally on both sides: spot-check the full record.
	res, err := s.Query(ctx, "SELECT user_extra, impersonated_extra, annotations, message, received_at, request_object_bytes, code FROM peertrail.native_check_blocks WHERE audit_id = 'x' LIMIT 1", nil)
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
