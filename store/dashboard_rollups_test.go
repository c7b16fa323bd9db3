package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
)

// dashboardRollupsMode is the helper mode of TestDashboardRollupsUpgrade. It is dispatched from
// init, before TestMain opens the shared engine: the helper needs a fresh engine of its own (a
// process holds one), and this keeps the test in one file.
const dashboardRollupsMode = "dashboard-rollups-upgrade"

func init() {
	if os.Getenv(helperEnv) != dashboardRollupsMode {
		return
	}
	os.Exit(dashboardRollupsHelper(context.Background(), func(format string, args ...any) int {
		fmt.Printf("FAIL: "+format+"\n", args...)
		return 1
	}))
}

// A store written before migrations 0008 and 0009 keeps its dashboards: the new rollups start with what
// the old ones held (the panels' answers unchanged), running the migration again adds nothing,
// and events written afterwards reach the new rollups through their views.
func TestDashboardRollupsUpgrade(t *testing.T) {
	out := runSubprocess(t, dashboardRollupsMode, 2*time.Minute)
	if !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "FAIL") {
		t.Fatalf("helper output:\n%s", out)
	}
}

// upgradeEventsSQL inserts n ResponseComplete events of apiservers up-a and up-b starting at
// %[1]s, one every 100 ms, with latencies of 1 to 50 ms and every fifth answered 404 or 503.
const upgradeEventsSQL = `INSERT INTO peertrail.events (apiserver, audit_id, stage, verb, api_group, resource, code,
    request_received_timestamp, stage_timestamp, received_at)
SELECT ['up-a', 'up-b'][1 + number %% 2], concat('upgrade-', toString(number + %[3]d)), 'ResponseComplete',
    ['get', 'list', 'create'][1 + number %% 3], ['', 'apps'][1 + number %% 2], ['pods', 'deployments', ''][1 + number %% 3],
    [200, 200, 404, 200, 503][1 + number %% 5],
    t, t + toIntervalMicrosecond(1000 + number %% 50 * 1000), t + toIntervalSecond(1)
FROM (SELECT number, toDateTime64('%[1]s', 6, 'UTC') + toIntervalMillisecond(number * 100) AS t FROM numbers(%[2]d))`

// upgradeChainsSQL inserts n final chains of the pairs up-a -> up-c and up-b -> up-c from
// %[1]s, one every 100 ms, every third proxied with a forwarding overhead of 1 to 20 ms, the
// others local.
const upgradeChainsSQL = `INSERT INTO peertrail.chains (id, audit_id, version, state, class, has_entry, entry_apiserver,
    has_peer, peer_apiserver, forwarding_overhead_seconds, request_time, first_received, last_received)
SELECT concat('upgrade-', toString(number + %[3]d)), concat('upgrade-', toString(number + %[3]d)), 1, 'final',
    if(number %% 3 = 0, 'proxied', 'local') AS class, true, ['up-a', 'up-b'][1 + number %% 2],
    class = 'proxied', if(class = 'proxied', 'up-c', ''), (1 + number %% 20) / 1000, t, t + toIntervalSecond(1), t + toIntervalSecond(2)
FROM (SELECT number, toDateTime64('%[1]s', 6, 'UTC') + toIntervalMillisecond(number * 100) AS t FROM numbers(%[2]d))`

func dashboardRollupsHelper(ctx context.Context, fail func(string, ...any) int) int {
	s, err := store.OpenEmbedded(ctx, store.EmbeddedOptions{})
	if err != nil {
		return fail("open: %v", err)
	}
	defer s.Close()
	ms, err := store.Migrations()
	if err != nil {
		return fail("%v", err)
	}
	// The schema as peertrail wrote it before 0008 (not recorded: Migrate runs 1-7 again, each
	// statement idempotent, then 0008 and 0009 over the data).
	if err := s.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+store.Database); err != nil {
		return fail("%v", err)
	}
	for _, m := range ms[:7] {
		stmts, err := m.Statements(store.SchemaOptions{})
		if err != nil {
			return fail("%v", err)
		}
		for _, st := range stmts {
			if err := s.Exec(ctx, st); err != nil {
				return fail("migration %d: %v", m.Version, err)
			}
		}
	}
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	if err := s.Exec(ctx, fmt.Sprintf(upgradeEventsSQL, store.FormatTime(base), 6000, 0)); err != nil {
		return fail("events under 0007: %v", err)
	}
	if err := s.Exec(ctx, fmt.Sprintf(upgradeChainsSQL, store.FormatTime(base), 6000, 0)); err != nil {
		return fail("chains under 0007: %v", err)
	}
	params := map[string]string{"since": store.FormatTime(base.Add(-time.Hour)), "until": store.FormatTime(base.Add(3 * time.Hour))}
	// The panels' answers as 0007's rollups gave them: the shipped queries' text before 0008.
	oldLatency := `SELECT minute, apiserver, sum(requests) AS requests, quantilesTDigestMerge(0.5, 0.9, 0.99)(latency_seconds) AS q
FROM peertrail.request_latency_per_minute WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
GROUP BY minute, apiserver ORDER BY minute, apiserver`
	oldErrors := `SELECT minute, apiserver, if(resource = '', 'non-resource', concat(if(api_group = '', 'core', api_group), '/', resource)) AS resource,
    sumIf(events, code = 404) AS not_found, sumIf(events, code >= 500) AS server_errors
FROM peertrail.events_per_minute WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
  AND stage = 'ResponseComplete' AND (code = 404 OR code >= 500)
GROUP BY minute, apiserver, resource ORDER BY minute, apiserver, resource`
	oldForwarding := `SELECT minute, concat(entry_apiserver, ' -> ', peer_apiserver) AS pair, sum(chains) AS proxied,
    quantilesTDigestMerge(0.5, 0.9, 0.99)(forwarding_overhead_seconds) AS q
FROM peertrail.chain_latency_per_minute WHERE minute >= toStartOfMinute({since:DateTime64(6, 'UTC')}) AND minute < {until:DateTime64(6, 'UTC')}
  AND class = 'proxied'
GROUP BY minute, pair ORDER BY minute, pair`
	// answers are the latency panels (requests and quantiles) of latency and forwarding, one
	// text, and the errors panel's rows, another.
	answers := func(latency, forwarding, errors string) (string, string, error) {
		l, err := s.Query(ctx, latency, params)
		if err != nil {
			return "", "", err
		}
		f, err := s.Query(ctx, forwarding, params)
		if err != nil {
			return "", "", err
		}
		e, err := s.Query(ctx, errors, params)
		if err != nil {
			return "", "", err
		}
		var lb strings.Builder
		for _, r := range []*store.Result{l, f} {
			for i := range r.Rows {
				who, n := r.Value(i, "apiserver"), r.Value(i, "requests")
				if r == f {
					who, n = r.Value(i, "pair"), r.Value(i, "proxied")
				}
				// The counts exactly; the quantiles are t-digest estimates, and merging the same
				// states in another grouping may move them in the last digits.
				fmt.Fprintf(&lb, "%s %s %s", r.Value(i, "minute"), who, n)
				for _, q := range strings.Split(strings.Trim(r.Value(i, "q"), "[]"), ",") {
					v, err := strconv.ParseFloat(q, 64)
					if err != nil {
						return "", "", fmt.Errorf("quantiles %q: %w", r.Value(i, "q"), err)
					}
					fmt.Fprintf(&lb, " %.4f", v)
				}
				lb.WriteString("\n")
			}
		}
		var eb strings.Builder
		for _, row := range e.Rows {
			eb.WriteString(strings.Join(row, " ") + "\n")
		}
		return lb.String(), eb.String(), nil
	}
	shipped := func() (string, string, error) {
		l, err := store.QueryNamed("dashboard_request_latency")
		if err != nil {
			return "", "", err
		}
		f, err := store.QueryNamed("dashboard_forwarding_overhead")
		if err != nil {
			return "", "", err
		}
		e, err := store.QueryNamed("dashboard_errors_by_resource")
		if err != nil {
			return "", "", err
		}
		return answers(l.SQL, f.SQL, e.SQL)
	}
	// Ten minutes of two apiservers, and of two pairs.
	wantL, wantE, err := answers(oldLatency, oldForwarding, oldErrors)
	if err != nil || !strings.Contains(wantE, "up-a") || strings.Count(wantL, "\n") != 40 {
		return fail("the panels under 0007 (%v):\n%s\n%s", err, wantL, wantE)
	}
	for run := range 2 {
		if run == 1 {
			// A migration missing from the record runs again: it must not count twice.
			if err := s.Exec(ctx, "ALTER TABLE peertrail.schema_migrations DELETE WHERE version IN (8, 9) SETTINGS mutations_sync = 1"); err != nil {
				return fail("%v", err)
			}
		}
		if err := store.Migrate(ctx, s, store.SchemaOptions{}, nil); err != nil {
			return fail("migrate (run %d): %v", run+1, err)
		}
		gotL, gotE, err := shipped()
		if err != nil {
			return fail("the shipped panels after 0008 (run %d): %v", run+1, err)
		}
		if gotL != wantL || gotE != wantE {
			return fail("after 0008 (run %d) the panels answer\n%s\n%s\nwant\n%s\n%s", run+1, gotL, gotE, wantL, wantE)
		}
	}
	// New events reach the new rollups as they reach the old ones.
	if err := s.Exec(ctx, fmt.Sprintf(upgradeEventsSQL, store.FormatTime(base.Add(time.Hour)), 3000, 10000)); err != nil {
		return fail("events under 0008: %v", err)
	}
	if err := s.Exec(ctx, fmt.Sprintf(upgradeChainsSQL, store.FormatTime(base.Add(time.Hour)), 3000, 10000)); err != nil {
		return fail("chains under 0009: %v", err)
	}
	wantL, wantE, err = answers(oldLatency, oldForwarding, oldErrors)
	if err != nil {
		return fail("%v", err)
	}
	gotL, gotE, err := shipped()
	if err != nil || gotL != wantL || gotE != wantE || strings.Count(gotL, "\n") != 60 {
		return fail("with events after 0008 the panels answer (%v)\n%s\n%s\nwant\n%s\n%s", err, gotL, gotE, wantL, wantE)
	}
	fmt.Println("ok")
	return 0
}
