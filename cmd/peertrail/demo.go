package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/simulate"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/store/chdb"
)

type demoFlags struct {
	listen, sqlListen string
	dataDir           string
	duration          time.Duration
	rate              float64
	seed              uint64
	keepRunning       bool
	real              bool
}

func newDemoCommand(_ *globalFlags) *cobra.Command {
	f := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch peertrail follow a simulated rolling upgrade with faults, on the embedded store",
		Long: `demo shows what peertrail does, on one machine, with nothing to set up: it fetches the embedded
ClickHouse engine if it is missing (scripts/fetch-chdb.sh, once), starts peertrail serve on
loopback with the embedded store, and plays a rolling upgrade of three kube-apiservers from
1.35 to 1.36 through the kube-apiserver's own audit webhook client, with faults: an old server
without the Mixed Version Proxy, a new server SIGKILLed mid-upgrade, lost and late audit
batches, a broken identity header on some forwards, impersonation.

Then it prints what a user of peertrail sees: the chains by class and apiserver pair, the
misleading 404s, broken chains and identity problems it found (and how that compares with the
faults the simulation injected), the upgrade gate's verdict, and the commands to explore
further (peertrail chain, gate, sql, report, /metrics), with the reader token and the SQL
password they need. peertrail then keeps running for them until Ctrl-C (--keep-running=false
ends the demo after the report instead); its data is in a temporary directory, removed at the
end, unless --data-dir names one.

Everything the demo starts listens on loopback, on free ports unless --listen and --sql-listen
name them, so a ClickHouse server or another peertrail on the default ports is no obstacle.

The first run fetches the embedded engine, chDB 26.7 (a 178 MB download, 566 MB on disk), from npm into
${PEERTRAIL_CACHE:-~/.cache/peertrail}; later runs use that copy.`,
		Example: `  go run ./cmd/peertrail demo
  go run ./cmd/peertrail demo --duration 3m
  go run ./cmd/peertrail demo --keep-running=false   # print the report and exit`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "where peertrail listens (webhook, API, metrics); port 0 is a free one")
	fl.StringVar(&f.sqlListen, "sql-listen", "127.0.0.1:0", "where the embedded store answers SQL (ClickHouse HTTP interface); port 0 is a free one")
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory (default: a temporary one, removed at the end)")
	fl.DurationVar(&f.duration, "duration", 75*time.Second, "length of the simulated upgrade")
	fl.Float64Var(&f.rate, "rate", 60, "client requests per second")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed")
	fl.BoolVar(&f.keepRunning, "keep-running", true, "keep peertrail running after the report for the commands it prints, until Ctrl-C")
	fl.BoolVar(&f.real, "real", false, "use real kube-apiservers (v1.35.4, v1.36.3, built by scripts/build-kube.sh) and etcd instead of the simulation")
	return cmd
}

func runDemo(ctx context.Context, f *demoFlags, out, errOut io.Writer) error {
	// A mistyped address is said before the engine is fetched, and a busy one before anything
	// starts (preflight, below).
	for _, a := range []struct{ flag, addr string }{{"--listen", f.listen}, {"--sql-listen", f.sqlListen}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return errorf(exitUsage, a.flag+" takes host:port, e.g. 127.0.0.1:0 for a free port", "%s %q: %v", a.flag, a.addr, err)
		}
		if !loopbackAddr(a.addr) {
			return errorf(exitUsage, "the demo serves plain HTTP without credentials for the apiservers: loopback only, e.g. 127.0.0.1:0",
				"%s %s is not loopback", a.flag, a.addr)
		}
	}
	if err := ensureEngine(ctx, errOut); err != nil {
		return err
	}
	dataDir := f.dataDir
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "peertrail-demo")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dataDir = filepath.Join(tmp, "data")
	}
	cfg := config.Defaults()
	cfg.Listen, cfg.InsecureHTTP, cfg.AcceptUnknownAPIServers = f.listen, true, true
	cfg.DataDir, cfg.Store.SQLListen = dataDir, f.sqlListen
	if err := preflight(cfg); err != nil {
		return err
	}
	// The API answers readers only, even on loopback: the demo makes a reader token and uses it
	// as the commands it prints do.
	token, tokenFile, err := demoReaderToken(dataDir)
	if err != nil {
		return err
	}
	cfg.Readers.TokenFile = tokenFile
	reader := &http.Client{Transport: withBearer(nil, token), Timeout: time.Minute}
	// The simulated apiservers send a batch every second: a short window closes chains quickly.
	cfg.Correlate.ChainWindow = config.Duration(5 * time.Second)
	// The report reads the store right after the load: inserts every second rather than
	// serve's fifteen (which spare the engine's CPU at a steady rate, not a demo's concern).
	cfg.Store.FlushInterval = config.Duration(time.Second)
	// Only warnings: the demo's own output is the point. Not the warning that any local client
	// may post as any apiserver: the demo's simulated apiservers have no credentials on purpose,
	// and the first line a newcomer read was that warning.
	log := slog.New(dropMessage{slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}), server.WarnNoAPIServerAuth})
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		return addrInUse(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			fmt.Fprintln(errOut, "peertrail:", err)
		}
	}()
	fmt.Fprintf(out, "peertrail is receiving audit webhooks at %s/audit/<apiserver>, store: embedded ClickHouse (SQL at %s)\n\n", srv.URL(), srv.SQLURL())

	var truths []simulate.Truth
	var sc *simulate.Scorecard
	if f.real {
		dir, err := os.MkdirTemp("", "peertrail-demo-real")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(out, "Rolling upgrade on real kube-apiservers (etcd and kube-apiserver on loopback):")
		if err := realUpgrade(ctx, srv.URL(), dir, out); err != nil {
			return err
		}
		fmt.Fprintln(out, "\nWaiting for the last chains to close...")
		// Two windows: a chain whose verdict waits for evidence stays open one more.
		time.Sleep(2*time.Duration(cfg.Correlate.ChainWindow) + 3*time.Second)
	} else {
		if truths, sc, err = simulatedDemo(ctx, f, srv.URL(), reader, out, errOut); err != nil {
			return err
		}
	}
	// The store writer flushes once a second (cfg.Store.FlushInterval).
	time.Sleep(1500 * time.Millisecond)

	fmt.Fprintln(out, "\n=== What peertrail saw (peertrail report)")
	if err := demoReport(ctx, out, srv.Store()); err != nil {
		return err
	}
	if sc != nil {
		fmt.Fprintln(out, "\n=== The faults the simulation injected, and what peertrail made of them")
		fmt.Fprintln(out, "truth:", simulate.Summary(truths))
		printScorecard(out, *sc)
	}

	fmt.Fprintln(out, "\n=== The upgrade gate (peertrail gate): may the next apiserver be replaced?")
	if err := demoGate(ctx, out, reader, srv.URL()); err != nil {
		return err
	}

	// An example to look at: a misleading 404 peertrail recognised as one, else a forwarded
	// request, else any (a short run may have none of the first).
	example := "<auditID>"
	for _, class := range []chain.Class{chain.ClassMisleading404, chain.ClassProxied, ""} {
		if c, err := listChains(ctx, reader, srv.URL(), class); err == nil && len(c) > 0 {
			example = c[0].AuditID
			break
		}
	}
	printExplore(out, exploreCommands(selfCommand(), srv.URL(), srv.SQLURL(), tokenFile,
		filepath.Join(dataDir, server.SQLPasswordFileName), example), f.keepRunning, f.dataDir == "")
	if f.keepRunning {
		<-ctx.Done()
		fmt.Fprintln(errOut, "\nStopping peertrail.")
	}
	return nil
}

// exploreCommand is one command the demo prints for the reader to run.
type exploreCommand struct{ what, line string }

// exploreCommands are the commands that explore the demo's peertrail, complete with its
// addresses and credentials, run as self (e.g. "go run ./cmd/peertrail").
func exploreCommands(self, api, sql, tokenFile, passwordFile, auditID string) []exploreCommand {
	q := func(s string) string { return shellQuote(s) }
	return []exploreCommand{
		{"one request", fmt.Sprintf("%s chain %s --server %s --token-file %s", self, q(auditID), api, q(tokenFile))},
		{"the gate", fmt.Sprintf("%s gate --server %s --token-file %s", self, api, q(tokenFile))},
		{"SQL", fmt.Sprintf("%s sql --sql-server %s --clickhouse-password-file %s 'SELECT class, count() FROM peertrail.chains FINAL GROUP BY class'", self, sql, q(passwordFile))},
		{"report", fmt.Sprintf("%s report --sql-server %s --clickhouse-password-file %s --since 1h", self, sql, q(passwordFile))},
		{"metrics", fmt.Sprintf("curl -sS -H \"Authorization: Bearer $(cat %s)\" %s/metrics", q(tokenFile), api)},
	}
}

func printExplore(out io.Writer, cmds []exploreCommand, running, tempData bool) {
	fmt.Fprintln(out, "\n=== Explore")
	if running {
		fmt.Fprintln(out, "peertrail keeps running for these until you press Ctrl-C here; run them in another terminal, from this directory:")
	} else {
		fmt.Fprintln(out, "peertrail has stopped (--keep-running=false); these work while a demo runs (the default):")
	}
	for _, c := range cmds {
		fmt.Fprintf(out, "  %-12s %s\n", c.what+":", c.line)
	}
	fmt.Fprintln(out, "  dashboards:  dashboards/generated/*.json for Grafana: a Prometheus data source scraping /metrics above with\n"+
		"               that bearer token, and a ClickHouse data source (grafana-clickhouse-datasource, HTTP) at the SQL address with\n"+
		"               that password; alert rules in alerts/generated/")
	if tempData {
		fmt.Fprintln(out, "The reader token, the SQL password and the data are in a temporary directory, removed when the demo ends.")
	}
}

// selfCommand is how the person who started this binary runs it again: "go run
// ./cmd/peertrail" for a binary go run built, "peertrail" when that is this binary on $PATH,
// else its path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "peertrail"
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/peertrail"
	}
	if p, err := exec.LookPath("peertrail"); err == nil {
		a, errA := os.Stat(p)
		b, errB := os.Stat(exe)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return "peertrail"
		}
	}
	return shellQuote(exe)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ensureEngine makes sure the embedded engine's library is at hand, fetching it with the
// repository's script when it is missing.
func ensureEngine(ctx context.Context, errOut io.Writer) error {
	if p := os.Getenv("CHDB_LIB_PATH"); p != "" {
		return nil
	}
	if _, err := os.Stat(chdb.DefaultLibPath()); err == nil {
		return nil
	}
	script, err := findUp(filepath.Join("scripts", "fetch-chdb.sh"))
	if err != nil {
		return fmt.Errorf("the embedded ClickHouse engine (libchdb.so) is not in %s, and scripts/fetch-chdb.sh was not found to fetch it: run the demo from the peertrail repository, or set CHDB_LIB_PATH", chdb.DefaultLibPath())
	}
	fmt.Fprintf(errOut, "Fetching the embedded ClickHouse engine once: chDB %s from npm, a 178 MB download, 566 MB on disk,\n"+
		"into %s (later runs use this copy); what is written so far shows every 5 s...\n",
		chdb.Version, filepath.Dir(chdb.DefaultLibPath()))
	cmd := exec.CommandContext(ctx, script)
	cmd.Stderr = errOut
	stop := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		downloadProgress(errOut, filepath.Dir(chdb.DefaultLibPath()), stop)
	}()
	path, err := cmd.Output()
	close(stop)
	<-progressDone
	if err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	return os.Setenv("CHDB_LIB_PATH", strings.TrimSpace(string(path)))
}

// downloadProgress says every few seconds how much fetch-chdb.sh has written into dir (its
// temporary directory is there), until stop is closed.
func downloadProgress(w io.Writer, dir string, stop <-chan struct{}) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var n int64
		filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
		fmt.Fprintf(w, "  ... %d MB written so far, %s\n", n>>20, time.Since(start).Round(time.Second))
	}
}

// findUp looks for rel in the working directory and its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

func demoReport(ctx context.Context, out io.Writer, s store.Store) error {
	if s == nil {
		return errors.New("no store")
	}
	params := store.Window(time.Now().UTC(), time.Hour)
	for _, name := range []string{"chains_by_class", "misleading_404s", "proxy_failures", "broken_chains", "identity_mismatches"} {
		q, err := store.QueryNamed(name)
		if err != nil {
			return err
		}
		res, err := q.Run(ctx, s, params)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(out, "\n-- %s\n", q.Title)
		if err := render(out, res, "table"); err != nil {
			return err
		}
	}
	return nil
}

// demoReaderToken writes a fresh random reader token to dir/reader.token (mode 0600) and
// returns it with the file's path.
func demoReaderToken(dir string) (token, path string, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", "", fmt.Errorf("data directory: %w", err)
	}
	token = rand.Text() // 128 random bits
	path = filepath.Join(dir, "reader.token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("reader token: %w", err)
	}
	return token, path, nil
}

func demoGate(ctx context.Context, out io.Writer, c *http.Client, base string) error {
	body, err := apiGet(ctx, c, base, "/api/v1/gate")
	if err != nil {
		return err
	}
	var v gate.Verdict
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("gate verdict: %w", err)
	}
	printVerdict(out, v)
	return nil
}

func listChains(ctx context.Context, c *http.Client, base string, class chain.Class) ([]*chain.Chain, error) {
	body, err := apiGet(ctx, c, base, "/api/v1/chains?limit=1&class="+string(class))
	if err != nil {
		return nil, err
	}
	var l struct{ Chains []*chain.Chain }
	return l.Chains, json.Unmarshal(body, &l)
}

// simulatedDemo plays the simulated upgrade and scores peertrail against its truth.
func simulatedDemo(ctx context.Context, f *demoFlags, url string, reader *http.Client, out, errOut io.Writer) ([]simulate.Truth, *simulate.Scorecard, error) {
	up := simulate.DefaultUpgrade()
	up.Duration, up.Rate, up.Seed = f.duration, f.rate, f.seed
	up.Faults = simulate.Faults{DropPeerAudit: 0.03, IdentityMismatch: 0.03, Impersonation: 0.1,
		KillPeer: true, KillFor: 15 * time.Second, MVPOff: true}
	wdir, err := os.MkdirTemp("", "peertrail-demo-webhooks")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(wdir)
	fmt.Fprintf(out, "Playing a rolling upgrade of 3 kube-apiservers, %s -> %s, for %s (%.0f requests/s):\n", up.From, up.To, up.Duration, up.Rate)
	fmt.Fprintln(out, "  kas-1 runs without the Mixed Version Proxy, kas-3 is SIGKILLed early on, some audit is lost, late or duplicated.")
	truths, err := simulateUpgrade(ctx, up, simulate.WebhookOptions{URL: url, Dir: wdir, BatchWait: time.Second,
		Late: 0.03, LateBy: 4 * time.Second, Duplicate: 0.05, Seed: f.seed}, errOut)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(out, "\nWaiting for the last chains to close...")
	sc, err := simulate.Score(ctx, reader, url, truths, 2*time.Minute)
	if err != nil {
		return nil, nil, err
	}
	return truths, &sc, nil
}

// dropMessage is a slog.Handler that leaves out the records with one message.
type dropMessage struct {
	slog.Handler
	msg string
}

func (d dropMessage) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == d.msg {
		return nil
	}
	return d.Handler.Handle(ctx, r)
}

func (d dropMessage) WithAttrs(as []slog.Attr) slog.Handler {
	return dropMessage{d.Handler.WithAttrs(as), d.msg}
}

func (d dropMessage) WithGroup(name string) slog.Handler {
	return dropMessage{d.Handler.WithGroup(name), d.msg}
}
