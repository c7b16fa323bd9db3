package simulate

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
)

func TestParseResourceAndMix(t *testing.T) {
	r, err := ParseResource("scheduling.k8s.io/v1alpha2/podgroups,ns=training,served-by=to|v1.37.0,weight=3")
	if err != nil {
		t.Fatal(err)
	}
	want := Resource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups", Namespace: "training", ServedBy: []string{"to", "v1.37.0"}, Weight: 3}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("got %+v", r)
	}
	if r, err := ParseResource("core/v1/pods"); err != nil || r.Group != "" || r.Resource != "pods" {
		t.Fatalf("core/v1/pods: %+v %v", r, err)
	}
	for _, bad := range []string{"pods", "apps/v1", "apps/v1/deployments,weight=-1", "apps/v1/deployments,color=red", "apps/v1/deployments,served-by="} {
		if _, err := ParseResource(bad); err == nil {
			t.Errorf("ParseResource(%q) accepted", bad)
		}
	}
	if m, err := ParseMix("get=5,create=1"); err != nil || m["get"] != 5 || m["create"] != 1 || len(m) != 2 {
		t.Fatalf("mix: %v %v", m, err)
	}
	for _, bad := range []string{"get", "patch=1", "get=x", "get=0"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}

type nullSink struct{}

func (*nullSink) Send(string, ...*auditinternal.Event) {}

// TestResourcesAndMixShapeTheTraffic: the configured resources and verb weights are what the
// clients request, and a resource only the new version serves is forwarded from the old ones.
func TestResourcesAndMixShapeTheTraffic(t *testing.T) {
	cfg := DefaultUpgrade()
	cfg.Duration, cfg.Rate = 2*time.Second, 1000
	cfg.Resources = []Resource{
		{Group: "apps", Version: "v1", Resource: "deployments", Namespace: "a", Weight: 3},
		{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups", Namespace: "b", ServedBy: []string{"to"}},
	}
	cfg.Mix = map[string]float64{"get": 4, "create": 1}
	u := NewUpgrade(cfg, &nullSink{})
	if err := u.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	resources, verbs, classes := map[string]int{}, map[string]int{}, map[string]int{}
	truths := u.Truths()
	for _, tr := range truths {
		if tr.Resource == "" || tr.Resource == "leases" && tr.Verb == "get" && tr.Class == "local" {
			continue // the apiservers' own discovery fetches and loopback lease reads
		}
		resources[tr.Resource]++
		verbs[tr.Verb]++
		if tr.Resource == "podgroups" {
			classes[tr.Class]++
		}
	}
	n := float64(resources["deployments"] + resources["podgroups"])
	if len(resources) != 2 || len(verbs) != 2 || n < 500 {
		t.Fatalf("resources %v, verbs %v", resources, verbs)
	}
	if share := float64(resources["deployments"]) / n; math.Abs(share-0.75) > 0.08 {
		t.Errorf("deployments are %.2f of the requests, want 0.75 (weight 3 of 4)", share)
	}
	if share := float64(verbs["get"]) / n; math.Abs(share-0.8) > 0.08 {
		t.Errorf("get is %.2f of the requests, want 0.8 (weight 4 of 5)", share)
	}
	if classes["proxied"] == 0 || classes["local"] == 0 {
		t.Errorf("podgroups (only the new version serves them) should be proxied from the old apiservers and local on the new: %v", classes)
	}
}
