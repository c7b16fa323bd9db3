package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/peertrail/peertrail/test/e2e/harness"
)

// TestHarnessLifecycle exercises the harness itself on real binaries: two
// servers of different versions, /version, MVP both ways, kill + restart,
// and a rolling-upgrade step.
func TestHarnessLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rec, pki := startRecorder(t)
	c, err := harness.Start(ctx, t, harness.Config{
		PKI: pki,
		Servers: []harness.ServerConfig{
			{Name: "old", Version: harness.OldVersion},
			{Name: "new", Version: harness.NewVersion, ExtraFlags: []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"}},
		},
		Webhook: &harness.WebhookConfig{URL: rec.WebhookURL},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers() {
		st := c.Get(ctx, s.Name, "/version")
		var v struct{ GitVersion, Major, Minor string }
		if err := json.Unmarshal([]byte(st.Body), &v); err != nil || v.GitVersion != s.Version {
			t.Errorf("%s /version: %s (%v)", s.Name, st, err)
		}
	}
	const pg = "/apis/scheduling.k8s.io/v1alpha2/podgroups"
	if err := c.WaitPeerProxy(ctx, "old", pg); err != nil {
		t.Fatal(err)
	}
	if st := c.Get(ctx, "new", pg); st.Code != http.StatusOK {
		t.Errorf("new serves podgroups itself: %s", st)
	}
	// Killed peer: 503 from the old entry.
	if err := c.Kill("new"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.WaitStatus(ctx, "old", pg, 30*time.Second, http.StatusServiceUnavailable); err != nil {
		t.Errorf("after kill: %v (%s)", err, st)
	}
	if err := c.StartServer(ctx, "new", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitPeerProxy(ctx, "old", pg); err != nil {
		t.Fatal(err)
	}
	// Rolling-upgrade step: old -> NewVersion, same identity and port.
	port := c.Server("old").Port
	if err := c.ReplaceServer(ctx, "old", harness.NewVersion); err != nil {
		t.Fatal(err)
	}
	if s := c.Server("old"); s.Port != port || s.Version != harness.NewVersion || len(s.LogFiles()) != 2 {
		t.Errorf("after replace: port %d version %s logs %v", s.Port, s.Version, s.LogFiles())
	}
	if st := c.Get(ctx, "old", "/version"); !json.Valid([]byte(st.Body)) || st.Code != 200 {
		t.Errorf("/version after replace: %s", st)
	}
	// The audit stream saw both servers.
	ctx2, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	for {
		ch := rec.Changed()
		seen := map[string]bool{}
		for _, p := range rec.Posts() {
			seen[p.Server] = true
		}
		if seen["old"] && seen["new"] {
			break
		}
		select {
		case <-ch:
		case <-ctx2.Done():
			t.Fatalf("audit posts only from %v", seen)
		}
	}
}

func startRecorder(t *testing.T) (*harness.Recorder, *harness.PKI) {
	t.Helper()
	pki, err := harness.NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := harness.StartRecorder(pki.ServerCA, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	return rec, pki
}
