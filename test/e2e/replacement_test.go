package e2e

// TestReplacementUnderLoad: the minutes in which apiservers are replaced, under steady client
// load, judged against what the clients saw.
//
// Three real kube-apiservers share one etcd, MVP on: kas-a and kas-b run v1.35.4, kas-c runs
// v1.36.3 with podgroups (which 1.35 does not have) and batch/v1 off (so it forwards jobs to
// the old servers). Clients keep sending (lists and gets of podgroups and jobs, as admin and
// as bob, whom RBAC allows) to every server while the test
//
//  1. lets the load run (the gate must say proceed),
//  2. SIGKILLs kas-c and restarts it (its forwards fail 503 while it is down, some of its
//     audit is lost, it may answer 404 and 403 while it starts: restart noise within budget),
//  3. replaces kas-b by v1.36.3 (a graceful stop, then the new binary: noise within budget;
//     the gate must not pause through 1-3),
//  4. stops kas-c gracefully for a while: the only server of podgroups is gone and the
//     others answer MVP's misleading 404s, a real fault: the gate must pause,
//  5. restarts it: the gate must proceed again once the fault leaves its window.
//
// The truth is the client's: every response's status and its Audit-Id headers (two: the
// request was forwarded, the peer's Audit-Id header added to the entry's), recorded per
// request. Every answered request must get the class the client saw, with the findings the
// restarts explain; the only allowed differences are the ones the restarts make real (the
// audit a killed or stopping apiserver loses).
//
//	export CHDB_LIB_PATH=$(scripts/fetch-chdb.sh); scripts/build-kube.sh
//	go test ./test/e2e -run TestReplacementUnderLoad -count=1 -v

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/test/e2e/harness"
)

// rlSent is one client request and what the client saw.
type rlSent struct {
	entry, identity, path string
	at                    time.Time
	code                  int
	auditIDs              []string
	body                  string
	err                   error
}

// rlStretch is a stretch of the test in which an apiserver restarts: from just before its
// stop or kill to just after it is ready again.
type rlStretch struct {
	what, server string
	from, to     time.Time
	killed       bool
}

// rlGracefulStop is what the rlStretch of step 4 is; rlReplacement step 3's, which stops the
// old server gracefully too.
const (
	rlGracefulStop = "graceful stop"
	rlReplacement  = "replacement"
)

type rlSample struct {
	at time.Time
	v  gate.Verdict
}

func TestReplacementUnderLoad(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
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
	names := []string{ruA, ruB, ruC}
	var cfg strings.Builder
	// A short gate window, so that the test sees the gate proceed again after the fault (the
	// window counts by minute of receipt, so that takes up to two minutes).
	cfg.WriteString("gate:\n  window: 30s\napiservers:\n")
	for _, n := range names {
		fmt.Fprintf(&cfg, "- name: %s\n  certSubject: %s-audit\n", n, n)
	}
	cfgFile := filepath.Join(dir, "pt.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildPeertrail(t, dir)
	pt := startPT(ctx, t, bin, []string{"serve", "--config", cfgFile,
		"--listen", "127.0.0.1:0", "--sql-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "pt-data"),
		"--tls-cert-file", serving.CertFile, "--tls-key-file", serving.KeyFile, "--client-ca-file", auditCA.CertFile,
		"--chain-window", ruChainWindow.String()}, filepath.Join(dir, "pt.log"), pki.ServerCA)
	webhookFlags := map[string][]string{}
	for _, n := range names {
		kp, err := auditCA.IssueClient("audit-"+n, n+"-audit")
		if err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(dir, "webhook-"+n+".kubeconfig")
		out, err := exec.Command(bin, "deploy", "webhook-config", "--apiserver", n, "--url", pt.URL,
			"--ca", pki.ServerCA.CertFile, "--client-cert", kp.CertFile, "--client-key", kp.KeyFile, "-o", kc).CombinedOutput()
		if err != nil {
			t.Fatalf("peertrail deploy webhook-config: %v\n%s", err, out)
		}
		webhookFlags[n] = []string{"--audit-webhook-config-file=" + kc, "--audit-webhook-mode=batch", "--audit-webhook-batch-max-wait=1s"}
	}
	c, err := harness.Start(ctx, t, harness.Config{
		Dir: filepath.Join(dir, "cluster"),
		PKI: pki,
		// The audit policy users deploy (Metadata, no bodies): what peertrail must work from.
		AuditPolicyFile: filepath.Join(depRepoRoot(t), "deploy/control-plane/audit-policy.yaml"),
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
	t.Logf("peertrail and the control plane ready after %s", time.Since(start).Round(time.Millisecond))
	r := &ruTest{t: t, ctx: ctx, c: c, pt: pt, clients: map[string]*http.Client{}}
	r.must(r.do(ruA, "admin", "POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+ruNS+`"}}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"ru-pg-editor"},"rules":[{"apiGroups":["scheduling.k8s.io"],"resources":["podgroups"],"verbs":["*"]},{"apiGroups":["batch"],"resources":["jobs"],"verbs":["*"]}]}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"ru-pg-editor-team-pg"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"ru-pg-editor"},"subjects":[{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"team-pg"}]}`, nil), 201)
	r.waitProxying()
	r.must(r.do(ruC, "admin", "POST", ruPG, `{"apiVersion":"scheduling.k8s.io/v1alpha2","kind":"PodGroup","metadata":{"name":"pg-1"},"spec":{"schedulingPolicy":{"gang":{"minCount":2}}}}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", ruJobs, `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"job-1"},"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.invalid/busybox"}]}}}}`, nil), 201)

	// The load: three clients, each a request every 150 ms to a server and path of its own
	// rotation, through clients of their own (the harness's http.Clients are not shared
	// across goroutines here).
	var mu sync.Mutex
	var sent []rlSent
	var samples []rlSample
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	paths := []string{ruPG, ruPG + "/pg-1", ruJobs, ruJobs + "/job-1"}
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
		rng := rand.New(rand.NewPCG(uint64(w), 13))
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
					return // stopped mid-request
				}
				mu.Lock()
				sent = append(sent, s)
				mu.Unlock()
			}
		})
	}
	// The gate, sampled every second, as an upgrade script would poll it.
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			var v gate.Verdict
			if code, err := pt.getJSON(loadCtx, "/api/v1/gate", &v); err != nil || code != http.StatusOK {
				continue
			}
			mu.Lock()
			samples = append(samples, rlSample{time.Now(), v})
			mu.Unlock()
		}
	})
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(d):
		}
	}
	var stretches []rlStretch

	// 1. Before: the load alone, once the gate's window no longer holds the setup (the
	// harness's polls until MVP worked got 404s before peer discovery synced).
	// Chains that waited for evidence surface a window later: the gate must say proceed for
	// three chain windows running.
	var proceeding time.Time
	if err := pollUntil(ctx, 3*time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		n := len(samples)
		switch {
		case n == 0 || !samples[n-1].v.Proceed:
			proceeding = time.Time{}
		case proceeding.IsZero():
			proceeding = samples[n-1].at
		}
		return !proceeding.IsZero() && time.Since(proceeding) > 3*ruChainWindow, pt.exited()
	}); err != nil {
		t.Fatalf("the gate never said proceed under the load alone: %v", err)
	}
	calm := time.Now()
	sleep(5 * time.Second)

	// 2. kas-c SIGKILLed, back after 4 s.
	killAt := time.Now()
	t.Logf("Kill %s", ruC)
	if err := c.Kill(ruC); err != nil {
		t.Fatal(err)
	}
	sleep(4 * time.Second)
	if err := c.StartServer(ctx, ruC, ""); err != nil {
		t.Fatal(err)
	}
	r.waitProxying()
	stretches = append(stretches, rlStretch{what: "kill", server: ruC, from: killAt.Add(-2 * time.Second), to: time.Now().Add(2 * time.Second), killed: true})
	sleep(10 * time.Second)

	// 3. kas-b replaced by v1.36.3 (batch/v1 on, podgroups still only on kas-c).
	upAt := time.Now()
	t.Logf("ReplaceServerWith %s %s", ruB, harness.NewVersion)
	if err := c.ReplaceServerWith(ctx, ruB, harness.ServerConfig{Version: harness.NewVersion, ExtraFlags: webhookFlags[ruB]}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPeerProxy(ctx, ruB, ruPG); err != nil {
		t.Fatal(err)
	}
	stretches = append(stretches, rlStretch{what: rlReplacement, server: ruB, from: upAt.Add(-2 * time.Second), to: time.Now().Add(2 * time.Second)})
	// Long enough for every chain of the replacement to be final and in the gate's window.
	sleep(3*ruChainWindow + 5*time.Second)
	faultAt := time.Now()

	// 4. The induced fault: kas-c, the only server of podgroups, stopped gracefully.
	t.Logf("StopGraceful %s", ruC)
	if err := c.StopGraceful(ruC); err != nil {
		t.Fatal(err)
	}
	sleep(10 * time.Second)
	// 404s from here on may be the restart's: the entries answer 404 until they have kas-c's
	// new discovery.
	faultRestart := time.Now()
	if err := c.StartServer(ctx, ruC, ""); err != nil {
		t.Fatal(err)
	}
	r.waitProxying()
	stretches = append(stretches, rlStretch{what: rlGracefulStop, server: ruC, from: faultAt.Add(-2 * time.Second), to: time.Now().Add(2 * time.Second)})
	faultEnd := time.Now()

	// 5. After: the gate must proceed again once the fault has left its window.
	proceedAgain := pollUntil(ctx, 4*time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		n := len(samples)
		return n > 0 && samples[n-1].at.After(faultEnd) && samples[n-1].v.Proceed, pt.exited()
	})
	stopLoad()
	wg.Wait()
	t.Logf("load stopped after %s: %d requests", time.Since(start).Round(time.Millisecond), len(sent))

	// The gate over time.
	var pausedInFault bool
	var noiseSeen []string
	for _, s := range samples {
		noise := checkOf(s.v, metrics.CheckRestartNoise)
		if noise != nil && strings.HasPrefix(noise.Detail, "restart noise within budget") && !slices.Contains(noiseSeen, noise.Detail) {
			noiseSeen = append(noiseSeen, noise.Detail)
		}
		switch {
		case s.at.After(calm) && s.at.Before(faultAt) && !s.v.Proceed:
			t.Errorf("gate paused at %s, before the induced fault (during the kill or the replacement): %v", s.at.Format(time.TimeOnly), s.v.Reasons)
		case s.at.After(faultAt) && !s.v.Proceed:
			if c := checkOf(s.v, metrics.CheckMisleading404); c != nil && !c.OK {
				pausedInFault = true
			}
		}
	}
	if t.Failed() {
		if v, err := pt.apiservers(ctx); err == nil {
			for _, n := range names {
				b, _ := json.Marshal(v[n].History)
				t.Logf("%s: history %s", n, b)
			}
		}
		// Every chain the gate may have counted against the upgrade: the faulty classes, and
		// forwards the peer answered with a 5xx.
		for _, class := range []string{"broken", "misleading_404", "proxy_failed", "proxied"} {
			chs, err := pt.chains(ctx, "class="+class+"&limit=10000")
			if err != nil {
				t.Log(err)
				continue
			}
			for _, ch := range chs {
				if class == "proxied" && ch.Code < 500 {
					continue
				}
				if ch.FirstReceived.After(calm) && ch.FirstReceived.Before(faultAt) {
					rr, sides := "", ""
					if ch.Entry != nil {
						rr = ch.Entry.RequestReceived.Format("15:04:05.000")
						sides = fmt.Sprintf("entry %s %d", ch.Entry.APIServer, ch.Entry.Code)
					}
					if ch.Peer != nil {
						sides += fmt.Sprintf(" peer %s %d %q %v", ch.Peer.APIServer, ch.Peer.Code, ch.Peer.Message, ch.Peer.Stages)
					}
					t.Logf("%s chain %s received %s (entry's request %s) %s [%s] %v: %s", class, ch.AuditID, ch.FirstReceived.Format("15:04:05.000"), rr, ch.RequestURI, sides, ch.Findings, ch.Explanation)
				}
			}
		}
	}
	if !pausedInFault {
		t.Errorf("the gate never paused on the misleading 404s of the graceful stop")
	}
	if proceedAgain != nil {
		t.Errorf("the gate did not proceed again after the fault: %v", proceedAgain)
	}
	if len(noiseSeen) == 0 {
		t.Errorf("the gate never reported restart noise within budget")
	}
	for _, d := range noiseSeen {
		t.Logf("gate: %s", d)
	}

	// Every answered request, as peertrail classified it.
	for _, n := range names {
		r.flush(n)
	}
	rlVerify(t, ctx, pt, sent, stretches, faultAt, faultRestart)
	t.Logf("TestReplacementUnderLoad took %s", time.Since(start).Round(time.Millisecond))
}

func checkOf(v gate.Verdict, name string) *gate.Check {
	for i := range v.Checks {
		if v.Checks[i].Name == name {
			return &v.Checks[i]
		}
	}
	return nil
}

// rlProxyErrors are the entry's messages when forwarding failed (measured).
var rlProxyErrors = []string{"error trying to reach service", "Error getting ip and port info of the remote server while proxying"}

// rlServes says whether entry, as it runs at the time, serves path's resource: podgroups only
// kas-c; jobs every server but kas-c.
func rlServes(entry, path string) bool {
	if strings.Contains(path, "/podgroups") {
		return entry == ruC
	}
	return entry != ruC
}

// rlVerify compares each answered request with its final chain.
func rlVerify(t *testing.T, ctx context.Context, pt *ptProc, sent []rlSent, stretches []rlStretch, faultAt, faultRestart time.Time) {
	t.Helper()
	in := func(s rlSent, kind func(rlStretch) bool) *rlStretch {
		for i := range stretches {
			if kind(stretches[i]) && !s.at.Before(stretches[i].from) && !s.at.After(stretches[i].to) {
				return &stretches[i]
			}
		}
		return nil
	}
	anyStretch := func(rlStretch) bool { return true }
	// Two chain windows (one more for a chain that waits for evidence) and the store's flush.
	time.Sleep(3*ruChainWindow + 2*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	counts := map[string]int{}
	var wrong []string
	answered := 0
	for _, s := range sent {
		if s.err != nil || len(s.auditIDs) == 0 {
			continue // the server was down: nothing audited
		}
		answered++
		id := s.auditIDs[0]
		var ch *chain.Chain
		// Everything was flushed and had time to close: a chain not final by now gets until
		// one shared deadline, not a wait of its own.
		err := pollUntil(ctx, max(time.Until(deadline), time.Millisecond), func() (bool, error) {
			c, code, err := pt.chain(ctx, id)
			if err != nil || code == http.StatusNotFound {
				return false, nil
			}
			ch = c
			return c.State == chain.StateFinal, pt.exited()
		})
		if ch != nil && ch.State != chain.StateFinal {
			err = fmt.Errorf("still open: %s %v", ch.Class, ch.Findings)
		}
		// What the client saw.
		want := chain.ClassLocal
		switch {
		case len(s.auditIDs) >= 2:
			want = chain.ClassProxied
		case (s.code == 503 || s.code == 502) && slices.ContainsFunc(rlProxyErrors, func(m string) bool { return strings.Contains(s.body, m) }):
			want = chain.ClassProxyFailed
		case s.code == 404 && !rlServes(s.entry, s.path):
			// The entry's own 404 for what a peer serves, whatever its body: 1.35's Status
			// "the server could not find the requested resource", or the plain "404 page not
			// found" of a 1.36 server with the group off, before its peer discovery lists a
			// server of it.
			want = chain.ClassMisleading404
		}
		where := fmt.Sprintf("%s %s as %s at %s -> %d %q (%d Audit-Id %s)", s.entry, s.path, s.identity, s.at.Format("15:04:05.000"), s.code, firstLine(s.body), len(s.auditIDs), id)
		if err != nil || ch == nil {
			// A request whose every record was lost: the entry was killed before its batch left,
			// or it was stopping (gracefully: an apiserver's audit backend can drop its own last
			// events as it shuts down; seen once, a 503 from kas-c as it stopped, and once a 503
			// "apiserver is shutting down" from kas-b as the replacement stopped it, of which
			// peertrail held no record: in the replacement only such answers may be lost).
			lost := func(x rlStretch) bool {
				return x.server == s.entry && (x.killed || x.what == rlGracefulStop && s.at.Before(faultRestart) ||
					x.what == rlReplacement && s.code == http.StatusServiceUnavailable && strings.Contains(s.body, "shutting down"))
			}
			if st := in(s, lost); st == nil {
				wrong = append(wrong, fmt.Sprintf("%s: want %s, no final chain (%v)", where, want, err))
			}
			counts["missing (entry killed or stopping)"]++
			continue
		}
		got := ch.Class
		counts[string(want)+" -> "+string(got)]++
		ok := got == want
		// What the restarts make real: a forwarded request whose peer's record died with the
		// peer (killed, or stopping: the audit backend drops some last events), or whose
		// entry's record did (killed).
		if !ok && want == chain.ClassProxied && got == chain.ClassBroken && in(s, anyStretch) != nil {
			ok = ch.HasFinding(chain.FindingPeerAuditMissing) || ch.HasFinding(chain.FindingEntryAuditMissing)
		}
		if !ok {
			wrong = append(wrong, fmt.Sprintf("%s: want %s, peertrail %s %v: %s", where, want, got, ch.Findings, ch.Explanation))
			continue
		}
		// The findings the restarts explain, and no others.
		for _, f := range ch.Findings {
			switch f {
			case chain.FindingPeerAuditMissing, chain.FindingEntryAuditMissing:
				if got != chain.ClassBroken {
					wrong = append(wrong, fmt.Sprintf("%s: %s with %s", where, got, f))
				}
			case chain.FindingPeerDown, chain.FindingEntryStarting, chain.FindingEntryDown, chain.FindingEntryStopping:
				if in(s, anyStretch) == nil {
					wrong = append(wrong, fmt.Sprintf("%s: %s %v outside every restart: %s", where, got, ch.Findings, ch.Explanation))
				}
			default:
				wrong = append(wrong, fmt.Sprintf("%s: %s with finding %s: %s", where, got, f, ch.Explanation))
			}
		}
		switch {
		case got == chain.ClassProxyFailed && in(s, func(x rlStretch) bool { return x.killed }) != nil && !ch.HasFinding(chain.FindingPeerDown):
			wrong = append(wrong, fmt.Sprintf("%s: a forward failed while kas-c was killed, without peer_down: %s", where, ch.Explanation))
		case got == chain.ClassMisleading404 && s.at.After(faultAt.Add(2*time.Second)) && s.at.Before(faultRestart) && s.entry != ruC &&
			(ch.HasFinding(chain.FindingEntryStarting) || ch.HasFinding(chain.FindingPeerDown)):
			wrong = append(wrong, fmt.Sprintf("%s: a misleading 404 of the induced fault passed off as restart noise: %s", where, ch.Explanation))
		}
		if len(wrong) > 0 && strings.HasPrefix(wrong[len(wrong)-1], where) {
			counts["wrong"]++
		}
	}
	b, _ := json.MarshalIndent(counts, "", "  ")
	t.Logf("%d answered requests, client's class -> peertrail's: %s", answered, b)
	if answered < 300 {
		t.Errorf("only %d answered requests: the load did not run", answered)
	}
	for _, need := range []string{"proxied -> proxied", "local -> local", "proxy_failed -> proxy_failed", "misleading_404 -> misleading_404"} {
		if counts[need] == 0 {
			t.Errorf("no request the client saw as %q: the scenario proves nothing about it", need)
		}
	}
	for i, w := range wrong {
		if i == 40 {
			t.Errorf("... and %d more", len(wrong)-40)
			break
		}
		t.Error(w)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d answered requests classified wrong", len(wrong), answered)
	}
}
