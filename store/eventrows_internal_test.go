package store

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
)

// TestEventRowBinaryMatchesEventRow checks that the writer's direct RowBinary of an event is
// the generic encoding of EventRow, byte for byte, for every event of the real kube-apiserver
// captures (impersonation, denials, objects, annotations), the simulator's, and records with
// every field set or none.
func TestEventRowBinaryMatchesEventRow(t *testing.T) {
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
		SourceIPs: []string{"10.0.0.1", "10.0.0.2"}, Code: -7, Message: "ünïcødé\ttab\nline",
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
	var all []byte
	for i := range records {
		want, err := EncodeRowBinary(EventColumns, [][]any{EventRow(&records[i])})
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got := appendEventRow(nil, &records[i])
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d (%s %s): appendEventRow differs from the generic encoding of EventRow:\n got %q\nwant %q",
				i, records[i].APIServer, records[i].AuditID, got, want)
		}
		all = append(all, want...)
	}
	if len(records) < 1000 {
		t.Fatalf("only %d records compared", len(records))
	}
	// The stream is the rows one after the other, whatever the reads' sizes.
	for range 3 {
		all = append(all, all...)
		records = append(records, records...)
	}
	for _, r := range []io.Reader{eventStream(records), iotest.OneByteReader(eventStream(records))} {
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, all) {
			t.Fatalf("the stream of %d records: %d bytes (err %v), want %d", len(records), len(got), err, len(all))
		}
	}
}
