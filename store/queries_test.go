package store_test

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// scenarioBegin is the scenario's own window, three hours ago: no other test writes there
// (they use other hours), and it is well inside the tables' retention.
var scenarioBegin = time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)

var (
	scenarioOnce sync.Once
	scenarioData *storetest.Scenario
	scenarioErr  error
)

// loadScenario writes the MVP scenario through the writer and the chain sink, once.
func loadScenario(t *testing.T) *storetest.Scenario {
	t.Helper()
	s := engine(t)
	scenarioOnce.Do(func() {
		scenarioData, scenarioErr = storetest.Build(storetest.Options{Begin: scenarioBegin, Duration: 10 * time.Minute, Seed: 7})
		if scenarioErr != nil {
			return
		}
		scenarioErr = storetest.Write(context.Background(), s, scenarioData.Records, scenarioData.Chains)
	})
	if scenarioErr != nil {
		t.Fatalf("load the scenario: %v", scenarioErr)
	}
	return scenarioData
}

func scenarioWindow() map[string]string {
	return map[string]string{
		"since": store.FormatTime(scenarioBegin),
		"until": store.FormatTime(scenarioBegin.Add(11 * time.Minute)),
	}
}

func runNamed(t *testing.T, name string, params map[string]string) *store.Result {
	t.Helper()
	q, err := store.QueryNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := q.Run(context.Background(), engine(t), params)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// column returns the values of column name, failing when the result has no such column.
func column(t *testing.T, r *store.Result, name string) []string {
	t.Helper()
	j := r.Index(name)
	if j < 0 {
		t.Fatalf("result has no column %q: %v", name, r.Columns)
	}
	out := make([]string, len(r.Rows))
	for i, row := range r.Rows {
		out[i] = row[j]
	}
	return out
}

func sumColumn(t *testing.T, r *store.Result, name string) int {
	t.Helper()
	n := 0
	for _, v := range column(t, r, name) {
		x, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("column %s: %q is not a number", name, v)
		}
		n += x
	}
	return n
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// Every shipped query runs against the real schema and real-shaped data, and says what it
// should. The checks map doubles as the list of queries: a query without a check fails.
func TestEveryShippedQuery(t *testing.T) {
	sc := loadScenario(t)
	win := scenarioWindow()
	count := func(class chain.Class) int { return len(sc.Expect[string(class)]) }

	proxiedID := sc.Expect[string(chain.ClassProxied)][0]

	checks := map[string]func(t *testing.T, r *store.Result){
		"chains_by_class": func(t *testing.T, r *store.Result) {
			got := map[string]int{}
			for i := range r.Rows {
				n, _ := strconv.Atoi(r.Value(i, "chains"))
				got[r.Value(i, "class")] += n
			}
			for _, c := range chain.Classes {
				if got[string(c)] != count(c) {
					t.Errorf("class %s: %d chains, want %d", c, got[string(c)], count(c))
				}
			}
			// The proxied pairs.
			pairs := map[string]int{}
			for i := range r.Rows {
				if r.Value(i, "class") == "proxied" {
					n, _ := strconv.Atoi(r.Value(i, "chains"))
					pairs[r.Value(i, "entry")+">"+r.Value(i, "peer")] += n
				}
			}
			if pairs["kas-a>kas-c"] != 46 || pairs["kas-b>kas-c"] != 25 || len(pairs) != 2 {
				t.Errorf("proxied pairs %v, want kas-a>kas-c 46, kas-b>kas-c 25", pairs)
			}
		},
		"misleading_404s": func(t *testing.T, r *store.Result) {
			if n := sumColumn(t, r, "requests"); n != count(chain.ClassMisleading404) {
				t.Errorf("%d misleading 404s, want %d", n, count(chain.ClassMisleading404))
			}
			for i := range r.Rows {
				if r.Value(i, "resource") != "podgroups" || r.Value(i, "served_by") != "['kas-c']" {
					t.Errorf("row %d: %v", i, r.Rows[i])
				}
			}
			if got := sortedCopy(column(t, r, "answered_404")); !slices.Equal(got, []string{"kas-a", "kas-b"}) {
				t.Errorf("answered_404 %v", got)
			}
		},
		"broken_chains": func(t *testing.T, r *store.Result) {
			want := sortedCopy(sc.Expect[string(chain.ClassBroken)])
			if got := sortedCopy(column(t, r, "audit_id")); !slices.Equal(got, want) {
				t.Errorf("broken auditIDs %v, want %v", got, want)
			}
			for i := range r.Rows {
				if !strings.Contains(r.Value(i, "finding_list"), "audit_missing") {
					t.Errorf("row %d has no *_audit_missing finding: %v", i, r.Rows[i])
				}
			}
		},
		"identity_mismatches": func(t *testing.T, r *store.Result) {
			got := map[string]string{}
			for i := range r.Rows {
				got[r.Value(i, "user")] = r.Value(i, "finding_list") + " " + r.Value(i, "requests") + " uid_lost=" + r.Value(i, "uid_lost")
			}
			if got["alice@example.com"] != "impersonation_flattened 6 uid_lost=0" || got["bob@example.com"] != "identity_mismatch 5 uid_lost=5" || len(got) != 2 {
				t.Errorf("identity mismatches %v", got)
			}
			for i := range r.Rows {
				if r.Value(i, "user") == "alice@example.com" && r.Value(i, "example_real_user") != "admin" {
					t.Errorf("the real user behind alice should be admin: %v", r.Rows[i])
				}
			}
		},
		"slowest_forwardings": func(t *testing.T, r *store.Result) {
			if len(r.Rows) != 20 {
				t.Fatalf("%d rows, want 20", len(r.Rows))
			}
			prev := 1e18
			for _, v := range column(t, r, "overhead_ms") {
				x, _ := strconv.ParseFloat(v, 64)
				if x > prev || x <= 0 {
					t.Fatalf("overhead_ms not positive and descending: %v", column(t, r, "overhead_ms"))
				}
				prev = x
			}
		},
		"proxy_failures": func(t *testing.T, r *store.Result) {
			if n := sumColumn(t, r, "requests"); n != count(chain.ClassProxyFailed) {
				t.Errorf("%d failed forwardings, want %d", n, count(chain.ClassProxyFailed))
			}
			for i := range r.Rows {
				if r.Value(i, "code") != "503" || !strings.Contains(r.Value(i, "message"), "remote server") && !strings.Contains(r.Value(i, "message"), "reach service") {
					t.Errorf("row %d: %v", i, r.Rows[i])
				}
			}
		},
		"apiserver_versions": func(t *testing.T, r *store.Result) {
			got := map[string]string{}
			for i := range r.Rows {
				got[r.Value(i, "apiserver")] += r.Value(i, "version")
			}
			for a, v := range storetest.Versions {
				if got[a] != v {
					t.Errorf("%s: version %q, want %q", a, got[a], v)
				}
			}
		},
		"audit_id_records": func(t *testing.T, r *store.Result) {
			var got []string
			for i := range r.Rows {
				got = append(got, r.Value(i, "apiserver")+"/"+r.Value(i, "stage"))
			}
			sort.Strings(got)
			want := []string{"kas-a/RequestReceived", "kas-a/ResponseComplete", "kas-c/RequestReceived", "kas-c/ResponseComplete"}
			if !slices.Equal(got, want) {
				t.Errorf("records of %s: %v, want %v", proxiedID, got, want)
			}
		},
		"audit_id_chain": func(t *testing.T, r *store.Result) {
			if len(r.Rows) != 1 || r.Value(0, "class") != "proxied" || r.Value(0, "entry_apiserver") != "kas-a" || r.Value(0, "peer_apiserver") != "kas-c" {
				t.Errorf("chain of %s: %v %v", proxiedID, r.Columns, r.Rows)
			}
		},
		"apiserver_capabilities": func(t *testing.T, r *store.Result) {
			got := map[string]bool{}
			for i := range r.Rows {
				got[r.Value(i, "apiserver")+" "+r.Value(i, "version")+" "+r.Value(i, "role")+" "+r.Value(i, "api_group")+"/"+r.Value(i, "resource")] = true
				if r.Value(i, "first_minute") >= r.Value(i, "until_minute") {
					t.Errorf("row %v: an empty span", r.Rows[i])
				}
			}
			for _, want := range []string{
				"kas-c v1.36.3 served scheduling.k8s.io/podgroups",
				"kas-a v1.35.4 forwarded scheduling.k8s.io/podgroups",
				"kas-b v1.35.4 forwarded scheduling.k8s.io/podgroups",
			} {
				if !got[want] {
					t.Errorf("no %q in the capability history: %v", want, got)
				}
			}
			for k := range got {
				if strings.HasPrefix(k, "kas-a ") && strings.HasSuffix(k, " served scheduling.k8s.io/podgroups") {
					t.Errorf("%q: kas-a (1.35) does not serve podgroups", k)
				}
			}
		},
		"chain_events": func(t *testing.T, r *store.Result) {
			var got []string
			for i := range r.Rows {
				got = append(got, r.Value(i, "apiserver")+"/"+r.Value(i, "stage"))
				if !strings.Contains(r.Value(i, "raw"), proxiedID) {
					t.Errorf("raw event %.80q is not of %s", r.Value(i, "raw"), proxiedID)
				}
			}
			sort.Strings(got)
			want := []string{"kas-a/RequestReceived", "kas-a/ResponseComplete", "kas-c/RequestReceived", "kas-c/ResponseComplete"}
			if !slices.Equal(got, want) {
				t.Errorf("events of %s: %v, want %v", proxiedID, got, want)
			}
		},
		"chains_since": func(t *testing.T, r *store.Result) {
			// Run with classes ['misleading_404'] and apiservers ['kas-b'] (below).
			n := 0
			for i := range r.Rows {
				c, err := store.ChainFromRow(r, i)
				if err != nil {
					t.Fatal(err)
				}
				if c.Class != chain.ClassMisleading404 || c.Entry == nil || c.Entry.APIServer != "kas-b" {
					t.Errorf("chain %s: %s from %v, want misleading_404s of kas-b only", c.ID, c.Class, c.Entry)
				}
				if slices.Contains(sc.Expect[string(chain.ClassMisleading404)], c.AuditID) {
					n++
				}
			}
			if n != 12 {
				t.Errorf("%d of the scenario's misleading 404s of kas-b, want 12", n)
			}
		},
		"dashboard_requests_per_minute": func(t *testing.T, r *store.Result) {
			want := 0
			for _, rec := range sc.Records {
				if rec.Stage == "ResponseComplete" {
					want++
				}
			}
			if n := sumColumn(t, r, "requests"); n != want {
				t.Errorf("%d requests, want %d (the ResponseComplete records)", n, want)
			}
		},
		"dashboard_request_latency": func(t *testing.T, r *store.Result) {
			want := 0
			for _, rec := range sc.Records {
				if rec.Stage == "ResponseComplete" {
					want++
				}
			}
			if n := sumColumn(t, r, "requests"); n != want {
				t.Errorf("%d requests, want %d", n, want)
			}
			for _, v := range column(t, r, "p99_seconds") {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || x <= 0 || x > 1 {
					t.Fatalf("p99 %q out of range", v)
				}
			}
		},
		"dashboard_errors_by_resource": func(t *testing.T, r *store.Result) {
			n503 := sumColumn(t, r, "server_errors")
			if n503 != count(chain.ClassProxyFailed) {
				t.Errorf("%d 5xx, want %d", n503, count(chain.ClassProxyFailed))
			}
			if sumColumn(t, r, "not_found") < count(chain.ClassMisleading404) {
				t.Errorf("fewer 404s than misleading 404s")
			}
		},
		"dashboard_chains_per_minute": func(t *testing.T, r *store.Result) {
			if n := sumColumn(t, r, "chains"); n != len(sc.Chains) {
				t.Errorf("%d chains, want %d", n, len(sc.Chains))
			}
		},
		"dashboard_forwarding_overhead": func(t *testing.T, r *store.Result) {
			if n := sumColumn(t, r, "proxied"); n != count(chain.ClassProxied) {
				t.Errorf("%d proxied, want %d", n, count(chain.ClassProxied))
			}
			for _, v := range column(t, r, "p50_seconds") {
				if x, _ := strconv.ParseFloat(v, 64); x <= 0 || x > 0.2 {
					t.Errorf("p50 overhead %s s out of range", v)
				}
			}
		},
		"dashboard_findings_per_minute": func(t *testing.T, r *store.Result) {
			got := map[string]int{}
			for i := range r.Rows {
				n, _ := strconv.Atoi(r.Value(i, "chains"))
				got[r.Value(i, "finding")] += n
			}
			for _, f := range chain.Findings {
				if want := len(sc.Expect["finding:"+string(f)]); got[string(f)] != want {
					t.Errorf("finding %s: %d, want %d", f, got[string(f)], want)
				}
			}
		},
	}

	qs, err := store.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		t.Run(q.Name, func(t *testing.T) {
			check, ok := checks[q.Name]
			if !ok {
				t.Fatalf("query %s has no check in this test", q.Name)
			}
			params := map[string]string{"since": win["since"], "until": win["until"], "audit_id": proxiedID,
				"classes": "['misleading_404']", "findings": "[]", "apiservers": "['kas-b']", "limit": "10000"}
			start := time.Now()
			r := runNamed(t, q.Name, params)
			t.Logf("%d rows in %v", len(r.Rows), time.Since(start).Round(time.Microsecond))
			check(t, r)
		})
		delete(checks, q.Name)
	}
	for name := range checks {
		t.Errorf("check for %s, which is not a shipped query", name)
	}
}

// NamedQuery.Run takes String parameters as plain values: a client-chosen Audit-ID with a
// backslash, a tab or a quote finds its records.
func TestNamedQueryStringParameters(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	tr := newTraffic(t, "oddid", 17, 1, 3)
	odd := []string{`C:\temp\x`, "tab\there", `it's`}
	var recs []record.Record
	for i, id := range odd {
		r := tr.batches[0].Records[i]
		r.AuditID = id
		recs = append(recs, r)
	}
	if err := store.NewWriter(s, codec, store.WriterOptions{}).WriteEvents(ctx, recs); err != nil {
		t.Fatal(err)
	}
	q, err := store.QueryNamed("audit_id_records")
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range odd {
		r, err := q.Run(ctx, s, map[string]string{"audit_id": id, "unused": "x"})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Rows) != 1 || r.Value(0, "stage_timestamp") != store.FormatTime(recs[i].StageTimestamp) {
			t.Errorf("records of %q: %v", id, r.Rows)
		}
	}
}
