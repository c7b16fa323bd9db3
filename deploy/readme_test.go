package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestReadmeMatchesManifests: the commands deploy/README.md gives for reaching peertrail (the
// port-forward, then gate and chain on localhost) name the namespace, the Service and the API
// port the base manifests create (or, for the HA layout, the aggregators' pods), and the webhook
// URLs name the webhook port (or the HA agents' loopback address); a manifest changed without
// its README would otherwise hand a person commands that reach nothing.
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

	// The HA layout: the aggregators' namespace and StatefulSet, the agents' namespace and
	// webhook address.
	ha := filepath.Join(root, "deploy", "overlays", "ha")
	var aggKust, agentKust struct{ Namespace string }
	var sts struct{ Metadata struct{ Name string } }
	var ds struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct{ Args []string }
				}
			}
		}
	}
	for f, v := range map[string]any{"aggregators/kustomization.yaml": &aggKust, "agents/kustomization.yaml": &agentKust,
		"aggregators/statefulset.yaml": &sts, "agents/daemonset.yaml": &ds} {
		b, err := os.ReadFile(filepath.Join(ha, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	agentListen := ""
	for _, a := range ds.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--listen="); ok {
			agentListen = v
		}
	}

	pf := regexp.MustCompile(`kubectl -n (\S+) port-forward (svc|pod)/(\S+) (\d+):(\d+)`).FindAllSubmatch(readme, -1)
	if len(pf) == 0 {
		t.Fatal("deploy/README.md gives no port-forward to peertrail")
	}
	local := map[string]bool{}
	aggregatorPod := regexp.MustCompile(`^` + regexp.QuoteMeta(sts.Metadata.Name) + `-\d+$`)
	for _, m := range pf {
		svcOK := string(m[2]) == "svc" && string(m[1]) == kust.Namespace && string(m[3]) == svc.Metadata.Name
		podOK := string(m[2]) == "pod" && string(m[1]) == aggKust.Namespace && aggregatorPod.Match(m[3])
		if !svcOK && !podOK || string(m[5]) != strconv.Itoa(ports["api"]) {
			t.Errorf("README: %q, want namespace %s and svc/%s (or an aggregator's pod, %s-N) and the API port %d", m[0], kust.Namespace, svc.Metadata.Name, sts.Metadata.Name, ports["api"])
		}
		local[string(m[4])] = true
	}
	clients := regexp.MustCompile(`peertrail (?:gate|chain <Audit-Id>|apiservers)[^\n`+"`"+`]*--server (https://localhost:\d+(?:,https://localhost:\d+)*)`).FindAllSubmatch(readme, -1)
	if len(clients) == 0 {
		t.Fatal("deploy/README.md gives no peertrail gate --server https://localhost:PORT")
	}
	for _, m := range clients {
		for _, u := range strings.Split(string(m[1]), ",") {
			if port := strings.TrimPrefix(u, "https://localhost:"); !local[port] {
				t.Errorf("README: %q: %s is not a port the README forwards (%v)", m[0], port, local)
			}
		}
	}
	for _, m := range regexp.MustCompile(`kubectl -n (\S+) (?:create secret|get secret|rollout)`).FindAllSubmatch(readme, -1) {
		if ns := string(m[1]); ns != kust.Namespace && ns != agentKust.Namespace {
			t.Errorf("README: %q, want namespace %s (or the HA agents' %s)", m[0], kust.Namespace, agentKust.Namespace)
		}
	}
	for _, m := range regexp.MustCompile(`--url https://([0-9.]+):(\d+)`).FindAllSubmatch(readme, -1) {
		addr := string(m[1]) + ":" + string(m[2])
		if addr != svc.Spec.ClusterIP+":"+strconv.Itoa(ports["https"]) && addr != agentListen {
			t.Errorf("README: %q, want the Service's %s:%d or the HA agents' %s", m[0], svc.Spec.ClusterIP, ports["https"], agentListen)
		}
	}
}
