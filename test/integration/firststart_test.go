package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// TestRealCaptureFirstStart replays test/testdata/real/first-start/pre-discovery (a cluster
// run of its own, see test/e2e TestCaptureRealFirstStart) into a fresh peertrail, as it saw
// the cluster's first start: kas-c answered lists of jobs with a bare 404 before its peer
// discovery synced the peers that serve jobs, which delivered their audit across those
// requests without a record of them. They are misleading 404s, not broken chains (issue 39),
// in the order the batches came, shuffled, and with a peer's stream late.
func TestRealCaptureFirstStart(t *testing.T) {
	dir := filepath.Join("..", "testdata", "real", "first-start", "pre-discovery")
	b, err := os.ReadFile(filepath.Join(dir, "labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s scenario
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	s.dir, s.Name = dir, "first-start/pre-discovery"
	for _, order := range []string{"as sent", "shuffled", "kas-a late", "kas-b late"} {
		t.Run(order, func(t *testing.T) {
			p := startBinary(t, filepath.Join(t.TempDir(), "data"), "--chain-window", "2s")
			posts := slices.Clone(s.Posts)
			var late []post
			switch order {
			case "shuffled":
				slices.Reverse(posts)
			case "kas-a late", "kas-b late":
				name := order[:5]
				late = slices.DeleteFunc(slices.Clone(posts), func(ps post) bool { return ps.APIServer != name })
				posts = slices.DeleteFunc(posts, func(ps post) bool { return ps.APIServer == name })
			}
			for _, ps := range posts {
				postFile(t, p.url, s, ps)
			}
			if len(late) > 0 {
				time.Sleep(3 * time.Second) // past the chain window: the others' chains close first
				slices.Reverse(late)
				for _, ps := range late {
					body, err := os.ReadFile(filepath.Join(dir, ps.File))
					if err != nil {
						t.Fatal(err)
					}
					for _, part := range split(t, body) {
						postBody(t, p.url, ps.APIServer, part)
					}
				}
				time.Sleep(3 * 2 * time.Second) // what the late stream teaches is judged when its chains close
			}
			checkLabels(t, p.url, s)
			var l struct{ Chains []*chain.Chain }
			readJSON(t, p.url+"/api/v1/chains?since=24h&limit=10000&class=broken", &l)
			for _, c := range l.Chains {
				t.Errorf("broken: %s %s %s (%s)", c.AuditID, c.Verb, c.RequestURI, c.Explanation)
			}
		})
	}
}

// checkLabels waits until each labelled request of s has its chain final and checks its class,
// findings and roles as expectation says.
func checkLabels(t *testing.T, base string, s scenario) {
	t.Helper()
	if len(s.Requests) == 0 {
		t.Fatalf("%s has no labelled request", s.Name)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, l := range s.Requests {
		class, findings, ok := expectation(l)
		if !ok {
			t.Fatalf("%s: label %q not understood", s.Name, l.Expect)
		}
		var c *chain.Chain
		for c == nil {
			got, code, err := getChain(base, l.AuditID)
			if err != nil {
				t.Fatal(err)
			}
			if code == 200 && got.State == chain.StateFinal {
				c = got
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: chain %s not final in time (status %d)", s.Name, l.AuditID, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
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
		if class == chain.ClassProxied && (c.Entry == nil || c.Peer == nil || c.Entry.APIServer != l.Entry || l.Peer != "" && c.Peer.APIServer != l.Peer) {
			t.Errorf("%s: roles entry=%v peer=%v, want %s -> %s", where, c.Entry, c.Peer, l.Entry, l.Peer)
		}
	}
}
