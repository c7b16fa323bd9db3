package chain

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// errUnstamped is wrapped by the error for a version of major 0.
var errUnstamped = errors.New("major version 0 is what an unstamped build reports, not a release")

// ParseVersion parses an apiserver's version as a release or a configuration names it: a
// semantic version with an optional leading "v", pre-release and build metadata ("v1.36.3",
// "v1.35.4+k3s1", "v1.35.4+rke2r1", "v1.35.4-eks-4a1b2c3", "v1.35.4-gke.1200"), or only
// major.minor, with or without such suffixes ("v1.36", "v1.36+k3s1"). Major version 0 is
// refused: an unstamped build reports "v0.0.0-master+$Format:%H$", which says nothing about
// what the server serves. The parser is k8s.io/apimachinery's, the one Kubernetes compares
// its own versions with.
func ParseVersion(s string) (*version.Version, error) {
	v, _, err := parseRelease(s)
	return v, err
}

// parseRelease is ParseVersion, also saying whether s named only major.minor. Kubernetes's
// own build (hack/lib/version.sh) takes such a KUBE_GIT_VERSION ("v1.17-usernetes" is one in
// use), which its binaries then report, so a user agent can carry one too. It is read as the
// minor's patch 0 with the suffixes s has: the semantic parser then checks them.
func parseRelease(s string) (v *version.Version, minorOnly bool, err error) {
	t := strings.TrimSpace(s)
	numbers, suffix := t, ""
	if i := strings.IndexAny(t, "-+"); i >= 0 {
		numbers, suffix = t[:i], t[i:]
	}
	if strings.Count(numbers, ".") == 1 && !strings.HasSuffix(numbers, ".") {
		minorOnly = true
		v, err = version.ParseSemantic(numbers + ".0" + suffix)
	} else {
		v, err = version.ParseSemantic(t)
	}
	if err != nil {
		return nil, false, fmt.Errorf("version %q: %w", s, err)
	}
	if v.Major() == 0 {
		return nil, false, fmt.Errorf("version %q: %w", s, errUnstamped)
	}
	return v, minorOnly, nil
}

// AgentVersion returns the version in the user agent of an apiserver's loopback client.
// client-go builds it as "<binary>/<version> (<os>/<arch>) kubernetes/<commit>", where
// <binary> is the base name of the running program ("kube-apiserver", "k3s",
// "kube-apiserver-1.36", "hyperkube": whatever the file is called) and <version> is the
// build's version cut at its first "-" ("v1.35.4-eks-4a1b2c3" shows as "v1.35.4", while
// "v1.35.4+rke2r1" keeps its build metadata). A component may append "/<name>" to the agent
// (rest.AddUserAgent), after the commit. So the version is the token after the first "/" up
// to the first space; it must parse with ParseVersion: a semantic version, or "v" and
// major.minor, which Kubernetes's build also stamps. The error says what was wrong with the
// agent.
func AgentVersion(agent string) (string, error) {
	if agent == "" {
		return "", errors.New("empty user agent")
	}
	_, rest, ok := strings.Cut(agent, "/")
	if !ok {
		return "", fmt.Errorf("user agent %q is not of the form <binary>/<version>", agent)
	}
	token, _, _ := strings.Cut(rest, " ")
	if token == "" {
		return "", fmt.Errorf("user agent %q has no version after its first /", agent)
	}
	_, minorOnly, err := parseRelease(token)
	if err != nil {
		return "", fmt.Errorf("user agent %q: %w", agent, err)
	}
	if minorOnly && !strings.HasPrefix(token, "v") {
		// Kubernetes's build refuses a version without its "v"; "Go-http-client/2.0" is no
		// apiserver's.
		return "", fmt.Errorf("user agent %q: %q has no patch and no leading v, so it is no Kubernetes build's version", agent, token)
	}
	return token, nil
}

// SameRelease reports whether versions a and b (both parseable) can name the same build,
// knowing that a user agent shows a version cut at its first "-" and that a configuration may
// name only major.minor: "v1.35.4-eks-4a1b2c3" and "v1.35.4" can, "v1.36" and "v1.36.3" can,
// "v1.35.4+rke2r1" and "v1.35.4+rke2r2" cannot, nor "v1.35.4" and "v1.36.3".
func SameRelease(a, b string) bool {
	if a == b {
		return true
	}
	va, minorA, erra := parseRelease(a)
	vb, minorB, errb := parseRelease(b)
	if erra != nil || errb != nil {
		return false
	}
	if va.Major() != vb.Major() || va.Minor() != vb.Minor() || !minorA && !minorB && va.Patch() != vb.Patch() {
		return false
	}
	if minorA || minorB || va.PreRelease() != "" || vb.PreRelease() != "" {
		// One of them lost what followed: a major.minor configuration, or an agent's cut.
		return true
	}
	return va.BuildMetadata() == vb.BuildMetadata()
}
