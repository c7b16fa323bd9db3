package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/peertrail/peertrail/simulate"
)

type simulateFlags struct {
	cfg       simulate.UpgradeConfig
	webhook   simulate.WebhookOptions
	tokenFile string
	// tokenDir holds the apiservers' own tokens, a file per apiserver.
	tokenDir string
	// readerTokenFile is the reader's token --score reads the chain API with.
	readerTokenFile string
	truthOut        string
	score           bool
	scoreWait       time.Duration
	jsonOut         bool
	output          string
	resources       []string
	mix             string
}

func newSimulateCommand(_ *globalFlags) *cobra.Command {
	f := &simulateFlags{cfg: simulate.DefaultUpgrade()}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Send the audit traffic of a simulated rolling upgrade, with faults, to a receiver",
		Long: `simulate plays a rolling upgrade of an HA control plane in real time: N apiservers, all but
one at --from and one at --to, the old ones replaced one at a time (each down for a few seconds).
The new version serves a resource the old one does not (scheduling.k8s.io/v1alpha2 podgroups)
and the other way round, so entries forward in both directions through the Mixed Version Proxy.
Each apiserver's audit events leave through the kube-apiserver's own audit webhook backend in
batch mode (k8s.io/apiserver), to <url>/audit/<apiserver>, shaped like real ones: the peer
records one more hop and the full status, impersonation only on the entry, the servers' own
loopback calls and peer-discovery fetches.

Faults: a peer's audit lost (--drop-peer-audit), a peer seeing another identity
(--identity-mismatch), impersonation (--impersonation), an apiserver SIGKILLed (--kill-peer:
503s, lost audit, then misleading 404s), an old apiserver without MVP (--mvp-off: misleading
404s), and batches delivered late or twice on their way (--late-batches, --duplicate-batches).

It knows what it did: --truth-out writes every request's true class and findings, and --score
asks the receiver's chain API about each one and prints how peertrail did.`,
		Example: `  peertrail simulate --url http://127.0.0.1:8443 --duration 2m --kill-peer --mvp-off --score`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(cmd, f.output); err != nil {
				return err
			}
			if err := checkSimulate(cmd, f); err != nil {
				return err
			}
			return runSimulate(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.webhook.URL, "url", "http://127.0.0.1:8443", "receiver base URL (peertrail serve)")
	fl.StringVar(&f.webhook.CAFile, "ca-file", "", "CA bundle that verifies the receiver (as in the webhook kubeconfig)")
	fl.BoolVar(&f.webhook.InsecureSkipVerify, "insecure-skip-tls-verify", false, "do not verify the receiver's certificate")
	fl.StringVar(&f.tokenFile, "token-file", "", "bearer token for the receiver (it names one apiserver: with several, use --token-dir, client certificates or none)")
	fl.StringVar(&f.tokenDir, "token-dir", "", "directory of the apiservers' own bearer tokens, a file per apiserver named after it (kas-1, or kas-1.token)")
	fl.StringVar(&f.readerTokenFile, "reader-token-file", "", "reader's bearer token for --score, which reads the chain API (default $"+tokenEnv+")")
	fl.DurationVar(&f.webhook.BatchWait, "batch-wait", time.Second, "the apiservers' --audit-webhook-batch-max-wait")
	fl.IntVar(&f.cfg.APIServers, "apiservers", f.cfg.APIServers, "number of apiservers (at least 2)")
	fl.StringVar(&f.cfg.From, "from", f.cfg.From, "version the upgrade starts from")
	fl.StringVar(&f.cfg.To, "to", f.cfg.To, "version the upgrade goes to")
	fl.Float64Var(&f.cfg.Rate, "rate", f.cfg.Rate, "client requests per second, over all apiservers")
	fl.DurationVar(&f.cfg.Duration, "duration", f.cfg.Duration, "length of the run")
	fl.Uint64Var(&f.cfg.Seed, "seed", f.cfg.Seed, "random seed (the same seed plays the same upgrade)")
	fl.StringArrayVar(&f.resources, "resource", nil, "a resource the clients request, repeatable (default: pods, configmaps, deployments, leases served by both\n"+
		"versions, podgroups only by --to, storageversionmigrations only by --from):\n"+
		"GROUP/VERSION/RESOURCE[,ns=NAMESPACE][,served-by=from|to|VERSION][,weight=N], e.g.\n"+
		"scheduling.k8s.io/v1alpha2/podgroups,ns=training,served-by=to,weight=2 (core: core/v1/pods)")
	fl.StringVar(&f.mix, "mix", "", "request mix, verb weights (default: get, list, create, update, delete equally), e.g. get=6,list=3,create=1")
	fl.Float64Var(&f.cfg.Faults.DropPeerAudit, "drop-peer-audit", 0, "share of forwarded requests whose peer's audit is lost")
	fl.Float64Var(&f.cfg.Faults.IdentityMismatch, "identity-mismatch", 0, "share of forwarded requests whose peer sees other groups")
	fl.Float64Var(&f.cfg.Faults.Impersonation, "impersonation", 0, "share of requests made by impersonation")
	fl.BoolVar(&f.cfg.Faults.KillPeer, "kill-peer", false, "SIGKILL the apiserver that starts at --to an eighth into the run, while it is the only one")
	fl.DurationVar(&f.cfg.Faults.KillFor, "kill-for", f.cfg.Faults.KillFor, "how long the killed apiserver stays down")
	fl.BoolVar(&f.cfg.Faults.MVPOff, "mvp-off", false, "run the first old apiserver without the Mixed Version Proxy")
	fl.Float64Var(&f.webhook.Late, "late-batches", 0, "share of audit batches delivered late")
	fl.DurationVar(&f.webhook.LateBy, "late-by", 20*time.Second, "how late")
	fl.Float64Var(&f.webhook.Duplicate, "duplicate-batches", 0, "share of audit batches delivered twice")
	fl.StringVar(&f.truthOut, "truth-out", "", "write every request's true class and findings to this JSON file")
	fl.BoolVar(&f.score, "score", false, "when done, ask the receiver about every request and compare with the truth")
	fl.DurationVar(&f.scoreWait, "score-wait", 90*time.Second, "how long to wait for chains to become final when scoring")
	fl.BoolVar(&f.jsonOut, "json", false, "same as -o json")
	fl.MarkHidden("json")
	fl.StringVarP(&f.output, "output", "o", "table", "output format of the scorecard (--score): table, json or yaml")
	return cmd
}

// checkSimulate checks simulate's command line, and that a receiver answers at --url, before
// the run: a usage error is exit 2, a receiver not there exit 5, each at once rather than
// after --duration of posting into nothing.
func checkSimulate(cmd *cobra.Command, f *simulateFlags) error {
	if f.cfg.APIServers < 2 {
		return usageError(cmd, "--apiservers must be at least 2")
	}
	if f.cfg.Rate <= 0 || f.cfg.Duration <= 0 {
		return usageError(cmd, "--rate and --duration must be positive")
	}
	for _, r := range f.resources {
		res, err := simulate.ParseResource(r)
		if err != nil {
			return usageError(cmd, "--resource: %v", err)
		}
		f.cfg.Resources = append(f.cfg.Resources, res)
	}
	if f.mix != "" {
		mix, err := simulate.ParseMix(f.mix)
		if err != nil {
			return usageError(cmd, "--mix: %v", err)
		}
		f.cfg.Mix = mix
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return usageError(cmd, "--token-file: %v", err)
		}
		f.webhook.Token = strings.TrimSpace(string(b))
	}
	if f.tokenDir != "" {
		var err error
		if f.webhook.Tokens, err = readTokenDir(f.tokenDir); err != nil {
			return usageError(cmd, "--token-dir: %v", err)
		}
	}
	tc, err := simulate.ClientTLS(f.webhook)
	if err != nil {
		return usageError(cmd, "%v", err)
	}
	return probeReceiver(cmd.Context(), &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, f.webhook.URL, "--url")
}

func runSimulate(ctx context.Context, f *simulateFlags, out, errOut io.Writer) error {
	dir, err := os.MkdirTemp("", "peertrail-simulate")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f.webhook.Dir, f.webhook.Seed = dir, f.cfg.Seed
	truths, err := simulateUpgrade(ctx, f.cfg, f.webhook, errOut)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "truth:", simulate.Summary(truths))
	if f.truthOut != "" {
		b, err := json.MarshalIndent(truths, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.truthOut, b, 0o644); err != nil {
			return fmt.Errorf("write truth: %w", err)
		}
	}
	if !f.score {
		return nil
	}
	tc, err := simulate.ClientTLS(f.webhook)
	if err != nil {
		return err
	}
	reader := serverFlags{tokenFile: f.readerTokenFile}
	tok, err := reader.bearer()
	if err != nil {
		return err
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tc}
	if tok != "" {
		rt = withBearer(rt, tok)
	}
	sc, err := simulate.Score(ctx, &http.Client{Transport: rt}, f.webhook.URL, truths, f.scoreWait)
	if err != nil {
		return err
	}
	if f.jsonOut {
		f.output = "json"
	}
	if f.output == "json" || f.output == "yaml" {
		b, err := json.Marshal(sc)
		if err != nil {
			return err
		}
		return printJSON(out, f.output, b)
	}
	printScorecard(out, sc)
	return nil
}

// simulateUpgrade runs the simulation, with a progress bar when errOut is a terminal.
func simulateUpgrade(ctx context.Context, cfg simulate.UpgradeConfig, wo simulate.WebhookOptions, errOut io.Writer) ([]simulate.Truth, error) {
	names := make([]string, cfg.APIServers)
	for i := range names {
		names[i] = fmt.Sprintf("kas-%d", i+1)
	}
	sink, err := simulate.NewWebhookSink(names, wo)
	if err != nil {
		return nil, err
	}
	u := simulate.NewUpgrade(cfg, sink)
	if fd, ok := errOut.(*os.File); ok && term.IsTerminal(int(fd.Fd())) {
		bar := progressbar.NewOptions(1000, progressbar.OptionSetWriter(errOut), progressbar.OptionSetDescription("rolling upgrade"),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionClearOnFinish())
		u.Progress = func(done float64) { _ = bar.Set(int(1000 * min(done, 1))) }
		defer bar.Finish()
	}
	runErr := u.Run(ctx)
	sink.Close() // flush every apiserver's last batch, as on shutdown
	if runErr != nil {
		return nil, runErr
	}
	return u.Truths(), nil
}

func printScorecard(out io.Writer, sc simulate.Scorecard) {
	fmt.Fprintf(out, "peertrail classified %d of %d requests right (%s); %d wrong, %d of them with the right class but other findings; %d never became a final chain\n",
		sc.Matched, sc.Requests, sc.Percent(), sc.Requests-sc.Matched, sc.FindingsWrong, sc.Missing)
	classes := make([]string, 0, len(sc.Confusion))
	for k := range sc.Confusion {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	for _, truth := range classes {
		row := sc.Confusion[truth]
		var parts []string
		for _, got := range sortedStrings(row) {
			parts = append(parts, fmt.Sprintf("%s %d", got, row[got]))
		}
		fmt.Fprintf(out, "  truth %-15s -> %s\n", truth, strings.Join(parts, ", "))
	}
	for _, fault := range sortedStrings(sc.Faults) {
		v := sc.Faults[fault]
		fmt.Fprintf(out, "  fault %-20s %d requests, %d found\n", fault, v[0], v[1])
	}
	for _, m := range sc.Mismatches {
		fmt.Fprintln(out, "  wrong:", m)
	}
}

func sortedStrings[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
