package deploy

import (
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestAPIServerMonitorLabelsEachAddress(t *testing.T) {
	targets, err := ParseAPIServerTargets([]string{"cp-2=10.0.0.12", "cp-1=10.0.0.1", "cp-6=fd00::6"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := APIServerMonitor("monitoring", targets)
	if err != nil {
		t.Fatal(err)
	}
	var sm struct {
		Kind     string
		Metadata struct{ Namespace string }
		Spec     struct {
			Endpoints []struct {
				Relabelings []struct {
					SourceLabels []string `json:"sourceLabels"`
					Regex        string
					TargetLabel  string `json:"targetLabel"`
					Replacement  string
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &sm); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if sm.Kind != "ServiceMonitor" || sm.Metadata.Namespace != "monitoring" || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("unexpected object:\n%s", b)
	}
	// Apply the relabelings as Prometheus does (anchored regex, the last match wins).
	label := func(address string) string {
		out := ""
		for _, r := range sm.Spec.Endpoints[0].Relabelings {
			if r.TargetLabel != "apiserver" || len(r.SourceLabels) != 1 || r.SourceLabels[0] != "__address__" {
				t.Fatalf("relabeling %+v", r)
			}
			if regexp.MustCompile("^(?:" + r.Regex + ")$").MatchString(address) {
				out = r.Replacement
			}
		}
		return out
	}
	for addr, want := range map[string]string{
		"10.0.0.1:6443": "cp-1", "10.0.0.12:6443": "cp-2", "[fd00::6]:443": "cp-6",
		"10.0.0.11:6443": "", "10.0.0.123:6443": "", "110.0.0.1:6443": "", "10.0.0.1x6443": "",
	} {
		if got := label(addr); got != want {
			t.Errorf("target %s labelled %q, want %q", addr, got, want)
		}
	}
}

func TestParseAPIServerTargetsRejects(t *testing.T) {
	for _, bad := range [][]string{nil, {"cp-1"}, {"cp-1=host.example"}, {"CP=10.0.0.1"}, {"a=10.0.0.1", "a=10.0.0.2"}, {"a=10.0.0.1", "b=10.0.0.1"}} {
		if _, err := ParseAPIServerTargets(bad); err == nil || !strings.Contains(err.Error(), "apiserver") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}
