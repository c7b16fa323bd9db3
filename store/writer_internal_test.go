package store

import (
	"context"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/simulate"
)

// With WriterOptions.Spool the writer keeps only where the frames it gathers are, not a copy of
// each: Consume's buffered frames hold no payload bytes. Without it each payload is copied.
func TestWriterKeepsNoPayloadsWithTheSpool(t *testing.T) {
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	defer codec.Close()
	sp, err := spool.Open(spool.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Sync: spool.SyncNever, Consumers: []string{ConsumerName}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	at := time.Now().UTC()
	g := simulate.NewEvents(1, func() time.Time { return at })
	for i := range 4 {
		body, _, err := g.EventList(10)
		if err != nil {
			t.Fatal(err)
		}
		recs, _, err := record.Decode(body, "kas-a", at.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]record.Key, len(recs))
		for j := range recs {
			keys[j] = recs[j].Key()
		}
		frame, err := codec.AppendFrame(nil, "kas-a", at, recs, keys)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Append(frame); err != nil {
			t.Fatal(err)
		}
	}
	var entries []spool.Entry
	r := sp.NewReader(0)
	defer r.Close()
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		entries = append(entries, e)
	}
	for _, fromSpool := range []bool{false, true} {
		opts := WriterOptions{FlushInterval: time.Hour}
		if fromSpool {
			opts.Spool = sp
		}
		// No store: nothing is inserted before FlushRows or the interval.
		w := NewWriter(nil, codec, opts)
		if _, err := w.Consume(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
		if len(w.frames) != len(entries) {
			t.Fatalf("spool %v: %d frames gathered, want %d", fromSpool, len(w.frames), len(entries))
		}
		copied := len(w.payloads)
		for _, f := range w.frames {
			copied += len(f.payload)
		}
		if fromSpool && copied != 0 {
			t.Errorf("with the spool the writer holds %d bytes of payloads, want none", copied)
		}
		if !fromSpool && copied == 0 {
			t.Errorf("without the spool the writer holds no payloads: the comparison says nothing")
		}
	}
}
