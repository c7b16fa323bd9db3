package e2e

// TestCaptureRealFirstStart captures, from real kube-apiservers, what issue 39 found misjudged:
// a list of jobs through a 1.36 apiserver that serves no batch/v1 at all
// (--runtime-config=batch/v1=false), answered with its not-found handler's bare 404 in the
// moment between its readiness and its peer discovery (0-2 s), while its peers, which serve
// jobs, kept delivering their audit without a record of the request. kas-c (v1.36.3) starts
// first; kas-a and kas-b (v1.35.4) join it, and from the moment one of them is ready kas-c is
// asked for jobs until it forwards them.
//
// It is a cluster run of its own: peertrail sees kas-c's first start there, not a restart, so
// its replay (test/integration TestRealCaptureFirstStart) goes into a fresh peertrail, and the
// capture lives apart from the scenarios of TestCaptureRealMVP's run:
//
//	scripts/build-kube.sh
//	go test ./test/e2e -run TestCaptureRealFirstStart -count=1 -v -update-real-fixtures
//
// writes test/testdata/real/first-start/pre-discovery. Without the flag nothing in the
// repository is touched.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/test/e2e/harness"
)

func TestCaptureRealFirstStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
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
		Servers: []harness.ServerConfig{{Name: kasC, Version: harness.NewVersion,
			FeatureGates:  map[string]bool{"GenericWorkload": true},
			RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true", "batch/v1": "false"}}},
		Webhook: &harness.WebhookConfig{URL: rec.WebhookURL, BatchMaxWait: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{t: t, ctx: ctx, c: c, rec: rec, clients: map[string]*http.Client{},
		versions: map[string]string{kasA: harness.OldVersion, kasB: harness.OldVersion, kasC: harness.NewVersion}}

	cp.begin("pre-discovery", "kas-c (v1.36.3, --runtime-config=batch/v1=false) runs alone; kas-a and kas-b (v1.35.4, which serve batch/v1) start. From the moment one of them is ready, kas-c is asked to list jobs until it forwards them. Until its peer discovery has synced the new peers it answers from its not-found handler: 404, text/plain, audited as {\"code\":404} only, the shape of a forward's entry record; kas-a and kas-b, which serve jobs, deliver their audit all along without a record of those requests. This is the cluster's first start: peertrail sees no restart of any apiserver.")
	cp.cur.start = time.Now()
	type up struct {
		name string
		at   time.Time
		err  error
	}
	added := make(chan up, 2)
	for _, name := range []string{kasA, kasB} {
		at := time.Now()
		go func() {
			_, err := c.AddServer(ctx, harness.ServerConfig{Name: name, Version: harness.OldVersion})
			added <- up{name, at, err}
		}()
	}
	u := <-added
	if u.err != nil {
		t.Fatalf("AddServer %s: %v", u.name, u.err)
	}
	cp.cur.actions = append(cp.cur.actions, action{At: u.at, What: fmt.Sprintf("AddServer kas-a and kas-b v1.35.4; %s ready %s later", u.name, time.Since(u.at).Round(time.Millisecond))})
	misleading, forwarded := 0, 0
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && forwarded < 2; {
		r := cp.do(kasC, "admin", "GET", jobPath, "", nil)
		switch {
		case r.code == 404 && forwarded == 0:
			misleading++
			cp.local(r, expMisleading404, 404, "kas-c does not serve batch/v1 and had not yet discovered its peers, which do and were serving: its not-found handler's 404 (before its peer discovery synced)")
		case r.code == 200:
			forwarded++
			cp.proxied(r, "", 200, "forwarded once kas-c's peer discovery had synced")
		default:
			t.Fatalf("kas-c answered a list of jobs %d: %s", r.code, truncate(r.body, 300))
		}
		cp.pause(20 * time.Millisecond)
	}
	u = <-added
	if u.err != nil {
		t.Fatalf("AddServer %s: %v", u.name, u.err)
	}
	t.Logf("kas-c answered %d lists of jobs 404, then forwarded %d", misleading, forwarded)
	if misleading == 0 || forwarded < 2 {
		t.Fatalf("kas-c answered %d lists of jobs 404 before it forwarded %d: the moment before its peer discovery synced was not caught", misleading, forwarded)
	}
	cp.finish()
	cp.check()
	for _, l := range cp.cur.labels {
		if l.Expect == expMisleading404 && l.ContentType != "" && !strings.HasPrefix(l.ContentType, "text/plain") {
			t.Errorf("a 404 before peer discovery came as %s, want the not-found handler's text/plain", l.ContentType)
		}
	}
	if *updateRealFixtures {
		cp.writeFirstStart(filepath.Join("..", "testdata", "real", "first-start"))
	}
}

// writeFirstStart stores the scenario as write does, and besides the events of interest and
// a little background, of every batch that overlaps the scenario's window its earliest and
// latest event not the harness's own: the batch's span, over which the apiserver's audit was
// delivered whole, stays what it was.
func (cp *capture) writeFirstStart(root string) {
	s := cp.cur
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
	for _, p := range cp.rec.Posts() {
		evs, err := harness.ParsePost(p)
		if err != nil {
			cp.t.Fatal(err)
		}
		stage := func(e harness.Event) time.Time {
			ts, _ := time.Parse(time.RFC3339Nano, e.StageTimestamp)
			return ts
		}
		var first, last = -1, -1
		for i, e := range evs {
			if e.UserAgent == harness.HarnessUserAgent {
				continue
			}
			if first < 0 || stage(e).Before(stage(evs[first])) {
				first = i
			}
			if last < 0 || stage(e).After(stage(evs[last])) {
				last = i
			}
		}
		overlaps := first >= 0 && !stage(evs[last]).Before(s.start) && !stage(evs[first]).After(s.end)
		var keep []json.RawMessage
		for i, e := range evs {
			ts, _ := time.Parse(time.RFC3339Nano, e.RequestReceivedTimestamp)
			inWindow := !ts.Before(s.start) && !ts.After(s.end)
			switch {
			case interesting[e.AuditID]:
			case overlaps && (i == first || i == last):
			case inWindow && bgIDs[e.AuditID]:
			case inWindow && e.UserAgent != harness.HarnessUserAgent && bg[e.Server] < backgroundPerServer && isBackground(e):
				bg[e.Server]++
				bgIDs[e.AuditID] = true
			default:
				continue
			}
			keep = append(keep, e.Raw)
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
	sort.SliceStable(lf.Posts, func(i, j int) bool { return lf.Posts[i].Received.Before(lf.Posts[j].Received) })
	b, err := json.MarshalIndent(lf, "", "  ")
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "labels.json"), append(b, '\n'), 0o644); err != nil {
		cp.t.Fatal(err)
	}
	args := map[string][]string{}
	for _, srv := range cp.c.Servers() {
		a, err := srv.Args()
		if err != nil {
			cp.t.Fatal(err)
		}
		for i := range a {
			a[i] = strings.ReplaceAll(a[i], cp.c.Dir, "$DIR")
			a[i] = strings.ReplaceAll(a[i], cp.rec.URL, "https://127.0.0.1:$RECEIVER_PORT")
		}
		args[srv.Name+" ("+srv.Version+")"] = a
	}
	b, _ = json.MarshalIndent(map[string]any{"capturedAt": time.Now().UTC().Format(time.RFC3339), "kubeApiserverArgs": args}, "", "  ")
	if err := os.WriteFile(filepath.Join(root, "capture-args.json"), append(b, '\n'), 0o644); err != nil {
		cp.t.Fatal(err)
	}
}
