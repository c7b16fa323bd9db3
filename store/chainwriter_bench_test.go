package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
)

// BenchmarkChainWriter measures the chain sink (Writer.WriteChains) against the engine's own
// bulk insert of the same kind of rows, in the same operation, so that the ratio holds on a
// busy machine (BENCHMARKS.md, store, "Chains: the writer next to the engine's own insert"):
//
//	go test ./store -run '^$' -bench ChainWriter -benchtime 3x -timeout 30m
//
// Each operation writes benchChains fresh final chains (a third proxied with both sides, the
// rest local), first received after every chain the table holds: the engine's own insert of
// their Native blocks (as the writer sends them), encoded beforehand, in one insert
// (engine-chains/s, the ceiling) and in the writer's batch sizes (engine-batches-chains/s:
// each insert costs the engine parts of the table and of each rollup), and through the writer
// in the correlator's batch sizes: 50,000 (its flushBatch, the most one WriteChains gets, in a
// burst's backlog) and 10,000. One writer serves every operation, as in a process, so what it
// keeps between batches is in retained-B/chain.
func BenchmarkChainWriter(b *testing.B) {
	s := engine(b)
	ctx := context.Background()
	for _, batch := range []int{10_000, 50_000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			var engineDur, engineBatchDur, writerDur time.Duration
			var allocBytes, allocs uint64
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			heapBefore := ms0.HeapAlloc
			codec, err := record.NewCodec()
			if err != nil {
				b.Fatal(err)
			}
			defer codec.Close()
			w := store.NewWriter(s, codec, store.WriterOptions{})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				// The ceiling: the same kind of rows, Native blocks encoded beforehand, one insert.
				data, err := store.EncodeChainsNative(pointers(freshChains(b)))
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := s.InsertNative(ctx, store.ChainsTable, store.ChainColumns, data); err != nil {
					b.Fatal(err)
				}
				engineDur += time.Since(start)
				data = nil

				// The engine's own insert in the writer's batch sizes: what an insert costs
				// the engine apart from its rows (parts of the table and of each rollup).
				var pieces [][]byte
				ref := pointers(freshChains(b))
				for len(ref) > 0 {
					n := min(batch, len(ref))
					data, err := store.EncodeChainsNative(ref[:n])
					if err != nil {
						b.Fatal(err)
					}
					pieces = append(pieces, data)
					ref = ref[n:]
				}
				start = time.Now()
				for _, data := range pieces {
					if err := s.InsertNative(ctx, store.ChainsTable, store.ChainColumns, data); err != nil {
						b.Fatal(err)
					}
				}
				engineBatchDur += time.Since(start)
				pieces = nil

				chains := freshChains(b)
				runtime.ReadMemStats(&ms0)
				b.StartTimer()
				start = time.Now()
				for len(chains) > 0 {
					n := min(batch, len(chains))
					// The slice belongs to the sink once passed (correlate.Sink).
					if err := w.WriteChains(ctx, chains[:n:n]); err != nil {
						b.Fatal(err)
					}
					chains = chains[n:]
				}
				writerDur += time.Since(start)
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				allocBytes += ms1.TotalAlloc - ms0.TotalAlloc
				allocs += ms1.Mallocs - ms0.Mallocs
				b.StartTimer()
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			total := float64(benchChains * b.N)
			writerRate := total / writerDur.Seconds()
			engineRate := total / engineDur.Seconds()
			b.ReportMetric(writerRate, "chains/s")
			b.ReportMetric(engineRate, "engine-chains/s")
			b.ReportMetric(writerRate/engineRate, "ratio-to-engine")
			b.ReportMetric(total/engineBatchDur.Seconds(), "engine-batches-chains/s")
			b.ReportMetric(writerDur.Seconds()/engineBatchDur.Seconds(), "time-vs-engine-batches")
			b.ReportMetric(float64(allocBytes)/total, "B/chain")
			b.ReportMetric(float64(allocs)/total, "allocs/chain")
			b.ReportMetric((float64(ms1.HeapAlloc)-float64(heapBefore))/total, "retained-B/chain")
			runtime.KeepAlive(w)
		})
	}
}

// benchChains is one BenchmarkChainWriter operation: 100,000 chains, 20 s of a burst's
// finalised chains (5,000 a second).
const benchChains = 100_000

var chainSeq struct {
	mu    sync.Mutex
	n     int
	start time.Time
}

// freshChains makes benchChains final chains no earlier operation wrote, in this process or an
// earlier one on the same data directory: each operation owns one minute, after the newest
// first_received the chains table held when the process began and a day ahead of the tests'.
func freshChains(b *testing.B) []chain.Chain {
	b.Helper()
	chainSeq.mu.Lock()
	if chainSeq.start.IsZero() {
		chainSeq.start = time.Now().UTC().Truncate(time.Hour).Add(26 * time.Hour)
		newest, err := store.ParseTime(scalar(b, engine(b), "SELECT max(first_received) FROM peertrail.chains", nil))
		if err != nil {
			b.Fatal(err)
		}
		if newest = newest.Truncate(time.Minute).Add(time.Minute); newest.After(chainSeq.start) {
			chainSeq.start = newest
		}
	}
	chainSeq.n++
	base := chainSeq.start.Add(time.Duration(chainSeq.n) * time.Minute)
	chainSeq.mu.Unlock()

	apiservers := []string{"bench-chain-a", "bench-chain-b", "bench-chain-c", "bench-chain-d"}
	resources := []string{"pods", "configmaps", "leases", "deployments", "secrets", "podgroups"}
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
	out := make([]chain.Chain, benchChains)
	for i := range out {
		first := base.Add(time.Duration(i) * 200 * time.Microsecond) // 20 s of chains
		auditID := fmt.Sprintf("%08x-%04x-4000-8000-%012x", uint32(base.Unix()), i%0x10000, i)
		entryName := apiservers[i%len(apiservers)]
		res := resources[i%len(resources)]
		entry := &chain.Side{
			APIServer: entryName, Code: 200, User: "system:serviceaccount:kube-system:replicaset-controller",
			UID: "6f1c2d3e-0000-4000-8000-" + strconv.Itoa(100000000000+i%1000), Groups: groups,
			SourceIPs: []string{"10.0.0." + strconv.Itoa(10+i%50)}, UserAgent: "kube-controller-manager/v1.34.1 (linux/amd64) kubernetes/abc1234/system:serviceaccount:kube-system:replicaset-controller",
			RequestReceived: first.Add(-3 * time.Millisecond), Completed: first.Add(-time.Millisecond),
			Stages: []string{"ResponseComplete"},
		}
		c := chain.Chain{
			ID:      auditID + "\x00" + entryName + "\x00" + strconv.FormatInt(entry.RequestReceived.UnixNano(), 10),
			AuditID: auditID, State: chain.StateFinal, Class: chain.ClassLocal,
			Explanation: entryName + " served the request itself (no peer record)",
			Entry:       entry, Verb: "get", RequestURI: "/api/v1/namespaces/kube-system/" + res + "/obj-" + strconv.Itoa(i%5000),
			Version: "v1", Resource: res, Namespace: "kube-system", Name: "obj-" + strconv.Itoa(i%5000),
			User: entry.User, Code: 200, EntryDurationSeconds: 0.002,
			FirstReceived: first, LastReceived: first, Records: 1, Revision: 1,
		}
		if i%3 == 0 {
			peerName := apiservers[(i+1)%len(apiservers)]
			peer := *entry
			peer.APIServer = peerName
			peer.SourceIPs = []string{entry.SourceIPs[0], "192.168.0.1"}
			peer.HasObjects = true
			peer.RequestReceived = entry.RequestReceived.Add(500 * time.Microsecond)
			peer.Completed = entry.Completed.Add(-500 * time.Microsecond)
			entry.Code = 200
			c.Peer = &peer
			c.Class = chain.ClassProxied
			c.Group, c.Version, c.Resource = "scheduling.k8s.io", "v1alpha2", "podgroups"
			c.RequestURI = "/apis/scheduling.k8s.io/v1alpha2/namespaces/kube-system/podgroups/obj-" + strconv.Itoa(i%5000)
			c.Explanation = fmt.Sprintf("%s forwarded the request to %s, which answered 200 (roles: hop evidence)", entryName, peerName)
			c.PeerDurationSeconds, c.ForwardingOverheadSeconds = 0.001, 0.001
			c.LastReceived = first.Add(2 * time.Millisecond)
			c.Records = 2
		}
		out[i] = c
	}
	return out
}

// pointers are the chains of cs, as a sink takes them.
func pointers(cs []chain.Chain) []*chain.Chain {
	out := make([]*chain.Chain, len(cs))
	for i := range cs {
		out[i] = &cs[i]
	}
	return out
}
