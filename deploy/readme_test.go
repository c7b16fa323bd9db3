package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReadmeMatchesManifests: the commands deploy/README.md gives for reaching peertrail (the
// port-forward, then gate and chain on localhost) name the namespace, the Service and the API
// port the base manifests create, and the webhook URLs name the webhook port; a manifest
// changed without its README would otherwise hand a person commands that reach nothing.
func TestReadmeMatchesManifests(t *testing.T) {
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var kust struct{ Namespace string }
	var svc struct {
		Metadata struct{ Name string }
		Spec     struct {
			ClusterIP string `json:"clusterIP"`
			Ports     []struct {
				Name string
				Port int
			}
		}
	}
	for f, v := range map[string]any{"kustomization.yaml": &kust, "service.yaml": &svc} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "base", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	ports := map[string]int{}
	for _, p := range svc.Spec.Ports {
		ports[p.Name] = p.Port
	}
	if ports["api"] == 0 || ports["https"] == 0 {
		t.Fatalf("base/service.yaml: ports %v, want https and api", ports)
	}

	pf := regexp.MustCompile(`kubectl -n (\S+) port-forward svc/(\S+) (\d+):(\d+)`).FindAllSubmatch(readme, -1)
	if len(pf) == 0 {
		t.Fatal("deploy/README.md gives no port-forward to peertrail")
	}
	local := map[string]bool{}
	for _, m := range pf {
		if string(m[1]) != kust.Namespace || string(m[2]) != svc.Metadata.Name || string(m[4]) != strconv.Itoa(ports["api"]) {
			t.Errorf("README: %q, want namespace %s, svc/%s and the API port %d", m[0], kust.Namespace, svc.Metadata.Name, ports["api"])
		}
		local[string(m[3])] = true
	}
	clients := regexp.MustCompile(`peertrail (?:gate|chain <Audit-Id>|apiservers)[^\n`+"`"+`]*--server https://localhost:(\d+)`).FindAllSubmatch(readme, -1)
	if len(clients) == 0 {
		t.Fatal("deploy/README.md gives no peertrail gate --server https://localhost:PORT")
	}
	for _, m := range clients {
		if !local[string(m[1])] {
			t.Errorf("README: %q is not a port the README forwards (%v)", m[0], local)
		}
	}
	for _, m := range regexp.MustCompile(`kubectl -n (\S+) (?:create secret|get secret|rollout)`).FindAllSubmatch(readme, -1) {
		if string(m[1]) != kust.Namespace {
			t.Errorf("README: %q, want namespace %s", m[0], kust.Namespace)
		}
	}
	for _, m := range regexp.MustCompile(`--url https://([0-9.]+):(\d+)`).FindAllSubmatch(readme, -1) {
		if string(m[1]) != svc.Spec.ClusterIP || string(m[2]) != strconv.Itoa(ports["https"]) {
			t.Errorf("README: %q, want the Service's %s:%d", m[0], svc.Spec.ClusterIP, ports["https"])
		}
	}
}
