package config

import (
	"strings"
	"testing"
)

// TestValidateParsesVersions: apiservers[].version takes the versions distributions write,
// with the parser the correlator and the gate use, and refuses what is not one.
func TestValidateParsesVersions(t *testing.T) {
	for _, v := range []string{"", "v1.35.4", "1.36.3", "v1.35.4+k3s1", "v1.35.4+rke2r1", "v1.35.4-eks-4a1b2c3", "v1.35.4-gke.1200", "v1.36", "v1.33.2+k0s.0", "v1.36+k3s1"} {
		f := File{APIServers: []APIServer{{Name: "kas-a", Version: v}}}
		if err := f.Validate(); err != nil {
			t.Errorf("version %q refused: %v", v, err)
		}
	}
	for _, v := range []string{"latest", "v1", "1.35.4.", "v1.35.4-gke.01", "v0.0.0", "kube-apiserver/v1.35.4", "v1.36-"} {
		f := File{APIServers: []APIServer{{Name: "kas-a", Version: v}}}
		err := f.Validate()
		if err == nil || !strings.Contains(err.Error(), "kas-a") {
			t.Errorf("version %q: err %v, want one naming kas-a", v, err)
		}
	}
}
