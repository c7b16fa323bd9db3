package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/ingest/dedup"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/ship"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/bufpool"
	"github.com/peertrail/peertrail/simulate"
)

// BenchmarkAckLatency measures what an apiserver waits for: three senders post batches of 400
// events over loopback HTTP at 10,000 events/s in all, open loop (a slow answer does not hold
// back the next batch), and each latency runs from sending the request to reading the whole
// answer. The figures are ack-p50-ms, ack-p99-ms and ack-max-ms; one op is one batch, so ns/op
// is the pacing interval and not a cost. -benchtime 1500x is a minute.
//
//   - decode-only is the baseline the issue sets, behind the same HTTP server: it decodes each
//     body with encoding/json into auditv1.EventList and answers 200.
//
//   - receiver is the whole acknowledged path (BenchmarkReceiver's) with the spool on disk,
//     fsynced before each answer (the default policy), while the spool's own consumer, the
//     duplicate index's persister, drains it.
//
//   - agent is the receiver as peertrail agent runs it (the HA layout): the same path, while its
//     spool is also relayed, frame by frame as it comes, to two aggregators, each a Receiver
//     with agents in this process. The aggregators stand for processes on machines of their
//     own: their spools do not fsync, which on this machine's one disk would queue behind (and
//     ahead of) the agent's own fsyncs, as a deployed agent's are not.
//
// None has the correlator or the store running beside it on the same cores; BENCHMARKS.md
// gives what `peertrail serve` measures with them. The senders run in this process and share its
// cores, so if anything the figures are pessimistic; they render bodies into reused buffers, so
// the server's garbage collector sees the server's garbage only.
func BenchmarkAckLatency(b *testing.B) {
	b.Run("decode-only", func(b *testing.B) {
		paceBatches(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			var list auditv1.EventList
			if err == nil {
				err = json.Unmarshal(body, &list)
			}
			if err != nil || len(list.Items) != benchBatch {
				http.Error(w, fmt.Sprintf("%d items: %v", len(list.Items), err), http.StatusBadRequest)
			}
		}))
	})
	b.Run("receiver", func(b *testing.B) {
		dir := b.TempDir()
		keys := filepath.Join(dir, "dedup")
		if err := os.MkdirAll(keys, 0o750); err != nil {
			b.Fatal(err)
		}
		sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool"), MaxBytes: 16 << 30,
			Consumers: []string{dedup.ConsumerName}})
		if err != nil {
			b.Fatal(err)
		}
		defer sp.Close()
		dl, err := OpenDeadLetters(filepath.Join(dir, "deadletter"), 1<<30, true)
		if err != nil {
			b.Fatal(err)
		}
		codec, err := record.NewCodec()
		if err != nil {
			b.Fatal(err)
		}
		discard := slog.New(slog.DiscardHandler)
		rc := NewReceiver(Options{MaxBodyBytes: 32 << 20, AcceptUnknown: true}, sp,
			dedup.NewIndex(10*time.Minute), codec, dl, discard)
		mux := http.NewServeMux()
		rc.Register(mux)

		ctx, cancel := context.WithCancel(b.Context())
		var persister sync.WaitGroup
		persister.Go(func() {
			p := &dedup.Persister{Dir: keys, Horizon: 10 * time.Minute, Log: discard}
			if err := sp.Run(ctx, dedup.ConsumerName, p, spool.RunOptions{}); err != nil {
				b.Error(err)
			}
		})
		defer persister.Wait()
		defer cancel()
		paceBatches(b, mux)
	})
	b.Run("agent", func(b *testing.B) { agentAckLatency(b, false) })
	b.Run("agent-remote", func(b *testing.B) { agentAckLatency(b, true) })
}

// agentAckLatency is the agent's acknowledged path while two aggregators take every frame as it
// comes: in this process (remote false: their decoding, checking and storing share the cores),
// or standing for aggregators on machines of their own (remote: they only take the request).
func agentAckLatency(b *testing.B, remote bool) {
	discard := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(b.Context())
	var running sync.WaitGroup
	defer running.Wait()
	defer cancel()
	codec, err := record.NewCodec()
	if err != nil {
		b.Fatal(err)
	}
	// openReceiver makes a receiver over a spool of its own, its persister running.
	openReceiver := func(dir string, sync spool.SyncPolicy, opts Options, consumers ...string) (*Receiver, *spool.Spool) {
		keys := filepath.Join(dir, "dedup")
		if err := os.MkdirAll(keys, 0o750); err != nil {
			b.Fatal(err)
		}
		sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool"), MaxBytes: 16 << 30, Sync: sync,
			Consumers: append([]string{dedup.ConsumerName}, consumers...)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sp.Close() })
		dl, err := OpenDeadLetters(filepath.Join(dir, "deadletter"), 1<<30, true)
		if err != nil {
			b.Fatal(err)
		}
		running.Go(func() {
			p := &dedup.Persister{Dir: keys, Horizon: 10 * time.Minute, Log: discard}
			if err := sp.Run(ctx, dedup.ConsumerName, p, spool.RunOptions{}); err != nil {
				b.Error(err)
			}
		})
		opts.MaxBodyBytes = 32 << 20
		return NewReceiver(opts, sp, dedup.NewIndex(10*time.Minute), codec, dl, discard), sp
	}
	auth, err := NewAuthenticator(AuthOptions{AgentTokens: []AgentToken{{"node", "agent-token"}}})
	if err != nil {
		b.Fatal(err)
	}
	var aggs []ship.Aggregator
	for i := range 2 {
		if remote {
			// An aggregator on a machine of its own, as deployed: here it only reads the
			// request and checks its framing, so that what shares the cores is the agent's
			// own work (reading its frames back, building and posting two requests).
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err == nil {
					_, err = ship.ParseRequest(body)
				}
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
				}
			}))
			b.Cleanup(srv.Close)
			aggs = append(aggs, ship.Aggregator{Name: fmt.Sprintf("agg-%d", i), URL: srv.URL, Client: &http.Client{Timeout: time.Minute}})
			continue
		}
		rc, _ := openReceiver(filepath.Join(b.TempDir(), fmt.Sprint(i)), spool.SyncNever, Options{AcceptUnknown: true, Auth: auth, RequireAuth: true,
			Agents: []RelayAgent{{Name: "node", APIServers: []string{"kas-0", "kas-1", "kas-2"}}}})
		mux := http.NewServeMux()
		rc.Register(mux)
		srv := httptest.NewServer(mux)
		b.Cleanup(srv.Close)
		aggs = append(aggs, ship.Aggregator{Name: fmt.Sprintf("agg-%d", i), URL: srv.URL,
			Client: &http.Client{Transport: bearerTransport{srv.Client().Transport, "agent-token"}, Timeout: time.Minute}})
	}
	rc, sp := openReceiver(b.TempDir(), spool.SyncAlways, Options{AcceptUnknown: true}, ship.ConsumerName("agg-0"), ship.ConsumerName("agg-1"))
	fleet, err := ship.NewFleet(ship.FleetOptions{Spool: sp, Log: discard}, aggs)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range fleet.Shippers() {
		running.Go(func() {
			if err := sp.Run(ctx, ship.ConsumerName(s.Name()), s, spool.RunOptions{RetryMax: 2 * time.Second}); err != nil {
				b.Error(err)
			}
		})
	}
	mux := http.NewServeMux()
	rc.Register(mux)
	paceBatches(b, mux)
	for _, s := range fleet.Shippers() {
		if lag := sp.Stats().Lag[ship.ConsumerName(s.Name())]; lag > 64<<20 {
			b.Errorf("aggregator %s is %d bytes behind at the end: the relaying did not keep up", s.Name(), lag)
		}
	}
}

// bearerTransport sends a bearer token on every request.
type bearerTransport struct {
	rt    http.RoundTripper
	token string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.rt.RoundTrip(r)
}

// paceBatches sends b.N batches to h at 10,000 events/s from three senders and reports the
// acknowledge latency quantiles.
func paceBatches(b *testing.B, h http.Handler) {
	const rate, senders = 10000, 3
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64

	tmpls := make([]simulate.Template, senders)
	for i := range tmpls {
		tmpl, err := simulate.NewTemplate(simulate.NewEvents(uint64(i+1), nil), benchBatch)
		if err != nil {
			b.Fatal(err)
		}
		tmpls[i] = tmpl
	}
	interval := time.Second * benchBatch / rate
	// The senders' bodies are reused, so that the garbage the server collects is its own, as
	// it is when apiservers are other processes.
	bodies := bufpool.New(64, 4<<20)
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
		inflight  sync.WaitGroup
	)
	faults0 := minorFaults(b)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		sender := i % senders
		body := tmpls[sender].AppendRender(bodies.Get(), sender, i/senders)
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		inflight.Go(func() {
			defer bodies.Put(body)
			t0 := time.Now()
			resp, err := client.Post(fmt.Sprintf("%s/audit/kas-%d", srv.URL, sender), "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat := time.Since(t0)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("batch %d: status %d, %v", i, resp.StatusCode, err)
				return
			}
			mu.Lock()
			latencies = append(latencies, lat)
			mu.Unlock()
		})
	}
	inflight.Wait()
	b.StopTimer()
	slices.Sort(latencies)
	q := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(.5), "ack-p50-ms")
	b.ReportMetric(q(.99), "ack-p99-ms")
	b.ReportMetric(q(1), "ack-max-ms")
	b.ReportMetric(float64(len(latencies)*benchBatch)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64(minorFaults(b)-faults0)/float64(b.N), "faults/op")
}

// minorFaults is the process's count of page faults served without I/O: touching memory the
// kernel had not yet given it, which on some VMs costs more than the code that touched it.
func minorFaults(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Minflt
}
