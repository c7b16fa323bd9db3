package e2e

// Tests of deploy/ against real kube-apiservers (v1.35.4 and v1.36.3, test/e2e/harness):
//
//   - TestDeployManifestsAccepted: every Kustomize build (base and each overlay, built by the
//     kustomize CLI that kubectl 1.36 embeds) is accepted by both apiserver versions in a
//     server-side dry run, after the prometheus-operator and cert-manager CRDs (from those
//     projects' own Go modules) were applied, with no warning (the namespace warns on the
//     restricted Pod Security Standard).
//   - TestDeployControlPlaneEndToEnd: a real peertrail started with the Deployment's own args,
//     config and mounts; the apiservers load deploy/'s audit policy, deploy/'s flag lists for
//     their version and the webhook kubeconfigs written by `peertrail deploy webhook-config`;
//     a request forwarded by the Mixed Version Proxy is classified proxied, seen with the
//     runbook's `peertrail chain` command.
//
// Needs: the kube-apiserver binaries (scripts/build-kube.sh), etcd, and the Go module proxy
// (the kustomize CLI and the CRD modules are fetched and cached on first use).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/deploy"
	"github.com/peertrail/peertrail/internal/childproc"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/e2e/harness"
)

const (
	// kustomizeModule is the kustomize CLI kubectl 1.36 embeds (k8s.io/kubectl v0.36.3's go.mod).
	kustomizeModule = "sigs.k8s.io/kustomize/kustomize/v5@v5.8.1"
	// The CRDs come from the projects' own modules, pinned by version and module hash.
	promOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
	promOperatorSum    = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
	certManagerModule  = "github.com/cert-manager/cert-manager@v1.21.2"

	depNamespace = "peertrail"
	// depServiceCIDR is kubeadm's default --service-cluster-ip-range, where the base Service's
	// fixed ClusterIP lies.
	depServiceCIDR = "10.96.0.0/12"
	depPodGroups   = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
	depClientIP    = "127.0.0.2"
	// The peertrail-readers Secret's tokens in TestDeployControlPlaneEndToEnd.
	depPromToken    = "deploy-test-prometheus-token"
	depUpgradeToken = "deploy-test-upgrade-token"
)

// depBuilds are the kustomizations under deploy/ that users apply or build on.
var depBuilds = []string{"base", "overlays/default", "overlays/cert-manager", "overlays/external-clickhouse", "overlays/clickhouse", depHA}

// depHA is the HA layout's overlay: aggregators in depNamespace, agents in depAgentNamespace.
const (
	depHA             = "overlays/ha"
	depAgentNamespace = "peertrail-agent"
)

func depRepoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := deploy.RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// kustomizeBinary installs the pinned kustomize CLI into the cache (once) and returns it.
func kustomizeBinary(t *testing.T) string {
	t.Helper()
	version := kustomizeModule[strings.LastIndexByte(kustomizeModule, '@')+1:]
	dir := filepath.Join(harness.CacheDir(), "tools", "kustomize-"+version)
	bin := filepath.Join(dir, "kustomize")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "install", kustomizeModule)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", kustomizeModule, err, out)
	}
	return bin
}

// kustomizeBuild builds deploy/<dir> and returns its objects.
func kustomizeBuild(t *testing.T, bin, root, dir string) []*unstructured.Unstructured {
	t.Helper()
	cmd := exec.Command(bin, "build", filepath.Join(root, "deploy", dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build deploy/%s: %v\n%s", dir, err, stderr.String())
	}
	objs, err := decodeObjects(out)
	if err != nil {
		t.Fatalf("deploy/%s: %v", dir, err)
	}
	if len(objs) == 0 {
		t.Fatalf("deploy/%s built no objects", dir)
	}
	return objs
}

func decodeObjects(b []byte) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		var m map[string]any
		if err := utiljson.Unmarshal(raw, &m); err != nil { // integers as int64
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// moduleDir downloads module@version through the Go module proxy and returns its directory,
// checking its hash when sum is given (go also checks it against the checksum database).
func moduleDir(t *testing.T, modVersion, sum string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v\n%s", modVersion, err, out)
	}
	var info struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", modVersion, err, out)
	}
	if sum != "" && info.Sum != sum {
		t.Fatalf("%s: module hash %s, pinned %s", modVersion, info.Sum, sum)
	}
	return info.Dir
}

// warnings collects the Warning headers the apiserver sends.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	w.msgs = append(w.msgs, text)
	w.mu.Unlock()
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.msgs
	w.msgs = nil
	return m
}

type depClient struct {
	dyn  dynamic.Interface
	warn *warnings
}

// depResources maps the kinds deploy/ uses to their resources (true: namespaced). A fixed
// table instead of discovery keeps client-go's OpenAPI dependencies out of go.mod; a kind
// missing here fails the test.
var depResources = map[schema.GroupKind]struct {
	resource   string
	namespaced bool
}{
	{Group: "", Kind: "Namespace"}:                           {"namespaces", false},
	{Group: "", Kind: "ServiceAccount"}:                      {"serviceaccounts", true},
	{Group: "", Kind: "ConfigMap"}:                           {"configmaps", true},
	{Group: "", Kind: "Secret"}:                              {"secrets", true},
	{Group: "", Kind: "Service"}:                             {"services", true},
	{Group: "", Kind: "PersistentVolumeClaim"}:               {"persistentvolumeclaims", true},
	{Group: "apps", Kind: "Deployment"}:                      {"deployments", true},
	{Group: "apps", Kind: "StatefulSet"}:                     {"statefulsets", true},
	{Group: "apps", Kind: "DaemonSet"}:                       {"daemonsets", true},
	{Group: "policy", Kind: "PodDisruptionBudget"}:           {"poddisruptionbudgets", true},
	{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:      {"networkpolicies", true},
	{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}: {"servicemonitors", true},
	{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}: {"prometheusrules", true},
	{Group: "cert-manager.io", Kind: "Certificate"}:          {"certificates", true},
	{Group: "cert-manager.io", Kind: "Issuer"}:               {"issuers", true},
}

func newDepClient(t *testing.T, cfg *rest.Config) *depClient {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &depClient{dyn: dyn, warn: w}
}

// apply server-side applies obj; dryRun makes it a dry run (nothing is stored).
func (c *depClient) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) error {
	gvk := obj.GroupVersionKind()
	m, ok := depResources[gvk.GroupKind()]
	if !ok {
		return fmt.Errorf("%s: not in depResources", gvk)
	}
	gvr := gvk.GroupVersion().WithResource(m.resource)
	opts := metav1.ApplyOptions{FieldManager: "peertrail-deploy-test", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = c.dyn.Resource(gvr)
	if m.namespaced {
		ns := obj.GetNamespace()
		if ns == "" {
			return fmt.Errorf("%s %s has no namespace", gvk.Kind, obj.GetName())
		}
		ri = c.dyn.Resource(gvr).Namespace(ns)
	}
	_, err := ri.Apply(ctx, obj.GetName(), obj, opts)
	return err
}

// applyCRDs applies the CRD files for real and waits until each is established.
func (c *depClient) applyCRDs(ctx context.Context, t *testing.T, files ...string) {
	t.Helper()
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeObjects(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			if o.GetKind() != "CustomResourceDefinition" {
				t.Fatalf("%s holds a %s", f, o.GetKind())
			}
			if _, err := c.dyn.Resource(crdGVR).Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "peertrail-deploy-test", Force: true}); err != nil {
				t.Fatalf("apply CRD %s: %v", o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	for _, n := range names {
		if err := poll(ctx, 60*time.Second, func() (bool, error) {
			o, err := c.dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, cnd := range conds {
				m, _ := cnd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Fatalf("CRD %s not established: %v", n, err)
		}
	}
}

func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, namePrefix string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && strings.HasPrefix(o.GetName(), namePrefix) {
			out = append(out, o)
		}
	}
	return out
}

func one(t *testing.T, objs []*unstructured.Unstructured, kind, namePrefix string) *unstructured.Unstructured {
	t.Helper()
	f := find(objs, kind, namePrefix)
	if len(f) != 1 {
		t.Fatalf("want one %s %s*, got %d", kind, namePrefix, len(f))
	}
	return f[0]
}

func TestDeployManifestsAccepted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := depRepoRoot(t)
	kbin := kustomizeBinary(t)
	builds := map[string][]*unstructured.Unstructured{}
	for _, d := range depBuilds {
		builds[d] = kustomizeBuild(t, kbin, root, d)
	}
	t.Run("structure", func(t *testing.T) { checkBuilds(t, root, builds) })

	promDir := moduleDir(t, promOperatorModule, promOperatorSum)
	cmDir := moduleDir(t, certManagerModule, "")
	c, err := harness.Start(ctx, t, harness.Config{
		Servers: []harness.ServerConfig{
			{Name: "cp-old", Version: harness.OldVersion},
			{Name: "cp-new", Version: harness.NewVersion},
		},
		AuditPolicyFile: filepath.Join(root, "deploy/control-plane/audit-policy.yaml"),
		ExtraFlags:      []string{"--service-cluster-ip-range=" + depServiceCIDR},
	})
	if err != nil {
		t.Fatal(err)
	}
	admin := newDepClient(t, c.AdminConfig("cp-new"))
	admin.applyCRDs(ctx, t,
		filepath.Join(promDir, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"),
		filepath.Join(promDir, "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml"),
		filepath.Join(cmDir, "deploy/crds/cert-manager.io_certificates.yaml"),
		filepath.Join(cmDir, "deploy/crds/cert-manager.io_issuers.yaml"),
	)
	// The namespaces for real (namespaced dry runs need them): the base's, and the HA layout's
	// agents'.
	for _, ns := range []*unstructured.Unstructured{one(t, builds["base"], "Namespace", depNamespace), named(t, builds[depHA], "Namespace", depAgentNamespace)} {
		if err := admin.apply(ctx, ns, false); err != nil {
			t.Fatal(err)
		}
	}

	for _, server := range []string{"cp-old", "cp-new"} {
		cl := newDepClient(t, c.AdminConfig(server))
		// The warning check is live: a pod template without any security context in the
		// namespace draws a Pod Security (restricted) warning.
		bad := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "unrestricted", "namespace": depNamespace},
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{"a": "b"}},
					"spec": map[string]any{"containers": []any{map[string]any{
						"name": "c", "image": "x"}}},
				},
			},
		}}
		if err := cl.apply(ctx, bad, true); err != nil {
			t.Fatalf("%s: dry run of the control Deployment: %v", server, err)
		}
		if w := cl.warn.take(); !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "PodSecurity") }) {
			t.Fatalf("%s: no Pod Security warning for an unrestricted pod template (warnings %q): the check below would prove nothing", server, w)
		}
		for _, d := range depBuilds {
			for _, o := range builds[d] {
				if err := cl.apply(ctx, o, true); err != nil {
					t.Errorf("%s: deploy/%s: %s %s/%s refused: %v", server, d, o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
				if w := cl.warn.take(); len(w) > 0 {
					t.Errorf("%s: deploy/%s: %s %s: warnings %q", server, d, o.GetKind(), o.GetName(), w)
				}
			}
		}
		// What `peertrail deploy apiserver-monitor` writes.
		targets, err := deploy.ParseAPIServerTargets([]string{"cp-old=10.0.0.11", "cp-new=fd00::12"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := deploy.APIServerMonitor(depNamespace, targets)
		if err != nil {
			t.Fatal(err)
		}
		mon := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &mon.Object); err != nil {
			t.Fatal(err)
		}
		if err := cl.apply(ctx, mon, true); err != nil {
			t.Errorf("%s: the apiserver-monitor ServiceMonitor refused: %v", server, err)
		}
		if w := cl.warn.take(); len(w) > 0 {
			t.Errorf("%s: the apiserver-monitor ServiceMonitor: warnings %q", server, w)
		}
	}
	// Nothing but the namespace was stored by the dry runs.
	if _, err := admin.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(depNamespace).Get(ctx, "peertrail", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run stored the Deployment (or failed otherwise): %v", err)
	}
}

// checkOneProcess: one peertrail serve, on one volume.
func checkOneProcess(t *testing.T, d string, objs []*unstructured.Unstructured) {
	t.Helper()
	dep := one(t, objs, "Deployment", "peertrail")
	if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != 1 {
		t.Errorf("deploy/%s: %d replicas, want 1 (one spool, one correlator)", d, r)
	}
	if s, _, _ := unstructured.NestedString(dep.Object, "spec", "strategy", "type"); s != "Recreate" {
		t.Errorf("deploy/%s: strategy %q, want Recreate (ReadWriteOnce data volume)", d, s)
	}
	claim := ""
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		if n, ok, _ := unstructured.NestedString(v.(map[string]any), "persistentVolumeClaim", "claimName"); ok {
			claim = n
		}
	}
	if claim == "" || len(find(objs, "PersistentVolumeClaim", claim)) != 1 {
		t.Errorf("deploy/%s: the data volume's claim %q is not in the build", d, claim)
	}
}

// checkBuilds asserts what the manifests promise beyond being valid.
func checkBuilds(t *testing.T, root string, builds map[string][]*unstructured.Unstructured) {
	rule, err := os.ReadFile(filepath.Join(root, deploy.PrometheusRuleSource))
	if err != nil {
		t.Fatal(err)
	}
	var wantRule map[string]any
	if err := yaml.Unmarshal(rule, &wantRule); err != nil {
		t.Fatal(err)
	}
	dashboards, _ := filepath.Glob(filepath.Join(root, deploy.DashboardsSource, "*.json"))
	if len(dashboards) == 0 {
		t.Fatalf("no dashboards in %s", deploy.DashboardsSource)
	}
	for d, objs := range builds {
		for _, o := range objs {
			namespaced := o.GetKind() != "Namespace"
			want := depNamespace
			if d == depHA && strings.HasPrefix(o.GetName(), "peertrail-agent") {
				want = depAgentNamespace
			}
			if namespaced && o.GetNamespace() != want {
				t.Errorf("deploy/%s: %s %s in namespace %q, want %q", d, o.GetKind(), o.GetName(), o.GetNamespace(), want)
			}
		}
		if d == depHA {
			checkHABuild(t, objs)
		} else {
			checkOneProcess(t, d, objs)
		}
		if d == "base" {
			continue
		}
		// Monitoring: the PrometheusRule is alerts/generated's; the dashboards are
		// dashboards/generated's, labelled for the Grafana sidecar.
		pr := one(t, objs, "PrometheusRule", "peertrail")
		if fmt.Sprint(pr.Object["spec"]) != fmt.Sprint(wantRule["spec"]) {
			t.Errorf("deploy/%s: PrometheusRule spec differs from %s", d, deploy.PrometheusRuleSource)
		}
		named(t, objs, "ServiceMonitor", "peertrail")
		for _, f := range dashboards {
			want, _ := os.ReadFile(f)
			key := filepath.Base(f)
			found := false
			for _, cm := range find(objs, "ConfigMap", "peertrail-dashboard-") {
				if data, ok, _ := unstructured.NestedString(cm.Object, "data", key); ok {
					found = true
					if data != string(want) {
						t.Errorf("deploy/%s: %s differs from %s", d, cm.GetName(), f)
					}
					if cm.GetLabels()["grafana_dashboard"] != "1" {
						t.Errorf("deploy/%s: %s lacks the label grafana_dashboard: \"1\"", d, cm.GetName())
					}
				}
			}
			if !found {
				t.Errorf("deploy/%s: no ConfigMap holds dashboard %s", d, key)
			}
		}
	}
	// cert-manager: the serving certificate names the fixed ClusterIP the apiservers dial, and
	// one client certificate exists per apiserver of the config, with its certSubject.
	objs := builds["overlays/cert-manager"]
	svcIP, _, _ := unstructured.NestedString(one(t, objs, "Service", "peertrail").Object, "spec", "clusterIP")
	ips, _, _ := unstructured.NestedStringSlice(one(t, objs, "Certificate", "peertrail-tls").Object, "spec", "ipAddresses")
	if svcIP == "" || !slices.Contains(ips, svcIP) {
		t.Errorf("serving certificate IPs %v lack the Service's clusterIP %q", ips, svcIP)
	}
	cfgData, _, _ := unstructured.NestedString(one(t, objs, "ConfigMap", "peertrail-config").Object, "data", "config.yaml")
	var cfg struct {
		APIServers []struct{ Name, CertSubject string } `json:"apiservers"`
	}
	if err := yaml.Unmarshal([]byte(cfgData), &cfg); err != nil || len(cfg.APIServers) == 0 {
		t.Fatalf("config.yaml: %v", err)
	}
	for _, a := range cfg.APIServers {
		found := false
		for _, crt := range find(objs, "Certificate", "") {
			cn, _, _ := unstructured.NestedString(crt.Object, "spec", "commonName")
			usages, _, _ := unstructured.NestedStringSlice(crt.Object, "spec", "usages")
			if cn == a.CertSubject && slices.Contains(usages, "client auth") {
				found = true
			}
		}
		if !found {
			t.Errorf("no client Certificate with commonName %q for apiserver %s", a.CertSubject, a.Name)
		}
	}
	// In-cluster ClickHouse: the schema is written by the same peertrail image as the
	// Deployment's, and peertrail is pointed at that server.
	objs = builds["overlays/clickhouse"]
	image := func(o *unstructured.Unstructured, path ...string) string {
		cs, _, _ := unstructured.NestedSlice(o.Object, path...)
		if len(cs) == 0 {
			return ""
		}
		return cs[0].(map[string]any)["image"].(string)
	}
	depImage := image(one(t, objs, "Deployment", "peertrail"), "spec", "template", "spec", "containers")
	initImage := image(one(t, objs, "StatefulSet", "clickhouse"), "spec", "template", "spec", "initContainers")
	if depImage == "" || depImage != initImage {
		t.Errorf("the ClickHouse schema init container runs %q, peertrail runs %q", initImage, depImage)
	}
	dsn, _, _ := unstructured.NestedString(one(t, objs, "ConfigMap", "peertrail-clickhouse").Object, "data", "dsn")
	if !strings.Contains(dsn, "clickhouse."+depNamespace+".svc:9000") {
		t.Errorf("in-cluster ClickHouse overlay: dsn %q does not point at the clickhouse Service", dsn)
	}
}

// --- end to end: peertrail as deployed, the control plane as deploy/ configures it ---

// container is the peertrail container of a Deployment, with its volumes.
type container struct {
	args    []string
	mounts  map[string]string // mountPath -> volume name
	volumes map[string]map[string]any
	// sqlListen and apiListen replace the --sql-listen and --api-listen addresses when run here.
	sqlListen string
	apiListen string
}

func peertrailContainer(t *testing.T, dep *unstructured.Unstructured) container {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("want one container, got %d", len(cs))
	}
	c := container{mounts: map[string]string{}, volumes: map[string]map[string]any{}}
	c.args, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	mounts, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "volumeMounts")
	for _, m := range mounts {
		mm := m.(map[string]any)
		c.mounts[mm["mountPath"].(string)] = mm["name"].(string)
	}
	vols, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "volumes")
	for _, v := range vols {
		vm := v.(map[string]any)
		c.volumes[vm["name"].(string)] = vm
	}
	return c
}

// localArgs maps the container onto this machine: each volume becomes a directory filled from
// the build's ConfigMaps or from secrets (key -> content), the args' mount paths point at
// those directories, and the listen address at listen.
func (c container) localArgs(t *testing.T, dir string, objs []*unstructured.Unstructured, secrets map[string]map[string][]byte, listen string) []string {
	t.Helper()
	repl := map[string]string{}
	for mountPath, vol := range c.mounts {
		local := filepath.Join(dir, vol)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		v := c.volumes[vol]
		switch {
		case v["configMap"] != nil:
			name, _, _ := unstructured.NestedString(v, "configMap", "name")
			cm := one(t, objs, "ConfigMap", name)
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			for k, val := range data {
				if err := os.WriteFile(filepath.Join(local, k), []byte(val), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		case v["secret"] != nil:
			name, _, _ := unstructured.NestedString(v, "secret", "secretName")
			items, _, _ := unstructured.NestedSlice(v, "secret", "items")
			if len(items) == 0 {
				// Without items every key is a file of its own name.
				if len(secrets[name]) == 0 {
					t.Fatalf("test has no keys of Secret %s", name)
				}
				for key, content := range secrets[name] {
					if err := os.WriteFile(filepath.Join(local, key), content, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, it := range items {
				key := it.(map[string]any)["key"].(string)
				path := it.(map[string]any)["path"].(string)
				content, ok := secrets[name][key]
				if !ok {
					t.Fatalf("test has no key %s of Secret %s", key, name)
				}
				if err := os.WriteFile(filepath.Join(local, path), content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		repl[mountPath] = local
	}
	// Longest mount paths first, so nested mounts win.
	paths := make([]string, 0, len(repl))
	for p := range repl {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	var out []string
	for _, a := range c.args {
		if strings.HasPrefix(a, "--listen=") {
			a = "--listen=" + listen
		}
		if strings.HasPrefix(a, "--sql-listen=") {
			a = "--sql-listen=" + c.sqlListen
		}
		if strings.HasPrefix(a, "--api-listen=") {
			a = "--api-listen=" + c.apiListen
		}
		for _, p := range paths {
			if i := strings.Index(a, "="+p); i >= 0 && (len(a) == i+1+len(p) || a[i+1+len(p)] == '/') {
				a = a[:i+1] + repl[p] + a[i+1+len(p):]
				break
			}
		}
		if strings.Contains(a, "=/etc/") || strings.Contains(a, "=/var/") {
			t.Fatalf("arg %s refers to a path no volume mounts", a)
		}
		out = append(out, a)
	}
	return out
}

// staticPodArgs reads deploy/control-plane/<version>/kube-apiserver-args.yaml and maps its
// paths onto the harness's files. The per-node peer address flags are left to the harness,
// and so are the flags kubeadm sets (the harness sets them too, like kubeadm): given twice,
// the list-valued --requestheader-*-headers would name each header twice and the peer would
// record every group twice. Those are returned apart, for checking that the harness has them.
func staticPodArgs(t *testing.T, root, version string, files map[string]string) (args, preset []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy/control-plane", version, "kube-apiserver-args.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	if err := yaml.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	flags, err := deploy.APIServerFlags(version, deploy.DefaultPaths)
	if err != nil {
		t.Fatal(err)
	}
	kubeadmSets := map[string]bool{}
	for _, f := range flags {
		kubeadmSets["--"+f.Name] = f.KubeadmDefault
	}
	for _, a := range list {
		name, val, _ := strings.Cut(a, "=")
		if name == "--peer-advertise-ip" || name == "--peer-advertise-port" {
			continue
		}
		if strings.HasPrefix(val, "/") {
			local, ok := files[val]
			if !ok {
				t.Fatalf("%s: no local file for %s", version, val)
			}
			a = name + "=" + local
		}
		if kubeadmSets[name] {
			preset = append(preset, a)
			continue
		}
		args = append(args, a)
	}
	return args, preset
}

// checkFlagsKnown checks that every flag of the version's list is one its kube-apiserver has.
func checkFlagsKnown(t *testing.T, root, version, binVersion string) {
	t.Helper()
	bin, err := harness.Binary(binVersion)
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	b, err := os.ReadFile(filepath.Join(root, "deploy/control-plane", version, "kube-apiserver-args.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	if err := yaml.Unmarshal(b, &args); err != nil {
		t.Fatal(err)
	}
	var patch struct {
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		} `json:"apiServer"`
	}
	pb, err := os.ReadFile(filepath.Join(root, "deploy/control-plane", version, "kubeadm-clusterconfiguration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(pb, &patch); err != nil {
		t.Fatal(err)
	}
	for _, ea := range patch.APIServer.ExtraArgs {
		args = append(args, "--"+ea.Name+"="+ea.Value)
	}
	if len(args) < 10 {
		t.Fatalf("%s: only %d flags", version, len(args))
	}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if !bytes.Contains(help, []byte(" "+name+" ")) {
			t.Errorf("kube-apiserver %s has no flag %s (deploy/control-plane/%s)", binVersion, name, version)
		}
	}
}

func TestDeployControlPlaneEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := depRepoRoot(t)
	checkFlagsKnown(t, root, "v1.35", harness.OldVersion)
	checkFlagsKnown(t, root, "v1.36", harness.NewVersion)

	dir := harness.TempDir(t)
	pki, err := harness.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	// peertrail's serving certificate and the CA of the apiservers' webhook client certificates.
	serving, err := pki.ServerCA.IssueServing("peertrail", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	auditCA, err := harness.NewCA(filepath.Join(dir, "pki"), "audit-ca")
	if err != nil {
		t.Fatal(err)
	}

	// peertrail exactly as the default overlay runs it.
	objs := kustomizeBuild(t, kustomizeBinary(t), root, "overlays/default")
	ctr := peertrailContainer(t, one(t, objs, "Deployment", "peertrail"))
	cfgData, _, _ := unstructured.NestedString(one(t, objs, "ConfigMap", "peertrail-config").Object, "data", "config.yaml")
	var cfg struct {
		APIServers []struct{ Name, CertSubject string } `json:"apiservers"`
	}
	if err := yaml.Unmarshal([]byte(cfgData), &cfg); err != nil || len(cfg.APIServers) < 2 {
		t.Fatalf("config.yaml: %v (%d apiservers)", err, len(cfg.APIServers))
	}
	oldName, newName := cfg.APIServers[0].Name, cfg.APIServers[1].Name
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	base := "https://" + listen
	sqlPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctr.sqlListen = fmt.Sprintf("127.0.0.1:%d", sqlPort)
	apiPort, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctr.apiListen = fmt.Sprintf("127.0.0.1:%d", apiPort)
	api := "https://" + ctr.apiListen
	if !slices.ContainsFunc(ctr.args, func(a string) bool { return strings.HasPrefix(a, "--api-listen=") }) {
		t.Fatal("the Deployment does not set --api-listen: the NetworkPolicy admits only the apiservers to the webhook's port")
	}
	args := ctr.localArgs(t, filepath.Join(dir, "peertrail"), objs, map[string]map[string][]byte{
		"peertrail-tls":      {"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM, "ca.crt": pki.ServerCA.CertPEM},
		"peertrail-audit-ca": {"ca.crt": auditCA.CertPEM},
		"peertrail-sql":      {"password": []byte("grafana-secret\n")},
		"peertrail-readers":  {"prometheus": []byte(depPromToken + "\n"), "upgrade": []byte(depUpgradeToken + "\n")},
	}, listen)
	ptBin := filepath.Join(dir, "peertrail-bin")
	build := exec.Command("go", "build", "-o", ptBin, "./cmd/peertrail")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build peertrail: %v\n%s", err, out)
	}
	checkServeFlags(t, ptBin, root)
	checkClickHouseInit(t, ptBin, root, filepath.Join(dir, "initdb"))
	stopPT := startPeertrail(t, ptBin, args, filepath.Join(dir, "peertrail.log"))
	defer stopPT()

	caPool := pki.ServerCA.Pool()
	// anon is the kubelet's probes; hc reads as Prometheus does, with the prometheus key of the
	// peertrail-readers Secret (the ServiceMonitor's).
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool}}}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: bearerRT{rt: anon.Transport, token: depPromToken}}
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		resp, err := hc.Get(base + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	}); err != nil {
		t.Fatalf("peertrail not ready: %v\n%s", err, tailOf(filepath.Join(dir, "peertrail.log")))
	}
	// What the probes (no credential) and Prometheus (its reader token, no client certificate)
	// do works on the API port, and reads without a reader's token are refused; the webhook's
	// port serves only /audit (with a client certificate) and the probes.
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/gate"} {
		if code := httpCode(t, hc, "GET", api+p); code != 200 {
			t.Errorf("GET %s on the API port with Prometheus' token: %d", p, code)
		}
	}
	for p, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401, "/api/v1/gate": 401, "/api/v1/apiservers": 401} {
		if code := httpCode(t, anon, "GET", api+p); code != want {
			t.Errorf("GET %s on the API port without a credential: %d, want %d", p, code, want)
		}
	}
	for p, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 404, "/api/v1/gate": 404} {
		if code := httpCode(t, hc, "GET", base+p); code != want {
			t.Errorf("GET %s on the webhook's port: %d, want %d", p, code, want)
		}
	}
	if code := httpCode(t, anon, "POST", base+"/audit/"+oldName); code != http.StatusUnauthorized {
		t.Errorf("POST /audit without a client certificate: %d, want 401", code)
	}
	if code := httpCode(t, hc, "POST", base+"/audit/"+oldName); code != http.StatusForbidden {
		t.Errorf("POST /audit with a reader's token: %d, want 403", code)
	}
	// Grafana's view of the embedded store (components/grafana-sql): the SQL interface serves
	// TLS with the serving certificate, asks for the password from the Secret, and answers with
	// it.
	sqlURL := "https://" + ctr.sqlListen + "/?query=" + url.QueryEscape("SELECT count() FROM peertrail.events")
	if code := httpCode(t, anon, "GET", sqlURL); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Errorf("SQL without the password: %d, want 401 or 403", code)
	}
	req, _ := http.NewRequest(http.MethodGet, sqlURL, nil)
	req.SetBasicAuth("grafana", "grafana-secret")
	if resp, err := anon.Do(req); err != nil {
		t.Errorf("SQL with the password: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("SQL with the password: %d", resp.StatusCode)
		}
	}

	// The webhook kubeconfigs, written by the command the runbook uses.
	kubeconfigs := map[string]string{}
	for _, a := range cfg.APIServers[:2] {
		kp, err := auditCA.IssueClient("audit-"+a.Name, a.CertSubject)
		if err != nil {
			t.Fatal(err)
		}
		kc := filepath.Join(dir, "webhook", a.Name, deploy.WebhookKubeconfig)
		cmd := exec.Command(ptBin, "deploy", "webhook-config", "--apiserver", a.Name, "--url", base,
			"--ca", pki.ServerCA.CertFile, "--client-cert", kp.CertFile, "--client-key", kp.KeyFile, "-o", kc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("peertrail deploy webhook-config: %v\n%s", err, out)
		}
		kubeconfigs[a.Name] = kc
	}

	// The apiservers: deploy's audit policy and deploy's flag list for their version.
	policy := filepath.Join(root, "deploy/control-plane/audit-policy.yaml")
	files := func(name string) map[string]string {
		pkiDir, ptDir := deploy.DefaultPaths.PKIDir, deploy.DefaultPaths.PeertrailDir
		return map[string]string{
			pkiDir + "/ca.crt":                     pki.ServerCA.CertFile,
			pkiDir + "/front-proxy-client.crt":     pki.ProxyClient.CertFile,
			pkiDir + "/front-proxy-client.key":     pki.ProxyClient.KeyFile,
			pkiDir + "/front-proxy-ca.crt":         pki.FrontProxyCA.CertFile,
			ptDir + "/" + deploy.AuditPolicyFile:   policy,
			ptDir + "/" + deploy.WebhookKubeconfig: kubeconfigs[name],
		}
	}
	oldArgs, oldPreset := staticPodArgs(t, root, "v1.35", files(oldName))
	newArgs, newPreset := staticPodArgs(t, root, "v1.36", files(newName))
	c, err := harness.Start(ctx, t, harness.Config{
		Dir: filepath.Join(dir, "cluster"),
		PKI: pki,
		Servers: []harness.ServerConfig{
			{Name: oldName, Version: harness.OldVersion, ExtraFlags: oldArgs},
			{Name: newName, Version: harness.NewVersion, ExtraFlags: newArgs,
				FeatureGates:  map[string]bool{"GenericWorkload": true},
				RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true"}},
		},
		AuditPolicyFile: policy,
		AuditLog:        true, // the same policy, written to a file: to check what it records
	})
	if err != nil {
		t.Fatal(err)
	}
	preset := map[string][]string{oldName: oldPreset, newName: newPreset}
	for _, s := range c.Servers() {
		a, _ := s.Args()
		if !slices.Contains(a, "--audit-webhook-config-file="+kubeconfigs[s.Name]) || !slices.Contains(a, "--audit-policy-file="+policy) {
			t.Fatalf("%s does not run with deploy's webhook kubeconfig and policy: %v", s.Name, a)
		}
		if len(preset[s.Name]) == 0 {
			t.Fatalf("%s: no kubeadm-set flags in the list", s.Name)
		}
		for _, p := range preset[s.Name] {
			if !slices.Contains(a, p) {
				t.Errorf("%s: the harness does not set %s as deploy's list does", s.Name, p)
			}
		}
	}
	if err := c.WaitPeerProxy(ctx, oldName, depPodGroups); err != nil {
		t.Fatal(err)
	}

	// The runbook's verification: a request only the new apiserver serves, sent to the old
	// one, impersonating a user (only the entry's record keeps the real actor).
	cfgR := harness.WithSourceIP(c.ImpersonateConfig(oldName, "alice", "system:masters"), depClientIP)
	rc, err := harness.HTTPClient(cfgR)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Get(c.Server(oldName).URL + depPodGroups)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	auditID := resp.Header.Get("Audit-Id")
	if resp.StatusCode != 200 || auditID == "" {
		t.Fatalf("proxied list: %d, Audit-Id %q", resp.StatusCode, auditID)
	}
	var got chain.Chain
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		r, err := hc.Get(api + "/api/v1/chains/" + auditID)
		if err != nil {
			return false, nil
		}
		defer r.Body.Close()
		if r.StatusCode != 200 {
			return false, nil
		}
		got = chain.Chain{}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			return false, err
		}
		return got.Class == chain.ClassProxied, nil
	}); err != nil {
		t.Fatalf("chain %s: class %q (%s): %v", auditID, got.Class, got.Explanation, err)
	}
	if got.Entry == nil || got.Peer == nil || got.Entry.APIServer != oldName || got.Peer.APIServer != newName {
		t.Errorf("chain roles: %+v", got)
	}
	if got.User != "alice" || got.RealUser != "admin" || got.HasFinding(chain.FindingIdentityMismatch) {
		t.Errorf("chain identity: user %q real %q findings %v\nentry %+v\npeer %+v", got.User, got.RealUser, got.Findings, *got.Entry, *got.Peer)
	}
	// The runbook's command, as an operator runs it.
	chainCmd := exec.Command(ptBin, "chain", auditID, "--server", api, "--ca-file", pki.ServerCA.CertFile)
	chainCmd.Env = append(os.Environ(), "PEERTRAIL_TOKEN="+depUpgradeToken)
	out, err := chainCmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "proxied") || !strings.Contains(string(out), newName) {
		t.Errorf("peertrail chain %s: %v\n%s", auditID, err, out)
	}

	// Every batch was accepted under the apiserver's own name (certificate and URL agree),
	// and each apiserver's version was learned from its own lease renewals, which the policy
	// keeps.
	if err := poll(ctx, 60*time.Second, func() (bool, error) {
		r, err := hc.Get(api + "/api/v1/apiservers")
		if err != nil {
			return false, nil
		}
		defer r.Body.Close()
		var v struct {
			APIServers []chain.APIServerView `json:"apiservers"`
		}
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			return false, err
		}
		got := map[string]string{}
		for _, s := range v.APIServers {
			got[s.Name] = s.Version
		}
		return got[oldName] == harness.OldVersion && got[newName] == harness.NewVersion, nil
	}); err != nil {
		t.Errorf("apiserver versions not learned: %v", err)
	}
	m := scrape(t, hc, api+"/metrics")
	for _, n := range []string{oldName, newName} {
		if !strings.Contains(m, fmt.Sprintf(`%s{apiserver=%q,code="200"}`, metrics.IngestRequestsTotal, n)) {
			t.Errorf("no accepted batch from %s in /metrics", n)
		}
	}
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, metrics.IngestRequestsTotal+"{") && !strings.Contains(line, `code="200"`) && !strings.Contains(line, `apiserver="unknown"`) {
			t.Errorf("refused batches: %s", line)
		}
	}

	// What the policy records: the proxied read on both sides as Metadata with only
	// ResponseComplete; a Secret write with RequestReceived and no body; no probes.
	admin := c.AdminConfig(oldName)
	ac, err := harness.HTTPClient(admin)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1"},"stringData":{"password":"hunter2"}}`
	sr, err := ac.Post(c.Server(oldName).URL+"/api/v1/namespaces/default/secrets", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sr.Body.Close()
	secretID := sr.Header.Get("Audit-Id")
	if sr.StatusCode != 201 {
		t.Fatalf("create secret: %d", sr.StatusCode)
	}
	if err := poll(ctx, 30*time.Second, func() (bool, error) {
		evs := auditLog(t, c.Server(oldName).AuditLogFile())
		return len(evs[secretID]) >= 2, nil
	}); err != nil {
		t.Fatalf("secret create not in the audit log: %v", err)
	}
	for _, name := range []string{oldName, newName} {
		evs := auditLog(t, c.Server(name).AuditLogFile())
		got := evs[auditID]
		if len(got) != 1 || got[0].Stage != "ResponseComplete" || got[0].Level != "Metadata" || got[0].HasBody {
			t.Errorf("%s: the proxied list's records: %+v, want one Metadata ResponseComplete without bodies", name, got)
		}
		for id, es := range evs {
			for _, e := range es {
				if e.HasBody {
					t.Errorf("%s: %s %s recorded a body", name, id, e.URI)
				}
				if strings.HasPrefix(e.URI, "/readyz") || strings.HasPrefix(e.URI, "/healthz") || strings.HasPrefix(e.URI, "/livez") {
					t.Errorf("%s: a probe was audited: %s", name, e.URI)
				}
			}
		}
	}
	stages := []string{}
	for _, e := range auditLog(t, c.Server(oldName).AuditLogFile())[secretID] {
		stages = append(stages, e.Stage+"/"+e.Level)
	}
	if !slices.Equal(stages, []string{"RequestReceived/Metadata", "ResponseComplete/Metadata"}) {
		t.Errorf("secret create recorded as %v", stages)
	}
	if b, _ := os.ReadFile(c.Server(oldName).AuditLogFile()); bytes.Contains(b, []byte("hunter2")) || bytes.Contains(b, []byte("aHVudGVyMg")) {
		t.Error("the secret's value is in the audit log")
	}
}

// checkServeFlags checks that every argument the builds give peertrail serve is one of its
// flags, with the same names as the store's ClickHouse connection flags elsewhere
// (store.ServerOptions.AddFlags, used by peertrail sql and report).
func checkServeFlags(t *testing.T, ptBin, root string) {
	t.Helper()
	help, err := exec.Command(ptBin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("peertrail serve --help: %v\n%s", err, help)
	}
	storeFlags := pflag.NewFlagSet("store", pflag.ContinueOnError)
	(&store.ServerOptions{}).AddFlags(storeFlags)
	storeFlags.VisitAll(func(f *pflag.Flag) {
		if !bytes.Contains(help, []byte("--"+f.Name+" ")) {
			t.Errorf("peertrail serve lacks the store flag --%s", f.Name)
		}
	})
	agentHelp, err := exec.Command(ptBin, "agent", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("peertrail agent --help: %v\n%s", err, agentHelp)
	}
	kbin := kustomizeBinary(t)
	for _, d := range depBuilds {
		objs := kustomizeBuild(t, kbin, root, d)
		// Each layout's peertrail workloads and the command each runs: one serve, or the HA
		// layout's aggregators (serve) and agents.
		type workload struct {
			obj     *unstructured.Unstructured
			command string
			help    []byte
		}
		var ws []workload
		if d == depHA {
			ws = []workload{{named(t, objs, "StatefulSet", "peertrail-aggregator"), "serve", help}, {named(t, objs, "DaemonSet", "peertrail-agent"), "agent", agentHelp}}
		} else {
			ws = []workload{{one(t, objs, "Deployment", "peertrail"), "serve", help}}
		}
		for _, w := range ws {
			ctr := peertrailContainer(t, w.obj)
			if len(ctr.args) == 0 || ctr.args[0] != w.command {
				t.Fatalf("deploy/%s: %s %s: args %v do not start with %s", d, w.obj.GetKind(), w.obj.GetName(), ctr.args, w.command)
			}
			for _, a := range ctr.args[1:] {
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !bytes.Contains(w.help, []byte("--"+name+" ")) {
					t.Errorf("deploy/%s: peertrail %s has no flag --%s", d, w.command, name)
				}
			}
		}
	}
}

// checkClickHouseInit runs the in-cluster ClickHouse's schema init container's args with the
// peertrail binary and checks it writes the store's DDL where the server's entrypoint reads it.
func checkClickHouseInit(t *testing.T, ptBin, root, dir string) {
	t.Helper()
	sts := one(t, kustomizeBuild(t, kustomizeBinary(t), root, "overlays/clickhouse"), "StatefulSet", "clickhouse")
	ics, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "initContainers")
	if len(ics) != 1 {
		t.Fatalf("want one init container, got %d", len(ics))
	}
	args, _, _ := unstructured.NestedStringSlice(ics[0].(map[string]any), "args")
	const initdb = "/docker-entrypoint-initdb.d"
	var local []string
	for _, a := range args {
		local = append(local, strings.Replace(a, "="+initdb+"/", "="+dir+"/", 1))
	}
	if out, err := exec.Command(ptBin, local...).CombinedOutput(); err != nil {
		t.Fatalf("peertrail %v: %v\n%s", local, err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.sql"))
	want, err := exec.Command(ptBin, "schema").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("init container args %v wrote %v, want one .sql file in %s", args, files, initdb)
	}
	if got, _ := os.ReadFile(files[0]); string(got) != string(want) || !bytes.Contains(got, []byte("CREATE TABLE IF NOT EXISTS")) {
		t.Errorf("%s differs from `peertrail schema`", files[0])
	}
}

type auditRec struct {
	Stage, Level, URI string
	HasBody           bool
}

// auditLog reads a JSON-lines audit log, by auditID.
func auditLog(t *testing.T, path string) map[string][]auditRec {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]auditRec{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			AuditID, Stage, Level, RequestURI string
			RequestObject, ResponseObject     json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		out[e.AuditID] = append(out[e.AuditID], auditRec{Stage: e.Stage, Level: e.Level, URI: e.RequestURI,
			HasBody: len(e.RequestObject) > 0 || len(e.ResponseObject) > 0})
	}
	return out
}

func httpCode(t *testing.T, hc *http.Client, method, url string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader("{}"))
	resp, err := hc.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func scrape(t *testing.T, hc *http.Client, url string) string {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startPeertrail runs peertrail with args, its output in logFile; the returned func stops it
// (SIGTERM, then SIGKILL after 30s).
func startPeertrail(t *testing.T, bin string, args []string, logFile string) func() {
	t.Helper()
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { proc.Wait(); lf.Close(); close(done) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("peertrail %s\n%s", strings.Join(args, " "), tailOf(logFile))
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
}

func tailOf(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// named is the object of kind named name, exactly.
func named(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			out = append(out, o)
		}
	}
	if len(out) != 1 {
		t.Fatalf("want one %s %s, got %d", kind, name, len(out))
	}
	return out[0]
}

// argOf is the value of --name=value in args ("" when absent).
func argOf(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// checkHABuild asserts what the HA layout promises (deploy/README.md, "The HA layout"): two
// aggregators never on one node, each with a volume of its own, disrupted one at a time; an
// agent on every control-plane node, in its host network on a loopback webhook address, its
// spool on the node, critical and tolerating the control-plane taint, relaying to every
// aggregator by its own address; and the aggregators' agents reading their tokens where the
// Secret is mounted.
func checkHABuild(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	sts := named(t, objs, "StatefulSet", "peertrail-aggregator")
	replicas, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas")
	if replicas < 2 {
		t.Errorf("%d aggregators, want at least 2", replicas)
	}
	terms, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
	if len(terms) != 1 || terms[0].(map[string]any)["topologyKey"] != "kubernetes.io/hostname" {
		t.Errorf("aggregators' anti-affinity %v, want required by kubernetes.io/hostname", terms)
	}
	podLabels, _, _ := unstructured.NestedStringMap(sts.Object, "spec", "template", "metadata", "labels")
	sel, _, _ := unstructured.NestedStringMap(terms[0].(map[string]any), "labelSelector", "matchLabels")
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("the anti-affinity selects %v, the aggregators are %v", sel, podLabels)
		}
	}
	if vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates"); len(vcts) != 1 {
		t.Errorf("aggregators: %d volume claim templates, want one (a volume each)", len(vcts))
	}
	pdb := named(t, objs, "PodDisruptionBudget", "peertrail-aggregator")
	if m, _, _ := unstructured.NestedInt64(pdb.Object, "spec", "maxUnavailable"); m != 1 {
		t.Errorf("aggregators' PDB maxUnavailable %d, want 1", m)
	}
	headless := named(t, objs, "Service", "peertrail-aggregator")
	serviceName, _, _ := unstructured.NestedString(sts.Object, "spec", "serviceName")
	clusterIP, _, _ := unstructured.NestedString(headless.Object, "spec", "clusterIP")
	notReady, _, _ := unstructured.NestedBool(headless.Object, "spec", "publishNotReadyAddresses")
	if serviceName != headless.GetName() || clusterIP != "None" || !notReady {
		t.Errorf("aggregators' Service %q (clusterIP %q, publishNotReadyAddresses %v), the StatefulSet's serviceName %q", headless.GetName(), clusterIP, notReady, serviceName)
	}
	httpsPort := int64(0)
	ports, _, _ := unstructured.NestedSlice(headless.Object, "spec", "ports")
	for _, p := range ports {
		if p.(map[string]any)["name"] == "https" {
			httpsPort, _, _ = unstructured.NestedInt64(p.(map[string]any), "port")
		}
	}

	ds := named(t, objs, "DaemonSet", "peertrail-agent")
	spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
	if spec["hostNetwork"] != true || spec["priorityClassName"] != "system-node-critical" || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
		t.Errorf("agents: hostNetwork %v, priorityClassName %v, dnsPolicy %v", spec["hostNetwork"], spec["priorityClassName"], spec["dnsPolicy"])
	}
	if ns, _, _ := unstructured.NestedStringMap(spec, "nodeSelector"); len(ns) != 1 || ns["node-role.kubernetes.io/control-plane"] != "" {
		t.Errorf("agents' nodeSelector %v, want the control-plane nodes", ns)
	}
	tols, _, _ := unstructured.NestedSlice(spec, "tolerations")
	if !slices.ContainsFunc(tols, func(o any) bool { return o.(map[string]any)["key"] == "node-role.kubernetes.io/control-plane" }) {
		t.Errorf("agents do not tolerate the control-plane taint: %v", tols)
	}
	cs, _, _ := unstructured.NestedSlice(spec, "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	if len(args) == 0 || args[0] != "agent" {
		t.Fatalf("agents run %v", args)
	}
	if !loopback(argOf(args, "listen")) {
		t.Errorf("agents' webhook listens on %q, want a loopback address", argOf(args, "listen"))
	}
	dataDir := argOf(args, "data-dir")
	mounts, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "volumeMounts")
	vols, _, _ := unstructured.NestedSlice(spec, "volumes")
	onNode := false
	for _, m := range mounts {
		if m.(map[string]any)["mountPath"] != dataDir {
			continue
		}
		for _, v := range vols {
			if v.(map[string]any)["name"] == m.(map[string]any)["name"] {
				_, onNode, _ = unstructured.NestedString(v.(map[string]any), "hostPath", "path")
			}
		}
	}
	if !onNode {
		t.Errorf("agents' --data-dir %q is not on a hostPath volume", dataDir)
	}
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("https://%s-%d.%s.%s.svc:%d", sts.GetName(), i, serviceName, depNamespace, httpsPort))
	}
	var got []string
	for _, a := range strings.Split(argOf(args, "aggregator"), ",") {
		_, u, _ := strings.Cut(a, "=")
		got = append(got, u)
	}
	if !slices.Equal(got, want) {
		t.Errorf("agents relay to %v, want every aggregator's own address %v", got, want)
	}

	// The aggregators' agents: their tokens where the Secret is mounted.
	cfgData, _, _ := unstructured.NestedString(one(t, objs, "ConfigMap", "peertrail-config").Object, "data", "config.yaml")
	var cfg struct {
		Agents []struct {
			Name       string   `json:"name"`
			APIServers []string `json:"apiservers"`
			TokenFile  string   `json:"tokenFile"`
		} `json:"agents"`
	}
	if err := yaml.Unmarshal([]byte(cfgData), &cfg); err != nil || len(cfg.Agents) == 0 {
		t.Fatalf("aggregators' config.yaml: %v %s", err, cfgData)
	}
	scs, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	agentsDir := ""
	smounts, _, _ := unstructured.NestedSlice(scs[0].(map[string]any), "volumeMounts")
	for _, m := range smounts {
		if m.(map[string]any)["name"] == "agents" {
			agentsDir, _ = m.(map[string]any)["mountPath"].(string)
		}
	}
	for _, a := range cfg.Agents {
		if agentsDir == "" || a.TokenFile != agentsDir+"/"+a.Name || len(a.APIServers) != 1 {
			t.Errorf("agent %s: token %q (the agents Secret is at %q), apiservers %v", a.Name, a.TokenFile, agentsDir, a.APIServers)
		}
	}
}

func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
