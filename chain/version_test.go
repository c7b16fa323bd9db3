package chain

import (
	"errors"
	"testing"
)

// TestAgentVersion: the version of an apiserver's loopback user agent, whatever its binary is
// called. The agents are client-go's "<binary>/<version> (<os>/<arch>) kubernetes/<commit>"
// as real builds write them: kubeadm's kube-apiserver, k3s (the apiserver runs inside the k3s
// binary), RKE2 (build metadata kept), a binary installed under a versioned name beside the
// old one, hyperkube and MicroK8s's kubelite (all components in one binary), a component's
// "/<name>" suffix (rest.AddUserAgent), and what client-go writes for a build without a
// version stamp.
func TestAgentVersion(t *testing.T) {
	for _, tc := range []struct {
		agent, want string
	}{
		{"kube-apiserver/v1.35.4 (linux/amd64) kubernetes/abc1234", "v1.35.4"},
		{"kube-apiserver/v1.36.3 (linux/amd64) kubernetes/unknown", "v1.36.3"},
		{"k3s/v1.35.4+k3s1 (linux/amd64) kubernetes/9f1c2d3", "v1.35.4+k3s1"},
		{"k3s/v1.35.4+k3s1 (linux/arm64) kubernetes/9f1c2d3", "v1.35.4+k3s1"},
		{"kube-apiserver/v1.35.4+rke2r1 (linux/amd64) kubernetes/abc1234", "v1.35.4+rke2r1"},
		// As an RKE2 server's audit log shows it (a public capture of v1.24.7+rke2r1).
		{"kube-apiserver/v1.24.7+rke2r1 (linux/amd64) kubernetes/e6f3597", "v1.24.7+rke2r1"},
		{"kube-apiserver-1.36/v1.36.3 (linux/amd64) kubernetes/abc1234", "v1.36.3"},
		{"kube-apiserver-1.35.4/v1.35.4 (linux/amd64) kubernetes/unknown", "v1.35.4"},
		{"hyperkube/v1.18.20 (linux/amd64) kubernetes/1f3e19b", "v1.18.20"},
		// MicroK8s (1.21+) runs the control plane inside one binary, kubelite.
		{"kubelite/v1.35.4 (linux/amd64) kubernetes/abc1234", "v1.35.4"},
		{"kube-apiserver.exe/v1.35.4 (windows/amd64) kubernetes/abc1234", "v1.35.4"},
		{"kube-apiserver/v1.35.4 (linux/amd64) kubernetes/abc1234/leader-election", "v1.35.4"},
		{"kube-apiserver/v1.35.4", "v1.35.4"},
		// Kubernetes's build (hack/lib/version.sh) also stamps major.minor: Usernetes built
		// with KUBE_GIT_VERSION=v1.17-usernetes, which client-go cuts to v1.17.
		{"kube-apiserver/v1.17 (linux/amd64) kubernetes/abc1234", "v1.17"},
		{"kube-apiserver/v1.36+k3s1 (linux/amd64) kubernetes/abc1234", "v1.36+k3s1"},
		// An EKS or GKE build's version is cut at its first "-" by client-go before it gets
		// here; a pre-release that got through anyway still parses.
		{"kube-apiserver/v1.37.0-rc.1 (linux/amd64) kubernetes/abc1234", "v1.37.0-rc.1"},
	} {
		got, err := AgentVersion(tc.agent)
		if err != nil || got != tc.want {
			t.Errorf("AgentVersion(%q) = %q, %v; want %q", tc.agent, got, err, tc.want)
		}
	}
	for _, agent := range []string{
		"",
		"garbage",
		"kube-apiserver",
		"kube-apiserver/ (linux/amd64) kubernetes/abc",
		"kube-apiserver/unknown (linux/amd64) kubernetes/unknown", // empty GitVersion
		"kube-apiserver/v0.0.0 (linux/amd64) kubernetes/$Format",  // unstamped build
		"kube-apiserver/1.35 (linux/amd64) kubernetes/abc",        // Kubernetes's build wants the v
		"Go-http-client/1.1",
		"kube-apiserver/v1 (linux/amd64) kubernetes/abc",
		"kube-apiserver/v1. (linux/amd64) kubernetes/abc",
		"kube-apiserver/v1.36+ (linux/amd64) kubernetes/abc",
		"kube-apiserver/v1.3x (linux/amd64) kubernetes/abc",
		"Go-http-client/2.0",
		"kube-apiserver/v1.35.4.1 (linux/amd64) kubernetes/abc",
		"kube-apiserver/v1.35.x (linux/amd64) kubernetes/abc",
	} {
		if v, err := AgentVersion(agent); err == nil {
			t.Errorf("AgentVersion(%q) = %q, want an error", agent, v)
		}
	}
	if _, err := AgentVersion("kube-apiserver/v0.0.0 (linux/amd64) kubernetes/$Format"); !errors.Is(err, errUnstamped) {
		t.Errorf("an unstamped build's agent: %v", err)
	}
}

// TestParseVersion: versions as distributions write them in a configuration.
func TestParseVersion(t *testing.T) {
	for in, want := range map[string][2]uint{
		"v1.35.4": {1, 35}, "1.36.3": {1, 36}, "v1.35.4+k3s1": {1, 35}, "v1.35.4+rke2r1": {1, 35},
		"v1.35.4-eks-4a1b2c3": {1, 35}, "v1.35.4-gke.1200": {1, 35}, "v1.36": {1, 36}, "1.37": {1, 37},
		"v1.37.0-rc.1": {1, 37}, " v1.36.3 ": {1, 36},
		// k0s's releases, a GKE patch, Usernetes's build, major.minor with metadata.
		"v1.33.2+k0s.0": {1, 33}, "v1.30.5-gke.1014001": {1, 30}, "v1.17-usernetes": {1, 17}, "v1.36+k3s1": {1, 36},
	} {
		v, err := ParseVersion(in)
		if err != nil || v.Major() != want[0] || v.Minor() != want[1] {
			t.Errorf("ParseVersion(%q) = %v, %v; want %d.%d", in, v, err, want[0], want[1])
		}
	}
	for _, in := range []string{"", "v1", "latest", "v1.35.4-gke.01", "v0.0.0", "v0.36.3", "v1.35.4.1", "v1.35x", "kube-apiserver/v1.35.4",
		"v1.", "v1.36-", "v1.36+", "v1.36.x+k3s1", ".36", "v1.36-01"} {
		if v, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %v, want an error", in, v)
		}
	}
}

func TestSameRelease(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"v1.35.4", "v1.35.4", true},
		{"v1.35.4-eks-4a1b2c3", "v1.35.4", true}, // the agent cut it
		{"v1.35.4-gke.1200", "v1.35.4", true},
		{"v1.36", "v1.36.3", true}, // a configured minor
		{"v1.35.4+rke2r1", "v1.35.4+rke2r1", true},
		{"v1.35.4+rke2r1", "v1.35.4+rke2r2", false},
		{"v1.35.4+k3s1", "v1.35.4", false},
		{"v1.35.4", "v1.35.5", false},
		{"v1.35.4", "v1.36.3", false},
		{"v1.36", "v1.35.4", false},
		{"v1.36+k3s1", "v1.36.3+k3s1", true}, // an agent's major.minor
		{"v1.17", "v1.17.0", true},
		{"v1.36+k3s1", "v1.37.0+k3s1", false},
		{"garbage", "v1.35.4", false},
	} {
		if got := SameRelease(tc.a, tc.b); got != tc.same {
			t.Errorf("SameRelease(%q, %q) = %v", tc.a, tc.b, got)
		}
		if got := SameRelease(tc.b, tc.a); got != tc.same {
			t.Errorf("SameRelease(%q, %q) = %v", tc.b, tc.a, got)
		}
	}
}
