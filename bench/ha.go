package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peertrail/peertrail/loadgen"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/store"
)

// HAResult is what a run of the HA layout measured (Options.Layout "ha"): the same batches as
// the run of one serve beside it in Result, sent each apiserver's to an agent of its own
// (`peertrail agent`), which relays to Aggregators aggregators (`peertrail serve` with agents),
// each with its own embedded store.
type HAResult struct {
	Agents      int `json:"agents"`
	Aggregators int `json:"aggregators"`

	EventsAcked    int            `json:"events_acked"`
	AcceptedPerSec float64        `json:"accepted_per_second"`
	Codes          map[string]int `json:"codes"`
	Retries        int            `json:"retries"`
	// AgentAck* are the agents' acknowledge latency, as the apiservers (the load generator) saw it.
	AgentAckP50ms float64 `json:"agent_ack_p50_ms"`
	AgentAckP99ms float64 `json:"agent_ack_p99_ms"`
	AgentAckMaxms float64 `json:"agent_ack_max_ms"`
	// AgentAcks* are the agents' own count of webhook answers and of those they took more than
	// 10 and 20 ms over (their histograms, metrics.IngestAckDurationSeconds, summed): the wait
	// without the load generator's share (it runs on the same cores here).
	AgentAcks         int `json:"agent_acks"`
	AgentAcksOver10ms int `json:"agent_acks_over_10ms"`
	AgentAcksOver20ms int `json:"agent_acks_over_20ms"`
	// AgentPeakRSSBytes is the largest agent's peak RSS; AgentLoadRSS* the largest agent's RSS
	// over the last minute of the load (mean, max), as Result.LoadRSS* for the server.
	AgentPeakRSSBytes     int64   `json:"agent_peak_rss_bytes"`
	AgentLoadRSSMeanBytes int64   `json:"agent_load_rss_mean_bytes"`
	AgentLoadRSSMaxBytes  int64   `json:"agent_load_rss_max_bytes"`
	AgentCPUSeconds       float64 `json:"agent_cpu_seconds"` // every agent together
	// AggregatorLag* are, over one sample a second from the first batch to everything stored,
	// the largest lag behind its agents any aggregator reported
	// (metrics.AggregatorAgentLagSeconds).
	AggregatorLagP99Seconds float64 `json:"aggregator_lag_p99_seconds"`
	AggregatorLagMaxSeconds float64 `json:"aggregator_lag_max_seconds"`
	// EventsStored, StoredSeconds and FinalSeconds are the slower aggregator's (every
	// acknowledged event in its events table, every chain final in its chains table).
	EventsStored       int     `json:"events_stored"`
	StoredSeconds      float64 `json:"stored_seconds"`
	FinalSeconds       float64 `json:"final_seconds"`
	EventsStoredPerSec float64 `json:"stored_per_second"`
	EndToEndPerSec     float64 `json:"end_to_end_per_second"`
	ChainsFinal        int     `json:"chains_final"`
	// AggregatorCPUSeconds is each aggregator's CPU from its start to everything final;
	// AggregatorPeakRSSBytes the largest peak.
	AggregatorCPUSeconds   []float64 `json:"aggregator_cpu_seconds"`
	AggregatorPeakRSSBytes int64     `json:"aggregator_peak_rss_bytes"`
}

// StoredRatio is the slower aggregator's stored rate over the one serve's in the same run.
func (r Result) StoredRatio() float64 {
	if r.HA == nil {
		return 0
	}
	return ratio(r.HA.EventsStoredPerSec, r.EventsStoredPerSec)
}

// AgentAckRatio is the agents' p99 acknowledge latency over the one serve's.
func (r Result) AgentAckRatio() float64 {
	if r.HA == nil {
		return 0
	}
	return ratio(r.HA.AgentAckP99ms, r.AckP99ms)
}

// DefaultAggregators is how many aggregators a run of the HA layout starts unless
// Options.Aggregators says otherwise: the deployed layout's two.
const DefaultAggregators = 2

// haRun runs the HA layout on the same batches as the one-serve run.
func (o Options) haRun(ctx context.Context, t *Traffic, batches int, work string, res *Result) error {
	haAggregators := o.Aggregators
	if haAggregators <= 0 {
		haAggregators = DefaultAggregators
	}
	ha := &HAResult{Agents: len(t.APIServers), Aggregators: haAggregators}
	res.HA = ha
	dir := filepath.Join(work, "ha")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	write := func(name, content string) (string, error) {
		path := filepath.Join(dir, name)
		return path, os.WriteFile(path, []byte(content), 0o600)
	}
	reader := rand.Text()
	readerFile, err := write("reader.token", reader+"\n")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	apiTokens := map[string]string{}
	var aggCfg, agentNames strings.Builder
	aggCfg.WriteString("apiservers:\n")
	for i, name := range t.APIServers {
		fmt.Fprintf(&aggCfg, "- name: %q\n  address: %s\n", name, apiserverAddress(i))
	}
	aggCfg.WriteString("agents:\n")
	agentTokens := map[string]string{}
	for _, name := range t.APIServers {
		tok := rand.Text()
		f, err := write("agent-"+name+".token", tok+"\n")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		agentTokens[name] = f
		fmt.Fprintf(&aggCfg, "- name: %q\n  apiservers: [%q]\n  tokenFile: %q\n", "agent-"+name, name, f)
	}
	fmt.Fprintf(&aggCfg, "readers:\n  tokenFile: %q\n", readerFile)
	aggFile, err := write("aggregator.yaml", aggCfg.String())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}

	var procs []*child // aggregators first
	defer func() {
		var wg sync.WaitGroup
		for _, c := range procs {
			wg.Go(func() { c.stop(o.Log) })
		}
		wg.Wait()
	}()
	var relay []string
	for i := range haAggregators {
		api, err := freePort()
		if err != nil {
			return err
		}
		sql, err := freePort()
		if err != nil {
			return err
		}
		c := &child{api: "http://" + api, sql: "http://" + sql, dataDir: filepath.Join(dir, fmt.Sprintf("agg-%d", i)), reader: reader}
		args := []string{"serve", "--config", aggFile, "--insecure-http", "--listen", api, "--sql-listen", sql, "--data-dir", c.dataDir, "--log-level", "warn"}
		if o.ChainWindow > 0 {
			args = append(args, "--chain-window", o.ChainWindow.String())
		}
		args = append(args, o.ServeArgs...)
		if o.NiceAggregators {
			args = append([]string{"-n", "19", o.Exe}, args...)
		}
		if err := o.spawnCmd(c, o.NiceAggregators, args, filepath.Join(dir, fmt.Sprintf("agg-%d.log", i))); err != nil {
			return err
		}
		procs = append(procs, c)
		relay = append(relay, fmt.Sprintf("agg-%d=%s", i, c.api))
	}
	agents := map[string]*child{}
	for _, name := range t.APIServers {
		tok := rand.Text()
		apiTokens[name] = tok
		tf, err := write(name+".token", tok+"\n")
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		cfg, err := write("agent-"+name+".yaml", fmt.Sprintf("apiservers:\n- name: %q\n  tokenFile: %q\nreaders:\n  tokenFile: %q\n", name, tf, readerFile))
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		api, err := freePort()
		if err != nil {
			return err
		}
		c := &child{api: "http://" + api, dataDir: filepath.Join(dir, "agent-"+name), reader: reader}
		args := []string{"agent", "--config", cfg, "--insecure-http", "--listen", api, "--data-dir", c.dataDir, "--log-level", "warn",
			"--aggregator", strings.Join(relay, ","), "--relay-token-file", agentTokens[name]}
		if err := o.spawn(c, args, filepath.Join(dir, "agent-"+name+".log")); err != nil {
			return err
		}
		procs = append(procs, c)
		agents[name] = c
		fmt.Fprintf(&agentNames, " %s", name)
	}
	for _, c := range procs {
		if err := c.ready(ctx, 3*time.Minute); err != nil {
			return fmt.Errorf("bench: the HA layout did not become ready: %w", err)
		}
	}
	aggs := procs[:haAggregators]
	var dbs []*store.Server
	for _, c := range aggs {
		db, err := store.OpenServer(ctx, store.ServerOptions{DSN: c.sql, PasswordFile: filepath.Join(c.dataDir, server.SQLPasswordFileName)})
		if err != nil {
			return fmt.Errorf("bench: an aggregator's SQL interface: %w", err)
		}
		defer db.Close()
		dbs = append(dbs, db)
	}
	before := map[*child]procUsage{}
	for _, c := range procs {
		p, err := readProc(c.cmd.Process.Pid)
		if err != nil {
			return err
		}
		before[c] = p
	}
	fmt.Fprintf(o.Progress, "the HA layout: %d agents (%s), %d aggregators\n", len(agents), strings.TrimSpace(agentNames.String()), haAggregators)

	// Once a second: each agent's memory, each aggregator's lag behind its agents.
	start := time.Now()
	var mu sync.Mutex
	var lags []float64
	agentRSS := map[string]*rssSamples{}
	for name := range agents {
		agentRSS[name] = &rssSamples{}
	}
	live := &loadgen.Live{}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			at := time.Since(start).Seconds()
			for name, c := range agents {
				if p, err := readProc(c.cmd.Process.Pid); err == nil {
					agentRSS[name].add(at, p)
				}
			}
			lag := 0.0
			for _, c := range aggs {
				lag = max(lag, c.maxMetric(sampleCtx, metrics.AggregatorAgentLagSeconds))
			}
			mu.Lock()
			lags = append(lags, lag)
			mu.Unlock()
			fmt.Fprintf(o.Progress, "%5.0fs HA sent %d acked %d refused %d | aggregators' lag %.1fs\n", at, live.Sent.Load(), live.Acked.Load(), live.Refused.Load(), lag)
		}
	})
	defer func() { stopSampling(); sampling.Wait() }()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
	lr, err := loadgen.Run(ctx, loadgen.Options{URLOf: func(name string) string { return agents[name].api }, APIServers: t.APIServers,
		Rate: o.Rate, Batch: t.Batch, Batches: batches, Inflight: o.Inflight, Client: client, Bodies: t.Body, Live: live,
		Token: func(name string) string { return apiTokens[name] }})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	send := time.Since(start).Seconds()
	ha.EventsAcked, ha.Codes, ha.Retries = lr.EventsAcked, lr.Codes, lr.Retries
	ha.AgentAckP50ms, ha.AgentAckP99ms, ha.AgentAckMaxms = lr.LatencyP50ms, lr.LatencyP99ms, lr.LatencyMaxms
	ha.AcceptedPerSec = float64(lr.EventsAcked) / send
	ack := metrics.IngestAckDurationSeconds
	for _, c := range agents {
		if m := c.metrics(ctx, ack+"_count", ack+`_bucket{le="0.01"}`, ack+`_bucket{le="0.02"}`); m != nil {
			ha.AgentAcks += int(m[0])
			ha.AgentAcksOver10ms += int(m[0] - m[1])
			ha.AgentAcksOver20ms += int(m[0] - m[2])
		}
	}
	for _, s := range agentRSS {
		var r Result
		s.summarise(send-loadRSSWindow.Seconds(), send, &r)
		ha.AgentLoadRSSMaxBytes = max(ha.AgentLoadRSSMaxBytes, r.LoadRSSMaxBytes)
		ha.AgentLoadRSSMeanBytes = max(ha.AgentLoadRSSMeanBytes, r.LoadRSSMeanBytes)
	}
	if err := lr.Err(); err != nil {
		return fmt.Errorf("bench: the HA layout: %w (answers %v)", err, lr.Codes)
	}

	// Every acknowledged event in each aggregator's events, then every chain final there.
	stored, final := make([]int, len(aggs)), make([]int, len(aggs))
	for i, c := range aggs {
		db := dbs[i]
		count := func() (int, error) { return scalarInt(ctx, db, eventsCount) }
		var into atomic.Int64
		if err := waitFor(ctx, c, o.Stall, count, ha.EventsAcked, &into); err != nil {
			return fmt.Errorf("bench: waiting for aggregator %d to store the events: %w", i, err)
		}
		stored[i] = int(into.Load())
	}
	ha.StoredSeconds = time.Since(start).Seconds()
	for i, c := range aggs {
		db := dbs[i]
		count := func() (int, error) { return scalarInt(ctx, db, finalChainsCount) }
		var into atomic.Int64
		if err := waitFor(ctx, c, o.Stall+time.Duration(res.ChainWindowSec*float64(time.Second)), count, res.ChainsExpected, &into); err != nil {
			return fmt.Errorf("bench: waiting for aggregator %d's chains to be final: %w", i, err)
		}
		final[i] = int(into.Load())
	}
	ha.FinalSeconds = time.Since(start).Seconds()
	stopSampling()
	sampling.Wait()
	ha.EventsStored, ha.ChainsFinal = slices.Min(stored), slices.Min(final)
	ha.EventsStoredPerSec = float64(ha.EventsStored) / ha.StoredSeconds
	ha.EndToEndPerSec = float64(ha.EventsStored) / ha.FinalSeconds
	slices.Sort(lags)
	if len(lags) > 0 {
		ha.AggregatorLagP99Seconds = lags[min(len(lags)-1, int(0.99*float64(len(lags))))]
		ha.AggregatorLagMaxSeconds = lags[len(lags)-1]
	}
	for _, c := range procs {
		p, err := readProc(c.cmd.Process.Pid)
		if err != nil {
			return err
		}
		cpu := p.cpuSeconds - before[c].cpuSeconds
		if slices.Contains(aggs, c) {
			ha.AggregatorCPUSeconds = append(ha.AggregatorCPUSeconds, cpu)
			ha.AggregatorPeakRSSBytes = max(ha.AggregatorPeakRSSBytes, p.hwm)
		} else {
			ha.AgentCPUSeconds += cpu
			ha.AgentPeakRSSBytes = max(ha.AgentPeakRSSBytes, p.hwm)
		}
	}
	fmt.Fprintf(o.Progress, "HA layout: every aggregator stored %d events in %.1fs, %d chains final in %.1fs\n", ha.EventsStored, ha.StoredSeconds, ha.ChainsFinal, ha.FinalSeconds)
	return nil
}

// spawn starts the binary with args as c, its output to logPath.
func (o Options) spawn(c *child, args []string, logPath string) error {
	return o.spawnCmd(c, false, args, logPath)
}

// spawnCmd is spawn, through nice(1) (args are then nice's: -n 19 binary ...) when niced.
func (o Options) spawnCmd(c *child, niced bool, args []string, logPath string) error {
	if err := os.MkdirAll(c.dataDir, 0o750); err != nil {
		return fmt.Errorf("bench: data directory: %w", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("bench: log: %w", err)
	}
	c.exited = make(chan struct{})
	c.cmd = exec.Command(o.Exe, args...)
	if niced {
		c.cmd = exec.Command("nice", args...) // nice execs the binary: the same process
	}
	c.cmd.Env = o.Env
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	o.Log.Info("bench: starting", "cmd", strings.Join(c.cmd.Args, " "))
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("bench: start %s: %w", strings.Join(c.cmd.Args, " "), err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return nil
}

// maxMetric is the largest sample of name in the process's /metrics (0 when it did not answer).
func (c *child) maxMetric(ctx context.Context, name string) float64 {
	resp, err := c.get(ctx, "/metrics", 3*time.Second)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var out float64
	b := make([]byte, 0, 64<<10)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(line[strings.LastIndexByte(strings.TrimSpace(line), ' ')+1:]), &v); err == nil {
			out = max(out, v)
		}
	}
	return out
}
