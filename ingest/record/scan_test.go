package record

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/peertrail/peertrail/simulate"
)

// apiserverBodies returns the EventLists of every real capture and one of the simulator's.
func apiserverBodies(t *testing.T) [][]byte {
	t.Helper()
	paths, _ := filepath.Glob("../../test/testdata/real/*/*.json")
	if len(paths) == 0 {
		t.Fatal("no real captures under test/testdata/real")
	}
	synthetic, _, err := simulate.NewEvents(3, nil).EventList(500)
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
	return bodies
}

// TestDecoderReusesItsMemoryCorrectly decodes every capture twice over with one Decoder, so
// that each batch lands in memory an earlier, different batch filled, and checks each against a
// fresh decode by encoding/json.
func TestDecoderReusesItsMemoryCorrectly(t *testing.T) {
	bodies := apiserverBodies(t)
	d := NewDecoder()
	std := &Decoder{unmarshal: json.Unmarshal}
	for round := range 2 {
		for i, body := range bodies {
			if round == 1 {
				body = bodies[len(bodies)-1-i]
			}
			got, gotInv, gotErr := d.Decode(body, "kas-a", received)
			want, wantInv, wantErr := std.Decode(body, "kas-a", received)
			if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) || len(gotInv) != len(wantInv) {
				t.Fatalf("round %d, body %d: a reused Decoder's records differ from encoding/json's", round, i)
			}
		}
	}
	if d.Footprint() == 0 {
		t.Fatal("the Decoder kept nothing to reuse")
	}
}

// TestScanReadsWhatApiserversSend checks that the scanner, not the fallback, reads the events
// real apiservers wrote (every capture) and the simulator's, and that each event it reads is
// the record encoding/json makes of it. FuzzDecode covers every other input.
func TestScanReadsWhatApiserversSend(t *testing.T) {
	bodies := apiserverBodies(t)
	scanned, total := 0, 0
	for _, body := range bodies {
		env := envelope{Items: boundedItems{d: NewDecoder()}}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatal(err)
		}
		for _, raw := range env.Items.items {
			total++
			var got Record
			kind, ok := scanEvent(raw, &got, nil, nil)
			if !ok {
				t.Errorf("scanner handed back an apiserver's event: %s", raw)
				continue
			}
			scanned++
			got.APIServer, got.ReceivedAt, got.Raw = "kas-a", received.UTC(), raw
			want, err := decodeEvent(json.Unmarshal, false, raw, "kas-a", received, nil, nil)
			if err != nil || check(&got, kind) != nil {
				t.Fatalf("event %s: encoding/json says %v, scanner %v", raw, err, check(&got, kind))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("scanned record differs from encoding/json's:\n scan %+v\n  std %+v", got, want)
			}
		}
	}
	t.Logf("%d of %d events read by the scanner", scanned, total)
}

// TestScanHandsBackWhatItDoesNotMimic lists inputs encoding/json reads in ways the scanner does
// not copy; each must come back unread so that the fallback decides.
func TestScanHandsBackWhatItDoesNotMimic(t *testing.T) {
	for _, raw := range []string{
		`{"auditID":"a","AuditID":"b"}`,                            // a key in another case is the same field
		`{"auditID":"a","auditID":"b"}`,                            // repeated key
		`{"objectRef":{"name":"a"},"objectRef":{"namespace":"b"}}`, // encoding/json merges these
		`{"objectRef":null}`,                                       // null
		`{"responseStatus":{"code":200.5}}`,                        // not an int32
		`{"responseStatus":{"code":4294967296}}`,                   // overflows int32
		`{"responseStatus":{"details":{"causes":[null]}}}`,         // null in a list of structs
		`{"user":{"groups":["a",1]}}`,                              // wrong type
		`{"stageTimestamp":"yesterday"}`,                           // MicroTime refuses it
		`{"\u0061uditID":"a"}`,                                     // escaped key
		`{"auditID":"a"} x`,                                        // trailing data
		`{"unknown":[1,2,}`,                                        // invalid JSON in a skipped value
	} {
		var r Record
		if _, ok := scanEvent([]byte(raw), &r, nil, nil); ok {
			t.Errorf("scanner read %s", raw)
		}
	}
}
