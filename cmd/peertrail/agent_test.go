package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentRefusesWhatCannotWork: an agent without aggregators, without a credential for them,
// with a spool that is not fsynced, or with aggregators misnamed, is refused (exit 2, the reason
// on one line) before its data directory is made.
func TestAgentRefusesWhatCannotWork(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "agent.token")
	if err := os.WriteFile(token, []byte("agent-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"agent", "--insecure-http", "--listen", "127.0.0.1:0", "--accept-unknown-apiservers"}
	for _, c := range []struct {
		args []string
		says string
	}{
		{nil, "no aggregator"},
		{[]string{"--aggregator", "agg-0=https://10.0.0.1:8443"}, "no credential for the aggregators"},
		{[]string{"--aggregator", "agg-0=https://10.0.0.1:8443", "--relay-token-file", token, "--spool-fsync", "interval"}, "it needs always"},
		{[]string{"--aggregator", "Agg_0=https://10.0.0.1:8443", "--relay-token-file", token}, "name \"Agg_0\""},
		{[]string{"--aggregator", "agg-0=ftp://10.0.0.1", "--relay-token-file", token}, "want https://host:port"},
		{[]string{"--aggregator", "agg-0", "--relay-token-file", token}, "want name=https://host:port"},
		{[]string{"--aggregator", "agg-0=https://a:1,agg-0=https://b:1", "--relay-token-file", token}, "named twice"},
		{[]string{"--aggregator", "agg-0=https://10.0.0.1:8443", "--relay-token-file", filepath.Join(dir, "missing")}, "--relay-token-file"},
	} {
		dataDir := filepath.Join(t.TempDir(), "data")
		var out, errOut bytes.Buffer
		args := append(append(append([]string(nil), base...), c.args...), "--data-dir", dataDir)
		code := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), c.says) || strings.Count(strings.TrimSpace(errOut.String()), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want %d saying %q on one line", c.args, code, errOut.String(), exitUsage, c.says)
		}
		if _, err := os.Stat(dataDir); err == nil {
			t.Errorf("%v: refused after making the data directory", c.args)
		}
	}
}
