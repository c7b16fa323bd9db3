package simulate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Resource is one group/version/resource the simulated clients request, and which versions
// of kube-apiserver serve it.
type Resource struct {
	Group, Version, Resource string
	// Namespace of the requests; empty for a cluster-scoped resource.
	Namespace string
	// ServedBy lists the versions that serve it ("from" and "to" stand for the upgrade's two
	// versions); empty: every version.
	ServedBy []string
	// Weight is its share of the requests relative to the other resources' (0 counts as 1).
	Weight float64
}

// DefaultResources are the resources a simulated upgrade requests when none are configured:
// some served by both versions, one only the new version serves (forwarded old -> new) and one
// only the old version serves (forwarded new -> old).
func DefaultResources() []Resource {
	return []Resource{
		{Version: "v1", Resource: "pods", Namespace: "default"},
		{Version: "v1", Resource: "configmaps", Namespace: "kube-system"},
		{Group: "apps", Version: "v1", Resource: "deployments", Namespace: "payments"},
		{Group: "coordination.k8s.io", Version: "v1", Resource: "leases", Namespace: "kube-system"},
		// 1.36 serves scheduling.k8s.io/v1alpha2 podgroups, 1.35 does not.
		{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups", Namespace: "training", ServedBy: []string{"to"}},
		{Group: "storagemigration.k8s.io", Version: "v1alpha1", Resource: "storageversionmigrations", ServedBy: []string{"from"}},
	}
}

// Verbs are the verbs the simulated clients use.
var Verbs = []string{"get", "list", "create", "update", "delete"}

// ParseResource reads GROUP/VERSION/RESOURCE[,ns=NAMESPACE][,served-by=V1|V2...][,weight=N]:
// core is "core/v1/pods" (or "/v1/pods"); a served-by version is "from", "to" or a version
// such as v1.36.3.
func ParseResource(s string) (Resource, error) {
	parts := strings.Split(s, ",")
	gvr := strings.Split(parts[0], "/")
	if len(gvr) != 3 || gvr[1] == "" || gvr[2] == "" {
		return Resource{}, fmt.Errorf("resource %q: want GROUP/VERSION/RESOURCE (core/v1/pods)", s)
	}
	r := Resource{Group: gvr[0], Version: gvr[1], Resource: gvr[2]}
	if r.Group == "core" {
		r.Group = ""
	}
	for _, opt := range parts[1:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "ns":
			r.Namespace = v
		case "served-by":
			for _, ver := range strings.Split(v, "|") {
				if ver == "" {
					return Resource{}, fmt.Errorf("resource %q: empty served-by version", s)
				}
				r.ServedBy = append(r.ServedBy, ver)
			}
		case "weight":
			w, err := strconv.ParseFloat(v, 64)
			if err != nil || w <= 0 {
				return Resource{}, fmt.Errorf("resource %q: weight must be a positive number", s)
			}
			r.Weight = w
		default:
			return Resource{}, fmt.Errorf("resource %q: unknown option %q (ns=, served-by=, weight=)", s, k)
		}
	}
	return r, nil
}

// ParseMix reads the request mix "get=5,list=2,create=1": each verb's weight. Verbs left out
// are not used.
func ParseMix(s string) (map[string]float64, error) {
	mix := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		verb, v, ok := strings.Cut(kv, "=")
		w, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || w < 0 {
			return nil, fmt.Errorf("mix %q: want VERB=WEIGHT,... with verbs among %v", s, Verbs)
		}
		if !slices.Contains(Verbs, verb) {
			return nil, fmt.Errorf("mix %q: unknown verb %q (want one of %v)", s, verb, Verbs)
		}
		mix[verb] = w
	}
	total := 0.0
	for _, w := range mix {
		total += w
	}
	if total == 0 {
		return nil, fmt.Errorf("mix %q: every weight is 0", s)
	}
	return mix, nil
}

// pick returns an index into n choices with the given weights; equal weights take the same
// draw as before weights existed, so a seed plays the same upgrade.
func (u *Upgrade) pick(n int, weight func(int) float64) int {
	total, equal := 0.0, true
	for i := range n {
		total += weight(i)
		if weight(i) != weight(0) {
			equal = false
		}
	}
	if equal {
		return u.rng.IntN(n)
	}
	x := u.rng.Float64() * total
	for i := range n {
		if x -= weight(i); x < 0 {
			return i
		}
	}
	return n - 1
}
