package e2e

// TestCaptureRealMVP runs a real mixed-version HA control plane (two
// kube-apiserver v1.35.4, one v1.36.3, one etcd), drives Mixed Version Proxy
// scenarios through it, records every audit webhook POST with a trivial HTTPS
// receiver, and checks what really happened (client status codes, which
// apiservers audited each request).
//
// With -update-real-fixtures it also (re)writes test/testdata/real/:
//
//	scripts/build-kube.sh
//	go test ./test/e2e -run TestCaptureRealMVP -count=1 -v -update-real-fixtures
//
// Without the flag nothing in the repository is touched.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/test/e2e/harness"
)

var updateRealFixtures = flag.Bool("update-real-fixtures", false, "rewrite test/testdata/real from a real capture")

const (
	kasA = "kas-a" // v1.35.4, MVP gate on
	kasB = "kas-b" // v1.35.4, MVP gate on
	kasC = "kas-c" // v1.36.3, serves scheduling.k8s.io/v1alpha2 podgroups, batch/v1 disabled

	// clientIP is the scenario clients' source address: distinct from the
	// apiservers' 127.0.0.1, so proxied requests show sourceIPs [client, entry].
	clientIP = "127.0.0.2"

	captureNS = "capture"
	pgPath    = "/apis/scheduling.k8s.io/v1alpha2/namespaces/" + captureNS + "/podgroups"
	jobPath   = "/apis/batch/v1/namespaces/" + captureNS + "/jobs"
)

// Expectation vocabulary of labels.json.
const (
	expProxied       = "proxied"             // entry forwarded it to a peer that served it
	expLocal         = "local"               // the entry served it itself
	expDenied        = "denied"              // 403 at the entry, never proxied
	expLocal404      = "local_404"           // nobody serves the resource: honest 404 from the entry
	expMisleading404 = "misleading_404"      // a peer served it until it stopped gracefully: 404 from the entry
	expPeerUnreach   = "peer_unreachable"    // peer killed: 503 from the entry
	expPeerDiscovery = "peer_discovery"      // an apiserver fetching a peer's /api or /apis
	expProxiedKilled = "proxied_peer_killed" // proxied, then the peer was SIGKILLed: its record may be lost
)

// Label is one request of interest, as the client saw it and as the audit
// streams recorded it.
type Label struct {
	AuditID          string    `json:"auditID"`
	Expect           string    `json:"expect"`
	Entry            string    `json:"entry,omitempty"`
	Peer             string    `json:"peer,omitempty"`
	Verb             string    `json:"verb"`
	Resource         string    `json:"resource,omitempty"`
	Method           string    `json:"method,omitempty"`
	Path             string    `json:"path"`
	User             string    `json:"user,omitempty"`
	ImpersonatedUser string    `json:"impersonatedUser,omitempty"`
	ClientAuditID    bool      `json:"clientSetAuditID,omitempty"`
	Code             int       `json:"code"`
	ContentType      string    `json:"contentType,omitempty"`
	ClientBody       string    `json:"clientBody,omitempty"`
	ClientAuditIDs   []string  `json:"clientAuditIDHeaders,omitempty"`
	RepeatedHeaders  []string  `json:"repeatedResponseHeaders,omitempty"`
	ObservedOn       []string  `json:"observedOn"`
	SentAt           time.Time `json:"sentAt,omitzero"`
	Note             string    `json:"note,omitempty"`

	// peers allowed for a proxied request (one of them must have served it).
	peers []string
	// must be audited on exactly these servers (nil: no check).
	wantOn []string
}

type scenario struct {
	Name        string
	Description string
	start       time.Time
	end         time.Time
	labels      []*Label
	actions     []action
	versions    map[string]string
	// extra events of interest chosen from the streams (discovery).
	pick func(e harness.Event) *Label
}

// action is something the harness did to the cluster during a scenario.
type action struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

type capture struct {
	t        *testing.T
	ctx      context.Context
	c        *harness.Cluster
	rec      *harness.Recorder
	clients  map[string]*http.Client // key: server + "/" + identity
	cur      *scenario
	all      []*scenario
	versions map[string]string
}

func TestCaptureRealMVP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := harness.TempDir(t)
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := harness.StartRecorder(pki.ServerCA, filepath.Join(dir, "posts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })

	c, err := harness.Start(ctx, t, harness.Config{
		Dir: dir,
		PKI: pki,
		Servers: []harness.ServerConfig{
			{Name: kasA, Version: harness.OldVersion},
			{Name: kasB, Version: harness.OldVersion},
			{Name: kasC, Version: harness.NewVersion,
				FeatureGates:  map[string]bool{"GenericWorkload": true},
				RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true", "batch/v1": "false"}},
		},
		Webhook: &harness.WebhookConfig{URL: rec.WebhookURL, BatchMaxWait: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{t: t, ctx: ctx, c: c, rec: rec, clients: map[string]*http.Client{},
		versions: map[string]string{kasA: harness.OldVersion, kasB: harness.OldVersion, kasC: harness.NewVersion}}
	startAll := time.Now().Add(-time.Minute)

	// Setup: namespace and RBAC for bob (group team-pg); alice gets nothing.
	cp.must(cp.do(kasA, "admin", "POST", "/api/v1/namespaces", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+captureNS+`"}}`, nil), 201)
	cp.must(cp.do(kasA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"pg-editor"},"rules":[{"apiGroups":["scheduling.k8s.io"],"resources":["podgroups"],"verbs":["*"]},{"apiGroups":["batch"],"resources":["jobs"],"verbs":["get","list","watch"]}]}`, nil), 201)
	cp.must(cp.do(kasA, "admin", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"pg-editor-team-pg"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"pg-editor"},"subjects":[{"kind":"Group","apiGroup":"rbac.authorization.k8s.io","name":"team-pg"}]}`, nil), 201)

	// Peer discovery must have synced in both directions before proxying works.
	for _, e := range []string{kasA, kasB} {
		if err := c.WaitPeerProxy(ctx, e, pgPath); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitPeerProxy(ctx, kasC, jobPath); err != nil {
		t.Fatal(err)
	}

	// 1. Peer discovery and client discovery.
	cp.begin("discovery", "The apiservers' own peer-discovery traffic (system:apiserver fetching a peer's /api and /apis, no userAgent) from startup, plus client discovery through a 1.35 entry (aggregated discovery includes the peer's groups).")
	cp.cur.start = startAll
	cp.cur.pick = func(e harness.Event) *Label {
		if e.User.Username == "system:apiserver" && (e.RequestURI == "/api" || e.RequestURI == "/apis") && e.UserAgent == "" {
			return &Label{AuditID: e.AuditID, Expect: expPeerDiscovery, Verb: e.Verb, Path: e.RequestURI,
				User: e.User.Username, Note: "fetched from " + e.Server + " by a peer apiserver; the fetching server is not named"}
		}
		return nil
	}
	r := cp.do(kasA, "admin", "GET", "/apis", "", map[string]string{"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
	cp.label(r, expLocal, "", "aggregated discovery through a 1.35 entry; contains scheduling.k8s.io/v1alpha2 from the peer: "+fmt.Sprint(strings.Contains(r.body, "v1alpha2")))
	r = cp.do(kasA, "admin", "GET", "/apis", "", nil)
	cp.label(r, expLocal, "", "legacy APIGroupList through a 1.35 entry")
	r = cp.do(kasC, "admin", "GET", "/apis", "", map[string]string{"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
	cp.label(r, expLocal, "", "aggregated discovery through the 1.36 entry")
	cp.finish()

	// 2. old -> new: 1.35 entries proxy podgroups to the 1.36 peer.
	cp.begin("proxied-old-to-new", "A 1.35 entry (kas-a, kas-b) forwards scheduling.k8s.io/v1alpha2 podgroups, served only by the 1.36 kas-c: list, create, get, watch (server timeout and client cancel), get of a missing object (404 from the peer), delete, and one request with a client-chosen Audit-ID.")
	pg := func(name string) string {
		return `{"apiVersion":"scheduling.k8s.io/v1alpha2","kind":"PodGroup","metadata":{"name":"` + name + `","labels":{"app":"capture"}},"spec":{"schedulingPolicy":{"gang":{"minCount":2}}}}`
	}
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath, "", nil), kasC, 200, "")
	cp.proxied(cp.do(kasA, "admin", "POST", pgPath, pg("pg-1"), nil), kasC, 201, "create: the entry record has no objectRef.name")
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath+"/pg-1", "", nil), kasC, 200, "")
	cp.proxied(cp.do(kasB, "admin", "GET", pgPath+"?labelSelector=app%3Dcapture&limit=10", "", nil), kasC, 200, "query string: the peer re-encodes it with sorted keys")
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath+"?watch=true&timeoutSeconds=2", "", nil), kasC, 200, "watch ended by the server after timeoutSeconds=2")
	cp.proxied(cp.watchCancel(kasB, "admin", pgPath+"?watch=1"), kasC, 200, "watch cancelled by the client after the first event: the entry records stage Panic (500, net/http: abort Handler), the peer ResponseComplete 200")
	cp.local(cp.watchCancel(kasC, "admin", pgPath+"?watch=1"), expLocal, 200, "control: the same client-cancelled watch served locally by kas-c")
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath+"/does-not-exist", "", nil), kasC, 404, "404 NotFound from the peer: the resource is served, the object is missing")
	cp.proxied(cp.do(kasA, "admin", "POST", pgPath, pg("pg-2"), map[string]string{"Audit-ID": "capture-client-chosen-audit-id-1"}), kasC, 201, "the client set Audit-ID itself; both records carry it")
	cp.proxied(cp.do(kasB, "admin", "DELETE", pgPath+"/pg-2", "", nil), kasC, 200, "")
	cp.finish()

	// 3. new -> old: the 1.36 entry (batch/v1 disabled) proxies jobs to a 1.35 peer.
	cp.begin("proxied-new-to-old", "The 1.36 kas-c runs with --runtime-config=batch/v1=false and forwards batch/v1 jobs to one of the 1.35 peers (kas-a or kas-b, picked by the entry).")
	job := `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"job-1"},"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.invalid/busybox"}]}}}}`
	cp.proxied(cp.do(kasC, "admin", "GET", jobPath, "", nil), "", 200, "")
	cp.proxied(cp.do(kasC, "admin", "POST", jobPath, job, nil), "", 201, "")
	cp.proxied(cp.do(kasC, "admin", "GET", jobPath+"/job-1", "", nil), "", 200, "")
	cp.proxied(cp.do(kasC, "admin", "GET", jobPath+"/missing-job", "", nil), "", 404, "")
	cp.proxied(cp.do(kasC, "bob", "GET", jobPath, "", nil), "", 200, "user bob (group team-pg) by client certificate")
	cp.finish()

	// 4. Denied at the entry.
	cp.begin("denied", "alice (client cert, group team-alpha, no RBAC) asks for resources only a peer serves: the entry's authorizer says 403 and nothing is proxied.")
	cp.local(cp.do(kasA, "alice", "GET", pgPath, "", nil), expDenied, 403, "")
	cp.local(cp.do(kasB, "alice", "POST", pgPath, pg("pg-alice"), nil), expDenied, 403, "")
	cp.local(cp.do(kasC, "alice", "GET", jobPath, "", nil), expDenied, 403, "new->old direction")
	cp.finish()

	// 5. Users and impersonation through the proxy.
	cp.begin("impersonation", "A proxied request by bob (client cert) and by admin impersonating bob: the peer's record shows user bob and no impersonatedUser; only the entry knows admin acted. admin impersonating alice is denied at the entry.")
	cp.proxied(cp.do(kasA, "bob", "GET", pgPath, "", nil), kasC, 200, "bob's own client certificate")
	cp.proxied(cp.do(kasA, "bob", "POST", pgPath, pg("pg-bob"), nil), kasC, 201, "")
	r = cp.do(kasA, "admin-as-bob", "GET", pgPath+"/pg-bob", "", nil)
	cp.proxied(r, kasC, 200, "admin impersonating bob (groups team-pg)")
	r = cp.do(kasB, "admin-as-bob", "DELETE", pgPath+"/pg-bob", "", nil)
	cp.proxied(r, kasC, 200, "admin impersonating bob (groups team-pg)")
	cp.local(cp.do(kasA, "admin-as-alice", "GET", pgPath, "", nil), expDenied, 403, "admin impersonating alice (no RBAC)")
	cp.finish()

	// 6. Nobody serves it.
	cp.begin("not-served", "Requests the entry answers itself with 404: a group nobody serves, a version nobody serves, a missing object of a locally served resource, and a client that sends the loop marker x-kubernetes-peer-proxied itself.")
	cp.local(cp.do(kasA, "admin", "GET", "/apis/widgets.example.com/v1/namespaces/"+captureNS+"/widgets", "", nil), expLocal404, 404, "group nobody serves")
	cp.local(cp.do(kasB, "admin", "GET", "/apis/scheduling.k8s.io/v1alpha9/namespaces/"+captureNS+"/podgroups", "", nil), expLocal404, 404, "version nobody serves")
	cp.local(cp.do(kasC, "admin", "GET", "/apis/widgets.example.com/v1/widgets", "", nil), expLocal404, 404, "group nobody serves, 1.36 entry")
	cp.local(cp.do(kasA, "admin", "GET", "/api/v1/namespaces/"+captureNS+"/configmaps/missing", "", nil), expLocal, 404, "served locally, object missing")
	cp.local(cp.do(kasA, "admin", "GET", pgPath, "", map[string]string{"x-kubernetes-peer-proxied": "true"}), expLocal404, 404, "client sent x-kubernetes-peer-proxied: true, so the entry did not proxy a resource its peer serves")
	cp.finish()

	// 7. Rolling-upgrade step: kas-b 1.35.4 -> 1.36.3 (same hostname and port).
	cp.begin("rolling-upgrade-step", "kas-b is stopped (SIGTERM) and started again as v1.36.3 with the same hostname (identity) and port, then proxies podgroups to kas-c as a 1.36 entry. kas-b's own loopback requests now carry userAgent kube-apiserver/v1.36.3.")
	cp.act("ReplaceServer kas-b v1.36.3 (SIGTERM, wait for exit, start v1.36.3, wait for /readyz)", func() error { return c.ReplaceServer(ctx, kasB, harness.NewVersion) })
	cp.cur.versions[kasB] = harness.OldVersion + " until the ReplaceServer action, then " + harness.NewVersion
	cp.versions[kasB] = harness.NewVersion
	cp.act("WaitPeerProxy kas-b (polls as "+harness.HarnessUserAgent+")", func() error { return c.WaitPeerProxy(ctx, kasB, pgPath) })
	cp.proxied(cp.do(kasB, "admin", "GET", pgPath, "", nil), kasC, 200, "kas-b now runs v1.36.3")
	cp.proxied(cp.do(kasB, "admin", "POST", pgPath, pg("pg-after-upgrade"), nil), kasC, 201, "kas-b now runs v1.36.3")
	perUA := map[string]int{}
	cp.cur.pick = func(e harness.Event) *Label {
		// A few of kas-b's own loopback requests before and after the
		// upgrade: the userAgent tells the version.
		if e.Server == kasB && e.User.Username == "system:apiserver" && strings.HasPrefix(e.UserAgent, "kube-apiserver/") && perUA[e.UserAgent] < 3 {
			perUA[e.UserAgent]++
			return &Label{AuditID: e.AuditID, Expect: expLocal, Entry: kasB, Verb: e.Verb, Path: e.RequestURI, User: e.User.Username,
				Note: "kas-b's own loopback request, userAgent " + e.UserAgent}
		}
		return nil
	}
	cp.finish()

	// 8. Peer stopped gracefully: misleading 404s.
	cp.begin("peer-stopped", "kas-c gets SIGTERM. While it shuts down, kas-a keeps sending it podgroups requests; once kas-c has deleted its identity lease, the 1.35 entry kas-a, which proxied podgroups to it seconds before, answers 404 'the server could not find the requested resource' (misleading). The kube-apiserver process lingers several seconds after it stopped listening. kas-c is then started again.")
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath, "", nil), kasC, 200, "before the stop")
	stopped := make(chan error, 1)
	cp.cur.actions = append(cp.cur.actions, action{At: time.Now(), What: "StopGraceful kas-c: SIGTERM sent"})
	go func() { stopped <- c.StopGraceful(kasC) }()
	// Probe through the entry while kas-c shuts down (bounded: the process
	// exits within seconds; StopGraceful SIGKILLs it after 60s).
	var stopErr error
	exited := false
probe:
	for i := 0; i < 200; i++ {
		select {
		case stopErr = <-stopped:
			exited = true
			break probe
		default:
		}
		r := cp.do(kasA, "admin", "GET", pgPath, "", nil)
		cp.duringShutdown(r, kasC, "while kas-c shuts down (SIGTERM sent, process not yet exited)")
		if i < 8 {
			cp.pause(250 * time.Millisecond)
		} else {
			cp.pause(time.Second)
		}
	}
	if !exited {
		stopErr = <-stopped
	}
	if stopErr != nil {
		t.Fatal(stopErr)
	}
	cp.cur.actions = append(cp.cur.actions, action{At: time.Now(), What: "StopGraceful kas-c: process exited"})
	for i := 0; i < 3; i++ {
		cp.local(cp.do(kasA, "admin", "GET", pgPath, "", nil), expMisleading404, 404, "peer kas-c stopped gracefully (process exited)")
		cp.pause(500 * time.Millisecond)
	}
	cp.local(cp.do(kasA, "admin", "GET", pgPath+"/pg-1", "", nil), expMisleading404, 404, "peer kas-c stopped gracefully; the object still exists in etcd")
	cp.local(cp.do(kasA, "bob", "POST", pgPath, pg("pg-lost"), nil), expMisleading404, 404, "create refused with 404 while the only server of the resource is down")
	cp.act("StartServer kas-c v1.36.3 (returns at /readyz 200)", func() error { return c.StartServer(ctx, kasC, "") })
	cp.act("WaitPeerProxy kas-a (polls as "+harness.HarnessUserAgent+")", func() error { return c.WaitPeerProxy(ctx, kasA, pgPath) })
	cp.proxied(cp.do(kasA, "admin", "GET", pgPath, "", nil), kasC, 200, "after kas-c restarted")
	cp.finish()

	// 9. Peer killed: 503s.
	cp.begin("peer-killed", "kas-c is SIGKILLed right after serving a proxied create. The entry kas-a answers 503 (connection refused), then, once kas-c's peer endpoint lease expires, 503 'Error getting ip and port info'. kas-c's unsent audit batch is lost.")
	r = cp.do(kasA, "admin", "POST", pgPath, pg("pg-before-kill"), nil)
	cp.act("Kill kas-c (SIGKILL)", func() error { return c.Kill(kasC) })
	cp.label(r, expProxiedKilled, kasC, "proxied create served by kas-c just before SIGKILL: kas-c's record is usually lost")
	cp.cur.labels[len(cp.cur.labels)-1].wantOn = nil
	deadline := time.Now().Add(25 * time.Second)
	afterLease := 0
	for time.Now().Before(deadline) && afterLease < 3 {
		r := cp.do(kasA, "admin", "GET", pgPath, "", nil)
		note := "peer kas-c killed"
		if strings.Contains(r.body, "Error getting ip and port info") {
			afterLease++
			note = "peer kas-c killed, its peer endpoint lease gone"
		}
		cp.local(r, expPeerUnreach, 0, note)
		cp.pause(time.Second)
	}
	cp.finish()

	cp.check()
	if *updateRealFixtures {
		cp.write(filepath.Join("..", "testdata", "real"))
	}
}

type result struct {
	server, identity   string
	method, path, body string
	code               int
	contentType        string
	auditIDs           []string
	repeated           []string
	clientAuditID      bool
	sentAt             time.Time
	err                error
}

func (cp *capture) client(server, identity string) *http.Client {
	key := server + "/" + identity
	if hc, ok := cp.clients[key]; ok {
		return hc
	}
	var cfgErr error
	cfg := cp.c.AdminConfig(server)
	switch identity {
	case "admin":
	case "alice":
		cfg, cfgErr = cp.c.UserConfig(server, "alice", "team-alpha")
	case "bob":
		cfg, cfgErr = cp.c.UserConfig(server, "bob", "team-pg")
	case "admin-as-bob":
		cfg = cp.c.ImpersonateConfig(server, "bob", "team-pg")
	case "admin-as-alice":
		cfg = cp.c.ImpersonateConfig(server, "alice", "team-alpha")
	default:
		cp.t.Fatalf("unknown identity %s", identity)
	}
	if cfgErr != nil {
		cp.t.Fatal(cfgErr)
	}
	hc, err := harness.HTTPClient(harness.WithSourceIP(cfg, clientIP))
	if err != nil {
		cp.t.Fatal(err)
	}
	hc.Timeout = 30 * time.Second
	cp.clients[key] = hc
	return hc
}

func (cp *capture) newRequest(ctx context.Context, server, method, path, body string, hdr map[string]string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cp.c.Server(server).URL+path, rd)
	if err != nil {
		cp.t.Fatal(err)
	}
	ua := "peertrail-capture"
	if cp.cur != nil {
		ua += "/" + cp.cur.Name
	}
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func (cp *capture) do(server, identity, method, path, body string, hdr map[string]string) result {
	req := cp.newRequest(cp.ctx, server, method, path, body, hdr)
	res := result{server: server, identity: identity, method: method, path: path, clientAuditID: hdr["Audit-ID"] != "", sentAt: time.Now()}
	resp, err := cp.client(server, identity).Do(req)
	if err != nil {
		res.err = err
		cp.t.Errorf("%s %s %s: %v", server, method, path, err)
		return res
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	res.code, res.body = resp.StatusCode, string(b)
	res.contentType = resp.Header.Get("Content-Type")
	res.auditIDs = resp.Header.Values("Audit-Id")
	res.repeated = repeatedHeaders(resp.Header)
	cp.t.Logf("%s %-6s %s as %s -> %d (audit-id %v)", server, method, path, identity, res.code, res.auditIDs)
	return res
}

// watchCancel starts a watch and cancels it after the first event.
func (cp *capture) watchCancel(server, identity, path string) result {
	ctx, cancel := context.WithTimeout(cp.ctx, 20*time.Second)
	defer cancel()
	req := cp.newRequest(ctx, server, "GET", path, "", nil)
	res := result{server: server, identity: identity, method: "GET", path: path, sentAt: time.Now()}
	resp, err := cp.client(server, identity).Do(req)
	if err != nil {
		cp.t.Fatalf("watch %s: %v", path, err)
	}
	res.code = resp.StatusCode
	res.contentType = resp.Header.Get("Content-Type")
	res.auditIDs = resp.Header.Values("Audit-Id")
	res.repeated = repeatedHeaders(resp.Header)
	line, _ := readLine(resp.Body)
	res.body = line
	cancel()
	resp.Body.Close()
	cp.t.Logf("%s WATCH  %s -> %d, first event %.80s (audit-id %v)", server, path, res.code, line, res.auditIDs)
	return res
}

// repeatedHeaders lists response headers that came more than once (a
// proxied response carries some of the entry's and the peer's).
func repeatedHeaders(h http.Header) []string {
	var out []string
	for k, v := range h {
		if len(v) > 1 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func readLine(r io.Reader) (string, error) {
	var buf bytes.Buffer
	b := make([]byte, 1)
	for buf.Len() < 1<<16 {
		n, err := r.Read(b)
		if n > 0 {
			if b[0] == '\n' {
				break
			}
			buf.WriteByte(b[0])
		}
		if err != nil {
			return buf.String(), err
		}
	}
	return buf.String(), nil
}

func (cp *capture) must(r result, code int) {
	cp.t.Helper()
	if r.err != nil || r.code != code {
		cp.t.Fatalf("%s %s %s: got %d %v, want %d: %s", r.server, r.method, r.path, r.code, r.err, code, r.body)
	}
}

// pause spaces requests that should be spread over time (it is part of the
// scenario, not a wait for readiness).
func (cp *capture) pause(d time.Duration) {
	select {
	case <-time.After(d):
	case <-cp.ctx.Done():
	}
}

func (cp *capture) act(what string, f func() error) {
	cp.t.Helper()
	at := time.Now()
	if err := f(); err != nil {
		cp.t.Fatalf("%s: %v", what, err)
	}
	cp.cur.actions = append(cp.cur.actions, action{At: at, What: what})
	cp.t.Logf("action: %s (%s)", what, time.Since(at).Round(time.Millisecond))
}

func (cp *capture) begin(name, desc string) {
	cp.cur = &scenario{Name: name, Description: desc, start: time.Now(), versions: map[string]string{}}
	for k, v := range cp.versions {
		cp.cur.versions[k] = v
	}
	cp.all = append(cp.all, cp.cur)
}

func (cp *capture) label(r result, expect, peer, note string) *Label {
	verb := auditVerb(r.method, r.path)
	l := &Label{
		Expect: expect, Entry: r.server, Peer: peer, Verb: verb, Resource: resourceOf(r.path),
		Method: r.method, Path: r.path, User: userOf(r.identity), ImpersonatedUser: impersonatedOf(r.identity),
		ClientAuditID: r.clientAuditID, Code: r.code, SentAt: r.sentAt, ContentType: r.contentType, ClientAuditIDs: r.auditIDs, RepeatedHeaders: r.repeated, Note: note,
	}
	if len(r.auditIDs) > 0 {
		l.AuditID = r.auditIDs[0]
	}
	if r.code >= 400 || strings.HasPrefix(r.contentType, "text/plain") {
		l.ClientBody = truncate(strings.TrimSpace(r.body), 300)
	}
	switch expect {
	case expProxied:
		if peer != "" {
			l.wantOn = []string{r.server, peer}
		} else {
			for _, s := range []string{kasA, kasB, kasC} {
				if s != r.server {
					l.peers = append(l.peers, s)
				}
			}
		}
	case expLocal, expDenied, expLocal404, expMisleading404, expPeerUnreach:
		l.wantOn = []string{r.server}
	}
	if l.AuditID == "" {
		cp.t.Errorf("%s %s %s: no Audit-Id header in the response", r.server, r.method, r.path)
	}
	cp.cur.labels = append(cp.cur.labels, l)
	return l
}

func (cp *capture) proxied(r result, peer string, code int, note string) {
	cp.t.Helper()
	if r.code != code {
		cp.t.Errorf("%s %s %s as %s: client saw %d, want %d (proxied): %s", r.server, r.method, r.path, r.identity, r.code, code, truncate(r.body, 300))
	}
	cp.label(r, expProxied, peer, note)
}

// duringShutdown labels a request sent through the entry while peer shuts
// down gracefully, by what the client saw; nothing is asserted about which
// records exist (the peer's audit backend may drop its last events).
func (cp *capture) duringShutdown(r result, peer, note string) {
	switch r.code {
	case 200:
		cp.label(r, expProxied, peer, note+"; served by the peer, whose record may be lost")
	case 404:
		cp.label(r, expMisleading404, "", note)
	case 503:
		cp.label(r, expPeerUnreach, "", note)
	default:
		cp.label(r, fmt.Sprintf("code_%d", r.code), "", note)
	}
	cp.cur.labels[len(cp.cur.labels)-1].wantOn = nil
}

// local labels a request only the entry should have audited. code 0: any.
func (cp *capture) local(r result, expect string, code int, note string) {
	cp.t.Helper()
	if code != 0 && r.code != code {
		cp.t.Errorf("%s %s %s as %s: client saw %d, want %d (%s): %s", r.server, r.method, r.path, r.identity, r.code, code, expect, truncate(r.body, 300))
	}
	if expect == expPeerUnreach && r.code != 503 {
		cp.t.Errorf("%s %s %s: client saw %d, want 503 (peer unreachable): %s", r.server, r.method, r.path, r.code, truncate(r.body, 300))
	}
	cp.label(r, expect, "", note)
}

// finish waits until every labeled request has its ResponseComplete (or
// Panic) event from every server that must have audited it, plus one more
// batch tick from each running server, then closes the scenario window.
func (cp *capture) finish() {
	cp.t.Helper()
	s := cp.cur
	ctx, cancel := context.WithTimeout(cp.ctx, 45*time.Second)
	defer cancel()
	for {
		changed := cp.rec.Changed()
		missing := cp.missing(s)
		if len(missing) == 0 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			cp.t.Errorf("scenario %s: audit events still missing after 45s: %v", s.Name, missing)
			s.end = time.Now()
			return
		}
	}
	// One more POST from every running server, so each has flushed past the
	// scenario's last request.
	mark := time.Now()
	for _, srv := range cp.c.Servers() {
		if !srv.Running() {
			continue
		}
		for {
			changed := cp.rec.Changed()
			if cp.postedAfter(srv.Name, mark) {
				break
			}
			select {
			case <-changed:
			case <-ctx.Done():
				cp.t.Errorf("scenario %s: no audit POST from %s after the scenario", s.Name, srv.Name)
				s.end = time.Now()
				return
			}
		}
	}
	s.end = time.Now()
}

func (cp *capture) postedAfter(server string, t time.Time) bool {
	for _, p := range cp.rec.Posts() {
		if p.Server == server && p.Received.After(t) {
			return true
		}
	}
	return false
}

func (cp *capture) completes() map[string]map[string]bool {
	evs, err := cp.rec.Events()
	if err != nil {
		cp.t.Fatal(err)
	}
	done := map[string]map[string]bool{}
	for _, e := range evs {
		if e.Stage == "ResponseComplete" || e.Stage == "Panic" {
			if done[e.AuditID] == nil {
				done[e.AuditID] = map[string]bool{}
			}
			done[e.AuditID][e.Server] = true
		}
	}
	return done
}

func (cp *capture) missing(s *scenario) []string {
	done := cp.completes()
	var out []string
	for _, l := range s.labels {
		for _, srv := range l.wantOn {
			if !done[l.AuditID][srv] {
				out = append(out, l.AuditID+"@"+srv)
			}
		}
		if len(l.peers) > 0 {
			ok := false
			for _, p := range l.peers {
				ok = ok || done[l.AuditID][p]
			}
			if !ok || !done[l.AuditID][l.Entry] {
				out = append(out, l.AuditID+"@"+l.Entry+"+peer")
			}
		}
	}
	return out
}

// check fills ObservedOn/Peer from the streams and verifies every label.
func (cp *capture) check() {
	evs, err := cp.rec.Events()
	if err != nil {
		cp.t.Fatal(err)
	}
	on := map[string]map[string]bool{}
	for _, e := range evs {
		if on[e.AuditID] == nil {
			on[e.AuditID] = map[string]bool{}
		}
		on[e.AuditID][e.Server] = true
	}
	for _, s := range cp.all {
		if s.pick != nil {
			seen := map[string]bool{}
			for _, e := range evs {
				if seen[e.AuditID] || e.Stage != "ResponseComplete" {
					continue
				}
				ts, _ := time.Parse(time.RFC3339Nano, e.RequestReceivedTimestamp)
				if ts.Before(s.start) || ts.After(s.end) {
					continue
				}
				if l := s.pick(e); l != nil {
					if e.ResponseStatus != nil {
						l.Code = e.ResponseStatus.Code
					}
					seen[e.AuditID] = true
					s.labels = append(s.labels, l)
				}
			}
		}
		for _, l := range s.labels {
			l.ObservedOn = keys(on[l.AuditID])
			if l.Expect == expPeerDiscovery {
				continue
			}
			if l.wantOn != nil && !slices.Equal(l.ObservedOn, sorted(l.wantOn)) {
				cp.t.Errorf("%s: %s %s %s (%s, code %d): audited on %v, want %v", s.Name, l.Entry, l.Method, l.Path, l.Expect, l.Code, l.ObservedOn, sorted(l.wantOn))
			}
			if len(l.peers) > 0 {
				var got []string
				for _, p := range l.peers {
					if on[l.AuditID][p] {
						got = append(got, p)
					}
				}
				if len(got) != 1 || !on[l.AuditID][l.Entry] {
					cp.t.Errorf("%s: %s %s %s: audited on %v, want the entry and exactly one of %v", s.Name, l.Entry, l.Method, l.Path, l.ObservedOn, l.peers)
				} else {
					l.Peer = got[0]
				}
			}
		}
	}
}

type postMeta struct {
	File           string    `json:"file"`
	Server         string    `json:"apiserver"`
	Received       time.Time `json:"received"`
	EventsInBatch  int       `json:"eventsInBatch"`
	EventsKept     int       `json:"eventsKept"`
	OriginalPostNo int       `json:"originalPostNo"`
}

type labelsFile struct {
	Scenario    string            `json:"scenario"`
	Description string            `json:"description"`
	Versions    map[string]string `json:"versions"`
	Window      [2]time.Time      `json:"window"`
	Actions     []action          `json:"actions,omitempty"`
	Posts       []postMeta        `json:"posts"`
	Requests    []*Label          `json:"requests"`
}

const backgroundPerServer = 12

// write stores, per scenario, every POST that carries an event of interest,
// filtered to those events plus a little background, as EventList files.
func (cp *capture) write(root string) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		cp.t.Fatal(err)
	}
	posts := cp.rec.Posts()
	for _, s := range cp.all {
		dir := filepath.Join(root, s.Name)
		if err := os.RemoveAll(dir); err != nil {
			cp.t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			cp.t.Fatal(err)
		}
		interesting := map[string]bool{}
		for _, l := range s.labels {
			interesting[l.AuditID] = true
		}
		bg := map[string]int{}
		bgIDs := map[string]bool{}
		lf := labelsFile{Scenario: s.Name, Description: s.Description, Versions: s.versions, Window: [2]time.Time{s.start, s.end}, Actions: s.actions, Requests: s.labels}
		n := map[string]int{}
		for _, p := range posts {
			evs, err := harness.ParsePost(p)
			if err != nil {
				cp.t.Fatal(err)
			}
			var keep []json.RawMessage
			for _, e := range evs {
				ts, _ := time.Parse(time.RFC3339Nano, e.RequestReceivedTimestamp)
				inWindow := !ts.Before(s.start) && !ts.After(s.end)
				switch {
				case interesting[e.AuditID]:
					keep = append(keep, e.Raw)
				case inWindow && bgIDs[e.AuditID]:
					keep = append(keep, e.Raw)
				case inWindow && e.UserAgent != harness.HarnessUserAgent && bg[e.Server] < backgroundPerServer && isBackground(e):
					bg[e.Server]++
					bgIDs[e.AuditID] = true
					keep = append(keep, e.Raw)
				}
			}
			if len(keep) == 0 {
				continue
			}
			n[p.Server]++
			name := fmt.Sprintf("%s-%d.json", p.Server, n[p.Server])
			body, err := json.MarshalIndent(map[string]any{
				"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": map[string]any{}, "items": keep,
			}, "", "  ")
			if err != nil {
				cp.t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), append(body, '\n'), 0o644); err != nil {
				cp.t.Fatal(err)
			}
			lf.Posts = append(lf.Posts, postMeta{File: name, Server: p.Server, Received: p.Received, EventsInBatch: len(evs), EventsKept: len(keep), OriginalPostNo: p.Seq})
		}
		b, err := json.MarshalIndent(lf, "", "  ")
		if err != nil {
			cp.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "labels.json"), append(b, '\n'), 0o644); err != nil {
			cp.t.Fatal(err)
		}
	}
	// The exact flags, with the temp dir replaced.
	args := map[string][]string{}
	for _, s := range cp.c.Servers() {
		a, err := s.Args()
		if err != nil {
			cp.t.Fatal(err)
		}
		for i := range a {
			a[i] = strings.ReplaceAll(a[i], cp.c.Dir, "$DIR")
			a[i] = strings.ReplaceAll(a[i], cp.rec.URL, "https://127.0.0.1:$RECEIVER_PORT")
		}
		args[s.Name+" ("+s.Version+")"] = a
	}
	b, _ := json.MarshalIndent(map[string]any{"capturedAt": time.Now().UTC().Format(time.RFC3339), "kubeApiserverArgs": args}, "", "  ")
	if err := os.WriteFile(filepath.Join(root, "capture-args.json"), append(b, '\n'), 0o644); err != nil {
		cp.t.Fatal(err)
	}
}

// isBackground: other traffic worth keeping as realistic noise (lease
// renewals, controllers, the apiservers' own loopback calls).
func isBackground(e harness.Event) bool {
	return e.Stage == "ResponseComplete" || e.Stage == "RequestReceived"
}

func auditVerb(method, path string) string {
	watch := strings.Contains(path, "watch=true") || strings.Contains(path, "watch=1")
	p := path
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	switch method {
	case "GET":
		if watch {
			return "watch"
		}
		if p == "/api" || p == "/apis" {
			return "get"
		}
		// collection if the last element is a resource: odd count after the
		// group/version prefix.
		parts := strings.Split(strings.Trim(p, "/"), "/")
		var rest []string
		if parts[0] == "api" {
			rest = parts[2:]
		} else if len(parts) >= 3 {
			rest = parts[3:]
		}
		if len(rest)%2 == 1 {
			return "list"
		}
		return "get"
	case "POST":
		return "create"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	}
	return strings.ToLower(method)
}

func resourceOf(path string) string {
	p := path
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	parts := strings.Split(strings.Trim(p, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return ""
	}
	if len(rest) >= 2 && rest[0] == "namespaces" && len(rest) > 2 {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return ""
	}
	return rest[0]
}

func userOf(identity string) string {
	switch identity {
	case "alice", "bob":
		return identity
	}
	return "admin"
}

func impersonatedOf(identity string) string {
	if u, ok := strings.CutPrefix(identity, "admin-as-"); ok {
		return u
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
