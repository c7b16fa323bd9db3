package kubecluster

import (
	"errors"
	"strings"
	"testing"
)

// TestReplaceServerWithChecksFirst: a bad new configuration is refused before
// the running server is touched (no binaries needed: the server never ran).
func TestReplaceServerWithChecksFirst(t *testing.T) {
	t.Setenv("PEERTRAIL_CACHE", t.TempDir())
	c := &Cluster{servers: map[string]*Server{}}
	s := &Server{Name: "kas-a", Port: 6443, Version: OldVersion, c: c, spec: ServerConfig{Name: "kas-a", Port: 6443, Version: OldVersion}}
	c.servers["kas-a"], c.order = s, []string{"kas-a"}
	ctx := t.Context()

	if err := c.ReplaceServerWith(ctx, "kas-z", ServerConfig{}); err == nil || !strings.Contains(err.Error(), `no server "kas-z"`) {
		t.Errorf("unknown server: %v", err)
	}
	if err := c.ReplaceServerWith(ctx, "kas-a", ServerConfig{Name: "kas-b"}); err == nil || !strings.Contains(err.Error(), "identity") {
		t.Errorf("renamed: %v", err)
	}
	if err := c.ReplaceServerWith(ctx, "kas-a", ServerConfig{Port: 7443}); err == nil || !strings.Contains(err.Error(), "port 7443") {
		t.Errorf("other port: %v", err)
	}
	if err := c.ReplaceServerWith(ctx, "kas-a", ServerConfig{Version: "v1.99.0"}); !errors.Is(err, ErrMissingBinary) {
		t.Errorf("missing binary: %v", err)
	}
	// Nothing changed.
	if s.Version != OldVersion || s.spec.Version != OldVersion || s.incarnation != 0 {
		t.Errorf("server changed: version %s spec %+v incarnation %d", s.Version, s.spec, s.incarnation)
	}
}
