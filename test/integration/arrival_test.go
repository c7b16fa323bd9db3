package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/simulate"
)

// Verdicts must not depend on the order in which batches arrive: an apiserver's webhook
// sends batches concurrently, backs off after errors (then its batches come late), and its
// batch boundaries fall anywhere. These tests replay the same bodies with one apiserver's
// batches delayed past the chain window, reordered and split, and want the same classes.

// eventList is an audit.k8s.io/v1 EventList with its items kept as they were sent.
type eventList struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Items      []json.RawMessage `json:"items"`
}

// split cuts a webhook body into two bodies of half its events each (one, if it has one).
func split(t *testing.T, body []byte) [][]byte {
	t.Helper()
	var l eventList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) < 2 {
		return [][]byte{body}
	}
	var out [][]byte
	half := len(l.Items) / 2
	for _, items := range [][]json.RawMessage{l.Items[:half], l.Items[half:]} {
		b, err := json.Marshal(eventList{Kind: l.Kind, APIVersion: l.APIVersion, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func postBody(t *testing.T, base, apiserver string, body []byte) {
	t.Helper()
	resp, err := http.Post(base+"/audit/"+apiserver, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /audit/%s: status %d", apiserver, resp.StatusCode)
	}
}

// TestRealCapturesWithOneAPIServerLate replays the real captures (a peer killed, a peer
// stopped, a rolling-upgrade step, ...) with an apiserver late: the others' batches first, in
// order; then, after more than the chain window (its chains' other sides are final by then,
// and must be reopened or judged again), the late one's batches in reverse order, each split
// in two.
//
// With kas-c late, kas-a's forwards to it are lone successes without objects until kas-c's
// stream comes, judged local for the time being; what they say about kas-a is only assumed,
// and the forwards kas-c's records then show outrank it (correlate.Capabilities.Assume).
func TestRealCapturesWithOneAPIServerLate(t *testing.T) {
	scenarios := loadScenarios(t)
	for _, late := range []string{"kas-a", "kas-b", "kas-c"} {
		t.Run(late+" late", func(t *testing.T) {
			p := startBinary(t, filepath.Join(t.TempDir(), "data"), "--chain-window", "2s")
			type held struct {
				s  scenario
				ps post
			}
			var later []held
			for _, s := range scenarios {
				for _, ps := range s.Posts {
					if ps.APIServer == late {
						later = append(later, held{s, ps})
						continue
					}
					postFile(t, p.url, s, ps)
				}
			}
			time.Sleep(3 * time.Second)
			slices.Reverse(later)
			for _, h := range later {
				body, err := os.ReadFile(filepath.Join(h.s.dir, h.ps.File))
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range split(t, body) {
					postBody(t, p.url, late, b)
				}
			}
			// A final chain may still change: the late stream's evidence is judged when its
			// chains close, and chains decided without it are judged again then.
			time.Sleep(3 * 2 * time.Second)
			checkScenarios(t, p.url, scenarios)
		})
	}
}

// captureSink keeps each simulated apiserver's webhook batches as the bodies the real webhook
// backend would post (one EventList per batch the simulator flushed).
type captureSink struct {
	mu      sync.Mutex
	batches []capturedBatch
}

type capturedBatch struct {
	apiserver string
	body      []byte
}

func (c *captureSink) Send(apiserver string, events ...*auditinternal.Event) {
	l := auditv1.EventList{}
	l.Kind, l.APIVersion = "EventList", auditv1.SchemeGroupVersion.String()
	for _, ev := range events {
		var v1 auditv1.Event
		if err := auditv1.Convert_audit_Event_To_v1_Event(ev, &v1, nil); err != nil {
			panic(err)
		}
		l.Items = append(l.Items, v1)
	}
	b, err := json.Marshal(l)
	if err != nil {
		panic(err)
	}
	c.mu.Lock()
	c.batches = append(c.batches, capturedBatch{apiserver, b})
	c.mu.Unlock()
}

// TestSimulatedUpgradeInAnyArrivalOrder captures one simulated rolling upgrade with every
// fault (a peer SIGKILLed, MVP off on one server, lost peer audit, identity mismatches), then
// replays the very same bodies into a fresh peertrail three ways: as sent; with the newest
// apiserver's batches (the killed one, the only one serving the new resources at first) held
// back past the chain window; and with every apiserver's batches reordered within each few
// seconds and split. Each replay must classify every request as the simulator's truth says.
func TestSimulatedUpgradeInAnyArrivalOrder(t *testing.T) {
	up := simulate.DefaultUpgrade()
	// Long enough that the replacements and the kill's restart lie apart, as in a real
	// upgrade (the simulator's truth does not model an entry's own start as the cause of
	// its 404s).
	up.Duration, up.Rate, up.Seed = 45*time.Second, 25, 11
	up.Faults = simulate.Faults{DropPeerAudit: 0.05, IdentityMismatch: 0.1, Impersonation: 0.2,
		KillPeer: true, KillFor: 6 * time.Second, MVPOff: true}
	sink := &captureSink{}
	u := simulate.NewUpgrade(up, sink)
	if err := u.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	truths := u.Truths()
	t.Logf("captured %d batches; %s", len(sink.batches), simulate.Summary(truths))

	orders := map[string]func() []capturedBatch{
		"as sent": func() []capturedBatch { return slices.Clone(sink.batches) },
		"kas-3 late": func() []capturedBatch {
			var first, last []capturedBatch
			for _, b := range sink.batches {
				if b.apiserver == "kas-3" {
					last = append(last, b)
				} else {
					first = append(first, b)
				}
			}
			return append(first, append([]capturedBatch{{}}, last...)...) // {} marks the pause
		},
		"reordered and split": func() []capturedBatch {
			var out []capturedBatch
			bs := sink.batches
			for i := 0; i < len(bs); i += 12 {
				group := slices.Clone(bs[i:min(i+12, len(bs))])
				slices.Reverse(group)
				for _, b := range group {
					for _, part := range split(t, b.body) {
						out = append(out, capturedBatch{b.apiserver, part})
					}
				}
			}
			return out
		},
	}
	for _, name := range []string{"as sent", "kas-3 late", "reordered and split"} {
		t.Run(name, func(t *testing.T) {
			p := startBinary(t, filepath.Join(t.TempDir(), "data"), "--chain-window", "2s")
			for _, b := range orders[name]() {
				if b.apiserver == "" {
					time.Sleep(3 * time.Second) // past the chain window: the others' chains close first
					continue
				}
				postBody(t, p.url, b.apiserver, b.body)
			}
			// Final chains may still change while late evidence is judged (see above).
			time.Sleep(3 * 2 * time.Second)
			sc, err := simulate.Score(context.Background(), readerClient, p.url, truths, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d of %d right (%s)", sc.Matched, sc.Requests, sc.Percent())
			for _, m := range sc.Mismatches {
				t.Error("wrong:", m)
			}
			if sc.Matched != sc.Requests || sc.Requests != len(truths) {
				t.Errorf("%d of %d requests classified wrong, %d never final", sc.Requests-sc.Matched, sc.Requests, sc.Missing)
			}
			if sc.Confusion["proxy_failed"]["proxy_failed"] == 0 || sc.Confusion["broken"]["broken"] == 0 || sc.Confusion["misleading_404"]["misleading_404"] == 0 {
				t.Errorf("the capture lacks a class the test is about: %v", sc.Confusion)
			}
		})
	}
}
