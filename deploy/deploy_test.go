package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/yaml"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := RepoRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The committed generated files (flags per version, copies of the alert rules and the
// dashboards) are what Generate writes now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	stale, err := Stale(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("stale generated files under deploy/ (run `go run ./cmd/peertrail deploy generate` from the repository root):\n  %s", strings.Join(stale, "\n  "))
	}
}

// The embedded policy is the file, and it is strictly valid for the apiserver's own loader.
func TestAuditPolicyLoads(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/control-plane/audit-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(AuditPolicy) {
		t.Fatal("embedded AuditPolicy differs from deploy/control-plane/audit-policy.yaml")
	}
	// LoadPolicyFromBytes falls back to lenient decoding (with a log line) on unknown fields:
	// decode strictly first so that a typo fails here instead of being ignored by the apiserver.
	var strict auditv1.Policy
	if err := yaml.UnmarshalStrict(AuditPolicy, &strict); err != nil {
		t.Fatalf("strict decode: %v", err)
	}
	if _, err := policy.LoadPolicyFromBytes(AuditPolicy); err != nil {
		t.Fatal(err)
	}
}

type req struct {
	name        string
	user        string
	groups      []string
	verb        string
	group       string
	resource    string
	subresource string
	path        string // non-resource request when set
}

func (r req) attrs() authorizer.Attributes {
	a := authorizer.AttributesRecord{
		User: &user.DefaultInfo{Name: r.user, Groups: r.groups},
		Verb: r.verb,
	}
	if r.path != "" {
		a.Path = r.path
		return a
	}
	a.ResourceRequest = true
	a.APIGroup, a.APIVersion, a.Resource, a.Subresource = r.group, "v1", r.resource, r.subresource
	a.Namespace = "default"
	return a
}

// What the policy records for the requests that matter to peertrail, and what it drops.
func TestAuditPolicyDecisions(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes(AuditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	ev := policy.NewPolicyRuleEvaluator(p)
	alice := "alice"
	allStages := []audit.Stage{}
	noRR := []audit.Stage{audit.StageRequestReceived}
	for _, tc := range []struct {
		req
		level audit.Level
		omit  []audit.Stage
	}{
		// What MVP forwards: resources only some versions serve. Both sides of a forwarded
		// request are evaluated with the client's user, so they get the same level.
		{req{name: "read of a new API (proxied)", user: alice, verb: "list", group: "scheduling.k8s.io", resource: "podgroups"}, audit.LevelMetadata, noRR},
		{req{name: "watch of a new API", user: alice, verb: "watch", group: "resource.k8s.io", resource: "deviceclasses"}, audit.LevelMetadata, noRR},
		{req{name: "write of a new API (proxied)", user: alice, verb: "create", group: "scheduling.k8s.io", resource: "podgroups"}, audit.LevelMetadata, allStages},
		{req{name: "exec", user: alice, verb: "create", group: "", resource: "pods", subresource: "exec"}, audit.LevelMetadata, allStages},
		// Secrets and tokens: never bodies, and their reads are dropped with the other core reads.
		{req{name: "secret create", user: alice, verb: "create", group: "", resource: "secrets"}, audit.LevelMetadata, allStages},
		{req{name: "secret update", user: alice, verb: "update", group: "", resource: "secrets"}, audit.LevelMetadata, allStages},
		{req{name: "secret read", user: alice, verb: "get", group: "", resource: "secrets"}, audit.LevelNone, nil},
		{req{name: "token request", user: "system:node:n1", verb: "create", group: "", resource: "serviceaccounts", subresource: "token"}, audit.LevelMetadata, allStages},
		{req{name: "token review", user: "system:kube-controller-manager", verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"}, audit.LevelMetadata, allStages},
		{req{name: "CSR", user: "system:node:n1", verb: "create", group: "certificates.k8s.io", resource: "certificatesigningrequests"}, audit.LevelMetadata, allStages},
		// Noise that MVP never forwards.
		{req{name: "healthz", user: "system:anonymous", verb: "get", path: "/healthz"}, audit.LevelNone, nil},
		{req{name: "readyz check", user: "system:anonymous", verb: "get", path: "/readyz/etcd"}, audit.LevelNone, nil},
		{req{name: "livez", user: "system:anonymous", verb: "get", path: "/livez"}, audit.LevelNone, nil},
		{req{name: "metrics", user: "prometheus", verb: "get", path: "/metrics"}, audit.LevelNone, nil},
		{req{name: "openapi v3", user: alice, verb: "get", path: "/openapi/v3/apis/apps/v1"}, audit.LevelNone, nil},
		{req{name: "event", user: "system:node:n1", verb: "create", group: "", resource: "events"}, audit.LevelNone, nil},
		{req{name: "events.k8s.io event", user: "system:kube-scheduler", verb: "patch", group: "events.k8s.io", resource: "events"}, audit.LevelNone, nil},
		{req{name: "node heartbeat", user: "system:node:n1", groups: []string{"system:nodes"}, verb: "update", group: "coordination.k8s.io", resource: "leases"}, audit.LevelNone, nil},
		{req{name: "leader election", user: "system:kube-controller-manager", verb: "update", group: "coordination.k8s.io", resource: "leases"}, audit.LevelNone, nil},
		{req{name: "kubelet node get", user: "system:node:n1", verb: "get", group: "", resource: "nodes"}, audit.LevelNone, nil},
		{req{name: "informer pod list", user: "system:kube-scheduler", verb: "list", group: "", resource: "pods"}, audit.LevelNone, nil},
		{req{name: "kube-proxy endpointslices watch", user: "system:kube-proxy", verb: "watch", group: "discovery.k8s.io", resource: "endpointslices"}, audit.LevelNone, nil},
		// Kept: the apiservers' own lease renewals (version from userAgent, gate heartbeat),
		// peer discovery and client discovery, lease candidates, core writes and subresources.
		{req{name: "apiserver identity lease", user: "system:apiserver", groups: []string{"system:masters"}, verb: "update", group: "coordination.k8s.io", resource: "leases"}, audit.LevelMetadata, noRR},
		{req{name: "peer discovery /apis", user: "system:apiserver", verb: "get", path: "/apis"}, audit.LevelMetadata, noRR},
		{req{name: "client discovery /api", user: alice, verb: "get", path: "/api"}, audit.LevelMetadata, noRR},
		{req{name: "lease candidates", user: "system:kube-scheduler", verb: "update", group: "coordination.k8s.io", resource: "leasecandidates"}, audit.LevelMetadata, allStages},
		{req{name: "pod create", user: alice, verb: "create", group: "", resource: "pods"}, audit.LevelMetadata, allStages},
		{req{name: "pod status read", user: alice, verb: "get", group: "", resource: "pods", subresource: "status"}, audit.LevelMetadata, noRR},
		{req{name: "deployment list", user: alice, verb: "list", group: "apps", resource: "deployments"}, audit.LevelMetadata, noRR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ev.EvaluatePolicyRule(tc.attrs())
			if got.Level != tc.level {
				t.Fatalf("level %s, want %s", got.Level, tc.level)
			}
			if tc.level == audit.LevelNone {
				return
			}
			if !sameStages(got.OmitStages, tc.omit) {
				t.Errorf("omitStages %v, want %v", got.OmitStages, tc.omit)
			}
			// ResponseComplete (and ResponseStarted for watches) is what peertrail joins on.
			for _, s := range got.OmitStages {
				if s == audit.StageResponseComplete || s == audit.StageResponseStarted {
					t.Errorf("omits %s", s)
				}
			}
		})
	}
	// No rule records bodies.
	for i, r := range p.Rules {
		if r.Level == audit.LevelRequest || r.Level == audit.LevelRequestResponse {
			t.Errorf("rule %d records bodies (%s)", i, r.Level)
		}
	}
}

func sameStages(a, b []audit.Stage) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
