package main

import (
	"slices"
	"testing"
)

// TestRedactResourcesFlag: the file's list is used unless --redact-resources is given, which
// replaces it (the flag wins, as every flag does), and survives applyConfigFile's re-setting.
func TestRedactResourcesFlag(t *testing.T) {
	path := writeConfig(t, "redactResources: [widgets.example.com, serviceaccounts]\n")
	fs, cfg := serveFlags(t)
	if err := applyConfigFile(fs, path, cfg); err != nil {
		t.Fatal(err)
	}
	if want := []string{"widgets.example.com", "serviceaccounts"}; !slices.Equal(cfg.RedactResources, want) {
		t.Errorf("from the file: %q, want %q", cfg.RedactResources, want)
	}
	fs, cfg = serveFlags(t, "--redact-resources", "gadgets.example.com, configmaps")
	if err := applyConfigFile(fs, path, cfg); err != nil {
		t.Fatal(err)
	}
	if want := []string{"gadgets.example.com", "configmaps"}; !slices.Equal(cfg.RedactResources, want) {
		t.Errorf("flag over the file: %q, want %q", cfg.RedactResources, want)
	}
}
