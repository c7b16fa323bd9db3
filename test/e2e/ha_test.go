package e2e

// TestHALayoutSurvivesEveryPeertrailProcess: the HA layout (issue 41) on real kube-apiservers,
// every peertrail process taken away in turn while clients keep the control plane busy.
//
// Three real kube-apiservers share one etcd, MVP on: kas-a and kas-b run v1.35.4, kas-c v1.36.3
// with podgroups (which 1.35 does not have) and batch/v1 off, so requests are forwarded both
// ways. Each apiserver's audit webhook posts to a peertrail agent of its own on loopback (its
// own client certificate, the webhook's default retries); every agent relays to two aggregators
// (peertrail serve with agents:, each its own embedded store), node-a and node-b with a bearer
// token, node-c with a client certificate. Each apiserver also writes its audit log: what it
// sent, to compare with what each aggregator stored. While clients send requests (the truth is
// what each one saw), the test
//
//  1. SIGKILLs node-a's agent and starts it again 5 s later;
//  2. SIGKILLs aggregator agg-0 and starts it again 60 s later;
//  3. SIGKILLs agg-1 once agg-0 has caught up, and starts it again 30 s later;
//  4. SIGKILLs both aggregators, for 3 minutes: longer than the apiservers' webhook holds a
//     batch whose connection is refused (81-98 s): the agents must;
//  5. replaces every peertrail process, one at a time, by a binary built afresh during the test.
//
// It passes only if apiserver_audit_error_total{plugin="webhook"} stays 0 on every apiserver;
// every event each apiserver wrote to its audit log is in each aggregator's events table, once
// (no identity twice, without FINAL), and nothing else is (checked against
// apiserver_audit_event_total too); both aggregators' final chains agree for every auditID
// (class, findings, entry, peer) and with what each client saw; in every second of the run but
// the 3 minutes when both were down at least one aggregator answered the gate; and each
// returning aggregator's gate paused until it had caught up with its agents, at least twice the
// rate at which the load had made its backlog.
//
//	export CHDB_LIB_PATH=$(scripts/fetch-chdb.sh); scripts/build-kube.sh
//	go test ./test/e2e -run TestHALayout -count=1 -v

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/internal/childproc"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/test/e2e/harness"
)

const (
	haChainWindow = 5 * time.Second
	haRebuilt     = "v0.0.0-ha-rebuilt"
)

var haAgents = map[string]string{ruA: "node-a", ruB: "node-b", ruC: "node-c"}

// haProc is one peertrail process (an agent or an aggregator), started, killed and started
// again under the same address and data directory.
type haProc struct {
	name, kind   string // kind: "agent" or "serve"
	args         []string
	url, sqlPort string
	dir          string // logs
	hc           *http.Client
	ca           *harness.CA

	mu          sync.Mutex
	cmd         *exec.Cmd
	done        chan struct{}
	incarnation int
	bin         string
	sqlURL      string
}

func (p *haProc) start(ctx context.Context, t *testing.T, bin string) {
	t.Helper()
	p.mu.Lock()
	p.incarnation++
	logPath := filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, p.incarnation))
	lf, err := os.Create(logPath)
	if err != nil {
		p.mu.Unlock()
		t.Fatal(err)
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := childproc.Start(cmd)
	if err != nil {
		p.mu.Unlock()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		proc.Wait()
		lf.Close()
		close(done)
	}()
	p.cmd, p.done, p.bin = cmd, done, bin
	p.mu.Unlock()
	err = pollUntil(ctx, 90*time.Second, func() (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("%s exited:\n%s", p.name, lastLinesOf(logPath, 30))
		default:
		}
		resp, err := p.hc.Get(p.url + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s not ready: %v", p.name, err)
	}
	if p.kind == "serve" {
		base := withSQLPassword("https://127.0.0.1:"+p.sqlPort, p.args)
		p.mu.Lock()
		p.sqlURL = base
		p.mu.Unlock()
	}
}

func (p *haProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop within 40s of %v", p.name, sig)
	}
}

func (p *haProc) kill(t *testing.T) { p.signal(t, syscall.SIGKILL) }
func (p *haProc) stop(t *testing.T) { p.signal(t, syscall.SIGTERM) }

func (p *haProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// api returns a ptProc that reads this process's API and SQL interface as it runs now.
func (p *haProc) api() *ptProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &ptProc{bin: p.bin, URL: p.url, SQLURL: p.sqlURL, hc: p.hc, caFile: p.ca.CertFile}
}

// haSample is one answer (or none) of an aggregator's gate.
type haSample struct {
	agg      string
	at       time.Time
	answered bool
	proceed  bool
	caughtUp bool
	detail   string
}

// haReturn is an aggregator coming back: when it was taken away, when it was ready again, and
// when its gate first said it had caught up with its agents.
type haReturn struct {
	agg                    string
	downAt, readyAt, upAt  time.Time
	events                 float64 // events it accepted from its agents from its start to caught up
	pausedBefore, proceedB int     // its gate's answers between ready and caught up
	lastBehind             string  // why its gate last said it was behind
}

func TestHALayoutSurvivesEveryPeertrailProcess(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	dir := harness.TempDir(t)
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.ServerCA.IssueServing("peertrail", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	auditCA, err := harness.NewCA(filepath.Join(dir, "pki"), "audit-ca")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildPeertrail(t, dir)
	// The binary every process is replaced by at the end, built now, while the cluster starts.
	rebuilt := make(chan error, 1)
	rebuiltBin := filepath.Join(dir, "pt-e2e-rebuilt")
	go func() {
		root, _ := filepath.Abs(filepath.Join("..", ".."))
		b := exec.Command("go", "build", "-ldflags", "-X github.com/peertrail/peertrail/internal/version.Version="+haRebuilt, "-o", rebuiltBin, "./cmd/peertrail")
		b.Dir = root
		out, err := b.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v\n%s", err, out)
		}
		rebuilt <- err
	}()

	readerToken := crand.Text()
	readerFile := filepath.Join(dir, "reader.token")
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("reader.token", readerToken+"\n")
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.ServerCA.Pool()}, ForceAttemptHTTP2: true}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: bearerRT{rt: rt, token: readerToken}}
	port := func() string {
		n, err := harness.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(n)
	}

	names := []string{ruA, ruB, ruC}
	aggNames := []string{"agg-0", "agg-1"}
	aggPorts := map[string]string{}
	for _, a := range aggNames {
		aggPorts[a] = port()
	}
	// The aggregators' configuration: the apiservers, and which agent relays which.
	var aggCfg strings.Builder
	aggCfg.WriteString("gate:\n  window: 30s\napiservers:\n")
	for _, n := range names {
		fmt.Fprintf(&aggCfg, "- name: %s\n", n)
	}
	aggCfg.WriteString("agents:\n")
	agentCreds := map[string]string{} // relay: lines of each agent's config
	for _, n := range names {
		a := haAgents[n]
		if n == ruC {
			kp, err := auditCA.IssueClient("agent-"+a, a+"-agent")
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&aggCfg, "- name: %s\n  apiservers: [%s]\n  certSubject: %s-agent\n", a, n, a)
			agentCreds[a] = fmt.Sprintf("  certFile: %s\n  keyFile: %s\n", kp.CertFile, kp.KeyFile)
			continue
		}
		tf := write(a+".token", crand.Text()+"\n")
		fmt.Fprintf(&aggCfg, "- name: %s\n  apiservers: [%s]\n  tokenFile: %s\n", a, n, tf)
		agentCreds[a] = fmt.Sprintf("  tokenFile: %s\n", tf)
	}
	aggFile := write("aggregator.yaml", aggCfg.String())

	procs := map[string]*haProc{}
	for _, a := range aggNames {
		sql := port()
		procs[a] = &haProc{name: a, kind: "serve", url: "https://127.0.0.1:" + aggPorts[a], sqlPort: sql, dir: dir, hc: hc, ca: pki.ServerCA,
			args: []string{"serve", "--config", aggFile, "--listen", "127.0.0.1:" + aggPorts[a], "--sql-listen", "127.0.0.1:" + sql,
				"--data-dir", filepath.Join(dir, a), "--tls-cert-file", serving.CertFile, "--tls-key-file", serving.KeyFile,
				"--client-ca-file", auditCA.CertFile, "--reader-token-file", readerFile, "--chain-window", haChainWindow.String()}}
	}
	webhookFlags := map[string][]string{}
	for _, n := range names {
		a := haAgents[n]
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "apiservers:\n- name: %s\n  certSubject: %s-audit\nrelay:\n  caFile: %s\n%s  aggregators:\n", n, n, pki.ServerCA.CertFile, agentCreds[a])
		for _, g := range aggNames {
			fmt.Fprintf(&cfg, "  - {name: %s, url: \"https://127.0.0.1:%s\"}\n", g, aggPorts[g])
		}
		p := port()
		procs[a] = &haProc{name: a, kind: "agent", url: "https://127.0.0.1:" + p, dir: dir, hc: hc, ca: pki.ServerCA,
			args: []string{"agent", "--config", write(a+".yaml", cfg.String()), "--listen", "127.0.0.1:" + p,
				"--data-dir", filepath.Join(dir, a), "--tls-cert-file", serving.CertFile, "--tls-key-file", serving.KeyFile,
				"--client-ca-file", auditCA.CertFile, "--reader-token-file", readerFile}}
		kp, err := auditCA.IssueClient("audit-"+n, n+"-audit")
		if err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(dir, "webhook-"+n+".kubeconfig")
		out, err := exec.Command(bin, "deploy", "webhook-config", "--apiserver", n, "--url", procs[a].url,
			"--ca", pki.ServerCA.CertFile, "--client-cert", kp.CertFile, "--client-key", kp.KeyFile, "-o", kc).CombinedOutput()
		if err != nil {
			t.Fatalf("peertrail deploy webhook-config: %v\n%s", err, out)
		}
		webhookFlags[n] = []string{"--audit-webhook-config-file=" + kc, "--audit-webhook-mode=batch", "--audit-webhook-batch-max-wait=1s"}
	}
	order := []string{"node-a", "node-b", "node-c", "agg-0", "agg-1"}
	var startWG sync.WaitGroup
	for _, n := range order {
		startWG.Go(func() { procs[n].start(ctx, t, bin) })
	}
	startWG.Wait()
	t.Cleanup(func() {
		for _, n := range order {
			procs[n].stop(t)
		}
		if t.Failed() {
			for _, n := range order {
				p := procs[n]
				t.Logf("==== last lines of %s (incarnation %d) ====\n%s", n, p.incarnation,
					lastLinesOf(filepath.Join(dir, fmt.Sprintf("%s.%d.log", n, p.incarnation)), 40))
			}
		}
	})

	c, err := harness.Start(ctx, t, harness.Config{
		Dir:             filepath.Join(dir, "cluster"),
		PKI:             pki,
		AuditPolicyFile: filepath.Join(depRepoRoot(t), "deploy/control-plane/audit-policy.yaml"),
		AuditLog:        true,
		Servers: []harness.ServerConfig{
			{Name: ruA, Version: harness.OldVersion, ExtraFlags: webhookFlags[ruA]},
			{Name: ruB, Version: harness.OldVersion, ExtraFlags: webhookFlags[ruB]},
			{Name: ruC, Version: harness.NewVersion, FeatureGates: map[string]bool{"GenericWorkload": true},
				RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true", "batch/v1": "false"},
				ExtraFlags:    webhookFlags[ruC]},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peertrail (3 agents, 2 aggregators) and the control plane ready after %s", time.Since(start).Round(time.Millisecond))
	r := &ruTest{t: t, ctx: ctx, c: c, clients: map[string]*http.Client{}}
	r.must(r.do(ruA, "admin", "POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+ruNS+`"}}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"ru-pg-editor"},"rules":[{"apiGroups":["scheduling.k8s.io"],"resources":["podgroups"],"verbs":["*"]},{"apiGroups":["batch"],"resources":["jobs"],"verbs":["*"]}]}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"ru-pg-editor-team-pg"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"ru-pg-editor"},"subjects":[{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"team-pg"}]}`, nil), 201)
	r.waitProxying()
	r.must(r.do(ruC, "admin", "POST", ruPG, `{"apiVersion":"scheduling.k8s.io/v1alpha2","kind":"PodGroup","metadata":{"name":"pg-1"},"spec":{"schedulingPolicy":{"gang":{"minCount":2}}}}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", ruJobs, `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"job-1"},"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.invalid/busybox"}]}}}}`, nil), 201)

	// Long watches, local and forwarded, held open until step 5 and the end of the load.
	var watches []*haWatch
	for _, w := range []struct{ server, path string }{
		{ruA, haClusterRolesWatch}, {ruA, ruPG + haWatchQuery}, {ruB, haClusterRolesWatch}, {ruB, ruPG + haWatchQuery},
		{ruC, haClusterRolesWatch}, {ruC, ruJobs + haWatchQuery},
	} {
		watches = append(watches, openHAWatch(t, ctx, r, w.server, w.path))
	}
	t.Cleanup(func() {
		for _, w := range watches {
			w.end(t)
		}
	})

	// The load, as in TestReplacementUnderLoad: three clients, a request every 150 ms each.
	var mu sync.Mutex
	var sent []rlSent
	var samples []haSample
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	paths := []string{ruPG, ruPG + "/pg-1", ruJobs, ruJobs + "/job-1"}
	loadStart := time.Now()
	for w := range 3 {
		clients := map[string]*http.Client{}
		for _, s := range names {
			for _, id := range []string{"admin", "bob"} {
				cfg := c.AdminConfig(s)
				if id == "bob" {
					if cfg, err = c.UserConfig(s, "bob", "team-pg"); err != nil {
						t.Fatal(err)
					}
				}
				hc, err := harness.HTTPClient(harness.WithSourceIP(cfg, ruClientIP))
				if err != nil {
					t.Fatal(err)
				}
				hc.Timeout = 20 * time.Second
				clients[s+"/"+id] = hc
			}
		}
		rng := rand.New(rand.NewPCG(uint64(w), 41))
		wg.Go(func() {
			tick := time.NewTicker(150 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				s := rlSent{entry: names[rng.IntN(len(names))], identity: []string{"admin", "bob"}[rng.IntN(2)], path: paths[rng.IntN(len(paths))], at: time.Now()}
				req, err := http.NewRequestWithContext(loadCtx, "GET", c.Server(s.entry).URL+s.path, nil)
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("User-Agent", "peertrail-e2e-load")
				req.Header.Set("Accept", "application/json")
				resp, err := clients[s.entry+"/"+s.identity].Do(req)
				if err != nil {
					s.err = err
				} else {
					b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
					s.code, s.body, s.auditIDs = resp.StatusCode, string(b), resp.Header.Values("Audit-Id")
				}
				if loadCtx.Err() != nil && s.err != nil {
					return
				}
				mu.Lock()
				sent = append(sent, s)
				mu.Unlock()
			}
		})
	}
	// Both aggregators' gates, every 100 ms, as an upgrade script would poll them.
	for _, a := range aggNames {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				s := haSample{agg: a, at: time.Now()}
				var v gate.Verdict
				if procs[a].running() {
					rctx, cancel := context.WithTimeout(loadCtx, time.Second)
					code, err := procs[a].api().getJSON(rctx, "/api/v1/gate", &v)
					cancel()
					if err == nil && code == http.StatusOK {
						s.answered, s.proceed, s.caughtUp = true, v.Proceed, caughtUpOf(v)
						if ch := checkOf(v, metrics.CheckAgentsCaughtUp); ch != nil {
							s.detail = ch.Detail
						}
					}
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		})
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(d):
		}
	}
	// caughtUpAfter waits until agg's gate says it is caught up in a sample taken after from.
	caughtUpAfter := func(agg string, from time.Time, within time.Duration) time.Time {
		t.Helper()
		var at time.Time
		if err := pollUntil(ctx, within, func() (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, s := range samples {
				if s.agg == agg && s.at.After(from) && s.answered && s.caughtUp {
					at = s.at
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("%s never caught up with its agents after %s: %v", agg, from.Format(time.TimeOnly), err)
		}
		return at
	}
	acceptedEvents := func(agg string) float64 {
		text, err := procs[agg].api().metrics(ctx)
		if err != nil {
			t.Fatalf("%s /metrics: %v", agg, err)
		}
		ss, err := promSamples(text, metrics.IngestEventsTotal)
		if err != nil {
			t.Fatal(err)
		}
		n := 0.0
		for _, s := range ss {
			if s.Labels[metrics.LabelResult] == metrics.ResultAccepted {
				n += s.Value
			}
		}
		return n
	}
	var returns []*haReturn
	// comeBack starts agg again and measures its return (down since downAt).
	comeBack := func(agg string, downAt time.Time) *haReturn {
		procs[agg].start(ctx, t, procs[agg].bin)
		ret := &haReturn{agg: agg, downAt: downAt, readyAt: time.Now()}
		ret.upAt = caughtUpAfter(agg, ret.readyAt, 3*time.Minute)
		ret.events = acceptedEvents(agg)
		t.Logf("%s back: ready %s after it went down, caught up %s later with %.0f events from its agents", agg,
			ret.readyAt.Sub(downAt).Round(time.Millisecond), ret.upAt.Sub(ret.readyAt).Round(time.Millisecond), ret.events)
		returns = append(returns, ret)
		return ret
	}

	// 0. Both aggregators caught up, their gates at proceed.
	for _, a := range aggNames {
		caughtUpAfter(a, loadStart, 3*time.Minute)
	}
	sleep(10 * time.Second)

	// 1. node-a's agent SIGKILLed, started again 5 s later.
	t.Log("kill -9 node-a's agent")
	procs["node-a"].kill(t)
	sleep(5 * time.Second)
	procs["node-a"].start(ctx, t, bin)
	sleep(15 * time.Second)

	// 2. agg-0 SIGKILLed under load, back 60 s later.
	t.Log("kill -9 agg-0")
	downAt := time.Now()
	procs["agg-0"].kill(t)
	sleep(60 * time.Second)
	comeBack("agg-0", downAt)

	// 3. agg-1 SIGKILLed once agg-0 has caught up, back 30 s later.
	t.Log("kill -9 agg-1")
	downAt = time.Now()
	procs["agg-1"].kill(t)
	sleep(30 * time.Second)
	comeBack("agg-1", downAt)
	sleep(10 * time.Second)

	// 4. Both aggregators down for 3 minutes.
	t.Log("kill -9 agg-0 and agg-1, for 3 minutes")
	bothDown := time.Now()
	procs["agg-0"].kill(t)
	procs["agg-1"].kill(t)
	sleep(3 * time.Minute)
	var back sync.WaitGroup
	for _, a := range aggNames {
		back.Go(func() { comeBack(a, bothDown) })
	}
	back.Wait()
	bothUp := time.Now()
	for _, ret := range returns[len(returns)-2:] {
		if ret.readyAt.Before(bothUp) {
			bothUp = ret.readyAt
		}
	}
	sleep(10 * time.Second)

	// 5. Every peertrail process replaced, one at a time, by the binary built afresh.
	if err := <-rebuilt; err != nil {
		t.Fatalf("building the replacement binary: %v", err)
	}
	ending := watches[:4]
	for _, n := range order {
		if procs[n].kind == "serve" {
			// Two long watches end before each aggregator is replaced: one it has stored by
			// then, one it has just joined the end of.
			ending[0].end(t)
			sleep(8 * time.Second)
			ending[1].end(t)
			sleep(2 * time.Second)
			ending = ending[2:]
		}
		t.Logf("replace %s at %s", n, time.Now().Format(time.StampMilli))
		stopAt := time.Now()
		procs[n].stop(t)
		procs[n].start(ctx, t, rebuiltBin)
		if procs[n].kind == "serve" {
			caughtUpAfter(n, stopAt, 3*time.Minute)
			// The spool had passed the first records of the watches still running (they began
			// more than a late window ago): their chains came back from the watch journal.
			log := filepath.Join(dir, fmt.Sprintf("%s.%d.log", n, procs[n].incarnation))
			if b, err := os.ReadFile(log); err != nil || !strings.Contains(string(b), "rebuilt watches' chains from the journal") {
				t.Errorf("%s rebuilt no watch's chain from its journal after its replacement (%v): %s", n, err, grepLines(string(b), "journal"))
			}
		}
		sleep(5 * time.Second)
	}
	sleep(10 * time.Second)
	stopLoad()
	wg.Wait()
	for _, w := range watches {
		w.end(t)
	}
	loadEnd := time.Now()
	t.Logf("load stopped after %s: %d requests", loadEnd.Sub(loadStart).Round(time.Second), len(sent))

	// Every process runs the binary built afresh.
	for _, n := range order {
		text, err := procs[n].api().metrics(ctx)
		if err != nil {
			t.Fatalf("%s /metrics: %v", n, err)
		}
		if !strings.Contains(text, `version="`+haRebuilt+`"`) {
			t.Errorf("%s does not run the replacement binary: %s", n, grepLines(text, metrics.BuildInfo))
		}
	}

	// The gate answered in every second but the 3 minutes both aggregators were down.
	answered := map[int64]bool{}
	for _, s := range samples {
		if s.answered {
			answered[s.at.Unix()] = true
		}
	}
	var silent []string
	for sec := loadStart.Unix() + 1; sec < loadEnd.Unix(); sec++ {
		if sec >= bothDown.Unix() && sec <= bothUp.Unix() {
			continue
		}
		if !answered[sec] {
			silent = append(silent, time.Unix(sec, 0).Format(time.TimeOnly))
		}
	}
	if len(silent) > 0 {
		t.Errorf("no aggregator answered the gate in %d seconds: %v", len(silent), silent)
	}
	// Each returning aggregator paused until it had caught up, and caught up at least twice as
	// fast as the load had made its backlog.
	for _, ret := range returns {
		for _, s := range samples {
			if s.agg != ret.agg || !s.answered || s.at.Before(ret.readyAt) || !s.at.Before(ret.upAt) {
				continue
			}
			if s.proceed || s.caughtUp {
				ret.proceedB++
				t.Errorf("%s said proceed (or caught up) at %s, before it had caught up at %s: %s", ret.agg, s.at.Format(time.StampMilli), ret.upAt.Format(time.StampMilli), s.detail)
			} else {
				ret.pausedBefore++
				ret.lastBehind = s.detail
			}
		}
		if ret.pausedBefore == 0 {
			t.Errorf("%s: no answer of its gate between its return and its catching up: nothing shows it paused", ret.agg)
		}
		loadRate := ret.events / ret.upAt.Sub(ret.downAt).Seconds()
		catchUp := ret.events / max(ret.upAt.Sub(ret.readyAt).Seconds(), 0.001)
		t.Logf("%s: down %s, %d gate answers paused until caught up (the last: %s); %.0f events: made at %.1f events/s, taken back at %.1f events/s (%.1fx)",
			ret.agg, ret.readyAt.Sub(ret.downAt).Round(time.Second), ret.pausedBefore, ret.lastBehind, ret.events, loadRate, catchUp, catchUp/loadRate)
		if catchUp < 2*loadRate {
			t.Errorf("%s caught up at %.1f events/s, less than twice the %.1f events/s of the load", ret.agg, catchUp, loadRate)
		}
	}

	// Everything flushed: a marker request on each apiserver, in each aggregator's chains.
	for _, n := range names {
		res := r.do(n, "admin", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "", nil)
		if res.err != nil || res.code != 200 || res.auditID == "" {
			t.Fatalf("flush marker on %s: %d %v", n, res.code, res.err)
		}
		for _, a := range aggNames {
			if err := pollUntil(ctx, 90*time.Second, func() (bool, error) {
				ch, _, err := procs[a].api().chain(ctx, res.auditID)
				return err == nil && ch != nil && ch.Entry != nil && slices.Contains(ch.Entry.Stages, "ResponseComplete"), nil
			}); err != nil {
				t.Fatalf("flush marker %s of %s never reached %s: %v", res.auditID, n, a, err)
			}
		}
	}
	// Every chain final, and in the store.
	time.Sleep(4*haChainWindow + 2*time.Second)

	haCheckWebhookErrors(t, r)
	haCheckEvents(t, ctx, r, procs, aggNames)
	haCheckChains(t, ctx, procs, aggNames, sent)
	haCheckWatches(t, ctx, procs, aggNames, watches)
	t.Logf("TestHALayoutSurvivesEveryPeertrailProcess took %s", time.Since(start).Round(time.Second))
}

// caughtUpOf says whether the verdict's agents_caught_up check passes.
func caughtUpOf(v gate.Verdict) bool {
	c := checkOf(v, metrics.CheckAgentsCaughtUp)
	return c != nil && c.OK
}

// haCheckWebhookErrors: no apiserver gave up an audit batch.
func haCheckWebhookErrors(t *testing.T, r *ruTest) {
	t.Helper()
	for _, n := range []string{ruA, ruB, ruC} {
		text := haApiserverMetrics(t, r, n)
		errs, err := promSamples(text, metrics.KubeAuditErrorTotal)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range errs {
			if s.Labels[metrics.LabelPlugin] == metrics.PluginWebhook && s.Value != 0 {
				t.Errorf("%s: %s{plugin=webhook} = %v: it dropped audit", n, metrics.KubeAuditErrorTotal, s.Value)
			}
		}
		evs, _ := promSamples(text, metrics.KubeAuditEventTotal)
		if len(evs) == 0 || evs[0].Value == 0 {
			t.Errorf("%s exports no %s: the metrics read are not an audited apiserver's", n, metrics.KubeAuditEventTotal)
		}
	}
}

func haApiserverMetrics(t *testing.T, r *ruTest, server string) string {
	t.Helper()
	hc, err := harness.HTTPClient(r.c.AdminConfig(server))
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 30 * time.Second
	resp, err := hc.Get(r.c.Server(server).URL + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", server, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s /metrics: %d", server, resp.StatusCode)
	}
	return string(b)
}

// haIdentity is an event's identity: auditID, stage and stageTimestamp in microseconds.
type haIdentity struct {
	auditID, stage string
	micros         int64
}

// haAuditLog reads what server wrote to its audit log.
func haAuditLog(t *testing.T, r *ruTest, server string) map[haIdentity]int {
	t.Helper()
	f, err := os.Open(r.c.Server(server).AuditLogFile())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[haIdentity]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			AuditID        string    `json:"auditID"`
			Stage          string    `json:"stage"`
			StageTimestamp time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line being written
		}
		out[haIdentity{ev.AuditID, ev.Stage, ev.StageTimestamp.UnixMicro()}]++
	}
	return out
}

// haCheckEvents: each aggregator holds every event each apiserver wrote to its audit log, once,
// and nothing it did not write.
func haCheckEvents(t *testing.T, ctx context.Context, r *ruTest, procs map[string]*haProc, aggNames []string) {
	t.Helper()
	before := map[string]map[haIdentity]int{}
	counter := map[string]float64{}
	for _, n := range []string{ruA, ruB, ruC} {
		before[n] = haAuditLog(t, r, n)
		evs, err := promSamples(haApiserverMetrics(t, r, n), metrics.KubeAuditEventTotal)
		if err != nil || len(evs) == 0 {
			t.Fatalf("%s: %s: %v", n, metrics.KubeAuditEventTotal, err)
		}
		counter[n] = evs[0].Value
	}
	type row struct {
		APIServer string `json:"apiserver"`
		AuditID   string `json:"audit_id"`
		Stage     string `json:"stage"`
		Micros    int64  `json:"micros"`
		N         int    `json:"n"`
	}
	// The audit logs were read while the apiservers' own background requests went on: their
	// newest events can be a webhook batch and a writer's flush away from the stores. Read the
	// stores until they hold every event read from the logs, for as long as a webhook batch and a
	// flush take under this test's load at most; an event lost stays missing.
	stored := map[string][]row{}
	// held is what aggregator a's events table holds of apiserver n: each event's rows, and
	// how many of its events have more than one.
	held := func(a, n string) (have map[haIdentity]int, dups int) {
		have = map[haIdentity]int{}
		for _, rw := range stored[a] {
			if rw.APIServer != n {
				continue
			}
			have[haIdentity{rw.AuditID, rw.Stage, rw.Micros}] += rw.N
			if rw.N > 1 {
				dups++
			}
		}
		return have, dups
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, a := range aggNames {
			// Without FINAL: what the table holds, not what merges would fold.
			var rows []row
			if err := procs[a].api().sql(ctx, `SELECT apiserver, audit_id, stage, toUnixTimestamp64Micro(stage_timestamp) AS micros, count() AS n
			FROM peertrail.events GROUP BY apiserver, audit_id, stage, micros`, &rows); err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			stored[a] = rows
		}
		all := true
		for _, a := range aggNames {
			for _, n := range []string{ruA, ruB, ruC} {
				have, _ := held(a, n)
				for id := range before[n] {
					all = all && have[id] > 0
				}
			}
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	for _, n := range []string{ruA, ruB, ruC} {
		after := haAuditLog(t, r, n)
		if c := counter[n]; c < float64(len(before[n])) || c > float64(len(after)) {
			t.Errorf("%s: %s is %v, its audit log held %d events before and %d after", n, metrics.KubeAuditEventTotal, c, len(before[n]), len(after))
		}
		for _, a := range aggNames {
			have, dups := held(a, n)
			var missing, extra []string
			for id := range before[n] {
				if have[id] == 0 {
					missing = append(missing, fmt.Sprintf("%s %s %s", id.auditID, id.stage, time.UnixMicro(id.micros).UTC().Format(time.StampMicro)))
				}
			}
			for id := range have {
				if after[id] == 0 {
					extra = append(extra, fmt.Sprintf("%s %s", id.auditID, id.stage))
				}
			}
			sort.Strings(missing)
			t.Logf("%s in %s: %d events stored, %d in its audit log (%d by the end), %d twice", n, a, len(have), len(before[n]), len(after), dups)
			if dups > 0 {
				t.Errorf("%s: %d of %s's events are stored more than once", a, dups, n)
			}
			if len(missing) > 0 {
				t.Errorf("%s lacks %d of the %d events %s wrote to its audit log, e.g. %v", a, len(missing), len(before[n]), n, missing[:min(10, len(missing))])
			}
			if len(extra) > 0 {
				t.Errorf("%s holds %d events of %s that its audit log does not, e.g. %v", a, len(extra), n, extra[:min(10, len(extra))])
			}
		}
	}
}

// haWatchQuery starts a watch from the watch cache's state: without a resourceVersion an
// apiserver just started answers "Too large resource version" until its cache catches up.
const haWatchQuery = "?watch=true&resourceVersion=0"

// haClusterRolesWatch is a watch every apiserver serves itself.
const haClusterRolesWatch = "/apis/rbac.authorization.k8s.io/v1/clusterroles" + haWatchQuery

// haWatch is a watch the test holds open for minutes.
type haWatch struct {
	server, path, auditID string
	cancel                context.CancelFunc
	done                  chan struct{}
	ended                 time.Time
}

// openHAWatch starts a watch of path on server as admin and drains it until end.
func openHAWatch(t *testing.T, ctx context.Context, r *ruTest, server, path string) *haWatch {
	t.Helper()
	hc, err := harness.HTTPClient(harness.WithSourceIP(r.c.AdminConfig(server), ruClientIP))
	if err != nil {
		t.Fatal(err)
	}
	hc.Timeout = 0 // it runs until the test ends it
	wctx, cancel := context.WithCancel(ctx)
	resp, err := hc.Do(r.request(wctx, server, "GET", path, "", nil))
	if err != nil {
		cancel()
		t.Fatalf("watch %s on %s: %v", path, server, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Audit-Id") == "" {
		cancel()
		resp.Body.Close()
		t.Fatalf("watch %s on %s: %d, Audit-Id %q", path, server, resp.StatusCode, resp.Header.Get("Audit-Id"))
	}
	if line, err := readLine(resp.Body); err != nil || !strings.Contains(line, `"type":"ADDED"`) {
		cancel()
		resp.Body.Close()
		t.Fatalf("watch %s on %s: first event %.200q, %v; want an object ADDED", path, server, line, err)
	}
	w := &haWatch{server: server, path: path, auditID: resp.Header.Get("Audit-Id"), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	t.Logf("%s WATCH %s as admin: %s", server, path, w.auditID)
	return w
}

// end closes the watch (once); the apiserver then writes its ResponseComplete.
func (w *haWatch) end(t *testing.T) {
	if !w.ended.IsZero() {
		return
	}
	select {
	case <-w.done:
		t.Errorf("watch %s on %s (%s) ended before the test closed it", w.path, w.server, w.auditID)
	default:
	}
	w.cancel()
	<-w.done
	w.ended = time.Now()
	t.Logf("%s WATCH %s ended by the client at %s: %s", w.server, w.path, w.ended.Format(time.StampMilli), w.auditID)
}

// haCheckWatches: each long watch (four ended around the aggregators' replacements) is one
// final chain in each aggregator, holding every record of it that aggregator stored, from the
// first. (The replay after a restart once joined a watch's end alone, beside or instead of the
// whole.)
func haCheckWatches(t *testing.T, ctx context.Context, procs map[string]*haProc, aggNames []string, watches []*haWatch) {
	t.Helper()
	type row struct {
		Records int    `json:"records"`
		First   string `json:"first"`
		Last    string `json:"last"`
		Class   string `json:"class"`
	}
	for _, w := range watches {
		for _, a := range aggNames {
			var chains, events []row
			err := pollUntil(ctx, 3*haChainWindow, func() (bool, error) {
				chains, events = nil, nil
				if err := procs[a].api().sql(ctx, `SELECT records, toString(toUnixTimestamp64Milli(first_received)) AS first,
					toString(toUnixTimestamp64Milli(last_received)) AS last, toString(class) AS class
					FROM peertrail.chains FINAL WHERE state = 'final' AND audit_id = '`+w.auditID+`'`, &chains); err != nil {
					return false, err
				}
				if err := procs[a].api().sql(ctx, `SELECT toInt32(count()) AS records, toString(toUnixTimestamp64Milli(min(received_at))) AS first,
					toString(toUnixTimestamp64Milli(max(received_at))) AS last FROM peertrail.events WHERE audit_id = '`+w.auditID+`'`, &events); err != nil {
					return false, err
				}
				return len(chains) == 1 && len(events) == 1 && chains[0].Records == events[0].Records && chains[0].First == events[0].First, nil
			})
			if err != nil {
				t.Errorf("%s: watch %s on %s (%s, ended %s): final chains %+v, events %+v; want one chain of all its records from the first",
					a, w.path, w.server, w.auditID, w.ended.Format(time.StampMilli), chains, events)
				haDumpAuditID(t, ctx, procs, aggNames, w.auditID)
				continue
			}
			first, _ := strconv.ParseInt(chains[0].First, 10, 64)
			last, _ := strconv.ParseInt(chains[0].Last, 10, 64)
			// Past the late window (5 minutes) the spool no longer holds a running watch's first
			// records: only then does a restart need the watch journal.
			if ran := time.Duration(last-first) * time.Millisecond; ran < 5*time.Minute+haChainWindow {
				t.Errorf("%s: watch %s on %s ran %s: not past the late window, the check tells nothing", a, w.path, w.server, ran)
			}
		}
	}
}

// haChain is what must agree between the aggregators about a final chain.
type haChain struct {
	Class    string   `json:"class"`
	Findings []string `json:"findings"`
	Entry    string   `json:"entry_apiserver"`
	Peer     string   `json:"peer_apiserver"`
	HasEntry bool     `json:"has_entry"`
	HasPeer  bool     `json:"has_peer"`
}

func (c haChain) String() string {
	return fmt.Sprintf("%s %v entry=%s peer=%s", c.Class, c.Findings, c.Entry, c.Peer)
}

// haDumpAuditID logs every row each aggregator holds of auditID id, chains (all revisions and
// states) and events with their receipt times, for a disagreement to be read after the run.
func haDumpAuditID(t *testing.T, ctx context.Context, procs map[string]*haProc, aggNames []string, id string) {
	t.Helper()
	for _, a := range aggNames {
		for _, q := range []string{
			`SELECT id, revision, state, class, findings, records, entry_apiserver, peer_apiserver, first_received, last_received, explanation
			FROM peertrail.chains WHERE audit_id = '` + id + `' ORDER BY version`,
			`SELECT apiserver, stage, code, source_ips, request_received_timestamp, stage_timestamp, received_at
			FROM peertrail.events WHERE audit_id = '` + id + `' ORDER BY received_at`,
		} {
			var rows []map[string]any
			if err := procs[a].api().sql(ctx, q, &rows); err != nil {
				t.Logf("%s: %v", a, err)
				continue
			}
			for _, rw := range rows {
				t.Logf("%s %s: %v", a, id, rw)
			}
		}
	}
}

// haCheckChains: both aggregators' final chains agree for every auditID, and with what the
// clients saw.
func haCheckChains(t *testing.T, ctx context.Context, procs map[string]*haProc, aggNames []string, sent []rlSent) {
	t.Helper()
	read := func(a string) map[string][]string {
		var rows []struct {
			AuditID string `json:"audit_id"`
			haChain
		}
		if err := procs[a].api().sql(ctx, `SELECT audit_id, class, arraySort(findings) AS findings, entry_apiserver, peer_apiserver, has_entry, has_peer
			FROM peertrail.chains FINAL WHERE state = 'final'`, &rows); err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		out := map[string][]string{}
		for _, rw := range rows {
			out[rw.AuditID] = append(out[rw.AuditID], rw.haChain.String())
		}
		for id := range out {
			sort.Strings(out[id])
		}
		return out
	}
	var chains [2]map[string][]string
	var diff []string
	// Chains a late record reopened may still be judged again: a few tries, a chain window apart.
	for try := 0; try < 4; try++ {
		chains[0], chains[1] = read(aggNames[0]), read(aggNames[1])
		diff = diff[:0]
		for id, a := range chains[0] {
			if b := chains[1][id]; !slices.Equal(a, b) {
				diff = append(diff, fmt.Sprintf("%s: %s %v, %s %v", id, aggNames[0], a, aggNames[1], b))
			}
		}
		for id, b := range chains[1] {
			if _, ok := chains[0][id]; !ok {
				diff = append(diff, fmt.Sprintf("%s: %s none, %s %v", id, aggNames[0], aggNames[1], b))
			}
		}
		if len(diff) == 0 {
			break
		}
		time.Sleep(haChainWindow + time.Second)
	}
	sort.Strings(diff)
	t.Logf("final chains: %d auditIDs in %s, %d in %s, %d differ", len(chains[0]), aggNames[0], len(chains[1]), aggNames[1], len(diff))
	if len(chains[0]) < 1000 {
		t.Errorf("only %d auditIDs with final chains: the load did not run", len(chains[0]))
	}
	for i, d := range diff {
		if i == 30 {
			t.Errorf("... and %d more", len(diff)-30)
			break
		}
		t.Errorf("the aggregators disagree: %s", d)
		if i < 3 {
			haDumpAuditID(t, ctx, procs, aggNames, strings.SplitN(d, ":", 2)[0])
		}
	}

	// What each client saw.
	counts := map[string]int{}
	var wrong []string
	answered := 0
	for _, s := range sent {
		if s.err != nil || len(s.auditIDs) == 0 {
			continue
		}
		answered++
		want := chain.ClassLocal
		if len(s.auditIDs) >= 2 {
			want = chain.ClassProxied
		}
		id := s.auditIDs[0]
		for i, a := range aggNames {
			got := chains[i][id]
			if len(got) != 1 || !strings.HasPrefix(got[0], string(want)+" [] ") {
				wrong = append(wrong, fmt.Sprintf("%s: %s %s as %s at %s -> %d (%d Audit-Id %s): want %s, got %v", a, s.entry, s.path, s.identity,
					s.at.Format(time.StampMilli), s.code, len(s.auditIDs), id, want, got))
				continue
			}
			if i == 0 {
				counts[string(want)]++
			}
		}
	}
	t.Logf("%d answered requests, classified as the client saw them: %v", answered, counts)
	if counts[string(chain.ClassProxied)] == 0 || counts[string(chain.ClassLocal)] == 0 {
		t.Errorf("no proxied or no local request: the scenario proves nothing about them (%v)", counts)
	}
	for i, w := range wrong {
		if i == 30 {
			t.Errorf("... and %d more", len(wrong)-30)
			break
		}
		t.Error(w)
	}
}
