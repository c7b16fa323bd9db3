// Package deploy holds what puts peertrail into a cluster and the control plane in front of
// it: the audit policy the kube-apiservers load, their flags for the Mixed Version Proxy and
// the audit webhook (per version, as static-pod arguments and as kubeadm ClusterConfiguration
// patches), the audit webhook kubeconfig of each apiserver, and the Kustomize base and
// overlays under this directory (deploy/README.md is the runbook).
//
// Some files under deploy/ are generated (`peertrail deploy generate`, from the repository
// root): the control-plane flag files from this package's code, and copies of the generated
// alert rules (alerts/generated) and dashboards (dashboards/generated), because Kustomize
// reads files only from inside a kustomization's directory. A test fails while a committed
// copy differs from what Generate would write.
package deploy

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// AuditPolicy is deploy/control-plane/audit-policy.yaml.
//
//go:embed control-plane/audit-policy.yaml
var AuditPolicy []byte

// Copied files: source (from the repository root) -> destination under deploy/.
const (
	PrometheusRuleSource = "alerts/generated/prometheusrule.yaml"
	DashboardsSource     = "dashboards/generated"
	MonitoringDir        = "deploy/components/monitoring/generated"
)

// Files returns every generated file under deploy/, by path relative to the repository root
// root, with its content.
func Files(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, v := range Versions {
		args, err := StaticPodArgs(v, DefaultPaths)
		if err != nil {
			return nil, err
		}
		patch, err := KubeadmPatch(v, DefaultPaths)
		if err != nil {
			return nil, err
		}
		out["deploy/control-plane/"+v+"/kube-apiserver-args.yaml"] = args
		out["deploy/control-plane/"+v+"/kubeadm-clusterconfiguration.yaml"] = patch
	}
	rule, err := os.ReadFile(filepath.Join(root, PrometheusRuleSource))
	if err != nil {
		return nil, fmt.Errorf("deploy: the PrometheusRule (run `peertrail generate alerts` first): %w", err)
	}
	out[MonitoringDir+"/prometheusrule.yaml"] = rule
	dash, err := filepath.Glob(filepath.Join(root, DashboardsSource, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(dash) == 0 {
		return nil, fmt.Errorf("deploy: no dashboards in %s (run `peertrail generate dashboards` first)", DashboardsSource)
	}
	for _, p := range dash {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[MonitoringDir+"/dashboards/"+filepath.Base(p)] = b
	}
	return out, nil
}

// Generate writes Files(root) under root and removes generated dashboards whose source is
// gone. It returns the paths written.
func Generate(root string) ([]string, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(root, MonitoringDir, "dashboards", "*.json"))
	for _, p := range old {
		rel, _ := filepath.Rel(root, p)
		if _, keep := files[filepath.ToSlash(rel)]; !keep {
			if err := os.Remove(p); err != nil {
				return nil, err
			}
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		dst := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(dst, files[p], 0o644); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// Stale lists the generated files under root that differ from what Generate would write, or
// are missing, or should not be there.
func Stale(root string) ([]string, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	var stale []string
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil || string(got) != string(want) {
			stale = append(stale, p)
		}
	}
	extra, _ := filepath.Glob(filepath.Join(root, MonitoringDir, "dashboards", "*"))
	for _, p := range extra {
		rel, _ := filepath.Rel(root, p)
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			stale = append(stale, filepath.ToSlash(rel)+" (no source)")
		}
	}
	sort.Strings(stale)
	return stale, nil
}

// RepoRoot finds the repository root above dir (the directory holding go.mod of module
// github.com/peertrail/peertrail).
func RepoRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/peertrail/peertrail\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("deploy: no peertrail go.mod above %s", dir)
		}
	}
}
