package dashboards_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/peertrail/peertrail/test/storetest"
)

// clusterHelperEnv, set, makes TestChainInvestigationQueriesOnClusterLayout the subprocess that
// runs the panels; it names the captures' directory.
const clusterHelperEnv = "PEERTRAIL_DASHBOARDS_CLUSTER_CAPTURES"

// Every query of the chain-investigation dashboard runs unchanged on the cluster layout
// (`peertrail schema --cluster`: Distributed tables under the tables' names), here two shards
// of the embedded engine. There ClickHouse refuses a plain IN or JOIN whose subquery reads a
// Distributed table (distributed_product_mode = 'deny'): it must be GLOBAL. The engine learns
// the cluster from a config.xml in its working directory, and a process holds one engine, so
// this runs as a subprocess of the test binary in a directory with that file.
func TestChainInvestigationQueriesOnClusterLayout(t *testing.T) {
	if dir := os.Getenv(clusterHelperEnv); dir != "" {
		c, _, results := runPanels(t, dir, true)
		// Both shards are the same engine: every chain is counted twice.
		if r := results["Chains per minute by class"]; r != nil {
			n := 0
			for i := range r.Rows {
				k, _ := strconv.Atoi(r.Value(i, "chains"))
				n += k
			}
			if n != 2*len(c.Chains) {
				t.Errorf("chains per minute: %d chains over two shards, want twice %d", n, len(c.Chains))
			}
		}
		return
	}
	captures, err := filepath.Abs(filepath.Join("..", storetest.RealDir))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(storetest.ClusterConfigXML), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), clusterHelperEnv+"="+captures)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the panels on the cluster layout: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
