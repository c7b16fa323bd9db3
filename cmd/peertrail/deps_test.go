package main

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// The shipped binary links no test code: not package testing, nothing under test/, and no
// test-helper package (httptest, storetest, ...). The real-apiserver demo runs its cluster
// from internal/kubecluster, which the e2e tests use through test/e2e/harness.
func TestBinaryLinksNoTestPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), out)
	}
	for _, p := range deps {
		// A test helper's name ends in "test" (httptest, fstest, storetest); the standard
		// library's own internal packages (internal/synctest) and words like "latest" are not.
		helper := strings.HasSuffix(path.Base(p), "test") && path.Base(p) != "latest" && !strings.HasPrefix(p, "internal/")
		if p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasPrefix(p, "github.com/peertrail/peertrail/test/") || helper {
			t.Errorf("peertrail links %s", p)
		}
	}
}
