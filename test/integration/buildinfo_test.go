package integration

import (
	"io"
	"regexp"
	"testing"
)

// TestBuildInfoIsExported: /metrics says which build runs (peertrail_build_info, always 1).
func TestBuildInfoIsExported(t *testing.T) {
	dir := t.TempDir()
	cfg := baseConfig(t, dir)
	cfg.InsecureHTTP, cfg.AcceptUnknownAPIServers = true, true
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	p := startPeertrail(t, cfg)
	resp, err := readerClient.Get(p.srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !regexp.MustCompile(`(?m)^peertrail_build_info\{[^}]*goversion="go[0-9.]+"[^}]*version="[^"]+"[^}]*\} 1$`).Match(b) {
		t.Errorf("no peertrail_build_info in /metrics:\n%.2000s", b)
	}
}
