package record

import (
	"testing"

	"github.com/peertrail/peertrail/simulate"
)

// BenchmarkDecodeFrame is a spool consumer decoding a frame of 400 synthetic events:
// DecodeFrame, whose records own copies of everything (the baseline, and what the events
// writer did before), against a FrameReader, whose records alias its memory, and the
// correlator's decoding (without Raw) with no interner and with one.
//
//	go test ./ingest/record -run '^$' -bench DecodeFrame -benchmem -count 3
func BenchmarkDecodeFrame(b *testing.B) {
	c, recs, keys := benchBatch(b)
	frame, err := c.AppendFrame(nil, "kas-a", received, recs, keys)
	if err != nil {
		b.Fatal(err)
	}
	var recs0, recs1 []Record
	in := NewInterner()
	decoders := map[string]func([]byte) (Batch, error){
		"DecodeFrame": c.DecodeFrame,
		"FrameReader": NewFrameReader().Decode,
		"WithoutRaw": func(f []byte) (Batch, error) {
			b, err := c.DecodeFrameWithoutRaw(recs0, f, nil)
			recs0 = b.Records
			return b, err
		},
		"WithoutRawInterned": func(f []byte) (Batch, error) {
			b, err := c.DecodeFrameWithoutRaw(recs1, f, in)
			recs1 = b.Records
			return b, err
		},
	}
	for _, name := range []string{"DecodeFrame", "FrameReader", "WithoutRaw", "WithoutRawInterned"} {
		b.Run(name, func(b *testing.B) {
			decode := decoders[name]
			b.ReportAllocs()
			for b.Loop() {
				if batch, err := decode(frame); err != nil || len(batch.Records) != len(recs) {
					b.Fatalf("%d records, %v", len(batch.Records), err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
		})
	}
}

// BenchmarkDecode is the receiver's decoding of a webhook body of 400 synthetic events into
// records (Decoder.Decode: the list split into its items, then each item read), on one core:
//
//	go test ./ingest/record -run '^$' -bench '^BenchmarkDecode$' -cpu 1 -count 5
func BenchmarkDecode(b *testing.B) {
	tmpl, err := simulate.NewTemplate(simulate.NewEvents(5, nil), 400)
	if err != nil {
		b.Fatal(err)
	}
	body := tmpl.Render(0, 1)
	d := NewDecoder()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if recs, inv, err := d.Decode(body, "kas-a", received); err != nil || len(recs) != 400 || len(inv) != 0 {
			b.Fatalf("%d records, %d invalid, %v", len(recs), len(inv), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*400), "ns/event")
}

// BenchmarkAppendFrame is the receiver encoding an accepted batch of 400 synthetic events into
// its spool frame, on the path of the acknowledgement:
//
//	go test ./ingest/record -run '^$' -bench AppendFrame -count 3
func BenchmarkAppendFrame(b *testing.B) {
	c, recs, keys := benchBatch(b)
	var (
		frame []byte
		err   error
	)
	b.ReportAllocs()
	for b.Loop() {
		if frame, err = c.AppendFrame(frame[:0], "kas-a", received, recs, keys); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(frame)), "frame-bytes")
}

// benchBatch is a codec and the records and keys of a batch of 400 synthetic events.
func benchBatch(b *testing.B) (*Codec, []Record, []Key) {
	b.Helper()
	body, _, err := simulate.NewEvents(5, nil).EventList(400)
	if err != nil {
		b.Fatal(err)
	}
	recs, inv, err := Decode(body, "kas-a", received)
	if err != nil || len(inv) > 0 {
		b.Fatalf("decode: %v, %d invalid", err, len(inv))
	}
	keys := make([]Key, len(recs))
	for i := range recs {
		keys[i] = recs[i].Key()
	}
	c, err := NewCodec()
	if err != nil {
		b.Fatal(err)
	}
	return c, recs, keys
}
