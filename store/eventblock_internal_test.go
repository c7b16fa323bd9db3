package store

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
)

// TestEventBlocksOwnTheirStrings checks that the Native blocks of the writer's frame stream,
// whose records alias the frame reader's memory only until the next frame is decoded, are the
// bytes of the same records decoded into memory of their own.
func TestEventBlocksOwnTheirStrings(t *testing.T) {
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer codec.Close()
	paths, _ := filepath.Glob("../test/testdata/real/*/kas-*.json")
	if len(paths) == 0 {
		t.Fatal("no real captures under test/testdata/real")
	}
	var bodies [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	g := simulate.NewEvents(9, nil)
	for range 8 {
		b, _, err := g.EventList(500)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	at := time.Date(2026, 12, 1, 2, 3, 4, 0, time.UTC)
	var frames [][]byte
	for i, body := range bodies {
		recs, _, err := record.Decode(body, fmt.Sprintf("kas-%d", i%3), at.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]record.Key, len(recs))
		for j := range recs {
			keys[j] = recs[j].Key()
		}
		f, err := codec.AppendFrame(nil, recs[0].APIServer, recs[0].ReceivedAt, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	// As writeFrames streams them: each frame decoded into the reader's memory, its records
	// added to the block, the block encoded when full.
	fr := record.NewFrameReader()
	block := newEventBlock()
	rows := 0
	stream := &blockStream{n: len(frames), block: block, add: func(i int) {
		batch, err := fr.Decode(frames[i])
		if err != nil {
			t.Fatal(err)
		}
		for j := range batch.Records {
			block.add(&batch.Records[j])
			rows++
		}
	}}
	got, err := io.ReadAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	// The same frames decoded into memory of their own, in the same blocks.
	var owned [][]record.Record
	for _, f := range frames {
		batch, err := codec.DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		owned = append(owned, batch.Records)
	}
	block2, decoded := newEventBlock(), 0
	want, err := io.ReadAll(&blockStream{n: len(owned), block: block2, add: func(i int) {
		for j := range owned[i] {
			block2.add(&owned[i][j])
			decoded++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if rows < 3*nativeBlockRows || rows != decoded {
		t.Fatalf("%d rows streamed, %d decoded; want the same, over three blocks", rows, decoded)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the frame stream's blocks (%d bytes) differ from the same records' in memory of their own (%d bytes)", len(got), len(want))
	}
}

// BenchmarkEventBlocks is Go's share of an events insert: the writer's records added to Native
// blocks and encoded, as the engine reads them (BENCHMARKS.md, "the events and chains reach
// the engine as Native blocks"):
//
//	go test ./store -run '^$' -bench EventBlocks -count 5
func BenchmarkEventBlocks(b *testing.B) {
	g := simulate.NewEvents(3, nil)
	var records []record.Record
	for len(records) < 8*nativeBlockRows {
		body, _, err := g.EventList(500)
		if err != nil {
			b.Fatal(err)
		}
		recs, _, err := record.Decode(body, "kas-1", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			b.Fatal(err)
		}
		records = append(records, recs...)
	}
	block := newEventBlock()
	buf := make([]byte, 32<<10)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := io.CopyBuffer(io.Discard, eventStream(block, records), buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(records)), "ns/event")
}

// countingBlock counts the blocks a stream encodes and the most rows one held.
type countingBlock struct {
	*eventBlock
	blocks, most int
}

func (c *countingBlock) encode(b []byte) []byte {
	c.blocks++
	c.most = max(c.most, c.rows())
	return c.eventBlock.encode(b)
}

// Large events (the RequestResponse level carries whole objects) make smaller blocks: a block's
// memory is bounded by its bytes as well as its rows.
func TestEventBlocksBoundTheirBytes(t *testing.T) {
	raw := []byte(`{"kind":"Event","requestObject":"` + strings.Repeat("x", 1<<20) + `"}`)
	records := make([]record.Record, 40)
	for i := range records {
		records[i] = record.Record{APIServer: "kas-1", AuditID: fmt.Sprint(i), Raw: raw}
	}
	block := &countingBlock{eventBlock: newEventBlock()}
	out, err := io.ReadAll(&blockStream{n: len(records), block: block, add: func(i int) { block.add(&records[i]) }})
	if err != nil {
		t.Fatal(err)
	}
	if block.most > 2 || block.blocks < 20 {
		t.Fatalf("40 events of 1 MiB went in %d blocks of at most %d rows; want blocks of 4 MiB or so, two events each", block.blocks, block.most)
	}
	if len(out) < 40<<20 {
		t.Fatalf("%d bytes encoded for 40 MiB of raw JSON", len(out))
	}
}
