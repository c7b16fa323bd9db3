package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// A scenario captured from real kube-apiservers (test/testdata/real, see its README).
type scenario struct {
	Name     string
	Posts    []post  `json:"posts"`
	Requests []label `json:"requests"`
	Window   []time.Time
	dir      string
}

type post struct {
	File      string    `json:"file"`
	APIServer string    `json:"apiserver"`
	Received  time.Time `json:"received"`
}

type label struct {
	AuditID    string   `json:"auditID"`
	Expect     string   `json:"expect"`
	Entry      string   `json:"entry"`
	Peer       string   `json:"peer"`
	Verb       string   `json:"verb"`
	Path       string   `json:"path"`
	Note       string   `json:"note"`
	ObservedOn []string `json:"observedOn"`
}

func loadScenarios(t *testing.T) []scenario {
	t.Helper()
	dirs, err := filepath.Glob("../testdata/real/*/labels.json")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no captured scenarios under test/testdata/real: %v", err)
	}
	var out []scenario
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var s scenario
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		s.dir, s.Name = filepath.Dir(p), filepath.Base(filepath.Dir(p))
		out = append(out, s)
	}
	// In capture order: what an apiserver serves is learned from earlier traffic.
	sort.Slice(out, func(i, j int) bool { return out[i].Window[0].Before(out[j].Window[0]) })
	return out
}

// expectation is what peertrail must conclude for a labelled request. The labels say what was
// done and what the client saw; this maps them to peertrail's classes.
func expectation(l label) (chain.Class, []chain.Finding, bool) {
	var findings []chain.Finding
	switch l.Expect {
	case "proxied":
		if strings.Contains(l.Note, "impersonating") {
			findings = append(findings, chain.FindingImpersonationFlattened)
		}
		return chain.ClassProxied, findings, true
	case "misleading_404":
		return chain.ClassMisleading404, nil, true
	case "local_404":
		if strings.Contains(l.Note, "x-kubernetes-peer-proxied") {
			// The client asked not to be forwarded; audit records cannot show the header, so
			// this 404 for a resource a peer serves is indistinguishable from a misleading one
			// (test/testdata/real/README.md, "What the capture shows"), and is one for the client.
			return chain.ClassMisleading404, nil, true
		}
		return chain.ClassLocal, nil, true
	case "local", "denied":
		return chain.ClassLocal, nil, true
	case "peer_discovery":
		return chain.ClassInternal, nil, true
	case "peer_unreachable":
		// The peer was killed: its stream is silent while the forwards fail (restart noise).
		return chain.ClassProxyFailed, []chain.Finding{chain.FindingPeerDown}, true
	case "proxied_peer_killed":
		if len(l.ObservedOn) == 1 {
			// Its record died with it, in its stream's silence (restart noise).
			return chain.ClassBroken, []chain.Finding{chain.FindingPeerAuditMissing, chain.FindingPeerDown}, true
		}
		return chain.ClassProxied, nil, true
	}
	return "", nil, false
}

func postFile(t *testing.T, base string, s scenario, p post) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(s.dir, p.File))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/audit/"+p.APIServer, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s/%s: status %d", s.Name, p.File, resp.StatusCode)
	}
}

func getChain(base, id string) (*chain.Chain, int, error) {
	resp, err := readerClient.Get(base + "/api/v1/chains/" + id)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode, nil
	}
	var c chain.Chain
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, 0, err
	}
	return &c, 200, nil
}

// checkScenarios waits until every labelled request's chain is final and checks its class,
// findings and roles.
func checkScenarios(t *testing.T, base string, scenarios []scenario) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	checked := 0
	for _, s := range scenarios {
		for _, l := range s.Requests {
			class, findings, ok := expectation(l)
			if !ok {
				t.Errorf("%s: label %q not understood", s.Name, l.Expect)
				continue
			}
			var c *chain.Chain
			for {
				got, code, err := getChain(base, l.AuditID)
				if err != nil {
					t.Fatal(err)
				}
				if code == 200 && got.State == chain.StateFinal {
					c = got
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: chain %s (%s %s) not final in time (status %d)", s.Name, l.AuditID, l.Verb, l.Path, code)
				}
				time.Sleep(100 * time.Millisecond)
			}
			checked++
			where := fmt.Sprintf("%s: %s %s (%s; %s)", s.Name, l.Verb, l.Path, l.Expect, l.Note)
			if c.Class != class {
				t.Errorf("%s: class %s, want %s: %s", where, c.Class, class, c.Explanation)
				continue
			}
			got := slices.Clone(c.Findings)
			slices.Sort(got)
			slices.Sort(findings)
			if !slices.Equal(got, findings) {
				t.Errorf("%s: findings %v, want %v", where, c.Findings, findings)
			}
			if class == chain.ClassProxied && l.Entry != "" && (c.Entry == nil || c.Peer == nil || c.Entry.APIServer != l.Entry || l.Peer != "" && c.Peer.APIServer != l.Peer) {
				t.Errorf("%s: roles entry=%v peer=%v, want %s -> %s", where, c.Entry, c.Peer, l.Entry, l.Peer)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d labelled requests checked", checked)
	}
	t.Logf("%d labelled requests classified as expected", checked)
}

// TestRealCapturesClassifyInAnyOrder replays the webhook bodies real kube-apiservers sent,
// each scenario's batches in a shuffled order (so a peer's records often come before the
// entry's), and checks every labelled request's class.
func TestRealCapturesClassifyInAnyOrder(t *testing.T) {
	scenarios := loadScenarios(t)
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			p := startBinary(t, filepath.Join(t.TempDir(), "data"), "--chain-window", "3s")
			rng := rand.New(rand.NewPCG(seed, seed))
			for _, s := range scenarios {
				posts := slices.Clone(s.Posts)
				rng.Shuffle(len(posts), func(i, j int) { posts[i], posts[j] = posts[j], posts[i] })
				for _, ps := range posts {
					postFile(t, p.url, s, ps)
				}
			}
			checkScenarios(t, p.url, scenarios)
			checkStore(t, p, scenarios)
		})
	}
}

// checkStore asks the embedded store, through its ClickHouse HTTP interface, for the chains of
// the labelled requests: each must be there once, with the class the API gave it.
func checkStore(t *testing.T, p *process, scenarios []scenario) {
	t.Helper()
	if p.sqlURL == "" {
		t.Fatalf("peertrail did not report its SQL interface:\n%s", p.logs)
	}
	want := map[string]chain.Class{}
	for _, s := range scenarios {
		for _, l := range s.Requests {
			if c, _, ok := expectation(l); ok {
				want[l.AuditID] = c
			}
		}
	}
	// The writer flushes chains as they become final; wait until all of them are there.
	deadline := time.Now().Add(60 * time.Second)
	for {
		rows := sqlRows(t, p.sqlURL, "SELECT audit_id, class, count() FROM peertrail.chains FINAL GROUP BY audit_id, class FORMAT TabSeparated")
		got := map[string]chain.Class{}
		dup := ""
		for _, r := range rows {
			if r[2] != "1" {
				dup = r[0]
			}
			got[r[0]] = chain.Class(r[1])
		}
		if dup != "" {
			t.Fatalf("chain of %s stored more than once after FINAL", dup)
		}
		missing := 0
		for id, class := range want {
			if g, ok := got[id]; !ok {
				missing++
			} else if g != class {
				t.Fatalf("store says %s for %s, want %s", g, id, class)
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d labelled chains never reached the store", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sqlRows(t *testing.T, base, query string) [][]string {
	t.Helper()
	resp, err := http.Post(base+"/", "text/plain", strings.NewReader(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("SQL %q: %d %s", query, resp.StatusCode, b.String())
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line != "" {
			rows = append(rows, strings.Split(line, "\t"))
		}
	}
	return rows
}

// TestRealCapturesSurviveARestart kills peertrail with SIGKILL halfway through the replay:
// chains still open then are rebuilt from the spool, and what was learned before survives.
func TestRealCapturesSurviveARestart(t *testing.T) {
	scenarios := loadScenarios(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startBinary(t, dataDir, "--chain-window", "3s")
	half := len(scenarios) / 2
	for _, s := range scenarios[:half] {
		for _, ps := range s.Posts {
			postFile(t, p.url, s, ps)
		}
	}
	// Kill while the last scenarios' chains are still open.
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p = startBinary(t, dataDir, "--chain-window", "3s")
	for _, s := range scenarios[half:] {
		for _, ps := range s.Posts {
			postFile(t, p.url, s, ps)
		}
	}
	// Chains still open at the kill, and everything after it, come from memory; chains final
	// before it are no longer in memory and the API answers them from the store.
	checkScenarios(t, p.url, scenarios)
	checkStore(t, p, scenarios)
}
