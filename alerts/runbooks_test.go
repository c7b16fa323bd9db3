package alerts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/alerts"
)

// Every alert links a runbook that exists and says what the alert means during an upgrade, how
// to confirm it with peertrail and what to do; no runbook is left without its alert.
func TestRunbooks(t *testing.T) {
	names := map[string]bool{}
	for _, g := range alerts.Groups(alerts.Options{}) {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			names[r.Alert] = true
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[k] == "" {
					t.Errorf("%s has no %s", r.Alert, k)
				}
			}
			if want := alerts.DefaultRunbookBaseURL + r.Alert + ".md"; r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if s := r.Labels["severity"]; s != alerts.SeverityCritical && s != alerts.SeverityWarning {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
		}
	}
	if len(names) < 11 {
		t.Fatalf("only %d alerts", len(names))
	}
	for name := range names {
		b, err := os.ReadFile(filepath.Join("runbooks", name+".md"))
		if err != nil {
			t.Errorf("runbook of %s: %v", name, err)
			continue
		}
		text := string(b)
		if !strings.HasPrefix(text, "# "+name+"\n") {
			t.Errorf("runbooks/%s.md does not start with its title", name)
		}
		for _, section := range []string{"## What it means during an upgrade", "## Confirm", "## What to do"} {
			if !strings.Contains(text, "\n"+section+"\n") {
				t.Errorf("runbooks/%s.md has no section %q", name, section)
			}
		}
		confirm := text[strings.Index(text, "## Confirm"):]
		if !strings.Contains(confirm, "peertrail ") && !strings.Contains(confirm, "https://peertrail:8443") {
			t.Errorf("runbooks/%s.md: Confirm does not use peertrail", name)
		}
		readme, _ := os.ReadFile(filepath.Join("runbooks", "README.md"))
		if !strings.Contains(string(readme), "("+name+".md)") {
			t.Errorf("runbooks/README.md does not list %s", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join("runbooks", "*.md"))
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".md")
		if base != "README" && !names[base] {
			t.Errorf("runbooks/%s.md belongs to no alert", base)
		}
	}
}
