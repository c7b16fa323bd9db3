package alerts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v2"

	"github.com/peertrail/peertrail/alerts"
)

const generatedDir = "generated"

// The committed files are what the code generates: regenerate with
// `go run ./cmd/peertrail generate alerts`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := alerts.Files(alerts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range alerts.FileNames() {
		got, err := os.ReadFile(filepath.Join(generatedDir, name))
		if err != nil {
			t.Errorf("%v (run `go run ./cmd/peertrail generate alerts`)", err)
			continue
		}
		if !bytes.Equal(got, files[name]) {
			t.Errorf("alerts/%s/%s differs from what alerts/*.go generates: run `go run ./cmd/peertrail generate alerts` and commit the result", generatedDir, name)
		}
	}
	entries, err := os.ReadDir(generatedDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			t.Errorf("alerts/%s/%s is not generated any more: remove it", generatedDir, e.Name())
		}
	}
}

// tool returns the path of a Debian-packaged Prometheus tool, failing the test with what to
// install when it is missing.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required and not installed: apt-get install -y %s (CI installs it)", name, pkg)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = generatedDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// Prometheus' own rule loader accepts the rules (promtool parses every expression and template).
func TestPromtoolCheckRules(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	out := run(t, promtool, "check", "rules", alerts.RulesFile)
	t.Log(out)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules: %s", out)
	}
}

// Every alert fires on the series it should, with its labels and annotations, and stays
// silent otherwise.
func TestPromtoolUnitTests(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	out := run(t, promtool, "test", "rules", alerts.RulesTestFile)
	t.Log(out)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %s", out)
	}
}

func TestAlertmanagerConfig(t *testing.T) {
	amtool := tool(t, "amtool", "prometheus-alertmanager")
	out := run(t, amtool, "check-config", alerts.AlertmanagerFile)
	t.Log(out)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("amtool check-config: %s", out)
	}
	// Routing: a critical peertrail alert pages, a warning notifies, others go elsewhere.
	for _, c := range []struct {
		labels []string
		want   string
	}{
		{[]string{"alertname=" + alerts.AlertPeertrailDown, "severity=critical", alerts.LabelComponent + "=" + alerts.Component}, alerts.ReceiverPage},
		{[]string{"alertname=" + alerts.AlertMisleading404s, "severity=warning", alerts.LabelComponent + "=" + alerts.Component}, alerts.ReceiverNotify},
		{[]string{"alertname=SomethingElse", "severity=critical"}, alerts.ReceiverDefault},
	} {
		got := strings.TrimSpace(run(t, amtool, append([]string{"config", "routes", "test", "--config.file=" + alerts.AlertmanagerFile}, c.labels...)...))
		if got != c.want {
			t.Errorf("%v routes to %q, want %q", c.labels, got, c.want)
		}
	}
}

type ruleFile struct {
	Groups []alerts.Group `yaml:"groups"`
}

// The PrometheusRule carries exactly the rules of the rule file.
func TestPrometheusRuleMatchesRuleFile(t *testing.T) {
	var rules ruleFile
	var cr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec ruleFile `yaml:"spec"`
	}
	for name, v := range map[string]any{alerts.RulesFile: &rules, alerts.PrometheusRuleFile: &cr} {
		b, err := os.ReadFile(filepath.Join(generatedDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" || cr.Metadata.Name == "" {
		t.Errorf("PrometheusRule is %s %s", cr.APIVersion, cr.Kind)
	}
	a, _ := yaml.Marshal(rules.Groups)
	b, _ := yaml.Marshal(cr.Spec.Groups)
	if !bytes.Equal(a, b) || len(rules.Groups) == 0 {
		t.Errorf("the PrometheusRule's groups differ from %s", alerts.RulesFile)
	}
}

// The unit tests make every alerting rule fire (with its own labels) and every alert stay
// silent at least once.
func TestUnitTestsCoverEveryRule(t *testing.T) {
	var tf struct {
		Tests []struct {
			AlertTests []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					Labels map[string]string `yaml:"exp_labels"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	b, err := os.ReadFile(filepath.Join(generatedDir, alerts.RulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	silent := map[string]bool{}
	type fired struct {
		name   string
		labels map[string]string
	}
	var fires []fired
	for _, g := range tf.Tests {
		for _, a := range g.AlertTests {
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname] = true
			}
			for _, e := range a.ExpAlerts {
				fires = append(fires, fired{a.Alertname, e.Labels})
			}
		}
	}
	for _, g := range alerts.Groups(alerts.Options{}) {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if !silent[r.Alert] {
				t.Errorf("no unit test where %s stays silent", r.Alert)
			}
			found := false
			for _, f := range fires {
				match := f.name == r.Alert
				for k, v := range r.Labels {
					match = match && f.labels[k] == v
				}
				found = found || match
			}
			if !found {
				t.Errorf("no unit test where %s %v fires", r.Alert, r.Labels)
			}
		}
	}
}

// Rules generated with other options (another job name, another gate pause) pass their own
// unit tests too.
func TestPromtoolUnitTestsWithOptions(t *testing.T) {
	promtool := tool(t, "promtool", "prometheus")
	dir := t.TempDir()
	if _, err := alerts.Write(dir, alerts.Options{PeertrailJob: "audit", GatePausedFor: 20 * time.Minute, RunbookBaseURL: "https://wiki.example.com/runbooks"}); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(dir, alerts.RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`job="audit"`, "for: 20m", "https://wiki.example.com/runbooks/" + alerts.AlertPeertrailDown + ".md"} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("rules generated with options lack %q", want)
		}
	}
	cmd := exec.Command(promtool, "test", "rules", alerts.RulesTestFile)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
