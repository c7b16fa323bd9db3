package correlate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/peertrail/peertrail/ingest/record"
)

// groupMasters is the group of the apiserver's loopback identity; peer discovery, which is
// also audited as system:apiserver, carries only system:authenticated.
const groupMasters = "system:masters"

// isLoopback reports whether r is one of the apiserver's own loopback requests: user
// system:apiserver in group system:masters, sent from one address (a request forwarded by a
// peer adds the peer's address to sourceIPs).
//
// What the apiserver itself is, not what its binary is called: every kube-apiserver (and
// every build that embeds one, such as k3s) authenticates its loopback client with a token
// it makes up at start, as user system:apiserver, groups [system:authenticated,
// system:masters] and a UID that is a fresh random UUID per process
// (k8s.io/apiserver/pkg/server/config.go, AuthorizeClientBearerToken). The real captures in
// test/testdata/real show exactly that, while the peer-discovery fetches of a server's
// /api and /apis come as system:apiserver with groups [system:authenticated] only, no UID
// and no user agent.
func isLoopback(r *record.Record) bool {
	if r.UserName != userAPIServer || len(r.SourceIPs) > 1 {
		return false
	}
	for _, g := range r.UserGroups {
		if g == groupMasters {
			return true
		}
	}
	return false
}

// errUnstamped is wrapped by the error for a version of major 0.
var errUnstamped = errors.New("major version 0 is what an unstamped build reports, not a release")

// majorMinorRE is a version that names only major.minor ("v1.36", "1.36").
var majorMinorRE = regexp.MustCompile(`^\s*v?[0-9]+\.[0-9]+\s*$`)

// ParseVersion parses an apiserver's version as a release or a configuration names it: a
// semantic version with an optional leading "v", pre-release and build metadata ("v1.36.3",
// "v1.35.4+k3s1", "v1.35.4+rke2r1", "v1.35.4-eks-4a1b2c3", "v1.35.4-gke.1200"), or only
// major.minor ("v1.36"). Major version 0 is refused: an unstamped build reports
// "v0.0.0-master+$Format:%H$", which says nothing about what the server serves. The parser
// is k8s.io/apimachinery's, the one Kubernetes compares its own versions with.
func ParseVersion(s string) (*version.Version, error) {
	var v *version.Version
	var err error
	if majorMinorRE.MatchString(s) {
		v, err = version.ParseGeneric(s)
	} else {
		v, err = version.ParseSemantic(s)
	}
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", s, err)
	}
	if v.Major() == 0 {
		return nil, fmt.Errorf("version %q: %w", s, errUnstamped)
	}
	return v, nil
}

// AgentVersion returns the version in the user agent of an apiserver's loopback client.
// client-go builds it as "<binary>/<version> (<os>/<arch>) kubernetes/<commit>", where
// <binary> is the base name of the running program ("kube-apiserver", "k3s",
// "kube-apiserver-1.36", "hyperkube": whatever the file is called) and <version> is the
// build's version cut at its first "-" ("v1.35.4-eks-4a1b2c3" shows as "v1.35.4", while
// "v1.35.4+rke2r1" keeps its build metadata). A component may append "/<name>" to the agent
// (rest.AddUserAgent), after the commit. So the version is the token after the first "/" up
// to the first space; it must be a full semantic version, since client-go always writes one.
// The error says what was wrong with the agent.
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
	v, err := version.ParseSemantic(token)
	if err != nil {
		return "", fmt.Errorf("user agent %q: %w", agent, err)
	}
	if v.Major() == 0 {
		return "", fmt.Errorf("user agent %q: %w", agent, errUnstamped)
	}
	return token, nil
}

// sameRelease reports whether versions a and b (both parseable) can name the same build,
// knowing that a user agent shows a version cut at its first "-" and that a configuration may
// name only major.minor: "v1.35.4-eks-4a1b2c3" and "v1.35.4" can, "v1.36" and "v1.36.3" can,
// "v1.35.4+rke2r1" and "v1.35.4+rke2r2" cannot, nor "v1.35.4" and "v1.36.3".
func sameRelease(a, b string) bool {
	if a == b {
		return true
	}
	va, erra := ParseVersion(a)
	vb, errb := ParseVersion(b)
	if erra != nil || errb != nil {
		return false
	}
	ca, cb := va.Components(), vb.Components()
	for i := range min(len(ca), len(cb)) {
		if ca[i] != cb[i] {
			return false
		}
	}
	if len(ca) != len(cb) || va.PreRelease() != "" || vb.PreRelease() != "" {
		// One of them lost what followed: a major.minor configuration, or an agent's cut.
		return true
	}
	return va.BuildMetadata() == vb.BuildMetadata()
}
