// Package bench measures `peertrail serve` as it is deployed, end to end: `peertrail bench` is
// its command line.
//
// A run starts the server as a child process (the same binary, its embedded store by default,
// plain HTTP on loopback, each apiserver with a token of its own), sends it audit batches with
// package loadgen (at a fixed rate or as fast as possible, several apiservers, both sides of
// forwarded requests: Traffic), waits until every acknowledged event is in peertrail.events
// and every request's chain is final in peertrail.chains, and reads what it cost from the
// kernel (/proc: CPU seconds, peak RSS) and the engine (system.tables: bytes on disk). In the
// same run, so that a busy machine moves both alike, it measures two ceilings on the same
// batches: decoding alone (DecodeOnly, with peertrail's decoder and with encoding/json into the
// Kubernetes audit types) and the engine's own bulk insert of the same rows, the events alone
// and with the run's chains (EngineBulk), each with the server stopped.
package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/loadgen"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/store"
)

// Options describe one run.
type Options struct {
	// Exe is the peertrail binary whose serve is measured (usually os.Executable()); Env is
	// its environment (nil: this process's).
	Exe string
	Env []string
	// ServeArgs are more flags for serve (they win over the run's).
	ServeArgs []string
	// APIServers are the senders' names.
	APIServers []string
	// Rate is events per second over all apiservers; 0 sends as fast as the server
	// acknowledges, Inflight batches per apiserver at a time.
	Rate, Inflight int
	// Events is how many to send; 0: Rate times Duration.
	Events   int
	Duration time.Duration
	// Batch is events per webhook batch; ProxiedFraction the share of requests forwarded.
	Batch           int
	ProxiedFraction float64
	// Seed makes the events (0: a random one, so that a kept DataDir takes a second run).
	Seed uint64
	// DataDir is serve's --data-dir (empty: a temporary one, removed afterwards).
	DataDir string
	// ChainWindow is serve's --chain-window (0: serve's default, as deployed).
	ChainWindow time.Duration
	// CeilingEvents bounds the events the ceilings are measured on (0: as many as the run).
	CeilingEvents int
	// ProfileDir, when set, has serve profile itself (--enable-pprof): a CPU profile of
	// ProfileSeconds from the start of the load, and heap profiles when the last batch was
	// acknowledged and when everything was stored.
	ProfileDir     string
	ProfileSeconds int
	// Stall is how long the stored counts may stand still before the run gives up (0: 5 min).
	Stall time.Duration
	// Layout "ha" also runs the HA layout on the same batches after the one serve (Result.HA):
	// an agent per apiserver, relaying to Aggregators aggregators (0: DefaultAggregators). ""
	// or "one": the one serve alone.
	Layout      string
	Aggregators int
	// NiceAggregators runs the HA layout's aggregators at nice 19, standing for machines of
	// their own: the agents and the load get the cores first, as they would beside
	// aggregators elsewhere.
	NiceAggregators bool
	// Progress gets a line a second while the server runs (nil: none).
	Progress io.Writer
	Log      *slog.Logger
}

// Result is what a run measured.
type Result struct {
	APIServers      int     `json:"apiservers"`
	Rate            int     `json:"rate"` // 0: as fast as possible
	Batch           int     `json:"batch"`
	ProxiedFraction float64 `json:"proxied_fraction"`
	ChainWindowSec  float64 `json:"chain_window_seconds"`

	EventsSent     int `json:"events_sent"`
	EventsAcked    int `json:"events_acked"`
	EventsStored   int `json:"events_stored"`
	ChainsExpected int `json:"chains_expected"` // one per request
	ChainsFinal    int `json:"chains_final"`
	Forwarded      int `json:"forwarded_requests"`
	// Classes are the final chains by class (FINAL), a check that forwarded pairs joined.
	Classes map[string]int `json:"classes"`

	SendSeconds        float64 `json:"send_seconds"`          // first batch sent to last acknowledged
	StoredSeconds      float64 `json:"stored_seconds"`        // first sent to every event in events
	FinalSeconds       float64 `json:"final_seconds"`         // first sent to every chain final in chains
	AcceptedPerSec     float64 `json:"accepted_per_second"`   // acknowledged events / SendSeconds
	EventsStoredPerSec float64 `json:"stored_per_second"`     // events / StoredSeconds
	EndToEndPerSec     float64 `json:"end_to_end_per_second"` // events / FinalSeconds

	// DecodeOnlyPerSec is decoding alone with peertrail's own decoder; DecodeOnlyJSONPerSec
	// with encoding/json into the Kubernetes audit types (see DecodeOnly).
	DecodeOnlyPerSec     float64 `json:"decode_only_per_second"`
	DecodeOnlyJSONPerSec float64 `json:"decode_only_json_per_second"`
	EngineBulkPerSec     float64 `json:"engine_bulk_per_second"`
	// EngineStorePerSec is the engine's bulk insert of the same events with their share of
	// the run's chains (see EngineBulk): what bounds the end-to-end rate.
	EngineStorePerSec float64 `json:"engine_store_per_second"`
	CeilingEvents     int     `json:"ceiling_events"`

	AckP50ms float64 `json:"ack_p50_ms"`
	AckP99ms float64 `json:"ack_p99_ms"`
	AckMaxms float64 `json:"ack_max_ms"`
	// ServerAcks* are the server's own count of webhook answers and of those it took more than
	// 5 and 10 ms over (its histogram, metrics.IngestAckDurationSeconds): the client's wait
	// without the client's own share, which here is a load generator on the server's cores
	// where real apiservers have machines of their own. Zero when /metrics did not answer.
	ServerAcks         int            `json:"server_acks"`
	ServerAcksOver5ms  int            `json:"server_acks_over_5ms"`
	ServerAcksOver10ms int            `json:"server_acks_over_10ms"`
	Codes              map[string]int `json:"codes"`
	// Retries are the batches posted again when the server answered 429 or 5xx with
	// Retry-After, as the apiserver's webhook client does (loadgen.Result.Retries).
	Retries int `json:"retries"`

	ServerCPUSeconds float64 `json:"server_cpu_seconds"` // from ready to everything final: the load and its drain
	// ServerLoadCores is the server's CPU seconds from ready to the last batch acknowledged,
	// over SendSeconds: the cores a steady rate costs while it runs.
	ServerLoadCores      float64 `json:"server_load_cores"`
	CPUSecondsPerMillion float64 `json:"server_cpu_seconds_per_million_events"`
	PeakRSSBytes         int64   `json:"server_peak_rss_bytes"`
	// LoadRSS* are the server's RSS sampled every second over the last LoadRSSSeconds of the
	// load (a minute, or the whole load when it is shorter): what a steady rate holds, where
	// the peak also counts the start and the drain.
	LoadRSSSeconds       float64 `json:"load_rss_seconds"`
	LoadRSSMeanBytes     int64   `json:"load_rss_mean_bytes"`
	LoadRSSMaxBytes      int64   `json:"load_rss_max_bytes"`
	LoadRSSAnonMeanBytes int64   `json:"load_rss_anon_mean_bytes"`
	// LoadGoHeapMeanBytes and LoadEngineLiveMeanBytes split LoadRSSMeanBytes, read from serve's
	// /metrics over the same window as it polls them (every serverPollEvery): Go's heap as the
	// runtime holds it from the system, and what the embedded engine holds live by its own
	// account (0 without one). The rest is code and the pages the engine's allocator keeps.
	LoadGoHeapMeanBytes     int64   `json:"load_go_heap_mean_bytes,omitempty"`
	LoadEngineLiveMeanBytes int64   `json:"load_engine_live_mean_bytes,omitempty"`
	EventsBytesOnDisk       int64   `json:"events_bytes_on_disk"`
	EventsRowsOnDisk        int64   `json:"events_rows_on_disk"`
	BytesPerEvent           float64 `json:"events_bytes_per_event"`
	StoreBytesPerEvent      float64 `json:"store_bytes_per_event"` // every peertrail table
	PeakSpoolBytes          int64   `json:"peak_spool_bytes"`
	// LoadCPUByThreads is the server's CPU seconds from ready to the last batch acknowledged
	// by group of threads (ThreadsProcess, ThreadsMerges, ThreadsEngine): where serve's cores
	// go while a steady rate runs.
	LoadCPUByThreads map[string]float64 `json:"load_cpu_seconds_by_threads,omitempty"`
	// Engine* are the embedded engine's counters over the same time (from /metrics, read at
	// most every 5 s by serve): what its inserts and merges did a second.
	EnginePartsPerSec      float64 `json:"engine_parts_inserted_per_second"`
	EngineMergesPerSec     float64 `json:"engine_merges_per_second"`
	EngineMergeRewrite     float64 `json:"engine_merged_bytes_per_inserted_byte"`
	EngineInsertedMBPerSec float64 `json:"engine_inserted_uncompressed_mb_per_second"`
	EngineActivePartsEnd   int     `json:"engine_active_parts_end_of_load"`
	// EngineCounters are the counters' increments over the load, by name.
	EngineCounters map[string]float64 `json:"engine_counters_during_load,omitempty"`
	ProfileDir     string             `json:"profile_dir,omitempty"`
	// HA is the HA layout's run of the same batches (Options.Layout "ha").
	HA *HAResult `json:"ha,omitempty"`
}

// AcceptedRatio is the accepted rate over the decode-only ceiling of peertrail's decoder.
func (r Result) AcceptedRatio() float64 { return ratio(r.AcceptedPerSec, r.DecodeOnlyPerSec) }

// AcceptedJSONRatio is the accepted rate over the decode-only ceiling of encoding/json into the
// Kubernetes audit types.
func (r Result) AcceptedJSONRatio() float64 { return ratio(r.AcceptedPerSec, r.DecodeOnlyJSONPerSec) }

// EndToEndRatio is the end-to-end rate over the engine's bulk insert of the events and their
// chains.
func (r Result) EndToEndRatio() float64 { return ratio(r.EndToEndPerSec, r.EngineStorePerSec) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Run runs one benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Stall <= 0 {
		o.Stall = 5 * time.Minute
	}
	if o.Inflight <= 0 {
		o.Inflight = 2
	}
	if o.Seed == 0 {
		var b [8]byte
		rand.Read(b[:])
		o.Seed = uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	}
	n := len(o.APIServers)
	events := o.Events
	if events <= 0 {
		events = int(float64(o.Rate) * o.Duration.Seconds())
	}
	if events <= 0 || o.Batch <= 0 || n == 0 {
		return Result{}, errors.New("bench: a number of events (or a rate and a duration), a batch size and apiservers are needed")
	}
	batches := (events + n*o.Batch - 1) / (n * o.Batch) // per apiserver
	t, err := NewTraffic(o.APIServers, o.Batch, o.ProxiedFraction, o.Seed)
	if err != nil {
		return Result{}, err
	}
	ceilBatches := batches
	if o.CeilingEvents > 0 {
		ceilBatches = max(1, min(batches, o.CeilingEvents/(n*o.Batch)))
	}
	res := Result{APIServers: n, Rate: o.Rate, Batch: o.Batch, ProxiedFraction: o.ProxiedFraction,
		ChainsExpected: t.Requests() * batches * n, Forwarded: t.Forwarded() * batches * n,
		CeilingEvents: ceilBatches * n * o.Batch, ProfileDir: o.ProfileDir}

	work, err := os.MkdirTemp("", "peertrail-bench")
	if err != nil {
		return res, fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(work)

	// The ceilings run after the servers, in this process: run before, their garbage and
	// their heap were this process's while it loaded serve, on serve's cores, and serve's CPU
	// grew with their size.
	chains, err := o.serveRun(ctx, t, batches, work, &res)
	if err != nil {
		return res, err
	}
	switch o.Layout {
	case "", "one":
	case "ha":
		fmt.Fprintf(o.Progress, "the HA layout on the same %d events...\n", batches*n*o.Batch)
		if err := o.haRun(ctx, t, batches, work, &res); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("bench: layout %q: want one or ha", o.Layout)
	}

	fmt.Fprintf(o.Progress, "decode-only ceilings: %d events as fast as possible, with peertrail's decoder and with encoding/json...\n", res.CeilingEvents)
	if res.DecodeOnlyPerSec, err = DecodeOnly(ctx, t, ceilBatches, o.Inflight, true); err != nil {
		return res, err
	}
	if res.DecodeOnlyJSONPerSec, err = DecodeOnly(ctx, t, ceilBatches, o.Inflight, false); err != nil {
		return res, err
	}
	perEvent := ratio(float64(res.ChainsExpected), float64(batches*n*o.Batch))
	fmt.Fprintf(o.Progress, "engine bulk insert ceiling: the same %d events, and %.0f of the run's chains...\n", res.CeilingEvents, perEvent*float64(res.CeilingEvents))
	b, err := EngineBulk(ctx, t, ceilBatches, filepath.Join(work, "bulk"), chains, perEvent)
	if err != nil {
		return res, err
	}
	res.EngineBulkPerSec, res.EngineStorePerSec = b.EventsPerSec, b.StorePerSec
	return res, nil
}

// child is the server being measured.
type child struct {
	cmd      *exec.Cmd
	api, sql string // base URLs
	dataDir  string
	reader   string // a reader's token: /metrics and /debug/pprof
	tokens   map[string]string
	exited   chan struct{}
	exitErr  error
}

// serveRun starts the server, loads it, waits for everything to be stored and final, takes its
// measurements and stops it. It returns some of the chains the run stored (maxSampleChains),
// for the engine's ceiling.
func (o Options) serveRun(ctx context.Context, t *Traffic, batches int, work string, res *Result) ([]*chain.Chain, error) {
	c, err := o.start(ctx, t, work)
	if err != nil {
		return nil, err
	}
	defer c.stop(o.Log)
	res.ChainWindowSec = time.Duration(config.Defaults().Correlate.ChainWindow).Seconds()
	if o.ChainWindow > 0 {
		res.ChainWindowSec = o.ChainWindow.Seconds()
	}
	db, err := store.OpenServer(ctx, store.ServerOptions{DSN: c.sql, PasswordFile: filepath.Join(c.dataDir, server.SQLPasswordFileName)})
	if err != nil {
		return nil, fmt.Errorf("bench: the server's SQL interface: %w", err)
	}
	defer db.Close()
	before, err := readProc(c.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	threadsBefore, _ := threadCPU(c.cmd.Process.Pid)
	engineBefore := c.engineCounters(ctx)

	// A kept --data-dir holds earlier runs: count what this run adds to it.
	base, err := storedBefore(ctx, db)
	if err != nil {
		return nil, err
	}

	live := &loadgen.Live{}
	var stored, final, peakSpool atomic.Int64
	rss := &rssSamples{}
	progressCtx, stopProgress := context.WithCancel(ctx)
	var progressDone sync.WaitGroup
	start := time.Now()
	countEvents := func() (int, error) {
		n, err := scalarInt(ctx, db, eventsCount)
		return n - base.events, err
	}
	progressDone.Go(func() {
		o.progress(progressCtx, c, live, countEvents, &final, &peakSpool, rss, start)
	})
	defer func() { stopProgress(); progressDone.Wait() }()
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: profile directory: %w", err)
		}
		progressDone.Go(func() {
			secs := max(o.ProfileSeconds, 1)
			if err := c.profile(progressCtx, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), filepath.Join(o.ProfileDir, "cpu.pprof"), time.Duration(secs+30)*time.Second); err != nil {
				o.Log.Warn("bench: CPU profile", "err", err)
			}
		})
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	lr, err := loadgen.Run(ctx, loadgen.Options{URL: c.api, APIServers: t.APIServers, Rate: o.Rate, Batch: t.Batch,
		Batches: batches, Inflight: o.Inflight, Client: client, Bodies: t.Body, Live: live,
		Token: func(name string) string { return c.tokens[name] }})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	res.SendSeconds = time.Since(start).Seconds()
	if p, err := readProc(c.cmd.Process.Pid); err == nil {
		rss.add(res.SendSeconds, p) // a load shorter than a progress tick has one sample
		res.ServerLoadCores = (p.cpuSeconds - before.cpuSeconds) / res.SendSeconds
	}
	if threadsAfter, err := threadCPU(c.cmd.Process.Pid); err == nil && threadsBefore != nil {
		res.LoadCPUByThreads = map[string]float64{}
		for g, v := range threadsAfter {
			res.LoadCPUByThreads[g] = v - threadsBefore[g]
		}
	}
	res.engineDuringLoad(engineBefore, c.engineCounters(ctx))
	rss.summarise(res.SendSeconds-loadRSSWindow.Seconds(), res.SendSeconds, res)
	res.EventsSent, res.EventsAcked, res.Codes, res.Retries = lr.EventsSent, lr.EventsAcked, lr.Codes, lr.Retries
	res.AckP50ms, res.AckP99ms, res.AckMaxms = lr.LatencyP50ms, lr.LatencyP99ms, lr.LatencyMaxms
	res.AcceptedPerSec = float64(lr.EventsAcked) / res.SendSeconds
	ack := metrics.IngestAckDurationSeconds
	if m := c.metrics(ctx, ack+"_count", ack+`_bucket{le="0.005"}`, ack+`_bucket{le="0.01"}`); m != nil {
		res.ServerAcks, res.ServerAcksOver5ms, res.ServerAcksOver10ms = int(m[0]), int(m[0]-m[1]), int(m[0]-m[2])
	}
	if err := lr.Err(); err != nil {
		return nil, fmt.Errorf("bench: %w (answers %v)", err, lr.Codes)
	}
	if o.ProfileDir != "" {
		if err := c.profile(ctx, "/debug/pprof/heap", filepath.Join(o.ProfileDir, "heap-acked.pprof"), time.Minute); err != nil {
			o.Log.Warn("bench: heap profile", "err", err)
		}
	}

	// Wait: every acknowledged event in events, then every request's chain final in chains.
	if err := waitFor(ctx, c, o.Stall, countEvents, res.EventsAcked, &stored); err != nil {
		return nil, fmt.Errorf("bench: waiting for the events to be stored: %w", err)
	}
	res.StoredSeconds = time.Since(start).Seconds()
	res.EventsStored = int(stored.Load())
	countFinal := func() (int, error) {
		n, err := scalarInt(ctx, db, finalChainsCount)
		return n - base.final, err
	}
	if err := waitFor(ctx, c, o.Stall+time.Duration(res.ChainWindowSec*float64(time.Second)), countFinal, res.ChainsExpected, &final); err != nil {
		return nil, fmt.Errorf("bench: waiting for the chains to be final: %w", err)
	}
	res.FinalSeconds = time.Since(start).Seconds()
	res.ChainsFinal = int(final.Load())
	res.EventsStoredPerSec = float64(res.EventsStored) / res.StoredSeconds
	res.EndToEndPerSec = float64(res.EventsStored) / res.FinalSeconds

	after, err := readProc(c.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.ServerCPUSeconds = after.cpuSeconds - before.cpuSeconds
	res.CPUSecondsPerMillion = res.ServerCPUSeconds / float64(res.EventsStored) * 1e6
	res.PeakRSSBytes = after.hwm
	res.PeakSpoolBytes = max(peakSpool.Load(), dirSize(filepath.Join(c.dataDir, "spool")))
	if o.ProfileDir != "" {
		if err := c.profile(ctx, "/debug/pprof/heap", filepath.Join(o.ProfileDir, "heap-final.pprof"), time.Minute); err != nil {
			o.Log.Warn("bench: heap profile", "err", err)
		}
	}
	if err := o.onDisk(ctx, db, base.classes, res); err != nil {
		return nil, err
	}
	stopProgress()
	progressDone.Wait()
	fmt.Fprintf(o.Progress, "stored: %d events in %.1fs, %d chains final in %.1fs\n", res.EventsStored, res.StoredSeconds, res.ChainsFinal, res.FinalSeconds)
	return sampleChains(ctx, db)
}

// maxSampleChains bounds the chains read back for the engine's ceiling, which inserts them in
// turn: one correlator flush (correlate's defaultFlushBatch), a few tens of MB.
const maxSampleChains = 50_000

// sampleChains reads final chains back from the store, as the chain read path does.
func sampleChains(ctx context.Context, db store.Store) ([]*chain.Chain, error) {
	r, err := db.Query(ctx, "SELECT * FROM "+store.ChainsTable+" WHERE state = 'final' LIMIT "+strconv.Itoa(maxSampleChains), nil)
	if err != nil {
		return nil, fmt.Errorf("bench: read back chains for the engine's ceiling: %w", err)
	}
	chains := make([]*chain.Chain, len(r.Rows))
	for i := range r.Rows {
		if chains[i], err = store.ChainFromRow(r, i); err != nil {
			return nil, fmt.Errorf("bench: read back chains for the engine's ceiling: %w", err)
		}
	}
	return chains, nil
}

const (
	// count() of a MergeTree table reads the parts' row counts only.
	eventsCount = "SELECT count() FROM peertrail.events"
	// FINAL streams the chains' revisions in key order: a uniqExact(id) held every id at once
	// and passed the SQL interface's 1 GiB a query at 17.6 million chains (an hour at 10,000
	// events/s). It counts the chains whose latest revision is final.
	finalChainsCount = "SELECT count() FROM peertrail.chains FINAL WHERE state = 'final'"
)

// baseline is what the store held before a run: nothing in a fresh data directory, earlier
// runs' events and chains in a kept one.
type baseline struct {
	events, final int
	classes       map[string]int
}

func storedBefore(ctx context.Context, db store.Store) (baseline, error) {
	var h baseline
	var err error
	if h.events, err = scalarInt(ctx, db, eventsCount); err != nil {
		return h, fmt.Errorf("bench: events already stored: %w", err)
	}
	if h.final, err = scalarInt(ctx, db, finalChainsCount); err != nil {
		return h, fmt.Errorf("bench: chains already stored: %w", err)
	}
	if h.classes, err = chainClasses(ctx, db); err != nil {
		return h, err
	}
	return h, nil
}

// chainClasses counts the final chains in the store by class.
func chainClasses(ctx context.Context, db store.Store) (map[string]int, error) {
	r, err := db.Query(ctx, "SELECT class, count() FROM peertrail.chains FINAL WHERE state = 'final' GROUP BY class ORDER BY class", nil)
	if err != nil {
		return nil, fmt.Errorf("bench: chains by class: %w", err)
	}
	classes := map[string]int{}
	for _, row := range r.Rows {
		if len(row) == 2 {
			classes[row[0]], _ = strconv.Atoi(row[1])
		}
	}
	return classes, nil
}

// onDisk reads what the store holds: bytes per event on disk (over every run a kept data
// directory holds), and this run's chains by class (less those held before it).
func (o Options) onDisk(ctx context.Context, db store.Store, before map[string]int, res *Result) error {
	// system.tables' totals are its active parts' (system.parts, which a SQL reader may not read).
	r, err := db.Query(ctx, "SELECT sumIf(total_bytes, name = 'events'), sumIf(total_rows, name = 'events'), sum(total_bytes) "+
		"FROM system.tables WHERE database = 'peertrail'", nil)
	if err != nil {
		return fmt.Errorf("bench: bytes on disk: %w", err)
	}
	if len(r.Rows) != 1 || len(r.Rows[0]) != 3 {
		return fmt.Errorf("bench: bytes on disk: %v", r.Rows)
	}
	res.EventsBytesOnDisk, _ = strconv.ParseInt(r.Rows[0][0], 10, 64)
	res.EventsRowsOnDisk, _ = strconv.ParseInt(r.Rows[0][1], 10, 64)
	all, _ := strconv.ParseInt(r.Rows[0][2], 10, 64)
	if res.EventsRowsOnDisk > 0 {
		res.BytesPerEvent = float64(res.EventsBytesOnDisk) / float64(res.EventsRowsOnDisk)
		res.StoreBytesPerEvent = float64(all) / float64(res.EventsRowsOnDisk)
	}
	classes, err := chainClasses(ctx, db)
	if err != nil {
		return err
	}
	res.Classes = map[string]int{}
	for class, n := range classes {
		if n -= before[class]; n != 0 {
			res.Classes[class] = n
		}
	}
	return nil
}

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

// waitFor polls count until it reaches want, failing when it stands still for stall or the
// server exits. A count that fails (the server's SQL front busy behind a backlog of inserts)
// counts as standing still, not as the end of the run.
func waitFor(ctx context.Context, c *child, stall time.Duration, count func() (int, error), want int, into *atomic.Int64) error {
	last, lastChange := -1, time.Now()
	var lastErr error
	for {
		got, err := count()
		switch {
		case err != nil:
			lastErr = err
			if time.Since(lastChange) > stall {
				return fmt.Errorf("%d of %d after standing still for %s (the last count failed: %w)", max(last, 0), want, stall, err)
			}
		case got >= want:
			into.Store(int64(got))
			return nil
		case got != last:
			into.Store(int64(got))
			last, lastChange = got, time.Now()
		case time.Since(lastChange) > stall:
			if lastErr != nil {
				return fmt.Errorf("%d of %d after standing still for %s (a count failed meanwhile: %w)", got, want, stall, lastErr)
			}
			return fmt.Errorf("%d of %d after standing still for %s", got, want, stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
			return fmt.Errorf("the server exited: %v (its log: %s)", c.exitErr, filepath.Join(filepath.Dir(c.dataDir), "serve.log"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func scalarInt(ctx context.Context, db store.Store, q string) (int, error) {
	r, err := db.Query(ctx, q, nil)
	if err != nil {
		return 0, err
	}
	if len(r.Rows) != 1 || len(r.Rows[0]) != 1 {
		return 0, fmt.Errorf("%s: want one value, got %v", q, r.Rows)
	}
	return strconv.Atoi(r.Rows[0][0])
}

// progress writes a line a second: sent, acknowledged, stored, final chains (the correlator's
// count), open chains, the server's RSS and spool. What only serve can tell (its /metrics and
// the events table's count) is read every serverPollEvery, as a Prometheus scrapes, not every
// second: serve's CPU is what the bench measures, and a read a second was a visible part of it
// at low rates (BENCHMARKS.md).
func (o Options) progress(ctx context.Context, c *child, live *loadgen.Live, stored func() (int, error), final, peakSpool *atomic.Int64, rss *rssSamples, start time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var (
		m        []float64
		inEvents int
		polled   time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		spool := dirSize(filepath.Join(c.dataDir, "spool"))
		storeMax(peakSpool, spool)
		if time.Since(polled) >= serverPollEvery {
			polled = time.Now()
			m = c.metrics(ctx, metrics.CorrelateChainsTotal, metrics.CorrelateOpenChains, metrics.StoreRowsWrittenTotal+`{table="events"`,
				metrics.StoreRowsWrittenTotal+`{table="chains"`, goHeapMetric, metrics.StoreEngineMemoryBytes+`{`+metrics.LabelMetric+`="`+store.EngineMemoryTracking+`"}`)
			if m != nil {
				rss.addHeap(time.Since(start).Seconds(), int64(m[4]), int64(m[5]))
			}
			if n, err := stored(); err == nil {
				inEvents = n
			}
		}
		p, err := readProc(c.cmd.Process.Pid)
		if err == nil {
			rss.add(time.Since(start).Seconds(), p)
		}
		metric := func(i int) string {
			if m == nil {
				return "?" // /metrics did not answer in time
			}
			return strconv.FormatInt(int64(m[i]), 10)
		}
		// Chain rows written come from /metrics while loading; the chains table is counted only
		// in the final wait (counting it is not free).
		inChains := metric(3) + " written"
		if n := final.Load(); n > 0 {
			inChains = strconv.FormatInt(n, 10)
		}
		fmt.Fprintf(o.Progress, "%5.0fs sent %d acked %d refused %d retried %d | events written %s stored %d | chains final %s (in chains %s) open %s | rss %d MB peak %d MB spool %d MB\n",
			time.Since(start).Seconds(), live.Sent.Load(), live.Acked.Load(), live.Refused.Load(), live.Retried.Load(),
			metric(2), inEvents, metric(0), inChains, metric(1), p.rss>>20, p.hwm>>20, spool>>20)
	}
}

// serverPollEvery is how often the progress line reads serve's own figures.
const serverPollEvery = 15 * time.Second

// goHeapMetric is the Go runtime's heap as held from the system, from client_golang's Go
// collector on serve's /metrics.
const goHeapMetric = "go_memstats_heap_sys_bytes"

// loadRSSWindow is how much of the end of the load Result.LoadRSS* cover.
const loadRSSWindow = time.Minute

// rssSamples are the server's memory, one sample a progress line, for Result.LoadRSS*, and
// its split as /metrics gives it, one a poll.
type rssSamples struct {
	mu      sync.Mutex
	samples []rssSample
	heaps   []heapSample
}

type heapSample struct {
	at           float64
	goHeap, live int64
}

func (s *rssSamples) addHeap(at float64, goHeap, live int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heaps = append(s.heaps, heapSample{at, goHeap, live})
}

type rssSample struct {
	at float64 // seconds since the load started
	p  procUsage
}

func (s *rssSamples) add(at float64, p procUsage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, rssSample{at, p})
}

// summarise sets res's LoadRSS* from the samples taken between from and to (seconds since
// the load started).
func (s *rssSamples) summarise(from, to float64, res *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from = max(from, 0)
	var n, sum, sumAnon int64
	for _, x := range s.samples {
		if x.at < from || x.at > to {
			continue
		}
		n++
		sum += x.p.rss
		sumAnon += x.p.rssAnon
		res.LoadRSSMaxBytes = max(res.LoadRSSMaxBytes, x.p.rss)
	}
	if n == 0 {
		return
	}
	res.LoadRSSSeconds = to - from
	res.LoadRSSMeanBytes, res.LoadRSSAnonMeanBytes = sum/n, sumAnon/n
	var nh, goHeap, live int64
	for _, x := range s.heaps {
		if x.at >= from && x.at <= to {
			nh, goHeap, live = nh+1, goHeap+x.goHeap, live+x.live
		}
	}
	if nh > 0 {
		res.LoadGoHeapMeanBytes, res.LoadEngineLiveMeanBytes = goHeap/nh, live/nh
	}
}

// privateCopy copies the binary exe into dir once, for serve to run from: a deployed serve is
// the only process that maps its binary, and serve pages out what its start alone used
// (server's pageout), which the kernel does only for pages no other process maps; run from the
// bench's own file, it would share them with the bench.
func privateCopy(exe, dir string) (string, error) {
	dst := filepath.Join(dir, "peertrail-serve")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	in, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("bench: copy the binary for serve: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst+".tmp", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("bench: copy the binary for serve: %w", err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(dst+".tmp", dst)
	}
	if err != nil {
		return "", fmt.Errorf("bench: copy the binary for serve: %w", err)
	}
	return dst, nil
}

// start starts serve with a config of the run's apiservers, each with a token of its own, and
// waits until it is ready.
func (o Options) start(ctx context.Context, t *Traffic, work string) (*child, error) {
	c := &child{dataDir: o.DataDir, tokens: map[string]string{}, exited: make(chan struct{}), reader: rand.Text()}
	if c.dataDir == "" {
		c.dataDir = filepath.Join(work, "data")
	}
	if err := os.MkdirAll(c.dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("bench: data directory: %w", err)
	}
	var cfg strings.Builder
	cfg.WriteString("apiservers:\n")
	for i, name := range t.APIServers {
		tok := rand.Text()
		c.tokens[name] = tok
		file := filepath.Join(work, name+".token")
		if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("bench: token: %w", err)
		}
		fmt.Fprintf(&cfg, "- name: %q\n  address: %s\n  tokenFile: %q\n", name, apiserverAddress(i), file)
	}
	readerFile := filepath.Join(work, "reader.token")
	if err := os.WriteFile(readerFile, []byte(c.reader+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("bench: reader token: %w", err)
	}
	fmt.Fprintf(&cfg, "readers:\n  tokenFile: %q\n", readerFile)
	cfgFile := filepath.Join(work, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		return nil, fmt.Errorf("bench: config: %w", err)
	}
	api, err := freePort()
	if err != nil {
		return nil, err
	}
	sql, err := freePort()
	if err != nil {
		return nil, err
	}
	c.api, c.sql = "http://"+api, "http://"+sql
	args := []string{"serve", "--config", cfgFile, "--insecure-http", "--listen", api, "--sql-listen", sql,
		"--data-dir", c.dataDir, "--log-level", "warn"}
	if o.ChainWindow > 0 {
		args = append(args, "--chain-window", o.ChainWindow.String())
	}
	if o.ProfileDir != "" {
		args = append(args, "--enable-pprof")
	}
	args = append(args, o.ServeArgs...)
	logFile, err := os.Create(filepath.Join(work, "serve.log"))
	if err != nil {
		return nil, fmt.Errorf("bench: server log: %w", err)
	}
	exe, err := privateCopy(o.Exe, work)
	if err != nil {
		logFile.Close()
		return nil, err
	}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Env = o.Env
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	o.Log.Info("bench: starting the server", "cmd", strings.Join(c.cmd.Args, " "))
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("bench: start %s serve: %w", o.Exe, err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	if err := c.ready(ctx, 3*time.Minute); err != nil {
		c.stop(o.Log)
		tail, _ := os.ReadFile(logFile.Name())
		return nil, fmt.Errorf("bench: the server did not become ready: %w\n%s", err, lastLines(string(tail), 20))
	}
	return c, nil
}

func (c *child) ready(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.api+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s (last: %v)", within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.exited:
			return fmt.Errorf("it exited: %v", c.exitErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the server as a deployment does, SIGTERM, and kills it after a minute.
func (c *child) stop(log *slog.Logger) {
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		log.Warn("bench: the server did not stop within a minute; killing it")
		c.cmd.Process.Kill()
		<-c.exited
	}
}

// get asks the server's API as a reader.
func (c *child) get(ctx context.Context, path string, timeout time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.api+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.reader)
	// Compressing each answer (Go's client asks for gzip unless told otherwise) would make serve
	// allocate a compressor's 800 KB a read for the bench alone.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

// metrics sums the samples of each name (a prefix with labels, such as name{table="events",
// works too) in /metrics; nil when the server did not answer within a few seconds (it is
// busy: the progress line must keep coming).
func (c *child) metrics(ctx context.Context, names ...string) []float64 {
	out := make([]float64, len(names))
	resp, err := c.get(ctx, "/metrics", 3*time.Second)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		for i, name := range names {
			if !strings.HasPrefix(l, name) {
				continue
			}
			if len(l) == len(name) {
				continue
			}
			if rest := l[len(name)]; !strings.Contains(name, "{") && rest != '{' && rest != ' ' {
				continue // another metric whose name starts with this one
			}
			if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); err == nil {
				out[i] += v
			}
		}
	}
	return out
}

// profile saves one of the server's /debug/pprof profiles.
func (c *child) profile(ctx context.Context, path, file string, timeout time.Duration) error {
	resp, err := c.get(ctx, path, timeout)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// freePort finds a free loopback port (released at once: serve takes it a moment later).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// engineFigures are the embedded engine's counters and its active parts, from /metrics.
type engineFigures struct {
	events map[string]float64
	parts  float64
}

// engineCounters reads the engine's counters from the server's /metrics (nil when it did not
// answer, or serves no embedded engine).
func (c *child) engineCounters(ctx context.Context) *engineFigures {
	names := make([]string, 0, len(store.EngineProfileEvents)+1)
	for _, e := range store.EngineProfileEvents {
		names = append(names, metrics.StoreEngineProfileEventsTotal+`{`+metrics.LabelEvent+`="`+e+`"}`)
	}
	names = append(names, metrics.StoreEngineActiveParts+`{`) // every table's, summed
	m := c.metrics(ctx, names...)
	if m == nil {
		return nil
	}
	f := &engineFigures{events: map[string]float64{}, parts: m[len(m)-1]}
	seen := false
	for i, e := range store.EngineProfileEvents {
		f.events[e] = m[i]
		seen = seen || m[i] != 0
	}
	if !seen {
		return nil // no engine counters on /metrics
	}
	return f
}

// engineDuringLoad sets the Engine* figures from the counters at the start and the end of the load.
func (r *Result) engineDuringLoad(before, after *engineFigures) {
	if before == nil || after == nil || r.SendSeconds <= 0 {
		return
	}
	d := func(name string) float64 { return after.events[name] - before.events[name] }
	r.EngineCounters = map[string]float64{}
	for name := range after.events {
		r.EngineCounters[name] = d(name)
	}
	r.EnginePartsPerSec = (d("InsertedCompactParts") + d("InsertedWideParts")) / r.SendSeconds
	r.EngineMergesPerSec = d("Merge") / r.SendSeconds
	r.EngineInsertedMBPerSec = d("MergeTreeDataWriterUncompressedBytes") / 1e6 / r.SendSeconds
	if w := d("MergeTreeDataWriterUncompressedBytes"); w > 0 {
		r.EngineMergeRewrite = d("MergedUncompressedBytes") / w
	}
	r.EngineActivePartsEnd = int(after.parts)
}
