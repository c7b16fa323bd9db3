package kubecluster

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRenamedBinary: the link has the new name and runs the cached binary; a path is refused
// as a name (the name is all the user agent shows).
func TestRenamedBinary(t *testing.T) {
	t.Setenv("PEERTRAIL_CACHE", t.TempDir())
	if err := os.MkdirAll(filepath.Dir(BinaryPath(OldVersion)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(BinaryPath(OldVersion), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bin")
	p, err := RenamedBinary(dir, OldVersion, "kube-apiserver-1.35.4")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "kube-apiserver-1.35.4" {
		t.Errorf("path %s", p)
	}
	if target, err := os.Readlink(p); err != nil || target != BinaryPath(OldVersion) {
		t.Errorf("link to %q, %v", target, err)
	}
	for _, name := range []string{"", "a/kube-apiserver", "../x"} {
		if _, err := RenamedBinary(dir, OldVersion, name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := RenamedBinary(dir, "v1.99.0", "kube-apiserver-1.99"); err == nil {
		t.Error("a version that is not built accepted")
	}
}
