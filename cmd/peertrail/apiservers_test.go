package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// peertrail apiservers asks /api/v1/apiservers for the capability history (?at= or ?since=)
// with the reader's token and prints one line per apiserver, version, role and resource.
func TestAPIServersPrintsTheHistory(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 16, 52, 0, 0, time.UTC)
	var gotQuery, gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/apiservers" {
			http.NotFound(w, r)
			return
		}
		gotQuery, gotAuth = r.URL.RawQuery, r.Header.Get("Authorization")
		json.NewEncoder(w).Encode(map[string]any{"at": t0, "since": t0.Add(-time.Hour), "until": t0.Add(time.Hour), "history": []chain.CapabilityRecord{
			{APIServer: "kas-b", Version: "v1.35.4", Role: chain.RoleForwarded, Group: "scheduling.k8s.io", APIVersion: "v1alpha2", Resource: "podgroups", From: t0, Until: t0.Add(time.Minute), Requests: 4},
			{APIServer: "kas-c", Version: "v1.36.3", Role: chain.RoleServed, Group: "scheduling.k8s.io", APIVersion: "v1alpha2", Resource: "podgroups", From: t0, Until: t0.Add(2 * time.Minute), Requests: 9},
			{APIServer: "kas-c", Version: "v1.36.3", Role: chain.RoleServed, Group: "", APIVersion: "v1", Resource: "configmaps", From: t0, Until: t0.Add(time.Minute), Requests: 1},
		}})
	}))
	defer srv.Close()
	t.Setenv(tokenEnv, "reader-token")
	out, err := runCLI(t, "apiservers", "--server", srv.URL, "--at", t0.Format(time.RFC3339), "--resource", "podgroups")
	if err != nil {
		t.Fatal(err)
	}
	if gotQuery != "at="+strings.ReplaceAll(t0.Format(time.RFC3339), ":", "%3A") || gotAuth != "Bearer reader-token" {
		t.Errorf("asked ?%s with %q", gotQuery, gotAuth)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		lines[strings.Join(strings.Fields(l), " ")] = true
	}
	for _, want := range []string{
		"kas-b v1.35.4 forwarded scheduling.k8s.io/v1alpha2/podgroups 2026-11-29T16:52:00Z 2026-11-29T16:53:00Z 4",
		"kas-c v1.36.3 served scheduling.k8s.io/v1alpha2/podgroups 2026-11-29T16:52:00Z 2026-11-29T16:54:00Z 9",
	} {
		if !lines[want] {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "configmaps") {
		t.Errorf("--resource podgroups printed configmaps:\n%s", out)
	}
	if _, err := runCLI(t, "apiservers", "--server", srv.URL, "--since", "6h"); err != nil || gotQuery != "since=6h" {
		t.Errorf("--since 6h asked ?%s (%v)", gotQuery, err)
	}
}
