package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/metrics"
)

// What an ordinary cluster user can bend (issue 39), replayed as the events two healthy
// apiservers with configured addresses send while their other users' traffic goes on: the
// gate must still say proceed, the other users' chains keep their classes, and the chain API
// and `peertrail chain` show every request of a reused Audit-ID, escaped for the terminal.

const (
	fgAddrA  = "10.0.0.11"
	fgAddrB  = "10.0.0.12"
	fgClient = "10.1.2.3"
)

// fgEvent is one audit event as an apiserver writes it, at Metadata level.
type fgEvent struct {
	id, verb, uri, user, agent string
	groups, sourceIPs          []string
	uid                        string
	group, version, resource   string
	namespace, name            string
	code                       int
	message                    string
	rr, done                   time.Time
}

func (e fgEvent) items() []string {
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }
	user, _ := json.Marshal(map[string]any{"username": e.user, "uid": e.uid, "groups": e.groups})
	ref, _ := json.Marshal(map[string]any{"resource": e.resource, "namespace": e.namespace, "name": e.name, "apiGroup": e.group, "apiVersion": e.version})
	status := map[string]any{"metadata": map[string]any{}, "code": e.code}
	if e.message != "" {
		status["status"], status["message"], status["reason"] = "Failure", e.message, "Forbidden"
	}
	st, _ := json.Marshal(status)
	ips, _ := json.Marshal(e.sourceIPs)
	id, _ := json.Marshal(e.id)
	uri, _ := json.Marshal(e.uri)
	agent, _ := json.Marshal(e.agent)
	base := `"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":` + string(id) + `,"requestURI":` + string(uri) +
		`,"verb":"` + e.verb + `","user":` + string(user) + `,"sourceIPs":` + string(ips) + `,"userAgent":` + string(agent) + `,"objectRef":` + string(ref) +
		`,"requestReceivedTimestamp":"` + ts(e.rr) + `"`
	return []string{
		`{` + base + `,"stage":"RequestReceived","stageTimestamp":"` + ts(e.rr) + `"}`,
		`{` + base + `,"stage":"ResponseComplete","stageTimestamp":"` + ts(e.done) + `","responseStatus":` + string(st) + `}`,
	}
}

func fgBody(events ...fgEvent) []byte {
	var items []string
	for _, e := range events {
		items = append(items, e.items()...)
	}
	return []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[` + strings.Join(items, ",") + `]}`)
}

// fgConfigMap is a get of team/cm by user from the client's address.
func fgConfigMap(id, user string, at time.Time) fgEvent {
	return fgEvent{id: id, verb: "get", uri: "/api/v1/namespaces/team/configmaps/cm", user: user, groups: []string{"system:authenticated"},
		agent: "kubectl/v1.36.3 (linux/amd64) kubernetes/8b1a2c7", sourceIPs: []string{fgClient}, version: "v1", resource: "configmaps",
		namespace: "team", name: "cm", code: 200, rr: at, done: at.Add(3 * time.Millisecond)}
}

// fgCluster is two apiservers' streams: each second (and a half) their own lease renewal
// and alice's get of a ConfigMap, posted as their webhooks would; Post adds a batch.
type fgCluster struct {
	t     *testing.T
	base  string
	mu    sync.Mutex
	alice []string // auditIDs of alice's requests
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
}

func (c *fgCluster) post(apiserver string, body []byte) {
	c.t.Helper()
	resp, err := http.Post(c.base+"/audit/"+apiserver, "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Error(err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Errorf("POST /audit/%s: %d %s", apiserver, resp.StatusCode, b)
	}
}

func (c *fgCluster) run() {
	c.stop = make(chan struct{})
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		for n := 0; ; n++ {
			for _, a := range []struct{ name, addr string }{{"kas-a", fgAddrA}, {"kas-b", fgAddrB}} {
				now := time.Now()
				lease := fgEvent{id: fmt.Sprintf("lease-%s-%d", a.name, n), verb: "update", uri: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/apiserver-" + a.name,
					user: "system:apiserver", uid: "uid-" + a.name, groups: []string{"system:authenticated", "system:masters"},
					agent: "kube-apiserver/v1.35.4 (linux/amd64) kubernetes/6d6e9c5", sourceIPs: []string{a.addr},
					group: "coordination.k8s.io", version: "v1", resource: "leases", namespace: "kube-system", name: "apiserver-" + a.name,
					code: 200, rr: now.Add(-2 * time.Millisecond), done: now.Add(-time.Millisecond)}
				id := fmt.Sprintf("alice-%s-%d", a.name, n)
				c.mu.Lock()
				c.alice = append(c.alice, id)
				c.mu.Unlock()
				c.post(a.name, fgBody(lease, fgConfigMap(id, "alice", now.Add(-time.Millisecond))))
			}
			select {
			case <-c.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

func (c *fgCluster) halt() {
	c.once.Do(func() { close(c.stop) })
	c.done.Wait()
}

func readJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := readerClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func verdict(t *testing.T, base string) gate.Verdict {
	t.Helper()
	var v gate.Verdict
	readJSON(t, base+"/api/v1/gate", &v)
	return v
}

// chainsOf waits until every chain of auditID is final (at least want of them) and returns
// the API's answer.
func chainsOf(t *testing.T, base, auditID string, want int) chain.ChainAnswer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := readerClient.Get(base + "/api/v1/chains/" + auditID)
		if err != nil {
			t.Fatal(err)
		}
		var a chain.ChainAnswer
		if resp.StatusCode == 200 {
			json.NewDecoder(resp.Body).Decode(&a)
		}
		resp.Body.Close()
		final := a.Chain != nil && a.ChainsWithAuditID >= want
		for _, c := range append([]*chain.Chain{a.Chain}, a.OtherChains...) {
			final = final && c != nil && c.State == chain.StateFinal
		}
		if final {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("chains of %s not final in time: %+v", auditID, a)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestForgedEvidenceChangesNothingElse(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "peertrail.yaml")
	if err := os.WriteFile(cfg, []byte("apiservers:\n- name: kas-a\n  address: "+fgAddrA+"\n- name: kas-b\n  address: "+fgAddrB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, filepath.Join(dir, "data"), "--config", cfg, "--chain-window", "2s")
	c := &fgCluster{t: t, base: p.url}
	c.run()
	defer c.halt()
	deadline := time.Now().Add(60 * time.Second)
	for v := verdict(t, p.url); !v.Proceed; v = verdict(t, p.url) {
		if time.Now().After(deadline) {
			t.Fatalf("the gate never said proceed on healthy traffic: %v", v.Reasons)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The series of the chain counter, and those of them that name a made-up group.
	series := func() (all, madeUp int) {
		resp, err := readerClient.Get(p.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, metrics.CorrelateChainsTotal+"{") {
				all++
				if strings.Contains(line, `.example"`) {
					madeUp++
				}
			}
		}
		return all, madeUp
	}

	// 1. One GET answered by kas-a and by kas-b with one Audit-ID, no hop in either record;
	// and again under two identities.
	now := time.Now()
	c.post("kas-a", fgBody(fgConfigMap("pair-1", "mallory", now)))
	b := fgConfigMap("pair-1", "mallory", now.Add(time.Millisecond))
	b.done = now.Add(2 * time.Millisecond)
	c.post("kas-b", fgBody(b))
	c.post("kas-b", fgBody(fgConfigMap("pair-2", "eve", now.Add(10*time.Millisecond))))
	c.post("kas-a", fgBody(fgConfigMap("pair-2", "mallory", now.Add(9*time.Millisecond))))

	// 2. A DELETE of a Secret with Audit-ID X, then a harmless GET with X; the GET's auditID
	// and path carry what a terminal acts on.
	const reused = "x-\u009b31m-\u202eevil"
	del := fgConfigMap(reused, "mallory", time.Now())
	del.verb, del.uri, del.resource, del.name = "delete", "/api/v1/namespaces/team/secrets/db", "secrets", "db"
	c.post("kas-a", fgBody(del))
	time.Sleep(3 * time.Second) // past the chain window: the DELETE's chain is final first
	get := fgConfigMap(reused, "mallory", time.Now())
	get.uri, get.name, get.agent = "/api/v1/namespaces/team/configmaps/%1B%5D0%3Bowned%07", "\x1b]0;owned\x07", "kubectl\x1b[2J"
	c.post("kas-a", fgBody(get))

	// 3. From kas-a's host with one X-Forwarded-For header, to kas-b.
	xff := fgConfigMap("xff-1", "mallory", time.Now())
	xff.sourceIPs = []string{"203.0.113.9", fgAddrA}
	c.post("kas-b", fgBody(xff))

	// 4. 2,000 refused requests to made-up resources.
	for i := 0; i < 2000; i += 200 {
		var evs []fgEvent
		for k := i; k < i+200; k++ {
			e := fgConfigMap(fmt.Sprintf("made-up-%d", k), "mallory", time.Now())
			e.verb, e.uri, e.group, e.resource, e.namespace, e.name = "list", fmt.Sprintf("/apis/g%d.example/v1/r%d", k, k), fmt.Sprintf("g%d.example", k), fmt.Sprintf("r%d", k), "", ""
			e.code, e.message = 403, fmt.Sprintf(`r%d.g%d.example is forbidden: User "mallory" cannot list resource "r%d" in API group "g%d.example" at the cluster scope`, k, k, k, k)
			evs = append(evs, e)
		}
		c.post("kas-a", fgBody(evs...))
	}

	for _, id := range []string{"pair-1", "pair-2"} {
		a := chainsOf(t, p.url, id, 2)
		if a.ChainsWithAuditID != 2 {
			t.Errorf("%s: %d chains, want 2 (one request each apiserver)", id, a.ChainsWithAuditID)
		}
		for _, ch := range append([]*chain.Chain{a.Chain}, a.OtherChains...) {
			if ch.Class != chain.ClassLocal || !ch.HasFinding(chain.FindingAuditIDReused) || ch.HasFinding(chain.FindingIdentityMismatch) || ch.Peer != nil {
				t.Errorf("%s: %s %v peer %v (%s)", id, ch.Class, ch.Findings, ch.Peer, ch.Explanation)
			}
		}
	}
	a := chainsOf(t, p.url, "xff-1", 1)
	if a.Class != chain.ClassLocal || len(a.Findings) != 0 || a.Entry == nil || a.Entry.APIServer != "kas-b" {
		t.Errorf("xff-1: %s %v entry %v (%s)", a.Class, a.Findings, a.Entry, a.Explanation)
	}
	a = chainsOf(t, p.url, reused, 2)
	if a.ChainsWithAuditID != 2 || a.Verb != "get" || len(a.OtherChains) != 1 || a.OtherChains[0].Verb != "delete" {
		t.Fatalf("%q: %d chains, shown %s, others %v", reused, a.ChainsWithAuditID, a.Verb, a.OtherChains)
	}
	for _, ch := range append([]*chain.Chain{a.Chain}, a.OtherChains...) {
		if ch.Class != chain.ClassLocal || !ch.HasFinding(chain.FindingAuditIDReused) {
			t.Errorf("%s %s: %s %v", reused, ch.Verb, ch.Class, ch.Findings)
		}
	}
	// What the operator's terminal gets from `peertrail chain`: both requests, escaped.
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	cli := exec.Command(bin, "chain", reused, "--server", p.url)
	cli.Env = append(os.Environ(), "PEERTRAIL_TOKEN="+readerToken)
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("peertrail chain: %v\n%s", err, out)
	}
	for _, want := range []string{"chain 1 of 2", "delete /api/v1/namespaces/team/secrets/db", "chain 2 of 2", `x-\u009b31m-\u202eevil`, "audit_id_reused"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("peertrail chain lacks %q:\n%s", want, out)
		}
	}
	if bytes.ContainsAny(out, "\x1b\x07\u009b\u202e") {
		t.Errorf("peertrail chain printed a control character raw:\n%q", out)
	}
	cli = exec.Command(bin, "chain", reused, "-o", "json", "--server", p.url)
	cli.Env = append(os.Environ(), "PEERTRAIL_TOKEN="+readerToken)
	if out, err = cli.Output(); err != nil || !bytes.Contains(out, []byte(`"audit_id": "`+reused+`"`)) {
		t.Errorf("peertrail chain -o json does not give the auditID exact: %v\n%s", err, out)
	}

	// The refused requests are chains of their own, counted under one label value.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var l struct{ Chains []*chain.Chain }
		readJSON(t, p.url+"/api/v1/chains?since=1h&limit=10000&class=local", &l)
		n := 0
		for _, ch := range l.Chains {
			if strings.HasPrefix(ch.AuditID, "made-up-") {
				n++
			}
		}
		if n == 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the 2000 refused requests are final chains", n)
		}
	}
	if all, madeUp := series(); madeUp != 0 || all > 20 {
		t.Errorf("%s: %d series after 2000 made-up resources, %d of them named after one", metrics.CorrelateChainsTotal, all, madeUp)
	}

	// Two chain windows more: anything the attacks could make pause has surfaced.
	time.Sleep(5 * time.Second)
	if v := verdict(t, p.url); !v.Proceed {
		t.Errorf("the gate says pause: %v", v.Reasons)
	}
	c.halt()
	var l struct{ Chains []*chain.Chain }
	readJSON(t, p.url+"/api/v1/chains?since=1h&limit=10000", &l)
	c.mu.Lock()
	alice := map[string]bool{}
	for _, id := range c.alice {
		alice[id] = true
	}
	c.mu.Unlock()
	seen := 0
	for _, ch := range l.Chains {
		if ch.Class == chain.ClassBroken || ch.Class == chain.ClassMisleading404 || ch.Class == chain.ClassProxied {
			t.Errorf("%s: %s %v (%s)", ch.AuditID, ch.Class, ch.Findings, ch.Explanation)
		}
		if alice[ch.AuditID] && ch.State == chain.StateFinal {
			seen++
			if ch.Class != chain.ClassLocal || len(ch.Findings) != 0 {
				t.Errorf("alice's %s: %s %v (%s)", ch.AuditID, ch.Class, ch.Findings, ch.Explanation)
			}
		}
	}
	if seen < 20 {
		t.Errorf("only %d of alice's requests final", seen)
	}
}
