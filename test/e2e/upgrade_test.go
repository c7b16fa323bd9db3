package e2e

// TestRollingUpgrade: peertrail against a real HA control plane in version skew during a
// kube-apiserver 1.35 -> 1.36 rolling upgrade.
//
// Three real kube-apiservers share one etcd, each with its own hostname (identity) and the
// Mixed Version Proxy on: kas-a and kas-b run v1.35.4; kas-c runs v1.36.3, serves
// scheduling.k8s.io/v1alpha2 podgroups (which the 1.35 servers do not have) and runs with
// batch/v1 disabled (so it forwards jobs to the old servers). Each apiserver's audit webhook
// (batch mode, TLS, its own client certificate mapped to its name in peertrail's config) posts
// to its own URL /audit/<name> of one real `peertrail serve` (built from this checkout, with
// the embedded ClickHouse store).
//
// Scenarios: requests proxied old->new and new->old (list, get, create, watch ended by the
// server, a watch the client cancels, a 404 of a missing object); requests the entry denies;
// impersonation through a proxied request; a resource nobody serves; a client sending the
// loop marker itself; the apiservers' own discovery traffic; a peer stopped gracefully
// (misleading 404s); a peer killed (503s); then a rolling-upgrade step that restarts kas-b
// as v1.36.3 serving podgroups itself. Every request is asserted through the chain API and
// through SQL on the store (chains FINAL and events). Finally, per entry apiserver, the
// chains peertrail classified proxied and proxy_failed are compared with the apiserver's own
// apiserver_rerouted_request_total, summed over the test (over every process of it).
//
//	export CHDB_LIB_PATH=$(scripts/fetch-chdb.sh); scripts/build-kube.sh
//	go test ./test/e2e -run TestRollingUpgrade -count=1 -v

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/test/e2e/harness"
)

const (
	ruA = "kas-a" // v1.35.4
	ruB = "kas-b" // v1.35.4, upgraded to v1.36.3 (then serves podgroups itself)
	ruC = "kas-c" // v1.36.3: podgroups, batch/v1 disabled

	ruNS = "rolling"
	ruPG = "/apis/scheduling.k8s.io/v1alpha2/namespaces/" + ruNS + "/podgroups"
	// ruJobs is served by the 1.35 servers (and kas-b after its upgrade), not by kas-c.
	ruJobs = "/apis/batch/v1/namespaces/" + ruNS + "/jobs"
	// ruClientIP: the scenario clients connect from here, not from the apiservers' 127.0.0.1,
	// so a peer's record of a forwarded request shows sourceIPs [client, entry].
	ruClientIP = "127.0.0.2"
	ruServerIP = "127.0.0.1"

	ruChainWindow = 5 * time.Second
	ruUnresolved  = "Error getting ip and port info of the remote server while proxying"
)

// ruWant is what one request must have become in peertrail.
type ruWant struct {
	scenario, what string
	auditID        string
	class          chain.Class
	findings       []chain.Finding
	entry          string
	peers          []string // proxied: the peer is one of these; nil: no peer
	code           int      // what the client got (the chain's and the entry's code)
	peerCode       int      // proxied: the peer's code (default code)
	peerReason     string   // proxied: the peer's status reason, when set (the entry has none)
	user, realUser string   // checked when user is set
	entryPanic     bool     // the entry recorded Panic (a proxied watch the client cancelled)
	sentAt         time.Time

	chainPeer string // filled by verify
}

type ruTest struct {
	t        *testing.T
	ctx      context.Context
	c        *harness.Cluster
	pt       *ptProc
	clients  map[string]*http.Client
	wants    []*ruWant
	scenario string
	// unstable are the times a server was going down (its last audit events may be lost).
	unstable []ruWindow
	// procs are the apiserver processes' MVP counts: each scraped just before it was
	// stopped or killed (its counter starts from zero in the next one), the running ones at
	// the end.
	procs []*ruProc
}

type ruResp struct {
	server, identity, method, path string
	code                           int
	auditID                        string
	body                           string
	sentAt                         time.Time
	err                            error
}

func TestRollingUpgrade(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	dir := harness.TempDir(t)
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// peertrail's serving certificate (verified by the apiservers with the server CA) and
	// the CA of the apiservers' webhook client certificates.
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
	cfg.WriteString("apiservers:\n")
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
	t.Logf("peertrail %s, SQL %s (started after %s)", pt.URL, pt.SQLURL, time.Since(start).Round(time.Millisecond))

	// Each apiserver's webhook kubeconfig, written by peertrail itself: its own URL and
	// client certificate. The flags go in ExtraFlags (the harness's Webhook has one
	// certificate for all servers).
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
	podgroupsGate := map[string]bool{"GenericWorkload": true}
	c, err := harness.Start(ctx, t, harness.Config{
		Dir: filepath.Join(dir, "cluster"),
		PKI: pki,
		// The audit policy users deploy (Metadata, no bodies): what peertrail must work from.
		AuditPolicyFile: filepath.Join(depRepoRoot(t), "deploy/control-plane/audit-policy.yaml"),
		Servers: []harness.ServerConfig{
			{Name: ruA, Version: harness.OldVersion, ExtraFlags: webhookFlags[ruA]},
			{Name: ruB, Version: harness.OldVersion, ExtraFlags: webhookFlags[ruB]},
			{Name: ruC, Version: harness.NewVersion, FeatureGates: podgroupsGate,
				RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true", "batch/v1": "false"},
				ExtraFlags:    webhookFlags[ruC]},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane ready after %s", time.Since(start).Round(time.Millisecond))
	r := &ruTest{t: t, ctx: ctx, c: c, pt: pt, clients: map[string]*http.Client{}}

	// Setup: a namespace, and RBAC for group team-pg (bob); alice gets nothing.
	r.scenario = "setup"
	r.expect(r.do(ruA, "admin", "POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+ruNS+`"}}`, nil),
		ruWant{what: "create the namespace", class: chain.ClassLocal, entry: ruA, code: 201})
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"ru-pg-editor"},"rules":[{"apiGroups":["scheduling.k8s.io"],"resources":["podgroups"],"verbs":["*"]},{"apiGroups":["batch"],"resources":["jobs"],"verbs":["*"]}]}`, nil), 201)
	r.must(r.do(ruA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"ru-pg-editor-team-pg"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"ru-pg-editor"},"subjects":[{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"team-pg"}]}`, nil), 201)
	r.waitProxying()

	pg := func(name string) string {
		return `{"apiVersion":"scheduling.k8s.io/v1alpha2","kind":"PodGroup","metadata":{"name":"` + name + `"},"spec":{"schedulingPolicy":{"gang":{"minCount":2}}}}`
	}
	job := func(name string) string {
		return `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"` + name + `"},"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.invalid/busybox"}]}}}}`
	}
	toC := []string{ruC}
	toOld := []string{ruA, ruB}

	// 1. old -> new: the 1.35 entries forward podgroups to kas-c.
	r.scenario = "proxied old->new"
	r.expect(r.do(ruA, "admin", "GET", ruPG, "", nil), ruWant{what: "list", class: chain.ClassProxied, entry: ruA, peers: toC, code: 200})
	r.expect(r.do(ruA, "admin", "POST", ruPG, pg("pg-1"), nil), ruWant{what: "create", class: chain.ClassProxied, entry: ruA, peers: toC, code: 201})
	oldForward := r.do(ruB, "admin", "GET", ruPG+"/pg-1", "", nil)
	r.expect(oldForward, ruWant{what: "get", class: chain.ClassProxied, entry: ruB, peers: toC, code: 200})
	r.expect(r.do(ruA, "admin", "GET", ruPG+"?watch=true&timeoutSeconds=1", "", nil), ruWant{what: "watch ended by the server (timeoutSeconds=1)", class: chain.ClassProxied, entry: ruA, peers: toC, code: 200})
	r.expect(r.watchCancel(ruB, "admin", ruPG+"?watch=1"), ruWant{what: "watch cancelled by the client after its first event", class: chain.ClassProxied, entry: ruB, peers: toC, code: 200, entryPanic: true})
	r.expect(r.do(ruB, "admin", "GET", ruPG+"/does-not-exist", "", nil), ruWant{what: "get of a missing object: the peer's 404, proxied", class: chain.ClassProxied, entry: ruB, peers: toC, code: 404, peerReason: "NotFound"})

	// 2. new -> old: kas-c (batch/v1 off) forwards jobs to a 1.35 server.
	r.scenario = "proxied new->old"
	r.expect(r.do(ruC, "admin", "GET", ruJobs, "", nil), ruWant{what: "list", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 200})
	r.expect(r.do(ruC, "admin", "POST", ruJobs, job("job-1"), nil), ruWant{what: "create", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 201})
	r.expect(r.do(ruC, "admin", "GET", ruJobs+"/job-1", "", nil), ruWant{what: "get", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 200})
	r.expect(r.do(ruC, "admin", "GET", ruJobs+"?watch=true&timeoutSeconds=1", "", nil), ruWant{what: "watch ended by the server", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 200})
	r.expect(r.do(ruC, "admin", "GET", ruJobs+"/missing-job", "", nil), ruWant{what: "get of a missing object", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 404, peerReason: "NotFound"})
	r.expect(r.do(ruC, "bob", "GET", ruJobs, "", nil), ruWant{what: "list as bob (client certificate)", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 200, user: "bob"})

	// 3. Denied at the entry: never forwarded.
	r.scenario = "denied"
	r.expect(r.do(ruA, "alice", "GET", ruPG, "", nil), ruWant{what: "alice (no RBAC) lists podgroups through a 1.35 entry", class: chain.ClassLocal, entry: ruA, code: 403, user: "alice"})
	r.expect(r.do(ruB, "alice", "POST", ruPG, pg("pg-alice"), nil), ruWant{what: "alice creates a podgroup", class: chain.ClassLocal, entry: ruB, code: 403, user: "alice"})
	r.expect(r.do(ruC, "alice", "GET", ruJobs, "", nil), ruWant{what: "alice lists jobs through the 1.36 entry", class: chain.ClassLocal, entry: ruC, code: 403, user: "alice"})

	// 4. Impersonation through a proxied request: only the entry's record keeps the actor.
	r.scenario = "impersonation"
	flat := []chain.Finding{chain.FindingImpersonationFlattened}
	imp1 := r.do(ruA, "admin-as-bob", "GET", ruPG+"/pg-1", "", nil)
	r.expect(imp1, ruWant{what: "admin as bob, old->new", class: chain.ClassProxied, findings: flat, entry: ruA, peers: toC, code: 200, user: "bob", realUser: "admin"})
	r.expect(r.do(ruC, "admin-as-bob", "GET", ruJobs+"/job-1", "", nil), ruWant{what: "admin as bob, new->old", class: chain.ClassProxied, findings: flat, entry: ruC, peers: toOld, code: 200, user: "bob", realUser: "admin"})
	r.expect(r.do(ruB, "bob", "POST", ruPG, pg("pg-bob"), nil), ruWant{what: "bob's own certificate: nothing flattened", class: chain.ClassProxied, entry: ruB, peers: toC, code: 201, user: "bob"})

	// 5. Nobody serves it, and a client that sends the loop marker itself.
	r.scenario = "not served"
	r.expect(r.do(ruA, "admin", "GET", "/apis/widgets.example.com/v1/namespaces/"+ruNS+"/widgets", "", nil), ruWant{what: "a group nobody serves (1.35 entry)", class: chain.ClassLocal, entry: ruA, code: 404})
	r.expect(r.do(ruC, "admin", "GET", "/apis/widgets.example.com/v1/widgets", "", nil), ruWant{what: "a group nobody serves (1.36 entry)", class: chain.ClassLocal, entry: ruC, code: 404})
	r.expect(r.do(ruA, "admin", "GET", ruPG, "", map[string]string{"x-kubernetes-peer-proxied": "true"}),
		ruWant{what: "the client sent x-kubernetes-peer-proxied: true: not forwarded; audit cannot show the header, so peertrail calls it misleading", class: chain.ClassMisleading404, entry: ruA, code: 404})
	r.expect(r.do(ruA, "admin", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/missing", "", nil), ruWant{what: "a missing object of a resource the entry serves", class: chain.ClassLocal, entry: ruA, code: 404})

	// What peertrail learned about the apiservers so far.
	r.waitAPIServers(map[string]string{ruA: harness.OldVersion, ruB: harness.OldVersion, ruC: harness.NewVersion},
		map[string]bool{ruA: false, ruB: false, ruC: true})

	// 6. Peer stopped gracefully: the 1.35 entries forget it and answer 404 for podgroups.
	r.scenario = "peer stopped gracefully"
	r.retire(ruC)
	t.Logf("StopGraceful %s", ruC)
	down := time.Now()
	if err := c.StopGraceful(ruC); err != nil {
		t.Fatal(err)
	}
	r.unstable = append(r.unstable, ruWindow{ruC, down, time.Now()})
	for _, e := range []string{ruA, ruB} {
		// Until the entry sees kas-c's identity lease gone, it may still try kas-c (503).
		if st, err := c.WaitStatus(ctx, e, ruPG, 60*time.Second, http.StatusNotFound); err != nil {
			t.Fatalf("%s after %s stopped: %v (%s)", e, ruC, err, st)
		}
	}
	r.expect(r.do(ruA, "admin", "GET", ruPG, "", nil), ruWant{what: "list", class: chain.ClassMisleading404, entry: ruA, code: 404})
	r.expect(r.do(ruB, "admin", "GET", ruPG+"/pg-1", "", nil), ruWant{what: "get of an object that exists in etcd", class: chain.ClassMisleading404, entry: ruB, code: 404})
	r.expect(r.do(ruA, "bob", "POST", ruPG, pg("pg-lost"), nil), ruWant{what: "create", class: chain.ClassMisleading404, entry: ruA, code: 404, user: "bob"})
	if err := c.StartServer(ctx, ruC, ""); err != nil {
		t.Fatal(err)
	}
	r.waitProxying()

	// 7. Peer killed: the entries still pick it: 503, then (once its peer endpoint lease
	// expired) 503 "Error getting ip and port info".
	r.scenario = "peer killed"
	r.flush(ruC) // nothing kas-c audited may be lost with it
	down = time.Now()
	r.retire(ruC)
	t.Logf("Kill %s", ruC)
	if err := c.Kill(ruC); err != nil {
		t.Fatal(err)
	}
	r.unstable = append(r.unstable, ruWindow{ruC, down, time.Now()})
	for _, e := range []string{ruA, ruB} {
		if st, err := c.WaitStatus(ctx, e, ruPG, 60*time.Second, http.StatusServiceUnavailable); err != nil {
			t.Fatalf("%s after %s was killed: %v (%s)", e, ruC, err, st)
		}
	}
	// kas-c's stream is silent meanwhile: the failed forwards are its restart noise.
	peerDown := []chain.Finding{chain.FindingPeerDown}
	r.expect(r.do(ruA, "admin", "GET", ruPG, "", nil), ruWant{what: "list", class: chain.ClassProxyFailed, findings: peerDown, entry: ruA, code: 503})
	r.expect(r.do(ruB, "bob", "POST", ruPG, pg("pg-killed"), nil), ruWant{what: "create", class: chain.ClassProxyFailed, findings: peerDown, entry: ruB, code: 503, user: "bob"})
	// Until kas-c's peer endpoint lease expires (~15 s), then one more: a request a second.
	unresolved := false
	tick := time.NewTicker(time.Second)
	for deadline := time.Now().Add(90 * time.Second); !unresolved && time.Now().Before(deadline); <-tick.C {
		resp := r.do(ruA, "admin", "GET", ruPG+"/pg-1", "", nil)
		r.expect(resp, ruWant{what: "get while kas-c is dead: " + firstLine(resp.body), class: chain.ClassProxyFailed, findings: peerDown, entry: ruA, code: 503})
		unresolved = strings.Contains(resp.body, ruUnresolved)
		if resp.code != http.StatusServiceUnavailable {
			break
		}
	}
	tick.Stop()
	if !unresolved {
		t.Errorf("kas-a never answered %q", ruUnresolved)
	}
	if err := c.StartServer(ctx, ruC, ""); err != nil {
		t.Fatal(err)
	}
	r.waitProxying()

	// 8. The rolling-upgrade step: kas-b restarts as v1.36.3 with the same hostname and port,
	// now with podgroups on (the flags change with the version: 1.35 refuses
	// scheduling.k8s.io/v1alpha2 in --runtime-config).
	r.scenario = "rolling upgrade"
	r.flush(ruB)
	upStart := time.Now()
	r.retire(ruB)
	if err := c.ReplaceServerWith(ctx, ruB, harness.ServerConfig{Version: harness.NewVersion, FeatureGates: podgroupsGate,
		RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true"}, ExtraFlags: webhookFlags[ruB]}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s replaced by %s in %s", ruB, harness.NewVersion, time.Since(upStart).Round(time.Millisecond))
	r.unstable = append(r.unstable, ruWindow{ruB, upStart, time.Now()})
	if st := c.Get(ctx, ruB, "/version"); !strings.Contains(st.Body, `"gitVersion": "`+harness.NewVersion+`"`) {
		t.Errorf("%s /version after the upgrade: %s", ruB, st)
	}
	r.waitProxying()
	newServe := r.do(ruB, "admin", "GET", ruPG, "", nil)
	r.expect(newServe, ruWant{what: "the upgraded server lists podgroups itself", class: chain.ClassLocal, entry: ruB, code: 200})
	r.expect(r.do(ruB, "admin", "POST", ruPG, pg("pg-upgraded"), nil), ruWant{what: "creates one itself", class: chain.ClassLocal, entry: ruB, code: 201})
	r.expect(r.do(ruB, "bob", "GET", ruPG+"/pg-1", "", nil), ruWant{what: "reads one kas-c created", class: chain.ClassLocal, entry: ruB, code: 200, user: "bob"})
	r.expect(r.do(ruB, "admin", "GET", ruJobs+"/job-1", "", nil), ruWant{what: "and still serves jobs", class: chain.ClassLocal, entry: ruB, code: 200})
	// The other servers pick the upgraded kas-b as a peer once they have its discovery again
	// (each picks at random among the servers of a resource).
	r.forwardUntil(ruB, func() ruWant {
		return ruWant{what: "kas-a forwards podgroups to either 1.36 server", class: chain.ClassProxied, entry: ruA, peers: []string{ruB, ruC}, code: 200}
	}, func() ruResp { return r.do(ruA, "admin", "GET", ruPG+"/pg-upgraded", "", nil) })
	r.forwardUntil(ruB, func() ruWant {
		return ruWant{what: "kas-c forwards jobs to kas-a or the upgraded kas-b (new -> new)", class: chain.ClassProxied, entry: ruC, peers: toOld, code: 200}
	}, func() ruResp { return r.do(ruC, "admin", "GET", ruJobs+"/job-1", "", nil) })
	r.waitAPIServers(map[string]string{ruA: harness.OldVersion, ruB: harness.NewVersion, ruC: harness.NewVersion},
		map[string]bool{ruA: false, ruB: true, ruC: true})

	// The end: the last counters, then everything audited before them final in peertrail.
	cutoff := time.Now()
	for _, n := range names {
		r.retire(n)
	}
	markers := map[string]string{}
	for _, n := range names {
		markers[n] = r.flush(n)
	}
	r.waitEventsStored(markers)
	t.Logf("scenarios done after %s; checking", time.Since(start).Round(time.Millisecond))

	r.verify()
	r.checkImpersonationRecords(imp1.auditID)
	r.checkDiscovery()
	r.checkVersionsInStore()
	r.checkCapabilityHistory(start, oldForward.sentAt, newServe.sentAt)
	r.checkIngest()
	r.compareRerouted(cutoff)
	t.Logf("TestRollingUpgrade took %s", time.Since(start).Round(time.Millisecond))
}

// waitProxying waits until MVP works both ways: the 1.35 entries forward podgroups, kas-c
// forwards jobs (harness polls, audited too).
func (r *ruTest) waitProxying() {
	r.t.Helper()
	for _, e := range []string{ruA, ruB, ruC} {
		path := ruPG
		if e == ruC {
			path = ruJobs
		}
		if e == ruB && r.c.Server(ruB).Version == harness.NewVersion {
			path = ruJobs + "/job-1" // served locally now: just wait until it answers
		}
		if err := r.c.WaitPeerProxy(r.ctx, e, path); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *ruTest) client(server, identity string) *http.Client {
	key := server + "/" + identity
	if hc, ok := r.clients[key]; ok {
		return hc
	}
	var cfgErr error
	cfg := r.c.AdminConfig(server)
	switch identity {
	case "admin":
	case "alice":
		cfg, cfgErr = r.c.UserConfig(server, "alice", "team-alpha")
	case "bob":
		cfg, cfgErr = r.c.UserConfig(server, "bob", "team-pg")
	case "admin-as-bob":
		cfg = r.c.ImpersonateConfig(server, "bob", "team-pg")
	default:
		r.t.Fatalf("unknown identity %s", identity)
	}
	if cfgErr != nil {
		r.t.Fatal(cfgErr)
	}
	hc, err := harness.HTTPClient(harness.WithSourceIP(cfg, ruClientIP))
	if err != nil {
		r.t.Fatal(err)
	}
	hc.Timeout = 60 * time.Second
	r.clients[key] = hc
	return hc
}

func (r *ruTest) request(ctx context.Context, server, method, path, body string, hdr map[string]string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.c.Server(server).URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("User-Agent", "peertrail-e2e-upgrade")
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func (r *ruTest) do(server, identity, method, path, body string, hdr map[string]string) ruResp {
	res := ruResp{server: server, identity: identity, method: method, path: path, sentAt: time.Now()}
	resp, err := r.client(server, identity).Do(r.request(r.ctx, server, method, path, body, hdr))
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	res.code, res.body = resp.StatusCode, string(b)
	if ids := resp.Header.Values("Audit-Id"); len(ids) > 0 {
		res.auditID = ids[0]
	}
	r.t.Logf("%s %s %s as %s -> %d %s", server, method, path, identity, res.code, res.auditID)
	return res
}

// watchCancel starts a watch, reads its first event and cancels it.
func (r *ruTest) watchCancel(server, identity, path string) ruResp {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	res := ruResp{server: server, identity: identity, method: "GET", path: path, sentAt: time.Now()}
	resp, err := r.client(server, identity).Do(r.request(ctx, server, "GET", path, "", nil))
	if err != nil {
		res.err = err
		return res
	}
	res.code = resp.StatusCode
	if ids := resp.Header.Values("Audit-Id"); len(ids) > 0 {
		res.auditID = ids[0]
	}
	line, _ := readLine(resp.Body)
	res.body = line
	cancel()
	resp.Body.Close()
	r.t.Logf("%s WATCH %s as %s -> %d, cancelled after %.60s (%s)", server, path, identity, res.code, line, res.auditID)
	return res
}

// forwardUntil sends requests (each expected as want says) until one is forwarded to peer,
// as the chain API shows as soon as both records are in (up to a minute).
func (r *ruTest) forwardUntil(peer string, want func() ruWant, send func() ruResp) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for n := 1; ; n++ {
		res := send()
		r.expect(res, want())
		var got string
		if err := pollUntil(r.ctx, 30*time.Second, func() (bool, error) {
			c, _, err := r.pt.chain(r.ctx, res.auditID)
			if err == nil && c != nil && c.Peer != nil {
				got = c.Peer.APIServer
			}
			return got != "", r.pt.exited()
		}); err != nil {
			r.t.Fatalf("%s: %s: no peer record of %s: %v", r.scenario, want().what, res.auditID, err)
		}
		if got == peer {
			r.t.Logf("%s: forwarded to %s at the %d. request", want().what, peer, n)
			return
		}
		if time.Now().After(deadline) {
			r.t.Errorf("%s: %s: never forwarded to %s in %d requests", r.scenario, want().what, peer, n)
			return
		}
	}
}

func (r *ruTest) must(res ruResp, code int) {
	r.t.Helper()
	if res.err != nil || res.code != code {
		r.t.Fatalf("%s %s %s: %d %v, want %d: %s", res.server, res.method, res.path, res.code, res.err, code, res.body)
	}
}

// expect checks what the client saw and records what peertrail must make of the request.
func (r *ruTest) expect(res ruResp, w ruWant) {
	r.t.Helper()
	w.scenario, w.sentAt = r.scenario, res.sentAt
	where := fmt.Sprintf("%s: %s (%s %s %s as %s)", w.scenario, w.what, res.server, res.method, res.path, res.identity)
	if res.err != nil {
		r.t.Errorf("%s: %v", where, res.err)
		return
	}
	if res.code != w.code {
		r.t.Errorf("%s: the client got %d, want %d: %s", where, res.code, w.code, truncate(strings.TrimSpace(res.body), 300))
	}
	if res.auditID == "" {
		r.t.Errorf("%s: no Audit-Id in the response", where)
		return
	}
	w.auditID = res.auditID
	if w.peerCode == 0 {
		w.peerCode = w.code
	}
	r.wants = append(r.wants, &w)
}

// flush makes sure peertrail has everything server audited so far: a request to it, whose
// record reaches peertrail after every earlier one (the webhook sends in order). It returns
// the request's audit ID.
func (r *ruTest) flush(server string) string {
	r.t.Helper()
	// Not a core read: the shipped audit policy does not record those (never forwarded).
	res := r.do(server, "admin", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "", nil)
	if res.err != nil || res.code != 200 || res.auditID == "" {
		r.t.Fatalf("flush marker on %s: %d %v", server, res.code, res.err)
	}
	if err := pollUntil(r.ctx, 90*time.Second, func() (bool, error) {
		if err := r.pt.exited(); err != nil {
			return false, err
		}
		c, _, err := r.pt.chain(r.ctx, res.auditID)
		return err == nil && c != nil && c.Entry != nil && slices.Contains(c.Entry.Stages, "ResponseComplete"), nil
	}); err != nil {
		r.t.Fatalf("flush marker %s of %s never reached peertrail: %v", res.auditID, server, err)
	}
	return res.auditID
}

// waitEventsStored waits until each server's flush marker (server -> audit ID) is in
// peertrail.events. The chain API has a record as soon as the correlator does, but the
// events writer inserts every store.flushInterval (15 s by default) or 50,000 records, so the
// table and its rollups trail it by up to that; the writer inserts the spool in order, so
// with a server's marker every earlier record of it is stored.
func (r *ruTest) waitEventsStored(markers map[string]string) {
	r.t.Helper()
	var missing []string
	if err := pollUntil(r.ctx, 90*time.Second, func() (bool, error) {
		var rows []struct {
			APIServer string `json:"apiserver"`
			AuditID   string `json:"audit_id"`
		}
		if err := r.pt.sql(r.ctx, `SELECT DISTINCT apiserver, audit_id FROM peertrail.events
			WHERE stage = 'ResponseComplete' AND audit_id IN (`+sqlStrings(r.t, slices.Collect(maps.Values(markers)))+`)`, &rows); err != nil {
			return false, err
		}
		stored := map[string]bool{}
		for _, rw := range rows {
			stored[rw.APIServer+" "+rw.AuditID] = true
		}
		missing = missing[:0]
		for server, id := range markers {
			if !stored[server+" "+id] {
				missing = append(missing, server+" "+id)
			}
		}
		return len(missing) == 0, nil
	}); err != nil {
		r.t.Fatalf("flush markers never in peertrail.events: %v (missing %v)", err, missing)
	}
}

// ruProc is what one apiserver process said about its Mixed Version Proxy, at one moment:
// its apiserver_rerouted_request_total and what its log says it forwarded up to then.
type ruProc struct {
	server, version, log string
	rerouted             []promSample
	// From the log ("Proxying request for <path> from <client> to <peer>", one line per call
	// of the proxy, before it forwards): peer-discovery fetches (/api and /apis, no client)
	// and forwarded client requests.
	discovery, forwarded int
	// discoveryFailed: discovery fetches that got another status than 200, by status.
	discoveryFailed map[string]int
}

var (
	ruProxyLine = regexp.MustCompile(`Proxying request for (\S+) from (\S*) to (\S+)`)
	ruDiscFail  = regexp.MustCompile(`error querying discovery endpoint for serverID" err="discovery request failed with status: (\d+)"`)
)

// retire records server's MVP counts: called just before its process ends, and at the end.
// A proxy call in flight would be in the log and not yet in the counter: the counts are
// taken in a quiet moment (the counter and the log unchanged over 300ms).
func (r *ruTest) retire(server string) {
	r.t.Helper()
	s := r.c.Server(server)
	hc, err := harness.HTTPClient(r.c.AdminConfig(server))
	if err != nil {
		r.t.Fatal(err)
	}
	hc.Timeout = 30 * time.Second
	take := func() *ruProc {
		resp, err := hc.Get(s.URL + "/metrics")
		if err != nil {
			r.t.Fatalf("%s /metrics: %v", server, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			r.t.Fatalf("%s /metrics: %d", server, resp.StatusCode)
		}
		ss, err := promSamples(string(b), "apiserver_rerouted_request_total")
		if err != nil {
			r.t.Fatal(err)
		}
		p := &ruProc{server: server, version: s.Version, log: s.LogFile(), rerouted: ss, discoveryFailed: map[string]int{}}
		logText, err := os.ReadFile(p.log)
		if err != nil {
			r.t.Fatal(err)
		}
		for _, line := range strings.Split(string(logText), "\n") {
			if m := ruProxyLine.FindStringSubmatch(line); m != nil {
				if (m[1] == "/api" || m[1] == "/apis") && m[2] == "" {
					p.discovery++
				} else {
					p.forwarded++
				}
			} else if m := ruDiscFail.FindStringSubmatch(line); m != nil {
				p.discoveryFailed[m[1]]++
			}
		}
		return p
	}
	var p *ruProc
	for try := 0; ; try++ {
		p1 := take()
		select {
		case <-r.ctx.Done():
			r.t.Fatal(r.ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
		p = take()
		if fmt.Sprint(p1.rerouted, p1.discovery, p1.forwarded, p1.discoveryFailed) == fmt.Sprint(p.rerouted, p.discovery, p.forwarded, p.discoveryFailed) {
			break
		}
		if try == 30 {
			r.t.Fatalf("%s: apiserver_rerouted_request_total or its log never stood still", server)
		}
	}
	r.procs = append(r.procs, p)
	total := 0.0
	for _, x := range p.rerouted {
		total += x.Value
	}
	r.t.Logf("%s (%s): apiserver_rerouted_request_total %v; its log: %d peer-discovery fetches (failed %v), %d forwarded requests",
		server, p.version, total, p.discovery, p.discoveryFailed, p.forwarded)
}

// waitAPIServers waits until /api/v1/apiservers reports each apiserver's version and whether
// it serves podgroups.
func (r *ruTest) waitAPIServers(versions map[string]string, servesPG map[string]bool) {
	r.t.Helper()
	var last map[string]chain.APIServerView
	err := pollUntil(r.ctx, 90*time.Second, func() (bool, error) {
		if err := r.pt.exited(); err != nil {
			return false, err
		}
		v, err := r.pt.apiservers(r.ctx)
		if err != nil {
			return false, nil
		}
		last = v
		for n, want := range versions {
			if v[n].Version != want {
				return false, nil
			}
			if s, known := serves(v[n], "scheduling.k8s.io", "v1alpha2", "podgroups"); !known || s != servesPG[n] {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b, _ := json.MarshalIndent(last, "", "  ")
		r.t.Errorf("%s: /api/v1/apiservers never said versions %v, serving podgroups %v: %v\n%s", r.scenario, versions, servesPG, err, b)
	}
}

// verify checks every expected request through the chain API, then through SQL on the store.
func (r *ruTest) verify() {
	t := r.t
	t.Helper()
	deadline := 2 * time.Minute
	for _, w := range r.wants {
		where := fmt.Sprintf("%s: %s [%s]", w.scenario, w.what, w.auditID)
		var c *chain.Chain
		if err := pollUntil(r.ctx, deadline, func() (bool, error) {
			if err := r.pt.exited(); err != nil {
				return false, err
			}
			got, _, err := r.pt.chain(r.ctx, w.auditID)
			if err != nil || got == nil {
				return false, nil
			}
			c = got
			return got.State == chain.StateFinal, nil
		}); err != nil {
			t.Errorf("%s: no final chain: %v (last %+v)", where, err, c)
			continue
		}
		var bad []string
		if c.Class != w.class {
			bad = append(bad, fmt.Sprintf("class %s, want %s", c.Class, w.class))
		}
		if !sameFindings(c.Findings, w.findings) {
			bad = append(bad, fmt.Sprintf("findings %v, want %v", c.Findings, w.findings))
		}
		if c.Entry == nil || c.Entry.APIServer != w.entry {
			bad = append(bad, fmt.Sprintf("entry %v, want %s", sideName(c.Entry), w.entry))
		}
		switch {
		case len(w.peers) == 0 && c.Peer != nil:
			bad = append(bad, fmt.Sprintf("peer %s, want none", c.Peer.APIServer))
		case len(w.peers) > 0 && (c.Peer == nil || !slices.Contains(w.peers, c.Peer.APIServer)):
			bad = append(bad, fmt.Sprintf("peer %s, want one of %v", sideName(c.Peer), w.peers))
		case len(w.peers) > 0 && int(c.Peer.Code) != w.peerCode:
			bad = append(bad, fmt.Sprintf("peer code %d, want %d", c.Peer.Code, w.peerCode))
		}
		if c.Peer != nil {
			w.chainPeer = c.Peer.APIServer
			if w.peerReason != "" && (c.Peer.Reason != w.peerReason || c.Entry == nil || c.Entry.Reason != "") {
				bad = append(bad, fmt.Sprintf("peer reason %q, entry reason %q: want the status on the peer's side only (%s)", c.Peer.Reason, sideReason(c.Entry), w.peerReason))
			}
		}
		if w.entryPanic {
			if c.Entry == nil || !slices.Contains(c.Entry.Stages, "Panic") {
				bad = append(bad, "the entry did not record Panic")
			}
		} else if int(c.Code) != w.code || c.Entry != nil && int(c.Entry.Code) != w.code {
			bad = append(bad, fmt.Sprintf("code %d (entry %d), want %d", c.Code, sideCode(c.Entry), w.code))
		}
		if w.user != "" && (c.User != w.user || c.RealUser != w.realUser) {
			bad = append(bad, fmt.Sprintf("user %q real_user %q, want %q %q", c.User, c.RealUser, w.user, w.realUser))
		}
		if len(bad) > 0 {
			b, _ := json.MarshalIndent(c, "", "  ")
			t.Errorf("%s: chain API: %s\n%s", where, strings.Join(bad, "; "), b)
		} else {
			t.Logf("%s: %s %s -> %s %d %v", where, c.Class, sideName(c.Entry), sideName(c.Peer), c.Code, c.Findings)
		}
	}

	// The same through SQL: the chains table (latest version of each chain) ...
	ids := make([]string, len(r.wants))
	for i, w := range r.wants {
		ids[i] = w.auditID
	}
	type chainRow struct {
		AuditID        string   `json:"audit_id"`
		State          string   `json:"state"`
		Class          string   `json:"class"`
		Findings       []string `json:"findings"`
		Code           int      `json:"code"`
		UserName       string   `json:"user_name"`
		RealUser       string   `json:"real_user"`
		HasEntry       bool     `json:"has_entry"`
		EntryAPIServer string   `json:"entry_apiserver"`
		EntryCode      int      `json:"entry_code"`
		EntryStages    []string `json:"entry_stages"`
		HasPeer        bool     `json:"has_peer"`
		PeerAPIServer  string   `json:"peer_apiserver"`
		PeerCode       int      `json:"peer_code"`
		PeerReason     string   `json:"peer_reason"`
		Explanation    string   `json:"explanation"`
	}
	rows := map[string][]chainRow{}
	err := pollUntil(r.ctx, deadline, func() (bool, error) {
		var got []chainRow
		if err := r.pt.sql(r.ctx, `SELECT audit_id, state, class, findings, code, user_name, real_user, has_entry, entry_apiserver,
			entry_code, entry_stages, has_peer, peer_apiserver, peer_code, peer_reason, explanation
			FROM peertrail.chains FINAL WHERE audit_id IN (`+sqlStrings(t, ids)+`)`, &got); err != nil {
			return false, err
		}
		rows = map[string][]chainRow{}
		for _, g := range got {
			rows[g.AuditID] = append(rows[g.AuditID], g)
		}
		for _, id := range ids {
			if len(rows[id]) == 0 || rows[id][0].State != "final" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the store never held every chain final: %v", err)
	}
	for _, w := range r.wants {
		where := fmt.Sprintf("%s: %s [%s]", w.scenario, w.what, w.auditID)
		rs := rows[w.auditID]
		if len(rs) != 1 {
			t.Errorf("%s: %d rows in peertrail.chains FINAL, want 1", where, len(rs))
			continue
		}
		row := rs[0]
		var bad []string
		if row.Class != string(w.class) {
			bad = append(bad, fmt.Sprintf("class %s, want %s", row.Class, w.class))
		}
		if !sameFindings(toFindings(row.Findings), w.findings) {
			bad = append(bad, fmt.Sprintf("findings %v, want %v", row.Findings, w.findings))
		}
		if !row.HasEntry || row.EntryAPIServer != w.entry {
			bad = append(bad, fmt.Sprintf("entry %q (has_entry %v), want %s", row.EntryAPIServer, row.HasEntry, w.entry))
		}
		if row.HasPeer != (len(w.peers) > 0) || row.PeerAPIServer != w.chainPeer || row.HasPeer && row.PeerCode != w.peerCode {
			bad = append(bad, fmt.Sprintf("peer %q (has_peer %v, code %d), want %q (the chain API's) code %d", row.PeerAPIServer, row.HasPeer, row.PeerCode, w.chainPeer, w.peerCode))
		}
		if w.peerReason != "" && row.PeerReason != w.peerReason {
			bad = append(bad, fmt.Sprintf("peer_reason %q, want %q", row.PeerReason, w.peerReason))
		}
		if w.entryPanic {
			if !slices.Contains(row.EntryStages, "Panic") {
				bad = append(bad, fmt.Sprintf("entry stages %v lack Panic", row.EntryStages))
			}
		} else if row.Code != w.code || row.EntryCode != w.code {
			bad = append(bad, fmt.Sprintf("code %d (entry %d), want %d", row.Code, row.EntryCode, w.code))
		}
		if w.user != "" && (row.UserName != w.user || row.RealUser != w.realUser) {
			bad = append(bad, fmt.Sprintf("user %q real_user %q, want %q %q", row.UserName, row.RealUser, w.user, w.realUser))
		}
		if len(bad) > 0 {
			t.Errorf("%s: peertrail.chains: %s (%s)", where, strings.Join(bad, "; "), row.Explanation)
		}
	}

	// ... and the events table: who recorded each request, from where.
	type eventRow struct {
		AuditID   string   `json:"audit_id"`
		APIServer string   `json:"apiserver"`
		Stage     string   `json:"stage"`
		SourceIPs []string `json:"source_ips"`
		Code      int      `json:"code"`
	}
	var evs []eventRow
	if err := r.pt.sql(r.ctx, `SELECT DISTINCT audit_id, apiserver, stage, source_ips, code FROM peertrail.events
		WHERE audit_id IN (`+sqlStrings(t, ids)+`)`, &evs); err != nil {
		t.Fatal(err)
	}
	byID := map[string][]eventRow{}
	for _, e := range evs {
		byID[e.AuditID] = append(byID[e.AuditID], e)
	}
	for _, w := range r.wants {
		where := fmt.Sprintf("%s: %s [%s]", w.scenario, w.what, w.auditID)
		want := []string{w.entry}
		if w.chainPeer != "" {
			want = append(want, w.chainPeer)
		}
		got := map[string]bool{}
		for _, e := range byID[w.auditID] {
			got[e.APIServer] = true
			wantIPs := []string{ruClientIP}
			if e.APIServer != w.entry {
				wantIPs = append(wantIPs, ruServerIP)
			}
			if !slices.Equal(e.SourceIPs, wantIPs) {
				t.Errorf("%s: %s's %s event has sourceIPs %v, want %v", where, e.APIServer, e.Stage, e.SourceIPs, wantIPs)
			}
			if e.Stage == "ResponseComplete" && e.APIServer == w.entry && !w.entryPanic && e.Code != w.code {
				t.Errorf("%s: the entry's ResponseComplete event has code %d, want %d", where, e.Code, w.code)
			}
		}
		if !slices.Equal(slices.Sorted(maps.Keys(got)), sorted(want)) {
			t.Errorf("%s: peertrail.events holds records from %v, want %v", where, slices.Sorted(maps.Keys(got)), sorted(want))
		}
	}
	t.Logf("%d requests checked through the chain API and SQL", len(r.wants))
}

// checkImpersonationRecords: the entry's record keeps admin impersonating bob; the peer's
// shows bob only (test/testdata/real/README.md).
func (r *ruTest) checkImpersonationRecords(auditID string) {
	type row struct {
		APIServer        string `json:"apiserver"`
		UserName         string `json:"user_name"`
		ImpersonatedUser string `json:"impersonated_user"`
	}
	var rows []row
	if err := r.pt.sql(r.ctx, `SELECT DISTINCT apiserver, user_name, impersonated_user FROM peertrail.events
		WHERE audit_id = '`+auditID+`' AND stage = 'ResponseComplete' ORDER BY apiserver`, &rows); err != nil {
		r.t.Fatal(err)
	}
	want := []row{{ruA, "admin", "bob"}, {ruC, "bob", ""}}
	if !slices.Equal(rows, want) {
		r.t.Errorf("impersonated request %s in peertrail.events: %+v, want %+v", auditID, rows, want)
	}
}

// checkDiscovery: the apiservers' peer-discovery fetches of each other's /api and /apis are
// internal chains, for every apiserver (the fetched one is the chain's only side).
func (r *ruTest) checkDiscovery() {
	t := r.t
	cs, err := r.pt.chains(r.ctx, "class=internal&limit=10000")
	if err != nil {
		t.Fatal(err)
	}
	api := map[string]int{}
	for _, c := range cs {
		if c.Entry == nil || c.Peer != nil || c.User != "system:apiserver" || c.Resource != "" {
			b, _ := json.Marshal(c)
			t.Errorf("internal chain not a lone system:apiserver discovery fetch: %s", b)
			continue
		}
		api[c.Entry.APIServer]++
	}
	type row struct {
		APIServer string `json:"entry_apiserver"`
		N         int    `json:"n"`
		Bad       int    `json:"bad"`
	}
	var rows []row
	if err := r.pt.sql(r.ctx, `SELECT entry_apiserver, toInt32(count()) AS n,
		toInt32(countIf(user_name != 'system:apiserver' OR has_peer OR entry_user_agent != '' OR request_uri NOT IN ('/api', '/apis'))) AS bad
		FROM peertrail.chains FINAL WHERE class = 'internal' GROUP BY entry_apiserver ORDER BY entry_apiserver`, &rows); err != nil {
		t.Fatal(err)
	}
	store := map[string]int{}
	for _, rw := range rows {
		store[rw.APIServer] = rw.N
		if rw.Bad != 0 {
			t.Errorf("peertrail.chains: %d internal chains of %s are not discovery fetches", rw.Bad, rw.APIServer)
		}
	}
	for _, n := range []string{ruA, ruB, ruC} {
		if api[n] == 0 || store[n] == 0 {
			t.Errorf("no internal (peer discovery) chains of %s: chain API %v, store %v", n, api, store)
		}
	}
	t.Logf("internal chains (peer discovery): chain API %v, store %v", api, store)
}

// checkVersionsInStore: the store's version rollup shows kas-b's upgrade.
func (r *ruTest) checkVersionsInStore() {
	type row struct {
		APIServer string   `json:"apiserver"`
		Versions  []string `json:"versions"`
	}
	var rows []row
	if err := r.pt.sql(r.ctx, `SELECT apiserver, arraySort(groupUniqArray(version)) AS versions
		FROM peertrail.apiserver_versions_per_minute GROUP BY apiserver ORDER BY apiserver`, &rows); err != nil {
		r.t.Fatal(err)
	}
	want := []row{{ruA, []string{harness.OldVersion}}, {ruB, []string{harness.OldVersion, harness.NewVersion}}, {ruC, []string{harness.NewVersion}}}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		r.t.Errorf("peertrail.apiserver_versions_per_minute: %+v, want %+v", rows, want)
	}
}

// checkCapabilityHistory: `peertrail apiservers`, the capability history the store keeps, shows
// kas-b's upgrade: on v1.35.4 it forwarded podgroups (to kas-c) and never served them, on
// v1.36.3 it served them and never forwarded them, though its last forwards and its new
// process's first requests fall in the same minutes. --at a time of each epoch shows that
// epoch's line. kas-a only ever ran v1.35.4 and never served podgroups; kas-c only v1.36.3,
// with batch/v1 off, and never served jobs.
func (r *ruTest) checkCapabilityHistory(since, oldAt, newAt time.Time) {
	t := r.t
	history := func(args ...string) []chain.CapabilityRecord {
		t.Helper()
		out, err := r.pt.cli(r.ctx, append([]string{"apiservers", "-o", "json"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			History []chain.CapabilityRecord `json:"history"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("peertrail apiservers -o json: %v\n%s", err, out)
		}
		return doc.History
	}
	const pgGroup, pgVersion, pgResource = "scheduling.k8s.io", "v1alpha2", "podgroups"
	lines := func(recs []chain.CapabilityRecord) map[string]int64 {
		m := map[string]int64{}
		for _, rec := range recs {
			m[fmt.Sprintf("%s %s %s %s", rec.APIServer, rec.Version, rec.Role, chain.GVR{Group: rec.Group, Version: rec.APIVersion, Resource: rec.Resource})] += rec.Requests
		}
		return m
	}
	pg := chain.GVR{Group: pgGroup, Version: pgVersion, Resource: pgResource}.String()
	jobs := chain.GVR{Group: "batch", Version: "v1", Resource: "jobs"}.String()
	all := history("--since", since.Add(-time.Minute).UTC().Format(time.RFC3339))
	got := lines(all)
	versions := map[string]map[string]bool{}
	for _, rec := range all {
		if versions[rec.APIServer] == nil {
			versions[rec.APIServer] = map[string]bool{}
		}
		versions[rec.APIServer][rec.Version] = true
	}
	want := map[string][]string{ruA: {harness.OldVersion}, ruB: {harness.OldVersion, harness.NewVersion}, ruC: {harness.NewVersion}}
	for n, vs := range want {
		if fmt.Sprint(slices.Sorted(maps.Keys(versions[n]))) != fmt.Sprint(vs) {
			t.Errorf("peertrail apiservers: %s's lines are of versions %v, want %v", n, slices.Sorted(maps.Keys(versions[n])), vs)
		}
	}
	for _, l := range []string{
		ruB + " " + harness.OldVersion + " " + chain.RoleForwarded + " " + pg,
		ruB + " " + harness.NewVersion + " " + chain.RoleServed + " " + pg,
		ruC + " " + harness.NewVersion + " " + chain.RoleServed + " " + pg,
		ruA + " " + harness.OldVersion + " " + chain.RoleForwarded + " " + pg,
		ruC + " " + harness.NewVersion + " " + chain.RoleForwarded + " " + jobs,
	} {
		if got[l] <= 0 {
			t.Errorf("peertrail apiservers has no line %q", l)
		}
	}
	for _, l := range []string{
		ruB + " " + harness.OldVersion + " " + chain.RoleServed + " " + pg,
		ruB + " " + harness.NewVersion + " " + chain.RoleForwarded + " " + pg,
		ruA + " " + harness.OldVersion + " " + chain.RoleServed + " " + pg,
		ruC + " " + harness.NewVersion + " " + chain.RoleServed + " " + jobs,
	} {
		if got[l] != 0 {
			t.Errorf("peertrail apiservers says %q (%d requests)", l, got[l])
		}
	}
	// At a time of each of kas-b's epochs.
	for _, tc := range []struct {
		at            time.Time
		version, line string
	}{
		{oldAt, harness.OldVersion, ruB + " " + harness.OldVersion + " " + chain.RoleForwarded + " " + pg},
		{newAt, harness.NewVersion, ruB + " " + harness.NewVersion + " " + chain.RoleServed + " " + pg},
	} {
		at := lines(history("--at", tc.at.UTC().Format(time.RFC3339Nano)))
		if at[tc.line] <= 0 {
			t.Errorf("peertrail apiservers --at %s (kas-b on %s) lacks %q: %v", tc.at.UTC().Format(time.RFC3339), tc.version, tc.line, at)
		}
	}
	out, err := r.pt.cli(r.ctx, "apiservers", "--since", since.Add(-time.Minute).UTC().Format(time.RFC3339), "--resource", pgResource)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peertrail apiservers --resource podgroups:\n%s", out)
}

// checkIngest: every batch was accepted under its apiserver's own name.
func (r *ruTest) checkIngest() {
	text, err := r.pt.metrics(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	ss, err := promSamples(text, metrics.IngestRequestsTotal)
	if err != nil {
		r.t.Fatal(err)
	}
	ok := map[string]float64{}
	for _, s := range ss {
		if s.Labels[metrics.LabelCode] != "200" {
			r.t.Errorf("refused webhook batches: %+v", s)
			continue
		}
		ok[s.Labels[metrics.LabelAPIServer]] += s.Value
	}
	for _, n := range []string{ruA, ruB, ruC} {
		if ok[n] == 0 {
			r.t.Errorf("no accepted batch from %s: %v", n, ok)
		}
	}
	r.t.Logf("accepted webhook batches: %v", ok)
}

// compareRerouted compares, per entry apiserver, the chains peertrail classified proxied or
// proxy_failed with the apiserver's own apiserver_rerouted_request_total over the test (the
// sum over its processes), by status code.
//
// The counter is incremented after the proxy handler returns, with the status it wrote
// (k8s.io/apiserver pkg/util/peerproxy), for every call of the proxy. Known differences:
//   - the apiserver's own peer-discovery fetches (GET /api and /apis of every peer, as
//     system:apiserver, again at each identity lease event) go through the same proxy call
//     and are counted: never audited by the fetcher, they are the fetched server's internal
//     chains. 1.36 labels them group="", version="", resource=""; for 1.35 (label code only)
//     they are counted in its log, one "Proxying request for /api(s) from  to <peer>" line
//     each (checked against the 1.36 labels);
//   - a 503 "Error getting ip and port info of the remote server while proxying" is written
//     before any proxy call (1.36 counts it in apiserver_peer_proxy_errors_total
//     {type="endpoint_resolution"} instead); peertrail calls it proxy_failed;
//   - a forwarded watch the client cancelled: the reverse proxy aborts the handler with a
//     panic (the entry records stage Panic), so the increment is never reached; peertrail
//     calls it proxied. The log has its proxy call.
//
// Everything else must match exactly, per status code (and for kas-c, always 1.36, per
// group/resource).
func (r *ruTest) compareRerouted(cutoff time.Time) {
	t := r.t
	type row struct {
		Entry    string `json:"entry_apiserver"`
		Class    string `json:"class"`
		Code     int    `json:"ecode"`
		Group    string `json:"api_group"`
		Resource string `json:"resource"`
		N        int    `json:"n"`
		Panics   int    `json:"panics"`
		Unres    int    `json:"unresolved"`
	}
	var rows []row
	if err := pollUntil(r.ctx, 90*time.Second, func() (bool, error) {
		var open []struct {
			N int `json:"n"`
		}
		err := r.pt.sql(r.ctx, `SELECT toInt32(count()) AS n FROM peertrail.chains FINAL
			WHERE state != 'final' AND request_time <= `+sqlTime(cutoff), &open)
		return err == nil && len(open) == 1 && open[0].N == 0, err
	}); err != nil {
		t.Fatalf("chains of requests before the last scrape still open in the store: %v", err)
	}
	if err := r.pt.sql(r.ctx, `SELECT entry_apiserver, class, entry_code AS ecode, api_group, resource, toInt32(count()) AS n,
		toInt32(countIf(has(entry_stages, 'Panic'))) AS panics,
		toInt32(countIf(position(entry_message, '`+ruUnresolved+`') > 0)) AS unresolved
		FROM peertrail.chains FINAL
		WHERE class IN ('proxied', 'proxy_failed') AND request_time <= `+sqlTime(cutoff)+`
		GROUP BY entry_apiserver, class, ecode, api_group, resource ORDER BY entry_apiserver, class, ecode, resource`, &rows); err != nil {
		t.Fatal(err)
	}
	ptCode := map[string]map[string]int{} // entry -> code -> chains the counter counts
	ptAttempts := map[string]int{}        // entry -> chains that went through the proxy call
	ptRes := map[string]int{}             // kas-c: "code group/resource" -> chains
	chainsBy := map[string]int{}          // class/entry -> chains (for peertrail's metric)
	excluded := map[string]string{}
	for _, rw := range rows {
		chainsBy[rw.Class+"/"+rw.Entry] += rw.N
		ptAttempts[rw.Entry] += rw.N - rw.Unres
		if rw.Panics+rw.Unres > 0 {
			excluded[rw.Entry] += fmt.Sprintf(" %d %s with entry code %d (%d Panic, %d unresolved);", rw.Panics+rw.Unres, rw.Class, rw.Code, rw.Panics, rw.Unres)
		}
		n := rw.N - rw.Panics - rw.Unres
		if n == 0 {
			continue
		}
		if ptCode[rw.Entry] == nil {
			ptCode[rw.Entry] = map[string]int{}
		}
		ptCode[rw.Entry][fmt.Sprint(rw.Code)] += n
		if rw.Entry == ruC {
			ptRes[fmt.Sprintf("%d %s/%s", rw.Code, rw.Group, rw.Resource)] += n
		}
	}

	kasCode := map[string]map[string]int{} // server -> code -> counted, discovery fetches taken out
	kasRes := map[string]int{}
	logFwd := map[string]int{}
	for _, p := range r.procs {
		if kasCode[p.server] == nil {
			kasCode[p.server] = map[string]int{}
		}
		logFwd[p.server] += p.forwarded
		// Discovery fetches by status, from the log.
		disc := map[string]int{"200": p.discovery}
		for code, n := range p.discoveryFailed {
			disc[code] += n
			disc["200"] -= n
		}
		labelDisc := map[string]int{}
		for _, s := range p.rerouted {
			names := labelNames(s)
			want := map[string]string{harness.OldVersion: "code", harness.NewVersion: "code,group,resource,version"}[p.version]
			if names != want {
				t.Errorf("%s (%s): apiserver_rerouted_request_total labels {%s}, want {%s}", p.server, p.version, names, want)
			}
			code := s.Labels["code"]
			kasCode[p.server][code] += int(s.Value)
			if p.version == harness.NewVersion && s.Labels["group"] == "" && s.Labels["version"] == "" && s.Labels["resource"] == "" {
				labelDisc[code] += int(s.Value)
			} else if p.server == ruC {
				kasRes[fmt.Sprintf("%s %s/%s", code, s.Labels["group"], s.Labels["resource"])] += int(s.Value)
			}
		}
		if p.version == harness.NewVersion && fmt.Sprint(nonZero(labelDisc)) != fmt.Sprint(nonZero(disc)) {
			t.Errorf("%s (%s, %s): discovery fetches by the counter's empty group/version/resource %v, by its log %v", p.server, p.version, p.log, labelDisc, disc)
		}
		for code, n := range disc {
			kasCode[p.server][code] -= n
		}
	}
	for _, n := range []string{ruA, ruB, ruC} {
		got, want := nonZero(ptCode[n]), nonZero(kasCode[n])
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: peertrail's proxied+proxy_failed chains by code %v (not counted by the apiserver:%s), apiserver_rerouted_request_total without its discovery fetches %v", n, got, excluded[n], want)
			r.dumpEntryChains(n, cutoff)
		} else {
			t.Logf("%s: apiserver_rerouted_request_total without its discovery fetches, by code %v = peertrail's proxied+proxy_failed chains (not counted by the apiserver:%s)", n, want, excluded[n])
		}
		// Its log names every proxy call of a client request, the cancelled watch's included.
		if logFwd[n] != ptAttempts[n] {
			t.Errorf("%s: %d forwarded requests in its log, peertrail %d proxied+proxy_failed chains that reached the proxy", n, logFwd[n], ptAttempts[n])
		}
	}
	if fmt.Sprint(ptRes) != fmt.Sprint(nonZero(kasRes)) {
		t.Errorf("%s by code group/resource: peertrail %v, apiserver_rerouted_request_total %v", ruC, ptRes, kasRes)
	}

	r.checkDiscoveryCounts(cutoff)

	// peertrail's own counter of final chains agrees with the store (counted at a chain's
	// first finalisation; a reclassification is counted apart).
	text, err := r.pt.metrics(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := promSamples(text, metrics.CorrelateChainsTotal)
	if err != nil {
		t.Fatal(err)
	}
	byMetric := map[string]int{}
	for _, s := range ss {
		if c := s.Labels[metrics.LabelClass]; c == "proxied" || c == "proxy_failed" {
			byMetric[c+"/"+s.Labels[metrics.LabelEntryAPIServer]] += int(s.Value)
		}
	}
	recl, _ := promSamples(text, metrics.CorrelateReclassifiedTotal)
	if fmt.Sprint(byMetric) != fmt.Sprint(chainsBy) || len(recl) > 0 {
		t.Errorf("%s %v, peertrail.chains %v (reclassified %v)", metrics.CorrelateChainsTotal, byMetric, chainsBy, recl)
	}
}

// ruWindow is a stretch of time in which server was going down.
type ruWindow struct {
	server   string
	from, to time.Time
}

var ruKlogTime = regexp.MustCompile(`^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})`)

// checkDiscoveryCounts: the fetched side of the peer-discovery fetches are peertrail's
// internal chains. Every audited GET /api or /apis by system:apiserver without a user agent
// must be internal, and their number is bounded by the fetchers' logs (one line per fetch,
// written before it is sent, with its time and target):
//   - at most the fetches logged up to the cutoff (a fetch is received after it is logged);
//   - at least those logged a second before the cutoff, less the failed ones and those to a
//     server that was going down (a SIGKILL loses up to a second of its audit events, and a
//     graceful shutdown may drop its last ones: test/testdata/real/README.md).
func (r *ruTest) checkDiscoveryCounts(cutoff time.Time) {
	t := r.t
	var rows []struct {
		Class string `json:"class"`
		N     int    `json:"n"`
	}
	if err := r.pt.sql(r.ctx, `SELECT class, toInt32(count()) AS n FROM peertrail.chains FINAL
		WHERE user_name = 'system:apiserver' AND request_uri IN ('/api', '/apis') AND entry_user_agent = '' AND request_time <= `+sqlTime(cutoff)+`
		GROUP BY class`, &rows); err != nil {
		t.Fatal(err)
	}
	internal := 0
	for _, rw := range rows {
		if rw.Class != string(chain.ClassInternal) {
			t.Errorf("%d peer-discovery fetches classified %s", rw.N, rw.Class)
		}
		internal += rw.N
	}
	port := map[string]string{}
	for _, s := range r.c.Servers() {
		port[fmt.Sprintf("127.0.0.1:%d", s.Port)] = s.Name
	}
	upper, lower, failed, atRisk := 0, 0, 0, 0
	for _, s := range r.c.Servers() {
		for _, f := range s.LogFiles() {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				if ruDiscFail.MatchString(line) {
					failed++
					continue
				}
				m := ruProxyLine.FindStringSubmatch(line)
				tm := ruKlogTime.FindStringSubmatch(line)
				if m == nil || tm == nil || (m[1] != "/api" && m[1] != "/apis") || m[2] != "" {
					continue
				}
				at, err := time.ParseInLocation("0102 15:04:05.000000", tm[1], time.Local)
				if err != nil {
					t.Fatal(err)
				}
				at = at.AddDate(cutoff.Year(), 0, 0)
				if at.After(cutoff) {
					continue
				}
				upper++
				if at.After(cutoff.Add(-time.Second)) {
					continue
				}
				lower++
				target := port[m[3]]
				if target == "" {
					t.Errorf("%s: a discovery fetch to %s, no server of the test", f, m[3])
				}
				for _, w := range r.unstable {
					if w.server == target && !at.Before(w.from.Add(-time.Second)) && !at.After(w.to) {
						atRisk++
						break
					}
				}
			}
		}
	}
	lower -= failed + atRisk
	t.Logf("peer-discovery fetches: %d logged by the fetchers up to the cutoff (%d failed, %d to a server going down), %d internal chains", upper, failed, atRisk, internal)
	if internal > upper || internal < lower {
		t.Errorf("peer-discovery fetches: %d internal chains, want between %d and %d (the fetchers' logs)", internal, lower, upper)
	}
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// dumpEntryChains logs every chain with entry server that is not local or internal, for
// explaining a count mismatch.
func (r *ruTest) dumpEntryChains(server string, cutoff time.Time) {
	var rows []map[string]any
	if err := r.pt.sql(r.ctx, `SELECT audit_id, class, findings, verb, request_uri, user_name, entry_code, entry_stages, entry_message,
		peer_apiserver, peer_code, entry_source_ips, entry_user_agent, explanation FROM peertrail.chains FINAL
		WHERE (entry_apiserver = '`+server+`' OR NOT has_entry) AND class NOT IN ('local', 'internal') AND request_time <= `+sqlTime(cutoff)+`
		ORDER BY request_time`, &rows); err != nil {
		r.t.Log(err)
		return
	}
	for _, rw := range rows {
		b, _ := json.Marshal(rw)
		r.t.Logf("  %s", b)
	}
}

func sqlTime(t time.Time) string {
	return "toDateTime64('" + t.UTC().Format("2006-01-02 15:04:05.000000") + "', 6, 'UTC')"
}

func sameFindings(a, b []chain.Finding) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func toFindings(s []string) []chain.Finding {
	out := make([]chain.Finding, len(s))
	for i, f := range s {
		out[i] = chain.Finding(f)
	}
	return out
}

func sideName(s *chain.Side) string {
	if s == nil {
		return "none"
	}
	return s.APIServer
}

func sideReason(s *chain.Side) string {
	if s == nil {
		return ""
	}
	return s.Reason
}

func sideCode(s *chain.Side) int32 {
	if s == nil {
		return 0
	}
	return s.Code
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return truncate(s, 120)
}

// TestUpgradeRenamedBinaries: apiservers whose binary is not called kube-apiserver, as a
// distribution's package or a side-by-side install names it. Two real apiservers run as
// "kube-apiserver-1.35.4" (so their loopback user agent is "kube-apiserver-1.35.4/v1.35.4
// ..."); kas-b is restarted into the same version, then replaced by v1.36.3 run as
// "kube-apiserver-1.36". peertrail must learn every version from the apiservers' own calls,
// see the restart as a new process though the version stayed, keep the version history in
// /api/v1/apiservers, and compare the minors in the gate's version-skew check.
//
//	go test ./test/e2e -run TestUpgradeRenamedBinaries -count=1 -v
func TestUpgradeRenamedBinaries(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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
	old, err := harness.RenamedBinary(filepath.Join(dir, "bin"), harness.OldVersion, "kube-apiserver-1.35.4")
	if err != nil {
		t.Fatal(err)
	}
	next, err := harness.RenamedBinary(filepath.Join(dir, "bin"), harness.NewVersion, "kube-apiserver-1.36")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{ruA, ruB}
	var cfg strings.Builder
	cfg.WriteString("apiservers:\n")
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
		// The audit policy users deploy: it keeps the apiservers' own calls at Metadata.
		AuditPolicyFile: filepath.Join(depRepoRoot(t), "deploy/control-plane/audit-policy.yaml"),
		Servers: []harness.ServerConfig{
			{Name: ruA, Version: harness.OldVersion, Binary: old, ExtraFlags: webhookFlags[ruA]},
			{Name: ruB, Version: harness.OldVersion, Binary: old, ExtraFlags: webhookFlags[ruB]},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane ready after %s", time.Since(start).Round(time.Millisecond))

	// history waits until /api/v1/apiservers shows each apiserver's version and causes of its
	// version history, and returns what it showed.
	history := func(step string, want map[string][]string) map[string]chain.APIServerView {
		t.Helper()
		var last map[string]chain.APIServerView
		err := pollUntil(ctx, 90*time.Second, func() (bool, error) {
			if err := pt.exited(); err != nil {
				return false, err
			}
			v, err := pt.apiservers(ctx)
			if err != nil {
				return false, nil
			}
			last = v
			for n, w := range want {
				h := v[n].History
				if v[n].Version != w[0] || len(h) != len(w)-1 {
					return false, nil
				}
				for i, cause := range w[1:] {
					if h[i].Cause != cause || h[i].Process == "" {
						return false, nil
					}
				}
			}
			return true, nil
		})
		if err != nil {
			b, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("%s: /api/v1/apiservers never showed %v (version, then the causes of the history): %v\n%s", step, want, err, b)
		}
		return last
	}
	skew := func(step string, value float64, detail string) {
		t.Helper()
		var v struct {
			Checks []struct {
				Name   string  `json:"name"`
				OK     bool    `json:"ok"`
				Value  float64 `json:"value"`
				Detail string  `json:"detail"`
			} `json:"checks"`
		}
		if code, err := pt.getJSON(ctx, "/api/v1/gate", &v); err != nil || code != http.StatusOK {
			t.Fatalf("%s: GET /api/v1/gate: %d %v", step, code, err)
		}
		for _, c := range v.Checks {
			if c.Name == metrics.CheckVersionSkew {
				if !c.OK || c.Value != value || !strings.Contains(c.Detail, detail) {
					t.Errorf("%s: version-skew check %+v, want ok, value %v, detail containing %q", step, c, value, detail)
				}
				return
			}
		}
		t.Errorf("%s: no %s check in the gate's verdict", step, metrics.CheckVersionSkew)
	}

	first := history("start", map[string][]string{
		ruA: {harness.OldVersion, chain.CauseFirstSeen},
		ruB: {harness.OldVersion, chain.CauseFirstSeen},
	})
	skew("start", 0, "versions kas-a=v1.35.4, kas-b=v1.35.4: 0 minor apart")

	// kas-b restarts into the same version: a new process, told by its new loopback identity.
	if err := c.StopGraceful(ruB); err != nil {
		t.Fatal(err)
	}
	if err := c.StartServer(ctx, ruB, ""); err != nil {
		t.Fatal(err)
	}
	restarted := history("restart", map[string][]string{
		ruA: {harness.OldVersion, chain.CauseFirstSeen},
		ruB: {harness.OldVersion, chain.CauseFirstSeen, chain.CauseRestart},
	})
	if h := restarted[ruB].History; h[1].Version != harness.OldVersion || h[1].Process == h[0].Process || !h[1].Since.After(h[0].Since) {
		t.Errorf("kas-b's restart: %+v", h)
	}
	if restarted[ruA].History[0] != first[ruA].History[0] {
		t.Errorf("kas-a's process changed though it never restarted: %+v, then %+v", first[ruA].History, restarted[ruA].History)
	}

	// The upgrade step: kas-b runs v1.36.3 as kube-apiserver-1.36.
	if err := c.ReplaceServerWith(ctx, ruB, harness.ServerConfig{Version: harness.NewVersion, Binary: next, ExtraFlags: webhookFlags[ruB]}); err != nil {
		t.Fatal(err)
	}
	upgraded := history("upgrade", map[string][]string{
		ruA: {harness.OldVersion, chain.CauseFirstSeen},
		ruB: {harness.NewVersion, chain.CauseFirstSeen, chain.CauseRestart, chain.CauseVersionChange},
	})
	if h := upgraded[ruB].History; h[2].Version != harness.NewVersion || h[2].Process == h[1].Process {
		t.Errorf("kas-b's upgrade: %+v", h)
	}
	skew("upgrade", 1, "versions kas-a=v1.35.4, kas-b=v1.36.3: 1 minor apart")
	if b, err := json.Marshal(upgraded[ruB].History); err == nil {
		t.Logf("kas-b's version history: %s", b)
	}

	// What the apiservers really sent: their own calls named the renamed binaries (the chains
	// in memory hold every record of this short test).
	seen := map[string]bool{}
	for _, n := range names {
		chains, err := pt.chains(ctx, "apiserver="+n+"&limit=10000")
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			for _, s := range append([]*chain.Side{ch.Entry, ch.Peer}, ch.Others...) {
				if s != nil && s.APIServer == n && s.User == "system:apiserver" && slices.Contains(s.Groups, "system:masters") {
					prefix, _, _ := strings.Cut(s.UserAgent, " ")
					seen[n+" "+prefix] = true
				}
			}
		}
	}
	for _, want := range []string{"kas-a kube-apiserver-1.35.4/v1.35.4", "kas-b kube-apiserver-1.35.4/v1.35.4", "kas-b kube-apiserver-1.36/v1.36.3"} {
		if !seen[want] {
			t.Errorf("no loopback user agent %q in the chains: %v", want, slices.Sorted(maps.Keys(seen)))
		}
	}
	text, err := pt.metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		metrics.APIServerVersionInfo + `{apiserver="kas-a",version="v1.35.4"} 1`,
		metrics.APIServerVersionInfo + `{apiserver="kas-b",version="v1.36.3"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, metrics.APIServerVersionUnparseableTotal+"{") {
		t.Errorf("a real apiserver's version reported unparseable:\n%s", grepLines(text, metrics.APIServerVersionUnparseableTotal))
	}

	// The capability history (the store's) shows kas-b's two versions one after the other, each
	// with what it served: GET /api/v1/apiservers?since=, and ?at= a moment of each epoch.
	var capHistory []chain.CapabilityRecord
	var oldEnd, newStart time.Time
	err = pollUntil(ctx, 90*time.Second, func() (bool, error) {
		var doc struct {
			History []chain.CapabilityRecord `json:"history"`
		}
		if code, err := pt.getJSON(ctx, "/api/v1/apiservers?since=1h", &doc); err != nil || code != http.StatusOK {
			return false, nil
		}
		capHistory = doc.History
		oldEnd, newStart = time.Time{}, time.Time{}
		for _, r := range doc.History {
			if r.APIServer != ruB || r.Role != chain.RoleServed {
				continue
			}
			switch r.Version {
			case harness.OldVersion:
				if r.Until.After(oldEnd) {
					oldEnd = r.Until
				}
			case harness.NewVersion:
				if newStart.IsZero() || r.From.Before(newStart) {
					newStart = r.From
				}
			}
		}
		return !oldEnd.IsZero() && !newStart.IsZero(), nil
	})
	if err != nil {
		t.Fatalf("the capability history never showed kas-b serving on both %s and %s: %v\n%+v", harness.OldVersion, harness.NewVersion, err, capHistory)
	}
	// The history's lines are by the minute: only the minute of the upgrade may hold both.
	change := upgraded[ruB].History[2].Since
	if minute := change.Truncate(time.Minute); oldEnd.After(minute.Add(time.Minute)) || newStart.Before(minute) {
		t.Errorf("kas-b's epochs overlap beyond the minute of its upgrade (%s): %s until %s, %s from %s",
			change, harness.OldVersion, oldEnd, harness.NewVersion, newStart)
	}
	// ?at= is exact to the second on either side of the upgrade (the version history tells it).
	oldAt := oldEnd
	if change.Before(oldAt) {
		oldAt = change
	}
	newAt := newStart
	if change.After(newAt) {
		newAt = change
	}
	for _, at := range []struct {
		t       time.Time
		version string
	}{{oldAt.Add(-time.Second), harness.OldVersion}, {newAt.Add(time.Second), harness.NewVersion}} {
		var doc struct {
			History []chain.CapabilityRecord `json:"history"`
		}
		if code, err := pt.getJSON(ctx, "/api/v1/apiservers?at="+url.QueryEscape(at.t.Format(time.RFC3339Nano)), &doc); err != nil || code != http.StatusOK {
			t.Fatalf("GET /api/v1/apiservers?at=: %d %v", code, err)
		}
		n := 0
		for _, r := range doc.History {
			if r.APIServer == ruB {
				n++
				if r.Version != at.version {
					t.Errorf("?at=%s: kas-b's record of %s, want %s: %+v", at.t, r.Version, at.version, r)
				}
			}
		}
		if n == 0 {
			t.Errorf("?at=%s: nothing of kas-b", at.t)
		}
	}
	t.Logf("TestUpgradeRenamedBinaries took %s", time.Since(start).Round(time.Millisecond))
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
