package ship

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/spool"
)

var stream = strings.Repeat("0f", 16)

func frame(pos uint64, payload string) Frame {
	return Frame{Pos: pos, End: pos + spool.FrameOverhead + uint64(len(payload)), Payload: []byte(payload)}
}

func TestRequestRoundTrip(t *testing.T) {
	h := Header{Stream: stream, Head: 99, HeadTime: time.Unix(1700000000, 5).UTC(), SentAt: time.Unix(1700000001, 0).UTC(), SpoolMaxBytes: 1 << 30,
		Aggregators: []AggregatorState{{Name: "agg-0", BacklogBytes: 7, Skipped: Skipped{Events: 3, Last: time.Unix(1700000000, 0).UTC()}}}}
	frames := []Frame{frame(8, "abc"), frame(19, "de"), frame(100, "f")}
	b, err := AppendRequest(nil, h, frames)
	if err != nil {
		t.Fatal(err)
	}
	req, err := ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req.Header, h) || !reflect.DeepEqual(req.Frames, frames) {
		t.Fatalf("got %+v, want %+v %+v", req, h, frames)
	}
	// A heartbeat: the header alone.
	b, _ = AppendRequest(nil, h, nil)
	if req, err := ParseRequest(b); err != nil || len(req.Frames) != 0 {
		t.Fatalf("heartbeat: %+v %v", req, err)
	}
}

func TestParseRequestRefusesWhatIsNotARequest(t *testing.T) {
	h := Header{Stream: stream}
	enc := func(h Header, frames ...Frame) []byte {
		b, err := AppendRequest(nil, h, frames)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	raw := func(hdr string, rest ...byte) []byte {
		b := append([]byte(magic), binary.AppendUvarint(nil, uint64(len(hdr)))...)
		return append(append(b, hdr...), rest...)
	}
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"another version", append([]byte("PTSHIP\x00\x02"), enc(h)[8:]...), "magic"},
		{"a header longer than the body", raw(`{"stream":"` + stream + `"}`)[:20], "header length"},
		{"a header over the limit", append([]byte(magic), binary.AppendUvarint(nil, MaxHeaderBytes+1)...), "header length"},
		{"a header not JSON", raw(`{`), "header"},
		{"no stream", raw(`{}`), "stream"},
		{"a stream not hex", raw(`{"stream":"` + strings.Repeat("g", 32) + `"}`), "stream"},
		{"an aggregator name with a slash", enc(Header{Stream: stream, Aggregators: []AggregatorState{{Name: "a/b"}}}), "aggregator name"},
		{"too many aggregators", enc(Header{Stream: stream, Aggregators: make([]AggregatorState, MaxAggregators+1)}), "aggregators"},
		{"an empty frame", raw(`{"stream":"`+stream+`"}`, 0, 8, 0), "length"},
		{"a frame longer than the body", raw(`{"stream":"`+stream+`"}`, 0, 12, 4, 'a'), "length"},
		{"a truncated position", raw(`{"stream":"`+stream+`"}`, 0x80), "position"},
		{"an end that is not its position plus its length", enc(h, Frame{Pos: 0, End: 20, Payload: []byte("a")}), "cannot end at"},
		{"an end before its position", enc(h, Frame{Pos: 20, End: 10, Payload: []byte("a")}), "cannot end at"},
		{"frames out of order", enc(h, frame(100, "a"), frame(50, "b")), "before the end"},
		{"frames that overlap", enc(h, frame(100, "abc"), frame(110, "b")), "before the end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRequest(c.body)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want ErrBadRequest saying %q", err, c.want)
			}
		})
	}
	many := make([]Frame, 0, MaxFrames+1)
	for i := range MaxFrames + 1 {
		many = append(many, frame(uint64(i)*10, "a"))
	}
	if _, err := AppendRequest(nil, h, many); err == nil {
		t.Fatal("AppendRequest took more than MaxFrames frames")
	}
	var body []byte
	body = append(body, enc(h)...)
	for _, f := range many {
		body = binary.AppendUvarint(body, f.Pos)
		body = binary.AppendUvarint(body, f.End)
		body = binary.AppendUvarint(body, 1)
		body = append(body, 'a')
	}
	if _, err := ParseRequest(body); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("more than MaxFrames: %v", err)
	}
}

// FuzzParseRequest checks that ParseRequest never panics, that what it takes keeps the
// documented bounds and order, and that what it takes encodes to a request that parses the same.
func FuzzParseRequest(f *testing.F) {
	h := Header{Stream: stream, Head: 5, Aggregators: []AggregatorState{{Name: "agg-0"}}}
	for _, frames := range [][]Frame{nil, {frame(8, "abc")}, {frame(8, "abc"), frame(19, "xyz"), frame(40, "q")}} {
		b, _ := AppendRequest(nil, h, frames)
		f.Add(b)
	}
	f.Add([]byte(magic))
	f.Add([]byte("PTSHIP\x00\x01\x02{}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseRequest(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error not ErrBadRequest: %v", err)
			}
			return
		}
		if len(req.Frames) > MaxFrames || len(req.Header.Aggregators) > MaxAggregators {
			t.Fatalf("%d frames, %d aggregators", len(req.Frames), len(req.Header.Aggregators))
		}
		var prev uint64
		for i, fr := range req.Frames {
			if fr.Pos < prev || fr.End != fr.Pos+spool.FrameOverhead+uint64(len(fr.Payload)) || len(fr.Payload) == 0 {
				t.Fatalf("frame %d: %d..%d with %d bytes after %d", i, fr.Pos, fr.End, len(fr.Payload), prev)
			}
			if !bytes.Contains(body, fr.Payload) {
				t.Fatalf("frame %d's payload is not from the body", i)
			}
			prev = fr.End
		}
		b, err := AppendRequest(nil, req.Header, req.Frames)
		if err != nil {
			t.Fatalf("a parsed request does not encode: %v", err)
		}
		again, err := ParseRequest(b)
		if err != nil {
			t.Fatalf("a parsed request encodes to one that does not parse: %v", err)
		}
		if len(again.Frames) != len(req.Frames) {
			t.Fatalf("%d frames, then %d", len(req.Frames), len(again.Frames))
		}
		for i := range req.Frames {
			if !reflect.DeepEqual(again.Frames[i], req.Frames[i]) {
				t.Fatalf("frame %d changed", i)
			}
		}
	})
}
