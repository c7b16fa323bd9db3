package record

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/klauspost/compress/s2"

	"github.com/peertrail/peertrail/simulate"
)

var received = time.Date(2026, 11, 29, 10, 0, 5, 123456789, time.UTC)

func mustDecode(t *testing.T, body []byte) ([]Record, []Invalid) {
	t.Helper()
	recs, inv, err := Decode(body, "kas-a", received)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return recs, inv
}

func TestDecodeNormalisesEveryField(t *testing.T) {
	body, err := os.ReadFile("testdata/entry-impersonated.json")
	if err != nil {
		t.Fatal(err)
	}
	recs, inv := mustDecode(t, body)
	if len(recs) != 2 || len(inv) != 0 {
		t.Fatalf("got %d records, %d invalid", len(recs), len(inv))
	}
	r := recs[0]
	want := Record{
		APIServer: "kas-a", AuditID: "4a1b2c3d-0000-4000-8000-00000000abcd", Stage: "ResponseComplete",
		Level: "RequestResponse", Verb: "list",
		RequestURI: "/apis/scheduling.k8s.io/v1alpha2/namespaces/training/podgroups?limit=10&labelSelector=a%3Db",
		Group:      "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups", Namespace: "training",
		UserName: "admin", UserUID: "u-123", UserGroups: []string{"system:masters", "system:authenticated"},
		UserExtra:        map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=abcd"}},
		ImpersonatedUser: "alice", ImpersonatedGroups: []string{"dev", "system:authenticated"},
		ImpersonatedExtra:       map[string][]string{"team": {"ml"}},
		ImpersonationConstraint: "impersonate:user-info",
		SourceIPs:               []string{"127.0.0.1"}, UserAgent: "kubectl/v1.36.3 (linux/amd64) kubernetes/8b1a2c7",
		Code:                     200,
		RequestReceivedTimestamp: time.Date(2026, 11, 29, 10, 0, 0, 100000000, time.UTC),
		StageTimestamp:           time.Date(2026, 11, 29, 10, 0, 0, 180123000, time.UTC),
		Annotations: map[string]string{
			"authorization.k8s.io/decision": "allow",
			"authorization.k8s.io/reason":   `RBAC: allowed by ClusterRoleBinding "admin"`,
		},
		ReceivedAt: received,
	}
	r.Raw = nil
	if !reflect.DeepEqual(r, want) {
		t.Errorf("record 0:\n got %+v\nwant %+v", r, want)
	}

	p := recs[1]
	if p.Name != "pg-1" || p.Code != 409 || p.Status != "Failure" || p.Reason != "AlreadyExists" ||
		p.Message != `podgroups.scheduling.k8s.io "pg-1" already exists` {
		t.Errorf("record 1 response fields: %+v", p)
	}
	if !p.HasRequestObject || p.RequestObjectBytes != int64(len(`{"kind":"PodGroup","apiVersion":"scheduling.k8s.io/v1alpha2","metadata":{"name":"pg-1"}}`)) {
		t.Errorf("request object: has=%v bytes=%d", p.HasRequestObject, p.RequestObjectBytes)
	}
	if !p.HasResponseObject || p.ResponseObjectBytes == 0 {
		t.Errorf("response object: has=%v bytes=%d", p.HasResponseObject, p.ResponseObjectBytes)
	}
	if !reflect.DeepEqual(p.SourceIPs, []string{"127.0.0.1", "10.0.0.11"}) {
		t.Errorf("source IPs %v", p.SourceIPs)
	}
	// The raw event is kept byte for byte, fields peertrail does not know included.
	if !strings.Contains(string(p.Raw), `"futureField":{"kept":true}`) || !json.Valid(p.Raw) {
		t.Errorf("raw event not kept verbatim: %s", p.Raw)
	}
}

func TestDecodeRejectsBodiesThatAreNotEventLists(t *testing.T) {
	for name, body := range map[string]string{
		"not json":          `{"kind":"EventList",`,
		"empty":             ``,
		"array":             `[{"auditID":"x"}]`,
		"wrong kind":        `{"kind":"PodList","apiVersion":"audit.k8s.io/v1","items":[]}`,
		"wrong apiVersion":  `{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[]}`,
		"no type":           `{"items":[]}`,
		"items not a list":  `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":{"a":1}}`,
		"binary":            "\x1f\x8b\x08\x00",
		"trailing garbage":  `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]} xx`,
		"wrong type fields": `{"kind":1,"apiVersion":"audit.k8s.io/v1","items":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			recs, inv, err := Decode([]byte(body), "kas-a", received)
			if !errors.Is(err, ErrNotEventList) {
				t.Fatalf("err = %v, want ErrNotEventList", err)
			}
			if recs != nil || inv != nil {
				t.Fatalf("got records or invalid items with an error")
			}
		})
	}
}

func TestDecodeKeepsGoodItemsBesideBadOnes(t *testing.T) {
	good := `{"level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api","verb":"get","user":{"username":"u"},"stageTimestamp":"2026-11-29T10:00:00.000001Z","requestReceivedTimestamp":"2026-11-29T10:00:00.000000Z"}`
	bad := map[string]string{
		"no auditID":        `{"level":"Metadata","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z"}`,
		"no stage":          `{"level":"Metadata","auditID":"a2","stageTimestamp":"2026-11-29T10:00:00.000001Z"}`,
		"no stageTimestamp": `{"level":"Metadata","auditID":"a3","stage":"ResponseComplete"}`,
		"not an object":     `"just a string"`,
		"null":              `null`,
		"wrong field type":  `{"auditID":"a4","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z","responseStatus":{"code":"two hundred"}}`,
		"bad timestamp":     `{"auditID":"a5","stage":"ResponseComplete","stageTimestamp":"yesterday"}`,
		"wrong item kind":   `{"kind":"Pod","auditID":"a6","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z"}`,
		// Times the store's DateTime64 columns cannot hold (it would wrap them to other times).
		"stageTimestamp after the store's range":  `{"auditID":"a7","stage":"ResponseComplete","stageTimestamp":"9999-01-01T00:00:00.000000Z"}`,
		"stageTimestamp before the store's range": `{"auditID":"a8","stage":"ResponseComplete","stageTimestamp":"0001-01-01T00:00:00.000001Z"}`,
		"stageTimestamp just past the range":      `{"auditID":"a9","stage":"ResponseComplete","stageTimestamp":"2262-04-11T23:47:16.854776Z"}`,
		"stageTimestamp in DateTime64, not int64": `{"auditID":"a9b","stage":"ResponseComplete","stageTimestamp":"2299-12-31T23:59:59.999999Z"}`,
		"stageTimestamp just before the range":    `{"auditID":"a10","stage":"ResponseComplete","stageTimestamp":"1899-12-31T23:59:59.999999Z"}`,
		"stageTimestamp out of range, offset":     `{"auditID":"a11","stage":"ResponseComplete","stageTimestamp":"2299-12-31T23:00:00.000000-01:00"}`,
		"requestReceivedTimestamp out of range":   `{"auditID":"a12","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z","requestReceivedTimestamp":"9999-01-01T00:00:00.000000Z"}`,
		"requestReceivedTimestamp too early":      `{"auditID":"a13","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z","requestReceivedTimestamp":"1000-01-01T00:00:00.000000Z"}`,
		// Deeper than maxItemDepth: refused alone, not with its batch (issue 12).
		"nested 10000 deep": `{"auditID":"a14","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z","requestObject":` +
			strings.Repeat(`{"a":[`, 5000) + strings.Repeat(`]}`, 5000) + `}`,
		"nested past the limit": `{"auditID":"a15","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z","requestObject":` +
			strings.Repeat(`[`, maxItemDepth) + strings.Repeat(`]`, maxItemDepth) + `}`,
		"nested 100000 deep, not valid inside": `{"auditID":"a16","requestObject":` + strings.Repeat(`[{`, 50000) + strings.Repeat(`]}`, 50000) + `}`,
	}
	for name, item := range bad {
		t.Run(name, func(t *testing.T) {
			body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + good + `,` + item + `,` + good + `]}`
			recs, inv := mustDecode(t, []byte(body))
			if len(recs) != 2 || recs[0].AuditID != "a1" {
				t.Fatalf("good items: %d records", len(recs))
			}
			if len(inv) != 1 || inv[0].Index != 1 || inv[0].Reason == "" || string(inv[0].Raw) != item {
				t.Fatalf("invalid items: %+v", inv)
			}
			t.Log(inv[0].Reason)
			stdRecs, stdInv, err := (&Decoder{unmarshal: json.Unmarshal}).Decode([]byte(body), "kas-a", received)
			if err != nil || !reflect.DeepEqual(stdRecs, recs) || len(stdInv) != 1 {
				t.Fatalf("encoding/json's decoder differs: %v, %d records, %d invalid", err, len(stdRecs), len(stdInv))
			}
		})
	}
}

// TestDecodeKeepsTimesAtTheStoresBounds: the bounds themselves are storable, and an absent
// requestReceivedTimestamp is no reason to refuse an event.
func TestDecodeKeepsTimesAtTheStoresBounds(t *testing.T) {
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` +
		`{"auditID":"lo","stage":"ResponseComplete","stageTimestamp":"1900-01-01T00:00:00.000000Z","requestReceivedTimestamp":"1900-01-01T00:00:00.000000Z"},` +
		`{"auditID":"hi","stage":"ResponseComplete","stageTimestamp":"2262-04-11T23:47:16.854775Z","requestReceivedTimestamp":"2262-04-11T23:47:16.854775Z"},` +
		`{"auditID":"none","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000000Z"}]}`
	recs, inv := mustDecode(t, []byte(body))
	if len(recs) != 3 || len(inv) != 0 {
		t.Fatalf("%d records, invalid %+v", len(recs), inv)
	}
	if !recs[0].StageTimestamp.Equal(MinTime) || !recs[1].StageTimestamp.Equal(MaxTime) || !recs[1].RequestReceivedTimestamp.Equal(MaxTime) {
		t.Fatalf("bounds changed: %v %v", recs[0].StageTimestamp, recs[1].StageTimestamp)
	}
}

// TestDecodeRefusesDeepItemsAlone: however deep one item nests, and whether or not it is valid
// JSON past the limit, it alone is invalid; its neighbours decode as without it. A body too deep
// in a form whose items cannot be split is refused as a whole.
func TestDecodeRefusesDeepItemsAlone(t *testing.T) {
	good := func(id string) string {
		return `{"auditID":"` + id + `","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z"}`
	}
	atLimit := `{"auditID":"limit","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z","requestObject":` +
		strings.Repeat(`[`, maxItemDepth-1) + strings.Repeat(`]`, maxItemDepth-1) + `}`
	deep := `{"auditID":"deep","requestObject":` + strings.Repeat(`{"a":`, 20000) + `1` + strings.Repeat(`}`, 20000) + `}`
	items := []string{good("a"), deep, atLimit, deep, good("b")}
	for _, n := range []int{len(items), 3 * parallelDecodeMin} { // one worker, and several
		list := make([]string, 0, n)
		for i := range n {
			list = append(list, items[i%len(items)])
		}
		body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(list, ",") + `]}`)
		recs, inv, err := Decode(body, "kas-a", received)
		sameAsEncodingJSON(t, body, recs, inv, err)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.AuditID == "deep" {
				t.Fatalf("deep item decoded")
			}
		}
		for _, v := range inv {
			if !strings.Contains(v.Reason, "more than the limit of 1000") || string(v.Raw) != deep {
				t.Fatalf("invalid item %d: %s", v.Index, v.Reason)
			}
		}
		if want := 2 * n / len(items); len(inv) != want || len(recs) != n-want {
			t.Fatalf("%d items: %d records, %d invalid", n, len(recs), len(inv))
		}
	}
	for name, body := range map[string]string{
		"deep and another item not JSON": `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + deep + `,{"a":tru}]}`,
		"deep, keys in another case":     `{"Kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + deep + `]}`,
		"deep and unclosed":              `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Repeat(`[`, 5000),
	} {
		recs, inv, err := Decode([]byte(body), "kas-a", received)
		if !errors.Is(err, ErrNotEventList) || recs != nil || inv != nil {
			t.Errorf("%s: err %v, %d records, %d invalid", name, err, len(recs), len(inv))
		}
		sameAsEncodingJSON(t, []byte(body), recs, inv, err)
	}
}

func TestKeySeparatesEveryComponent(t *testing.T) {
	ts := time.Date(2026, 1, 1, 0, 0, 0, 1000, time.UTC)
	base := KeyOf("kas-a", "id", "ResponseComplete", ts)
	for name, k := range map[string]Key{
		"apiserver":       KeyOf("kas-b", "id", "ResponseComplete", ts),
		"auditID":         KeyOf("kas-a", "id2", "ResponseComplete", ts),
		"stage":           KeyOf("kas-a", "id", "RequestReceived", ts),
		"timestamp":       KeyOf("kas-a", "id", "ResponseComplete", ts.Add(time.Microsecond)),
		"field boundary":  KeyOf("kas-ai", "d", "ResponseComplete", ts),
		"field boundary2": KeyOf("kas-a", "idR", "esponseComplete", ts),
	} {
		if k == base {
			t.Errorf("changing %s did not change the key", name)
		}
	}
	if KeyOf("kas-a", "id", "ResponseComplete", ts.Add(100)) != base {
		t.Errorf("sub-microsecond difference changed the key; apiservers write microseconds")
	}
}

func TestFrameRoundTrip(t *testing.T) {
	body, err := os.ReadFile("testdata/entry-impersonated.json")
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := mustDecode(t, body)
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []Key{recs[0].Key(), recs[1].Key()}
	frame, err := c.AppendFrame(nil, "kas-a", received, recs, keys)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(frame)
	if err != nil {
		t.Fatal(err)
	}
	if h.APIServer != "kas-a" || !h.ReceivedAt.Equal(received) || !reflect.DeepEqual(h.Keys, keys) {
		t.Fatalf("header %+v", h)
	}
	b, err := c.DecodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.Records, recs) {
		t.Fatalf("records changed in a frame round trip:\n got %+v\nwant %+v", b.Records, recs)
	}
	if _, err := c.DecodeFrame(frame[:len(frame)-3]); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("truncated frame: %v", err)
	}
	if _, err := c.AppendFrame(nil, "kas-a", received, recs, keys[:1]); err == nil {
		t.Fatalf("AppendFrame accepted keys that do not match the records")
	}
}

// corruptFrame is a frame of keys all-zero keys whose records, compressed, are body.
func corruptFrame(body []byte, keys int) []byte {
	f := binary.BigEndian.AppendUint64([]byte{frameVersion, 0}, 0)
	f = binary.AppendUvarint(f, uint64(keys))
	f = append(f, make([]byte, 16*keys)...)
	return append(f, s2.Encode(nil, body)...)
}

// TestSmallCorruptFramesCostLittle: a frame of a few bytes cannot make a decoder allocate much,
// whatever counts and lengths it declares. Both once cost the fuzzer's ten-second limit: a
// count of a million records was allocated before it was checked against the header's keys,
// and a declared body of 1 GiB was allocated before its first byte was decoded.
func TestSmallCorruptFramesCostLittle(t *testing.T) {
	million := binary.AppendUvarint(nil, 1<<20+1) // a million records, as reader.count reads it
	million = append(million, make([]byte, 1<<20)...)
	huge := binary.BigEndian.AppendUint64([]byte{frameVersion, 0}, 0)
	huge = binary.AppendUvarint(append(huge, 0), MaxFrameBody+1) // an S2 block's decoded length
	huge = append(huge, 0, 0, 0, 0)
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader()
	for name, frame := range map[string][]byte{
		"a million records for no key":           corruptFrame(million, 0),
		"a million records for one key":          corruptFrame(million, 1),
		"a body declared over the frame's limit": huge,
	} {
		for _, decode := range []func([]byte) (Batch, error){c.DecodeFrame, fr.Decode} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := decode(frame)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrBadFrame) {
				t.Errorf("%s (%d bytes): %v, want ErrBadFrame", name, len(frame), err)
			}
			// The million-record body itself, decompressed, is 1 MiB.
			if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
				t.Errorf("%s (%d bytes): decoding it allocated %d MiB", name, len(frame), n>>20)
			}
		}
	}
}

// TestAppendFrameRefusesWhatCannotBeRead: records over MaxFrameBody are refused when encoded,
// since the decoder would refuse them when read.
func TestAppendFrameRefusesWhatCannotBeRead(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	recs := []Record{{AuditID: "a", Raw: make([]byte, MaxFrameBody)}}
	if _, err := c.AppendFrame(nil, "kas-a", received, recs, []Key{recs[0].Key()}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("records of %d bytes: %v, want ErrFrameTooLarge", MaxFrameBody, err)
	}
	recs[0].Raw = make([]byte, MaxFrameBody-1<<10)
	frame, err := c.AppendFrame(nil, "kas-a", received, recs, []Key{recs[0].Key()})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.DecodeFrame(frame); err != nil || len(b.Records[0].Raw) != len(recs[0].Raw) {
		t.Fatalf("the largest frame does not read back: %v", err)
	}
}

// TestFastDecoderMatchesEncodingJSON proves the faster decoder yields records identical to
// encoding/json's on every body we have: the fixtures, real apiserver captures, and a large
// synthetic batch.
func TestFastDecoderMatchesEncodingJSON(t *testing.T) {
	paths, _ := filepath.Glob("testdata/*.json")
	real, _ := filepath.Glob("../../test/testdata/real/*/*.json")
	paths = append(paths, real...)
	body, _, err := simulate.NewEvents(9, nil).EventList(2000)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]byte{"synthetic": body}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bodies[p] = b
	}
	records := 0
	for name, b := range bodies {
		t.Run(filepath.Base(name), func(t *testing.T) {
			recs, inv, err := Decode(b, "kas-a", received)
			sameAsEncodingJSON(t, b, recs, inv, err)
			records += len(recs)
		})
	}
	t.Logf("%d bodies (%d real captures), %d records identical", len(bodies), len(real), records)
}

// TestFrameReaderDecodesAsDecodeFrame decodes frames of every body we have, real captures and
// synthetic batches, one after another with one FrameReader, so that each frame lands in
// memory that larger and smaller frames filled before it, and compares every record with
// DecodeFrame's copies before the next frame overwrites it. Records with many annotations and a
// large extra (past the maps the reader keeps) and nil against empty lists and maps are among
// them. Then a frame decoded again allocates nothing but its apiserver's name.
func TestFrameReaderDecodesAsDecodeFrame(t *testing.T) {
	c, frames := testFrames(t)
	fr := NewFrameReader()
	records := 0
	for round := range 2 {
		for i, f := range frames {
			want, err := c.DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fr.Decode(f)
			if err != nil {
				t.Fatalf("round %d, frame %d: %v", round, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, frame %d: FrameReader gives\n %+v\nDecodeFrame gives\n %+v", round, i, got, want)
			}
			records += len(got.Records)
		}
	}
	if _, err := fr.Decode(frames[0][:len(frames[0])-3]); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("truncated frame: %v", err)
	}
	t.Logf("%d frames, %d records", 2*len(frames), records)

	big := frames[len(frames)-3] // the 2000 synthetic events
	if allocs := testing.AllocsPerRun(20, func() {
		if _, err := fr.Decode(big); err != nil {
			t.Fatal(err)
		}
	}); allocs > 1 {
		t.Errorf("decoding a frame again allocates %.0f times; want 1 (the apiserver's name)", allocs)
	}
}

// testFrames are frames of every body we have, real captures and synthetic batches (the
// 2000 synthetic events third from the end), and odd records: many annotations, a large extra
// (past the maps a FrameReader keeps), nil against empty lists and maps.
func testFrames(t *testing.T) (*Codec, [][]byte) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := filepath.Glob("testdata/*.json")
	real, _ := filepath.Glob("../../test/testdata/real/*/*.json")
	var batches [][]Record
	for _, p := range append(paths, real...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if recs, _, err := Decode(b, "kas-a", received); err == nil && len(recs) > 0 {
			batches = append(batches, recs)
		}
	}
	for _, n := range []int{2000, 3} {
		body, _, err := simulate.NewEvents(uint64(n), nil).EventList(n)
		if err != nil {
			t.Fatal(err)
		}
		recs, inv := mustDecode(t, body)
		if len(inv) > 0 {
			t.Fatalf("%d invalid items in a synthetic batch", len(inv))
		}
		batches = append(batches, recs)
	}
	odd := batches[0][0]
	odd.Annotations, odd.UserExtra = map[string]string{}, map[string][]string{"scopes": {}, "empty": nil}
	for i := range 3 * maxKeptMapLen {
		odd.Annotations[fmt.Sprint("a/", i)] = fmt.Sprint(i)
		odd.UserExtra[fmt.Sprint("x/", i)] = []string{fmt.Sprint(i), ""}
	}
	odd.UserGroups, odd.SourceIPs, odd.ImpersonatedGroups, odd.Raw = []string{}, nil, []string{""}, nil
	batches = append(batches, []Record{odd, batches[0][0], odd})
	if len(batches) < 10 {
		t.Fatalf("only %d bodies to decode", len(batches))
	}

	var frames [][]byte
	for _, recs := range batches {
		keys := make([]Key, len(recs))
		for i := range recs {
			keys[i] = recs[i].Key()
		}
		f, err := c.AppendFrame(nil, recs[0].APIServer, received, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	return c, frames
}

// TestInternerDecodesAsDecodeFrame decodes the frames of testFrames twice over with one
// Interner, as the correlator does, and compares every record with DecodeFrame's (Raw and
// Annotations aside, which DecodeFrameWithoutRaw leaves out): a shared value is never another
// record's. Then the values that recur are shared, not copied: the second round's records
// hold the first round's lists and maps, and a frame decoded again allocates a fraction of
// what it does without the interner.
func TestInternerDecodesAsDecodeFrame(t *testing.T) {
	c, frames := testFrames(t)
	in := NewInterner()
	var first [][]Record
	shared, values := 0, 0
	for round := range 2 {
		for i, f := range frames {
			want, err := c.DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			for k := range want.Records {
				want.Records[k].Raw, want.Records[k].Annotations = nil, nil
			}
			got, err := c.DecodeFrameWithoutRaw(nil, f, in)
			if err != nil {
				t.Fatalf("round %d, frame %d: %v", round, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d, frame %d: with the interner\n %+v\nDecodeFrame gives\n %+v", round, i, got, want)
			}
			if round == 0 {
				first = append(first, got.Records)
				continue
			}
			for k, r := range got.Records {
				was := first[i][k]
				for _, v := range []struct{ present, same bool }{
					{len(r.UserGroups) > 0, unsafe.SliceData(r.UserGroups) == unsafe.SliceData(was.UserGroups)},
					{len(r.SourceIPs) > 0, unsafe.SliceData(r.SourceIPs) == unsafe.SliceData(was.SourceIPs)},
					{len(r.UserExtra) > 0, reflect.ValueOf(r.UserExtra).Pointer() == reflect.ValueOf(was.UserExtra).Pointer()},
					{r.UserAgent != "", unsafe.StringData(r.UserAgent) == unsafe.StringData(was.UserAgent)},
				} {
					if v.present {
						values++
						if v.same {
							shared++
						}
					}
				}
			}
		}
	}
	// Every value here recurs (the second round), but a value whose slot another holds is
	// read afresh: 2,000 of the extras are one request's own, as the synthetic load makes them.
	t.Logf("%d of %d groups, addresses, extras and agents read again were shared", shared, values)
	if shared < values*7/10 {
		t.Errorf("only %d of %d values read again were shared", shared, values)
	}
	if _, err := c.DecodeFrameWithoutRaw(nil, frames[0][:len(frames[0])-3], in); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("truncated frame: %v", err)
	}
	// What it holds is counted, and bounded by its slots and the longest value it keeps.
	n, held := in.Stats()
	slots := int64(unsafe.Sizeof(in.strs) + unsafe.Sizeof(in.lists) + unsafe.Sizeof(in.maps))
	t.Logf("the interner holds %d values, %d bytes besides its %d bytes of slots", n, held-slots, slots)
	if n == 0 || n > 3*internSlots || held <= slots || held > slots+3*internSlots*8*maxInterned {
		t.Errorf("the interner reports %d values and %d bytes (slots %d)", n, held, slots)
	}

	big := frames[len(frames)-3] // the 2000 synthetic events
	var recs []Record
	allocs := func(in *Interner) float64 {
		return testing.AllocsPerRun(10, func() {
			b, err := c.DecodeFrameWithoutRaw(recs, big, in)
			if err != nil {
				t.Fatal(err)
			}
			recs = b.Records
		})
	}
	fresh, interned := allocs(nil), allocs(in)
	t.Logf("decoding %d records again: %.0f allocations fresh, %.0f with the interner", len(recs), fresh, interned)
	if interned > fresh/2 {
		t.Errorf("with the interner a frame allocates %.0f times, without %.0f: want at most half", interned, fresh)
	}
}

// TestDecodeRefusesTooManyItems: an EventList of more items than the limit is refused with
// ErrTooManyItems (not as a body that is no EventList) by the scanner and by the JSON library's
// path alike, and one of exactly the limit is decoded whole.
func TestDecodeRefusesTooManyItems(t *testing.T) {
	item := func(i int) string {
		return fmt.Sprintf(`{"auditID":"a%d","stage":"ResponseComplete","stageTimestamp":"2026-11-29T10:00:00.000001Z"}`, i)
	}
	list := func(key string, n int) []byte {
		items := make([]string, n)
		for i := range items {
			items[i] = item(i)
		}
		return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","` + key + `":[` + strings.Join(items, " , ") + `]}`)
	}
	const limit = 5
	for _, key := range []string{"items", "Items"} { // the scanner's envelope; the library's
		for _, fast := range []bool{true, false} {
			d := NewDecoder()
			if !fast {
				d = &Decoder{unmarshal: json.Unmarshal}
			}
			d.LimitItems(limit)
			recs, inv, err := d.Decode(list(key, limit), "kas-a", received)
			if err != nil || len(recs) != limit || len(inv) != 0 || recs[limit-1].AuditID != fmt.Sprintf("a%d", limit-1) {
				t.Fatalf("%s, fast %v: %d items: %v, %d records, %d invalid", key, fast, limit, err, len(recs), len(inv))
			}
			recs, inv, err = d.Decode(list(key, limit+1), "kas-a", received)
			if !errors.Is(err, ErrTooManyItems) || errors.Is(err, ErrNotEventList) || recs != nil || inv != nil {
				t.Fatalf("%s, fast %v: %d items: %v, %d records, %d invalid", key, fast, limit+1, err, len(recs), len(inv))
			}
			if !strings.Contains(err.Error(), "5") {
				t.Errorf("the error does not name the limit: %v", err)
			}
		}
	}
	// Past the limit and not valid JSON further on: no EventList, as the library says.
	bad := append(list("items", limit+1)[:len(list("items", limit+1))-2], []byte(`,{"a":tru}]}`)...)
	d := NewDecoder()
	d.LimitItems(limit)
	if _, _, err := d.Decode(bad, "kas-a", received); !errors.Is(err, ErrNotEventList) {
		t.Errorf("an invalid body past the limit: %v", err)
	}
}

// TestManyTinyItemsCostNoMemoryByTheItem: the 2,000,000 `{}` items (a 6 MB body) are
// refused having allocated a small fraction of the body, by either path; before the limit they
// took about 1.5 KB each.
func TestManyTinyItemsCostNoMemoryByTheItem(t *testing.T) {
	const n = 2_000_000
	for _, key := range []string{"items", "ITEMS"} {
		body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","` + key + `":[{}` + strings.Repeat(`,{}`, n-1) + `]}`)
		d := NewDecoder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _, err := d.Decode(body, "kas-a", received)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTooManyItems) {
			t.Fatalf("%s: %v", key, err)
		}
		// The library's path copies the body (goccy/go-json does, to scan it); nothing more.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*uint64(len(body)) {
			t.Errorf("%s: refusing %d items of a %d-byte body allocated %d bytes", key, n, len(body), alloc)
		} else {
			t.Logf("%s: refusing %d items of a %d-byte body allocated %d bytes", key, n, len(body), alloc)
		}
	}
}
