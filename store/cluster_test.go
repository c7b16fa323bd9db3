package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// Every shipped query runs unchanged on the cluster layout (`peertrail schema --cluster`:
// Distributed tables under the tables' names), here two shards of the embedded engine over the
// real captures. A subquery over a Distributed table inside IN or JOIN must be GLOBAL there
// (ClickHouse's default distributed_product_mode = 'deny' refuses it otherwise), which a single
// server never shows.
func TestQueriesOnClusterLayout(t *testing.T) {
	if _, err := os.Stat(realDir); err != nil {
		t.Fatalf("no real captures at %s (they are committed; test/e2e TestCaptureRealMVP -update-real-fixtures remakes them): %v", realDir, err)
	}
	abs, err := filepath.Abs(realDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.xml"), []byte(storetest.ClusterConfigXML), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runSubprocessIn(t, dir, "cluster", 180*time.Second, "PEERTRAIL_REAL_DIR="+abs)
	t.Log(out)
	if !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("helper output:\n%s", out)
	}
}

func clusterHelper(ctx context.Context, fail func(string, ...any) int) int {
	s, c, params, err := openReal(ctx)
	if err != nil {
		return fail("%v", err)
	}
	defer s.Close()
	if err := storetest.Distribute(ctx, s); err != nil {
		return fail("%v", err)
	}
	// The layout is the one that refuses a plain IN over a Distributed table.
	_, err = s.Query(ctx, "SELECT count() FROM peertrail.chains WHERE audit_id IN (SELECT audit_id FROM peertrail.audit_ids)", nil)
	if err == nil || !strings.Contains(err.Error(), "DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED") {
		return fail("a plain IN over Distributed tables: %v, want DISTRIBUTED_IN_JOIN_SUBQUERY_DENIED", err)
	}
	qs, err := store.Queries()
	if err != nil {
		return fail("%v", err)
	}
	params["audit_id"] = c.Expect["proxied"][0]
	var problems []string
	for _, q := range qs {
		r, err := q.Run(ctx, s, params)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", q.Name, err))
		case len(r.Rows) == 0:
			problems = append(problems, q.Name+": no rows")
		default:
			fmt.Printf("%s: %d rows\n", q.Name, len(r.Rows))
		}
	}
	if len(problems) > 0 {
		return fail("on the cluster layout:\n%s", strings.Join(problems, "\n"))
	}
	fmt.Println("ok")
	return 0
}
