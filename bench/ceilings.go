package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/loadgen"
	"github.com/peertrail/peertrail/store"
)

// DecodeOnly is the receiver's ceiling: loadgen, as fast as possible, with the same senders,
// batches and batches in flight as the run, against an HTTP server in this process that only
// reads each body, decodes it and answers 200: no authentication, duplicate check, spool or
// fsync. With ownDecoder it decodes with ingest/record's Decoder (the receiver's own,
// which reads only what peertrail keeps); otherwise with encoding/json into the audit.k8s.io/v1
// EventList of k8s.io/apiserver, as a receiver built on the Kubernetes types decodes (the
// baseline of ingest's BenchmarkDecodeOnly). It returns events/s.
func DecodeOnly(ctx context.Context, t *Traffic, batches, inflight int, ownDecoder bool) (float64, error) {
	name := "decode-only ceiling (encoding/json)"
	if ownDecoder {
		name = "decode-only ceiling (peertrail's decoder)"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("%s: listen: %w", name, err)
	}
	type mem struct {
		body []byte
		dec  *record.Decoder
	}
	pool := sync.Pool{New: func() any { return &mem{dec: record.NewDecoder()} }}
	var (
		mu     sync.Mutex
		failed error
	)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := pool.Get().(*mem)
		defer pool.Put(m)
		b, err := readAll(m.body[:0], r.Body)
		m.body = b
		if err == nil {
			if ownDecoder {
				_, _, err = m.dec.Decode(b, strings.TrimPrefix(r.URL.Path, "/audit/"), time.Now())
			} else {
				var list auditv1.EventList
				if err = json.Unmarshal(b, &list); err == nil && len(list.Items) == 0 {
					err = errors.New("no items")
				}
			}
		}
		if err != nil {
			mu.Lock()
			failed = err
			mu.Unlock()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	res, err := loadgen.Run(ctx, loadgen.Options{URL: "http://" + ln.Addr().String(), APIServers: t.APIServers, Batch: t.Batch,
		Batches: batches, Inflight: inflight, Client: client, Bodies: t.Body})
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if failed != nil {
		return 0, fmt.Errorf("%s: a batch did not decode: %w", name, failed)
	}
	if err := res.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return res.AckedPerSec, nil
}

// readAll reads r to the end into b's memory.
func readAll(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// bulkChunk is how many batches one bulk insert holds: 100,000 events of 400, the operation of
// store's BenchmarkInsert engine_bulk_native.
const bulkChunk = 250

// Bulk is what EngineBulk measured.
type Bulk struct {
	// EventsPerSec is the events' inserts alone: events/s.
	EventsPerSec float64
	// StorePerSec counts the chains' inserts too: events/s over the time of both. The whole
	// process cannot store faster end to end: this leaves out the merges the inserts cause
	// and all the work before the engine.
	StorePerSec    float64
	Events, Chains int
}

// EngineBulk is the store's ceiling: the embedded engine, opened in this process on dataDir
// (the server must not run meanwhile: both would share the two cores), inserts the same
// rows the run sent (the batches decoded by ingest/record and encoded beforehand as the writer
// sends them, Native blocks) into peertrail.events, materialized views
// included, in streaming inserts of 100,000 rows; after each, chainsPerEvent times as many
// chains into peertrail.chains, views included, taken in turn from chains (rows of the run's
// own chains table: what the correlator wrote for these requests, in number and shape). Only
// the inserts are timed.
func EngineBulk(ctx context.Context, t *Traffic, batches int, dataDir string, chains []*chain.Chain, chainsPerEvent float64) (Bulk, error) {
	var res Bulk
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{DataDir: dataDir})
	if err != nil {
		return res, fmt.Errorf("engine bulk ceiling: %w", err)
	}
	defer s.Close()
	if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
		return res, fmt.Errorf("engine bulk ceiling: migrate: %w", err)
	}
	bodies := make([]loadgen.Body, len(t.APIServers))
	for si := range bodies {
		if bodies[si], err = t.Body(si); err != nil {
			return res, err
		}
	}
	var (
		events, withChains time.Duration
		body               []byte
		nextChain          int
		owed               float64 // chains due to the events inserted so far, not yet inserted
	)
	for from := 0; from < batches; from += bulkChunk / len(bodies) {
		to := min(batches, from+max(1, bulkChunk/len(bodies)))
		var all []record.Record
		for seq := from; seq < to; seq++ {
			for si, b := range bodies {
				body = b.AppendRender(body, si, seq)
				// Decode copies what the records keep, so the body's memory is reused.
				recs, _, err := record.Decode(body, t.APIServers[si], time.Now())
				if err != nil {
					return res, fmt.Errorf("engine bulk ceiling: decode: %w", err)
				}
				all = append(all, recs...)
			}
		}
		data, err := store.EncodeEventsNative(all)
		if err != nil {
			return res, fmt.Errorf("engine bulk ceiling: encode: %w", err)
		}
		var chainData []byte
		if len(chains) > 0 {
			owed += float64(len(all)) * chainsPerEvent
			batch := make([]*chain.Chain, 0, int(owed))
			for ; owed >= 1; owed-- {
				batch = append(batch, chains[nextChain%len(chains)])
				nextChain++
			}
			if chainData, err = store.EncodeChainsNative(batch); err != nil {
				return res, fmt.Errorf("engine bulk ceiling: encode chains: %w", err)
			}
			res.Chains += len(batch)
		}
		t0 := time.Now()
		if err := s.InsertNative(ctx, store.EventsTable, store.EventColumns, data); err != nil {
			return res, fmt.Errorf("engine bulk ceiling: insert: %w", err)
		}
		events += time.Since(t0)
		if len(chainData) > 0 {
			if err := s.InsertNative(ctx, store.ChainsTable, store.ChainColumns, chainData); err != nil {
				return res, fmt.Errorf("engine bulk ceiling: insert chains: %w", err)
			}
		}
		withChains += time.Since(t0)
		res.Events += len(all)
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
	if events > 0 {
		res.EventsPerSec = float64(res.Events) / events.Seconds()
	}
	if withChains > 0 && res.Chains > 0 {
		res.StorePerSec = float64(res.Events) / withChains.Seconds()
	}
	return res, nil
}
