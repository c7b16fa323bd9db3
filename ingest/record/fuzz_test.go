package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func seedBodies(f *testing.F) {
	f.Helper()
	paths, _ := filepath.Glob("testdata/*.json")
	real, _ := filepath.Glob("../../test/testdata/real/*/*.json")
	for _, p := range append(paths, real...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"a","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z"}]}`))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[null,1,"x",{}]}`))
	f.Add([]byte(`{}`))
	// Past a small limit (FuzzDecode limits a Decoder to two items), in the scanner's envelope
	// and in one only the JSON library reads.
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{},{}]}`))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","Items":[{},{},{}],"items":[{}]}`))
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":null}`))
	// Every shape the scanner reads (scan.go), for the fuzzer to bend.
	f.Add(richBody)
	// Redacted: a Secret's objects, under keys spelled every way encoding/json reads them.
	f.Add(eventList(secretEvent("s", "", "secrets", "", `"annotations":{"a":"b"}`),
		strings.Replace(secretEvent("t", "", "serviceaccounts", "token", ""), `"requestObject"`, `"REQUESTOBJECT"`, 1)))
	// \u escapes: HTML-safe characters as Go writes them, a surrogate pair, lone surrogates.
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"a\u0026\u003c\u003E",` +
		`"stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z","requestURI":"/x?a=1\u0026b=\ud83d\ude00",` +
		`"userAgent":"\ud800x\udc00\ud800\u0041\ud800\\u","verb":"\u00e9\u20ac"}]}`))
	// Timestamps the fast path must hand back to encoding/json, or reject as it does.
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
		`{"auditID":"a","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001\u005a","requestReceivedTimestamp":null},` +
		`{"auditID":"b","stage":"ResponseComplete","stageTimestamp":"2026-11-29T11:00:00.5+01:00","StageTimestamp":"2026-11-29T10:00:00Z"},` +
		`{"auditID":"c","stage":"ResponseComplete","stageTimestamp":"2026-11-29 10:00:00"},` +
		`{"auditID":"d","stage":"ResponseComplete","stageTimestamp":1}]}`))
}

// richBody has every shape the scanner reads (scan.go).
var richBody = []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"kind":"Event",` +
	`"level":"Metadata","auditID":"x","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z",` +
	`"user":{"username":"a\u00e9\"b","uid":"u","groups":[],"extra":{"k":["v"],"e":[]}},` +
	`"impersonatedUser":{"username":"i","extra":{}},"authenticationMetadata":{"impersonationConstraint":"c"},` +
	`"sourceIPs":["1.2.3.4","10.0.0.2"],"objectRef":{"resource":"pods","apiGroup":"","uid":"u","subresource":"s"},` +
	`"responseStatus":{"metadata":{},"status":"Failure","code":-404,"message":"say \"no\"","details":{"causes":[{"reason":"r"}],"retryAfterSeconds":1}},` +
	`"requestObject":{"a":null,"a":[1,-0.5e3,true,"\t"]},"responseObject":"x",` +
	`"annotations":{"k":"v","k":"w"},"future":{"x":null}}]}`)

// FuzzDecode checks that no body makes Decode panic, that the fast decoder agrees with
// encoding/json on every body, and that every item of an accepted list is accounted for exactly
// once: as a record with the fields its key needs, or as an invalid item.
func FuzzDecode(f *testing.F) {
	seedBodies(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		recs, inv, err := Decode(body, "kas-a", received)
		sameAsEncodingJSON(t, body, recs, inv, err)
		// A Decoder reused after a batch that filled its memory decodes the same.
		d := NewDecoder()
		for range 2 {
			if _, _, err := d.Decode(richBody, "kas-b", received); err != nil {
				t.Fatal(err)
			}
			again, againInv, againErr := d.Decode(body, "kas-a", received)
			sameAsEncodingJSON(t, body, again, againInv, againErr)
		}
		// With a limit of two items, both decoders refuse exactly the lists encoding/json
		// splits into more, and for the same reason.
		limited := NewDecoder()
		limited.LimitItems(2)
		lRecs, lInv, lErr := limited.Decode(body, "kas-a", received)
		std := &Decoder{unmarshal: json.Unmarshal}
		std.LimitItems(2)
		_, _, stdErr := std.Decode(body, "kas-a", received)
		if errors.Is(lErr, ErrTooManyItems) != errors.Is(stdErr, ErrTooManyItems) || (lErr == nil) != (stdErr == nil) {
			t.Fatalf("limited to 2 items: fast decoder %v, encoding/json %v", lErr, stdErr)
		}
		if err == nil && lErr == nil && (len(lRecs) != len(recs) || len(lInv) != len(inv)) {
			t.Fatalf("limited to 2 items: %d records, %d invalid; unlimited %d, %d", len(lRecs), len(lInv), len(recs), len(inv))
		}
		if err != nil {
			if !errors.Is(err, ErrNotEventList) || recs != nil || inv != nil {
				t.Fatalf("error %v with %d records, %d invalid", err, len(recs), len(inv))
			}
			return
		}
		if looseDepth(body) > maxItemDepth+2 {
			return // too deep for encoding/json to split (TestDecodeRefusesDeepItemsAlone)
		}
		var env struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("Decode accepted a body encoding/json rejects: %v", err)
		}
		if len(recs)+len(inv) != len(env.Items) {
			t.Fatalf("%d items became %d records and %d invalid", len(env.Items), len(recs), len(inv))
		}
		if tooMany := errors.Is(lErr, ErrTooManyItems); tooMany != (len(env.Items) > 2) {
			t.Fatalf("%d items, limited to 2: %v", len(env.Items), lErr)
		}
		// Each item keeps exactly the bytes encoding/json's RawMessage gives it.
		for i, ri, ii := 0, 0, 0; i < len(env.Items); i++ {
			var raw []byte
			if ii < len(inv) && inv[ii].Index == i {
				raw, ii = inv[ii].Raw, ii+1
			} else {
				raw, ri = recs[ri].Raw, ri+1
			}
			if !bytes.Equal(raw, env.Items[i]) {
				// Or its redaction, when it is of a redacted resource.
				if red, dropped, ok := appendRedacted(nil, env.Items[i]); !ok || dropped == "" || !bytes.Equal(raw, red) {
					t.Fatalf("item %d kept as %q, encoding/json's RawMessage is %q", i, raw, env.Items[i])
				}
			}
		}
		for _, r := range recs {
			if r.AuditID == "" || r.Stage == "" || r.StageTimestamp.IsZero() || r.APIServer != "kas-a" || len(r.Raw) == 0 {
				t.Fatalf("record without its identifying fields: %+v", r)
			}
		}
		// Whatever was decoded survives the spool exactly.
		keys := make([]Key, len(recs))
		for i := range recs {
			keys[i] = recs[i].Key()
		}
		var c Codec
		frame, err := c.AppendFrame(nil, "kas-a", received, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.DecodeFrame(frame)
		if err != nil {
			t.Fatalf("a frame of decoded records does not decode: %v", err)
		}
		if len(recs) > 0 && !reflect.DeepEqual(b.Records, recs) {
			t.Fatalf("records changed through a frame:\n got %+v\nwant %+v", b.Records, recs)
		}
	})
}

// FuzzDecodeFrame checks that a damaged frame is an error, never a panic or a runaway
// allocation, and that a frame of real records survives a round trip.
func FuzzDecodeFrame(f *testing.F) {
	c, err := NewCodec()
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	body, err := os.ReadFile("testdata/entry-impersonated.json")
	if err != nil {
		f.Fatal(err)
	}
	recs, _, err := Decode(body, "kas-a", received)
	if err != nil {
		f.Fatal(err)
	}
	keys := []Key{recs[0].Key(), recs[1].Key()}
	frame, err := c.AppendFrame(nil, "kas-a", received, recs, keys)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(frame)
	f.Add(frame[:20])
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	// Counts and lengths that once cost seconds to refuse (TestSmallCorruptFramesCostLittle).
	f.Add(corruptFrame(append(binary.AppendUvarint(nil, 1<<20+1), make([]byte, 1<<10)...), 0))
	f.Add(corruptFrame(binary.AppendUvarint(nil, 3), 2))
	want, err := c.DecodeFrame(frame)
	if err != nil {
		f.Fatal(err)
	}
	// One FrameReader for every input, so that each decodes into memory the inputs before it
	// left behind, whatever they were.
	// Likewise one Interner, so that each input's values meet what the inputs before it left.
	fr, in := NewFrameReader(), NewInterner()
	bare := func(b Batch) Batch {
		b.Records = slices.Clone(b.Records)
		for i := range b.Records {
			b.Records[i].Raw, b.Records[i].Annotations = nil, nil
		}
		return b
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		batch, err := c.DecodeFrame(b)
		got, frErr := fr.Decode(b)
		if (err == nil) != (frErr == nil) {
			t.Fatalf("DecodeFrame: %v; FrameReader: %v", err, frErr)
		}
		shared, inErr := c.DecodeFrameWithoutRaw(nil, b, in)
		if (err == nil) != (inErr == nil) {
			t.Fatalf("DecodeFrame: %v; with the interner: %v", err, inErr)
		}
		if err == nil && !reflect.DeepEqual(shared, bare(batch)) {
			t.Fatalf("with the interner\n %+v\nDecodeFrame gives\n %+v", shared, batch)
		}
		if err != nil {
			if !errors.Is(err, ErrBadFrame) || !errors.Is(frErr, ErrBadFrame) {
				t.Fatalf("error not wrapping ErrBadFrame: %v; %v", err, frErr)
			}
		} else {
			h, err := ParseHeader(b)
			if err != nil || len(h.Keys) != len(batch.Records) {
				t.Fatalf("decoded frame with inconsistent header: %v", err)
			}
			if !reflect.DeepEqual(got, batch) {
				t.Fatalf("FrameReader gives\n %+v\nDecodeFrame gives\n %+v", got, batch)
			}
		}
		if got, err := fr.Decode(frame); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("the real frame after this input: %v\n %+v", err, got)
		}
		if got, err := c.DecodeFrameWithoutRaw(nil, frame, in); err != nil || !reflect.DeepEqual(got, bare(want)) {
			t.Fatalf("the real frame after this input, with the interner: %v\n %+v", err, got)
		}
	})
}

// sameAsEncodingJSON fails unless decoding body with encoding/json gives the same records, the
// same invalid items and the same verdict on the body as Decode did.
func sameAsEncodingJSON(t *testing.T, body []byte, recs []Record, inv []Invalid, err error) {
	t.Helper()
	stdRecs, stdInv, stdErr := (&Decoder{unmarshal: json.Unmarshal}).Decode(body, "kas-a", received)
	if (err == nil) != (stdErr == nil) {
		t.Fatalf("fast decoder error %v, encoding/json error %v", err, stdErr)
	}
	if !reflect.DeepEqual(recs, stdRecs) {
		t.Fatalf("records differ from encoding/json's:\n fast %+v\n  std %+v", recs, stdRecs)
	}
	if len(inv) != len(stdInv) {
		t.Fatalf("%d invalid items, encoding/json finds %d", len(inv), len(stdInv))
	}
	for i := range inv {
		if inv[i].Index != stdInv[i].Index || !bytes.Equal(inv[i].Raw, stdInv[i].Raw) {
			t.Fatalf("invalid item %d differs: %+v vs %+v", i, inv[i], stdInv[i])
		}
	}
}
