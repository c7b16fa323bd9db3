package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/bench"
)

type benchFlags struct {
	apiservers    string
	rate          int
	events        int
	duration      time.Duration
	batch         int
	inflight      int
	proxied       float64
	seed          uint64
	dataDir       string
	chainWindow   time.Duration
	ceilingEvents int
	profileDir    string
	profileSecs   int
	stall         time.Duration
	serveArgs     []string
	layout        string
	aggregators   int
	niceAggs      bool
	output        string
}

func newBenchCommand(g *globalFlags) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure peertrail serve end to end, as deployed: accepted and stored rates, ack latency, CPU, memory, disk",
		Long: `bench starts peertrail serve (this binary, the embedded store, plain HTTP on loopback, a
temporary data directory unless --data-dir) with a token per apiserver, sends it audit batches
from several apiservers with package loadgen, at --rate or as fast as it acknowledges (--rate 0),
real event shapes with both sides of forwarded requests (--proxied-fraction of the requests:
the entry's record with its bare status, the peer's with the extra source IP), then waits until
every acknowledged event is in peertrail.events and every request's chain is final in
peertrail.chains. A progress line goes to stderr every second (serve's own figures in it, from
its /metrics and SQL, are read every 15 s, as a Prometheus would scrape: the bench measures
serve's CPU, and its reading should cost serve no more than a deployment's monitoring).

It prints the accepted rate (acknowledged events per second of sending) and the end-to-end
rate (events per second from the first batch sent to the last chain final; a chain is final a
--chain-window after its last record, 30 s by default, as deployed), the acknowledge latency,
the server's CPU seconds over the load and its drain, and the cores it used while the load ran,
peak RSS and mean RSS over the last minute of the load (what a steady --rate holds; from /proc), bytes per event on disk (system.tables),
and ceilings measured in the same run on the same batches, the server stopped: decoding alone
(an HTTP server in this process that decodes each body and answers 200), once with the
receiver's own decoder and once with encoding/json into the audit.k8s.io/v1 EventList of
k8s.io/apiserver, as a receiver built on the Kubernetes types would; and the embedded engine's
own bulk insert of the same rows, the events alone and with as many chains (rows the run
stored, read back and inserted in turn) as the run stored per event: the end-to-end rate's
ceiling. Read the ratios: a busy machine moves both sides alike.

--apiservers is a count (kas-1..kas-N), several counts (2,5,20: one run each, a row each, the
same events), or a list of names (kas-a,kas-b).

--layout ha runs the HA layout on the same batches after the one serve: a peertrail agent per
apiserver, which the apiserver's batches go to, relaying to two aggregators (serve with agents,
each its own embedded store). It adds the agents' acknowledge latency and RSS, how far behind
their agents the aggregators were (p99 of a sample a second), and the slower aggregator's stored
and end-to-end rates, with their ratios to the one serve's in the same run.`,
		Example: `  peertrail bench --apiservers 4 --events 1370000              # a burst, as fast as possible
  peertrail bench --apiservers 4 --rate 10000 --duration 6m      # steady
  peertrail bench --apiservers 2,5,20 --events 500000 -o json    # cost against apiservers
  peertrail bench --apiservers 4 --rate 10000 --duration 3m --layout ha   # the HA layout beside one serve`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, f.output); err != nil {
				return err
			}
			if f.rate < 0 || f.batch <= 0 || f.events < 0 || f.proxied < 0 || f.proxied > 1 {
				return usageError(cmd, "--rate and --events must not be negative, --batch positive, --proxied-fraction within 0..1")
			}
			if f.events == 0 && (f.rate == 0 || f.duration <= 0) {
				return usageError(cmd, "say how much to send: --events, or --rate with --duration")
			}
			runs, err := benchAPIServers(f.apiservers)
			if err != nil {
				return usageError(cmd, "--apiservers: %v", err)
			}
			log, err := g.logger()
			if err != nil {
				return usageError(cmd, "%v", err)
			}
			return runBench(cmd.Context(), f, runs, log, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.apiservers, "apiservers", "4", "apiservers: a count (kas-1..kas-N), counts for one run each (2,5,20), or names (kas-a,kas-b)")
	fl.IntVar(&f.rate, "rate", 0, "events per second over all apiservers; 0: as fast as the server acknowledges")
	fl.IntVar(&f.events, "events", 0, "events to send (rounded up to whole batches from every apiserver); 0: --rate times --duration")
	fl.DurationVar(&f.duration, "duration", 0, "how long to send at --rate (with --events 0)")
	fl.IntVar(&f.batch, "batch", 400, "events per webhook batch (the apiserver's default is 400)")
	fl.IntVar(&f.inflight, "inflight", 2, "batches in flight per apiserver when sending as fast as possible")
	fl.Float64Var(&f.proxied, "proxied-fraction", 0.3, "share of requests forwarded to a peer (both sides recorded)")
	fl.Uint64Var(&f.seed, "seed", 0, "random seed of the events (0: a random one)")
	fl.StringVar(&f.dataDir, "data-dir", "", "serve's data directory (default: a temporary one, removed at the end); several runs each get a subdirectory;\n"+
		"kept, it may hold earlier runs: a run counts only the events and chains it adds (bytes per event are over all of them)")
	fl.DurationVar(&f.chainWindow, "chain-window", 0, "serve's --chain-window (default: serve's, 30s)")
	fl.IntVar(&f.ceilingEvents, "ceiling-events", 0, "measure the ceilings on at most this many of the events (0: all)")
	fl.StringVar(&f.profileDir, "profile-dir", "", "have serve profile itself (--enable-pprof) and save cpu.pprof (the first --profile-seconds of the load),\n"+
		"heap-acked.pprof (when the last batch was acknowledged) and heap-final.pprof here (go tool pprof BINARY FILE)")
	fl.IntVar(&f.profileSecs, "profile-seconds", 30, "length of the CPU profile")
	fl.DurationVar(&f.stall, "stall", 5*time.Minute, "give up when nothing more was stored for this long")
	fl.StringArrayVar(&f.serveArgs, "serve-flag", nil, "a flag for serve, such as --serve-flag=--store=none (repeatable; wins over bench's)")
	fl.StringVar(&f.layout, "layout", "one", "one: peertrail serve alone; ha: also the HA layout (an agent per apiserver, two aggregators) on the same batches")
	fl.IntVar(&f.aggregators, "aggregators", bench.DefaultAggregators, "with --layout ha: how many aggregators (1 compares one aggregator's work with one serve's on the same cores)")
	fl.BoolVar(&f.niceAggs, "nice-aggregators", false, "with --layout ha: run the aggregators at nice 19, standing for machines of their own (the agents and the load get the cores first)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// benchAPIServers reads --apiservers: the names of each run.
func benchAPIServers(s string) ([][]string, error) {
	parts := strings.Split(s, ",")
	var counts []int
	for _, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			counts = nil
			break
		}
		if n < 1 || n > 4096 {
			return nil, fmt.Errorf("%d apiservers: want 1 to 4096", n)
		}
		counts = append(counts, n)
	}
	if counts == nil {
		for _, p := range parts {
			if strings.TrimSpace(p) == "" {
				return nil, fmt.Errorf("%q: an empty name", s)
			}
		}
		return [][]string{parts}, nil
	}
	var runs [][]string
	for _, n := range counts {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("kas-%d", i+1)
		}
		runs = append(runs, names)
	}
	return runs, nil
}

func runBench(ctx context.Context, f *benchFlags, runs [][]string, log *slog.Logger, out, errOut io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: this binary's path, to run its serve: %w", err)
	}
	if err := ensureEngine(ctx, errOut); err != nil {
		return err
	}
	var results []bench.Result
	for i, names := range runs {
		o := bench.Options{Exe: exe, ServeArgs: f.serveArgs, APIServers: names, Rate: f.rate, Inflight: f.inflight,
			Events: f.events, Duration: f.duration, Batch: f.batch, ProxiedFraction: f.proxied, Seed: f.seed,
			DataDir: f.dataDir, ChainWindow: f.chainWindow, CeilingEvents: f.ceilingEvents,
			ProfileDir: f.profileDir, ProfileSeconds: f.profileSecs, Stall: f.stall, Layout: f.layout, Aggregators: f.aggregators, NiceAggregators: f.niceAggs, Progress: errOut, Log: log}
		if len(runs) > 1 {
			if o.DataDir != "" {
				o.DataDir = fmt.Sprintf("%s/run-%d", f.dataDir, i+1)
			}
			if o.ProfileDir != "" {
				o.ProfileDir = fmt.Sprintf("%s/run-%d", f.profileDir, i+1)
			}
		}
		fmt.Fprintf(errOut, "=== %d apiservers\n", len(names))
		res, err := bench.Run(ctx, o)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	if f.output == "json" || f.output == "yaml" {
		var doc any = results
		if len(results) == 1 {
			doc = results[0]
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		return printJSON(out, f.output, b)
	}
	printBench(out, results)
	return nil
}

// printBench writes one column per run.
func printBench(out io.Writer, rs []bench.Result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, cell func(r bench.Result) string) {
		fmt.Fprint(tw, name, "\t")
		for _, r := range rs {
			fmt.Fprint(tw, cell(r), "\t")
		}
		fmt.Fprintln(tw)
	}
	rate := func(v float64) string { return fmt.Sprintf("%.0f ev/s", v) }
	row("apiservers", func(r bench.Result) string { return strconv.Itoa(r.APIServers) })
	row("rate", func(r bench.Result) string {
		if r.Rate == 0 {
			return "as fast as possible"
		}
		return fmt.Sprintf("%d ev/s", r.Rate)
	})
	row("events acknowledged / stored", func(r bench.Result) string { return fmt.Sprintf("%d / %d", r.EventsAcked, r.EventsStored) })
	row("chains final / expected (forwarded)", func(r bench.Result) string {
		return fmt.Sprintf("%d / %d (%d)", r.ChainsFinal, r.ChainsExpected, r.Forwarded)
	})
	row("chains by class", func(r bench.Result) string { return classes(r.Classes) })
	row("accepted", func(r bench.Result) string { return rate(r.AcceptedPerSec) })
	row("  decode-only ceiling, peertrail's decoder", func(r bench.Result) string { return rate(r.DecodeOnlyPerSec) })
	row("  ratio", func(r bench.Result) string { return fmt.Sprintf("%.2f", r.AcceptedRatio()) })
	row("  decode-only ceiling, encoding/json into the audit types", func(r bench.Result) string { return rate(r.DecodeOnlyJSONPerSec) })
	row("  ratio", func(r bench.Result) string { return fmt.Sprintf("%.2f", r.AcceptedJSONRatio()) })
	row("events stored (all in events)", func(r bench.Result) string {
		return fmt.Sprintf("%s in %.1fs", rate(r.EventsStoredPerSec), r.StoredSeconds)
	})
	row("end to end (all chains final)", func(r bench.Result) string {
		return fmt.Sprintf("%s in %.1fs", rate(r.EndToEndPerSec), r.FinalSeconds)
	})
	row("  chain window", func(r bench.Result) string { return fmt.Sprintf("%.0fs", r.ChainWindowSec) })
	row("  engine bulk insert ceiling: events alone", func(r bench.Result) string { return rate(r.EngineBulkPerSec) })
	row("  engine bulk insert ceiling: events and their chains", func(r bench.Result) string { return rate(r.EngineStorePerSec) })
	row("  ratio", func(r bench.Result) string { return fmt.Sprintf("%.2f", r.EndToEndRatio()) })
	row("posted again on request (Retry-After)", func(r bench.Result) string { return strconv.Itoa(r.Retries) })
	row("ack latency p50 / p99 / max", func(r bench.Result) string {
		return fmt.Sprintf("%.1f / %.1f / %.0f ms", r.AckP50ms, r.AckP99ms, r.AckMaxms)
	})
	row("  the server's own: answers over 5 / over 10 ms", func(r bench.Result) string {
		return fmt.Sprintf("%d / %d of %d", r.ServerAcksOver5ms, r.ServerAcksOver10ms, r.ServerAcks)
	})
	row("server CPU, load and drain", func(r bench.Result) string {
		return fmt.Sprintf("%.1f s (%.1f s per million events)", r.ServerCPUSeconds, r.CPUSecondsPerMillion)
	})
	row("server CPU during the load", func(r bench.Result) string {
		return fmt.Sprintf("%.2f cores", r.ServerLoadCores)
	})
	row("  by threads: serve's own (Go, and the engine's work it calls) / merges / the engine's other", func(r bench.Result) string {
		t := r.LoadCPUByThreads
		if t == nil {
			return ""
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f s", t[bench.ThreadsProcess], t[bench.ThreadsMerges], t[bench.ThreadsEngine])
	})
	row("  engine: parts inserted / merges a second; merged per inserted byte", func(r bench.Result) string {
		return fmt.Sprintf("%.1f / %.2f; %.2f", r.EnginePartsPerSec, r.EngineMergesPerSec, r.EngineMergeRewrite)
	})
	row("server peak RSS", func(r bench.Result) string { return fmt.Sprintf("%d MB", r.PeakRSSBytes>>20) })
	row("server RSS, end of the load: mean / max (anon)", func(r bench.Result) string {
		return fmt.Sprintf("%d / %d MB (%d MB) over the last %.0fs", r.LoadRSSMeanBytes>>20, r.LoadRSSMaxBytes>>20, r.LoadRSSAnonMeanBytes>>20, r.LoadRSSSeconds)
	})
	row("  of it: Go's heap / the engine's live memory", func(r bench.Result) string {
		if r.LoadGoHeapMeanBytes == 0 {
			return "-"
		}
		return fmt.Sprintf("%d / %d MB (the rest: code, and pages the engine's allocator keeps)", r.LoadGoHeapMeanBytes>>20, r.LoadEngineLiveMeanBytes>>20)
	})
	row("on disk per event: events / all tables", func(r bench.Result) string {
		return fmt.Sprintf("%.0f / %.0f bytes", r.BytesPerEvent, r.StoreBytesPerEvent)
	})
	row("peak spool", func(r bench.Result) string { return fmt.Sprintf("%d MB", r.PeakSpoolBytes>>20) })
	if rs[0].HA != nil {
		ha := func(cell func(h *bench.HAResult) string) func(r bench.Result) string {
			return func(r bench.Result) string {
				if r.HA == nil {
					return ""
				}
				return cell(r.HA)
			}
		}
		row("HA layout: agents / aggregators", ha(func(h *bench.HAResult) string { return fmt.Sprintf("%d / %d", h.Agents, h.Aggregators) }))
		row("  accepted by the agents", ha(func(h *bench.HAResult) string { return rate(h.AcceptedPerSec) }))
		row("  agent ack latency p50 / p99 / max", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%.1f / %.1f / %.0f ms", h.AgentAckP50ms, h.AgentAckP99ms, h.AgentAckMaxms)
		}))
		row("  ratio of the p99 to one serve's", func(r bench.Result) string { return fmt.Sprintf("%.2f", r.AgentAckRatio()) })
		row("  the agents' own: answers over 10 / over 20 ms", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%d / %d of %d", h.AgentAcksOver10ms, h.AgentAcksOver20ms, h.AgentAcks)
		}))
		row("  agent RSS, end of the load: mean / max; peak (the largest agent)", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%d / %d MB; %d MB", h.AgentLoadRSSMeanBytes>>20, h.AgentLoadRSSMaxBytes>>20, h.AgentPeakRSSBytes>>20)
		}))
		row("  agents' CPU, all together", ha(func(h *bench.HAResult) string { return fmt.Sprintf("%.1f s", h.AgentCPUSeconds) }))
		row("  aggregators' lag behind their agents p99 / max", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%.1f / %.1f s", h.AggregatorLagP99Seconds, h.AggregatorLagMaxSeconds)
		}))
		row("  events stored, the slower aggregator", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%s in %.1fs", rate(h.EventsStoredPerSec), h.StoredSeconds)
		}))
		row("  ratio to one serve's", func(r bench.Result) string { return fmt.Sprintf("%.2f", r.StoredRatio()) })
		row("  end to end, the slower aggregator", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%s in %.1fs", rate(h.EndToEndPerSec), h.FinalSeconds)
		}))
		row("  aggregators' CPU; peak RSS (the larger)", ha(func(h *bench.HAResult) string {
			return fmt.Sprintf("%.1f s; %d MB", h.AggregatorCPUSeconds, h.AggregatorPeakRSSBytes>>20)
		}))
	}
	tw.Flush()
}

func classes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
