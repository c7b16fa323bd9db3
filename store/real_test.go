package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/chainapi"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

var realDir = filepath.Join("..", storetest.RealDir)

// The real captures (audit webhook bodies of real kube-apiservers in each MVP scenario) through
// the writer, the chain sink and every shipped query. They are fixed in time, so this runs in
// an engine of its own whose retention keeps them.
func TestRealCaptures(t *testing.T) {
	if _, err := os.Stat(realDir); err != nil {
		t.Fatalf("no real captures at %s (they are committed; test/e2e TestCaptureRealMVP -update-real-fixtures remakes them): %v", realDir, err)
	}
	out := runSubprocess(t, "real", 180*time.Second, "PEERTRAIL_REAL_DIR="+realDir)
	t.Log(out)
	if !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("helper output:\n%s", out)
	}
}

// openReal opens a fresh in-memory engine and writes the captures in $PEERTRAIL_REAL_DIR into
// it; params is the window of the captures (since and until).
func openReal(ctx context.Context) (s *store.Embedded, c *storetest.Capture, params map[string]string, err error) {
	c, err = storetest.LoadCaptures(os.Getenv("PEERTRAIL_REAL_DIR"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load: %w", err)
	}
	s, err = store.OpenEmbedded(ctx, store.EmbeddedOptions{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("open: %w", err)
	}
	fail := func(what string, err error) (*store.Embedded, *storetest.Capture, map[string]string, error) {
		s.Close()
		return nil, nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := store.Migrate(ctx, s, store.SchemaOptions{Retention: store.MaxRetention, RollupRetention: store.MaxRetention}, nil); err != nil {
		return fail("migrate", err)
	}
	if err := storetest.Write(ctx, s, c.Records, c.Chains); err != nil {
		return fail("load the captures", err)
	}
	lo, hi := receivedSpan(c)
	params = map[string]string{"since": store.FormatTime(lo.Add(-time.Minute)), "until": store.FormatTime(hi.Add(time.Minute))}
	return s, c, params, nil
}

func realCaptureHelper(ctx context.Context, fail func(string, ...any) int) int {
	s, c, params, err := openReal(ctx)
	if err != nil {
		return fail("%v", err)
	}
	defer s.Close()
	fmt.Printf("%d scenarios, %d posts, %d records, %d chains, %d labelled requests\n", len(c.Scenarios), len(c.Posts), len(c.Records), len(c.Chains), len(c.Labels))

	run := func(name string, extra map[string]string) (*store.Result, error) {
		q, err := store.QueryNamed(name)
		if err != nil {
			return nil, err
		}
		p := map[string]string{}
		for k, v := range params {
			p[k] = v
		}
		for k, v := range extra {
			p[k] = v
		}
		return q.Run(ctx, s, p)
	}
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}

	// Every shipped query runs on the real records.
	qs, err := store.Queries()
	if err != nil {
		return fail("%v", err)
	}
	for _, q := range qs {
		extra := map[string]string{"audit_id": c.Labels[0].AuditID}
		r, err := run(q.Name, extra)
		if err != nil {
			return fail("%s: %v", q.Name, err)
		}
		fmt.Printf("%s: %d rows\n", q.Name, len(r.Rows))
	}

	total := scalarOf(ctx, s, "SELECT count() FROM peertrail.events")
	check(total == fmt.Sprint(len(c.Records)), "events: %s rows, want %d", total, len(c.Records))

	// Misleading 404s: the labelled ones, at the 1.35 entry, and served_by names kas-c.
	r, _ := run("misleading_404s", nil)
	n := 0
	for i := range r.Rows {
		var k int
		fmt.Sscan(r.Value(i, "requests"), &k)
		n += k
		check(strings.Contains(r.Value(i, "served_by"), "kas-c"), "misleading 404 row without kas-c serving: %v", r.Rows[i])
		check(r.Value(i, "resource") == "podgroups", "misleading 404 of %s", r.Value(i, "resource"))
	}
	check(n == len(c.Expect["label:misleading_404"]), "misleading 404s: %d, labels say %d", n, len(c.Expect["label:misleading_404"]))

	// Failed forwardings: the 503s after kas-c was killed.
	r, _ = run("proxy_failures", nil)
	n = 0
	for i := range r.Rows {
		var k int
		fmt.Sscan(r.Value(i, "requests"), &k)
		n += k
		check(r.Value(i, "code") == "503" && r.Value(i, "entry") == "kas-a", "proxy failure row %v", r.Rows[i])
	}
	check(n == len(c.Expect["label:peer_unreachable"]), "proxy failures: %d, labels say %d", n, len(c.Expect["label:peer_unreachable"]))

	// Broken chains: the create kas-c served just before its SIGKILL, if its record was lost.
	r, _ = run("broken_chains", nil)
	var broken []string
	for i := range r.Rows {
		broken = append(broken, r.Value(i, "audit_id"))
	}
	sort.Strings(broken)
	want := append([]string{}, c.Expect[string(chain.ClassBroken)]...)
	sort.Strings(want)
	check(slices.Equal(broken, want), "broken chains %v, want %v", broken, want)

	// Impersonation flattened on the hop: admin acting as bob, seen by the peer as bob.
	r, _ = run("identity_mismatches", nil)
	found := false
	for i := range r.Rows {
		if r.Value(i, "user") == "bob" {
			found = true
			check(r.Value(i, "example_real_user") == "admin" && strings.Contains(r.Value(i, "finding_list"), "impersonation_flattened"), "bob's row %v", r.Rows[i])
		}
	}
	check(found, "no identity mismatch for bob: %v", r.Rows)

	// The rolling upgrade: kas-b reported v1.35.4 and later v1.36.3.
	r, _ = run("apiserver_versions", nil)
	versions := map[string][]string{}
	for i := range r.Rows {
		versions[r.Value(i, "apiserver")] = append(versions[r.Value(i, "apiserver")], r.Value(i, "version"))
	}
	check(slices.Equal(versions["kas-b"], []string{"v1.35.4", "v1.36.3"}), "kas-b versions %v", versions["kas-b"])
	check(slices.Equal(versions["kas-c"], []string{"v1.36.3"}) && slices.Equal(versions["kas-a"], []string{"v1.35.4"}), "versions %v", versions)

	// Every labelled request: its records come from exactly the apiservers that observed it,
	// and its chain has the class the label implies.
	for _, l := range c.Labels {
		r, err := run("audit_id_records", map[string]string{"audit_id": l.AuditID})
		if err != nil {
			return fail("%v", err)
		}
		var seen []string
		for i := range r.Rows {
			if a := r.Value(i, "apiserver"); !slices.Contains(seen, a) {
				seen = append(seen, a)
			}
		}
		sort.Strings(seen)
		obs := append([]string{}, l.ObservedOn...)
		sort.Strings(obs)
		check(slices.Equal(seen, obs), "%s/%s (%s): records from %v, observed on %v", l.Scenario, l.AuditID, l.Expect, seen, obs)
		ch, err := run("audit_id_chain", map[string]string{"audit_id": l.AuditID})
		if err != nil {
			return fail("%v", err)
		}
		if len(obs) > 0 {
			check(len(ch.Rows) == 1, "%s: %d chains", l.AuditID, len(ch.Rows))
		}
	}
	if err := realCapabilityHistory(ctx, s, c, check); err != nil {
		return fail("capability history: %v", err)
	}
	if len(problems) > 0 {
		return fail("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	fmt.Println("ok")
	return 0
}

// realCapabilityHistory checks the capability history of the rolling-upgrade capture: kas-b is
// replaced by v1.36.3, and what it served and forwarded changes with its version. It runs here,
// in the captures' own engine, because they are fixed in time: in the shared engine they would
// fall inside other tests' windows relative to now, and out of its retention a week later.
func realCapabilityHistory(ctx context.Context, s store.Store, c *storetest.Capture, check func(bool, string, ...any)) error {
	from, to := receivedSpan(c)
	history, err := store.CapabilityHistory(s)(ctx, from.Add(-time.Hour), to.Add(time.Hour))
	if err != nil {
		return err
	}
	// kas-b's two epochs: v1.35.4 until its replacement, v1.36.3 after, each with what it did.
	var oldEnd, newStart time.Time
	did := map[string]map[string]bool{} // version -> "role group/resource"
	for _, r := range history {
		check(r.Requests > 0 && r.From.Before(r.Until), "capability record %+v: no requests or an empty span", r)
		check(!(r.APIServer == "kas-a" && r.Role == chain.RoleServed && r.Resource == "podgroups"), "kas-a (1.35) served podgroups: %+v", r)
		if r.APIServer != "kas-b" {
			continue
		}
		if did[r.Version] == nil {
			did[r.Version] = map[string]bool{}
		}
		did[r.Version][r.Role+" "+r.Group+"/"+r.Resource] = true
		switch r.Version {
		case "v1.35.4":
			oldEnd = maxT(oldEnd, r.Until)
		case "v1.36.3":
			if newStart.IsZero() || r.From.Before(newStart) {
				newStart = r.From
			}
		default:
			check(false, "kas-b capability record of version %q: %+v", r.Version, r)
		}
	}
	if oldEnd.IsZero() || newStart.IsZero() || oldEnd.After(newStart) {
		return fmt.Errorf("kas-b's epochs: v1.35.4 until %v, v1.36.3 from %v: want one after the other", oldEnd, newStart)
	}
	check(did["v1.35.4"]["forwarded scheduling.k8s.io/podgroups"], "kas-b on v1.35.4 did not forward podgroups: %v", did["v1.35.4"])
	onlyNew := 0
	for k := range did["v1.36.3"] {
		if !did["v1.35.4"][k] {
			onlyNew++
		}
	}
	check(onlyNew > 0, "kas-b on v1.36.3 did nothing v1.35.4 did not: %v", did["v1.36.3"])

	// The API's ?at= picks each apiserver's epoch that holds the time.
	mux := http.NewServeMux()
	chainapi.New(nil, nil, chainapi.Stores{History: store.CapabilityHistory(s)}).Register(mux)
	api := httptest.NewServer(mux)
	defer api.Close()
	for _, tc := range []struct {
		at      time.Time
		version string
	}{{oldEnd.Add(-time.Second), "v1.35.4"}, {newStart.Add(time.Second), "v1.36.3"}} {
		resp, err := http.Get(api.URL + "/api/v1/apiservers?at=" + url.QueryEscape(tc.at.Format(time.RFC3339Nano)))
		if err != nil {
			return err
		}
		var doc struct {
			History []chain.CapabilityRecord `json:"history"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("?at=%s: %s %v", tc.at, resp.Status, err)
		}
		kasB := 0
		for _, r := range doc.History {
			if r.APIServer == "kas-b" {
				kasB++
				check(r.Version == tc.version, "?at=%s: kas-b record of %s, want only %s", tc.at, r.Version, tc.version)
			}
		}
		check(kasB > 0, "?at=%s: no record of kas-b", tc.at)
	}
	return nil
}

// receivedSpan is when peertrail received the captures' first and last records.
func receivedSpan(c *storetest.Capture) (from, to time.Time) {
	from, to = c.Records[0].ReceivedAt, c.Records[0].ReceivedAt
	for _, r := range c.Records {
		from, to = minT(from, r.ReceivedAt), maxT(to, r.ReceivedAt)
	}
	return from, to
}

func scalarOf(ctx context.Context, s store.Store, q string) string {
	r, err := s.Query(ctx, q, nil)
	if err != nil || len(r.Rows) != 1 {
		return fmt.Sprint(err)
	}
	return r.Rows[0][0]
}
