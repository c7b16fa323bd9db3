package dashboards_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/dashboards"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// expandSQL does what Grafana and the grafana-clickhouse-datasource plugin (v4) do to a panel's
// SQL before ClickHouse sees it: the ${audit_id:sqlstring} variable becomes a quoted string
// literal, $__fromTime and $__toTime the range's ends, and the plugin's $__timeFilter(column) macro a comparison with the dashboard's time
// range ("column >= toDateTime(from) AND column <= toDateTime(to)", pkg/macros of the plugin).
// Anything else starting with $ is an error: it would reach ClickHouse unexpanded.
func expandSQL(sql string, from, to time.Time, vars map[string]string) (string, error) {
	for name, v := range vars {
		sql = strings.ReplaceAll(sql, "${"+name+":sqlstring}", "'"+strings.ReplaceAll(v, "'", "''")+"'")
	}
	// $__fromTime and $__toTime: the range's ends as DateTime.
	sql = strings.ReplaceAll(sql, "$__fromTime", fmt.Sprintf("toDateTime(%d)", from.Unix()))
	sql = strings.ReplaceAll(sql, "$__toTime", fmt.Sprintf("toDateTime(%d)", to.Unix()))
	sql = timeFilter.ReplaceAllStringFunc(sql, func(m string) string {
		col := strings.TrimSpace(timeFilter.FindStringSubmatch(m)[1])
		return fmt.Sprintf("%s >= toDateTime(%d) AND %s <= toDateTime(%d)", col, from.Unix(), col, to.Unix())
	})
	if i := strings.Index(sql, "$"); i >= 0 {
		return "", fmt.Errorf("unexpanded %q", sql[i:min(len(sql), i+30)])
	}
	return sql, nil
}

var timeFilter = regexp.MustCompile(`\$__timeFilter\(([^()]+)\)`)

// Every SQL query of the chain-investigation dashboard runs on the embedded ClickHouse engine,
// with the store's real schema (its migrations) and the real captures (the audit webhook bodies
// real kube-apiservers sent in each MVP scenario, and the chains they make) written through the
// store's writer, and returns what the panel is for.
func TestChainInvestigationQueriesOnRealCaptures(t *testing.T) {
	c, lookup, results := runPanels(t, filepath.Join("..", storetest.RealDir), false)

	sumBy := func(r *store.Result, key, value string) map[string]int {
		out := map[string]int{}
		for i := range r.Rows {
			n, _ := strconv.Atoi(r.Value(i, value))
			out[r.Value(i, key)] += n
		}
		return out
	}
	// Every chain is counted once, in its class.
	if r := results["Chains per minute by class"]; r != nil {
		got := sumBy(r, "class", "chains")
		for _, class := range chain.Classes {
			if want := len(c.Expect[string(class)]); got[string(class)] != want {
				t.Errorf("chains per minute: %d %s chains, the captures have %d", got[string(class)], class, want)
			}
		}
	}
	wantMisleading := len(c.Expect[string(chain.ClassMisleading404)])
	if r := results["Misleading 404s per minute by resource"]; r != nil {
		n := 0
		for _, v := range sumBy(r, "answered_by", "misleading_404s") {
			n += v
		}
		if n != wantMisleading || wantMisleading == 0 {
			t.Errorf("misleading 404s per minute: %d, the captures have %d", n, wantMisleading)
		}
	}
	if r := results["Forwarding overhead p50 / p99 per minute"]; r != nil {
		for i := range r.Rows {
			p50, _ := strconv.ParseFloat(r.Value(i, "p50"), 64)
			p99, _ := strconv.ParseFloat(r.Value(i, "p99"), 64)
			if !strings.Contains(r.Value(i, "pair"), " -> kas-") || p99 < p50 {
				t.Errorf("forwarding overhead row %v", r.Rows[i])
			}
		}
	}
	if r := results["Findings per minute"]; r != nil {
		got := sumBy(r, "finding", "chains")
		for _, f := range []chain.Finding{chain.FindingImpersonationFlattened, chain.FindingPeerAuditMissing} {
			if want := len(c.Expect["finding:"+string(f)]); got[string(f)] != want || want == 0 {
				t.Errorf("findings per minute: %d %s, the captures have %d", got[string(f)], f, want)
			}
		}
	}
	// Every request, from the events rollups: what the captures hold, counted by hand.
	completed, notFound, serverErrors := map[string]int{}, 0, 0
	for _, r := range c.Records {
		if r.Stage != "ResponseComplete" {
			continue
		}
		completed[r.APIServer]++
		switch {
		case r.Code == 404:
			notFound++
		case r.Code >= 500:
			serverErrors++
		}
	}
	if r := results["Requests per minute by apiserver"]; r != nil {
		if got := sumBy(r, "apiserver", "requests"); !maps.Equal(got, completed) {
			t.Errorf("requests per minute: %v, the captures have %v", got, completed)
		}
	}
	if r := results["404s and 5xx per minute by resource"]; r != nil {
		n404, n5xx := 0, 0
		for _, v := range sumBy(r, "answered_by", "not_found") {
			n404 += v
		}
		for _, v := range sumBy(r, "answered_by", "server_errors") {
			n5xx += v
		}
		if n404 != notFound || n5xx != serverErrors || n404 < wantMisleading || n5xx == 0 {
			t.Errorf("404s and 5xx per minute: %d and %d, the captures have %d and %d", n404, n5xx, notFound, serverErrors)
		}
	}
	if r := results["Request latency p50 / p90 / p99 per minute"]; r != nil {
		seen := map[string]bool{}
		for i := range r.Rows {
			seen[r.Value(i, "apiserver")] = true
			p50, _ := strconv.ParseFloat(r.Value(i, "p50"), 64)
			p90, _ := strconv.ParseFloat(r.Value(i, "p90"), 64)
			p99, _ := strconv.ParseFloat(r.Value(i, "p99"), 64)
			if p50 < 0 || p90 < p50 || p99 < p90 || p99 > 60 {
				t.Errorf("request latency row %v", r.Rows[i])
			}
		}
		if len(seen) != len(completed) {
			t.Errorf("request latency for %v, the captures have requests completed by %v", seen, completed)
		}
	}
	// The broken chains, each of them, and nothing else; the failed forwards, counted.
	if r := results["Broken chains"]; r != nil {
		var got []string
		for i := range r.Rows {
			got = append(got, r.Value(i, "audit_id"))
		}
		want := slices.Clone(c.Expect[string(chain.ClassBroken)])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) || len(want) == 0 {
			t.Errorf("broken chains: %v, want %v", got, want)
		}
	}
	if r := results["Failed forwardings by entry apiserver"]; r != nil {
		n := 0
		for i := range r.Rows {
			k, _ := strconv.Atoi(r.Value(i, "requests"))
			n += k
			if r.Value(i, "code") != "503" || r.Value(i, "entry") == "" {
				t.Errorf("failed forward row %v", r.Rows[i])
			}
		}
		if want := len(c.Expect[string(chain.ClassProxyFailed)]); n != want || want == 0 {
			t.Errorf("failed forwardings: %d, the captures have %d", n, want)
		}
	}
	if r := results["Misleading 404s by resource"]; r != nil {
		n := 0
		for i := range r.Rows {
			k, _ := strconv.Atoi(r.Value(i, "requests"))
			n += k
			if r.Value(i, "resource") != "podgroups" || !strings.Contains(r.Value(i, "served_by"), "kas-c") {
				t.Errorf("misleading 404 row %v: want podgroups, served by kas-c", r.Rows[i])
			}
		}
		if n != wantMisleading {
			t.Errorf("misleading 404s by resource: %d, the captures have %d", n, wantMisleading)
		}
	}
	if r := results["Identity mismatches by user"]; r != nil {
		found := false
		for i := range r.Rows {
			if r.Value(i, "user") == "bob" && strings.Contains(r.Value(i, "finding_list"), string(chain.FindingImpersonationFlattened)) &&
				r.Value(i, "example_real_user") == "admin" {
				found = true
			}
		}
		if !found {
			t.Errorf("identity mismatches: no row for bob impersonated by admin: %v", r.Rows)
		}
	}
	// The looked-up chain: both sides, as the labels say.
	if r := results["Chain"]; r != nil {
		if len(r.Rows) != 1 || r.Value(0, "class") != string(chain.ClassProxied) ||
			r.Value(0, "entry_apiserver") != lookup.Entry || (lookup.Peer != "" && r.Value(0, "peer_apiserver") != lookup.Peer) ||
			r.Value(0, "real_user") != lookup.User {
			t.Errorf("chain %s (%s -> %s, %s as %s): %v", lookup.AuditID, lookup.Entry, lookup.Peer, lookup.User, lookup.ImpersonatedUser, r.Rows)
		}
	}
	if r := results["Audit records"]; r != nil {
		servers := map[string]bool{}
		for i := range r.Rows {
			servers[r.Value(i, "apiserver")] = true
		}
		if len(servers) != 2 {
			t.Errorf("audit records of %s from %v, want the entry's and the peer's", lookup.AuditID, servers)
		}
	}
}

func minTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if !t.IsZero() && t.Before(m) {
			m = t
		}
	}
	return m
}

func maxTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// runPanels writes the real captures in dir into a fresh embedded engine, in the cluster
// layout when distribute is set (storetest.Distribute), and runs every query of the
// chain-investigation dashboard over them, checking what every panel must return; results are
// by panel title.
func runPanels(t *testing.T, dir string, distribute bool) (c *storetest.Capture, lookup storetest.Label, results map[string]*store.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := storetest.LoadCaptures(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{})
	if err != nil {
		t.Fatalf("the embedded ClickHouse engine is required and did not open: %v\n"+
			"Run scripts/fetch-chdb.sh first (test/run and CI do), or set CHDB_LIB_PATH.", err)
	}
	defer s.Close()
	// The captures are fixed in time: keep them whatever their age.
	if err := store.Migrate(ctx, s, store.SchemaOptions{Retention: store.MaxRetention, RollupRetention: store.MaxRetention}, nil); err != nil {
		t.Fatal(err)
	}
	if err := storetest.Write(ctx, s, c.Records, c.Chains); err != nil {
		t.Fatal(err)
	}
	if distribute {
		if err := storetest.Distribute(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	// The dashboard's time range: the captures, from the start of their first minute.
	from, to := c.Records[0].ReceivedAt, c.Records[0].ReceivedAt
	for _, r := range c.Records {
		from, to = minTime(from, r.ReceivedAt, r.RequestReceivedTimestamp), maxTime(to, r.ReceivedAt)
	}
	from, to = from.Truncate(time.Minute).Add(-time.Minute), to.Add(time.Minute)

	// The chain to look up: a proxied request with impersonation (both sides, and who acted).
	for _, l := range c.Labels {
		if l.Expect == "proxied" && l.ImpersonatedUser != "" && len(l.ObservedOn) == 2 {
			lookup = l
			break
		}
	}
	if lookup.AuditID == "" {
		t.Fatal("no proxied impersonated request in the captures")
	}

	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	targets, err := dashboards.Targets(files["chain-investigation.json"])
	if err != nil {
		t.Fatal(err)
	}
	results = map[string]*store.Result{}
	for _, tg := range targets {
		if tg.RawSQL == "" {
			t.Errorf("%s %s: no SQL", tg.Panel, tg.RefID)
			continue
		}
		sql, err := expandSQL(tg.RawSQL, from, to, map[string]string{"audit_id": lookup.AuditID})
		if err != nil {
			t.Errorf("%s: %v", tg.Panel, err)
			continue
		}
		r, err := s.Query(ctx, sql, nil)
		if err != nil {
			t.Errorf("%s: %v\n%s", tg.Panel, err, sql)
			continue
		}
		t.Logf("%s: %d rows", tg.Panel, len(r.Rows))
		if len(r.Rows) == 0 {
			t.Errorf("%s: no rows on the real captures", tg.Panel)
		}
		if tg.Format == dashboards.FormatTimeSeries && (len(r.Columns) == 0 || r.Columns[0].Name != "time" || !strings.HasPrefix(r.Columns[0].Type, "DateTime")) {
			t.Errorf("%s: a time series must start with a DateTime column named time, got %v", tg.Panel, r.Columns)
		}
		results[tg.Panel] = r
	}
	if len(results) < 11 {
		t.Fatalf("only %d panels ran", len(results))
	}
	return c, lookup, results
}
