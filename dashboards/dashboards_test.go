package dashboards_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peertrail/peertrail/dashboards"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store/queries"
)

const generatedDir = "generated"

// The committed dashboards are what the code generates: regenerate with
// `go run ./cmd/peertrail generate dashboards`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range dashboards.Boards() {
		got, err := os.ReadFile(filepath.Join(generatedDir, b.File))
		if err != nil {
			t.Errorf("%v (run `go run ./cmd/peertrail generate dashboards`)", err)
			continue
		}
		if !bytes.Equal(got, files[b.File]) {
			t.Errorf("dashboards/%s/%s differs from what dashboards/*.go generates: run `go run ./cmd/peertrail generate dashboards` and commit the result", generatedDir, b.File)
		}
	}
	entries, err := os.ReadDir(generatedDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			t.Errorf("dashboards/%s/%s is not generated any more: remove it", generatedDir, e.Name())
		}
	}
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panelJSON struct {
	ID         *int             `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource *dsRef           `json:"datasource"`
	GridPos    map[string]int   `json:"gridPos"`
	Targets    []map[string]any `json:"targets"`
	Panels     []panelJSON      `json:"panels"`
}

// Every panel and query is complete: a title, an id, a position, the dashboard's data source
// variable, a refId per query (unique in its panel), and a query text in the data source's
// own model.
func TestDashboardStructure(t *testing.T) {
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	wantType := map[string]string{"mvp-rollout.json": dashboards.PrometheusType, "chain-investigation.json": dashboards.ClickHouseType}
	for name, b := range files {
		var d struct {
			UID        string      `json:"uid"`
			Title      string      `json:"title"`
			Panels     []panelJSON `json:"panels"`
			Templating struct {
				List []struct {
					Name  string `json:"name"`
					Type  string `json:"type"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d.UID == "" || uids[d.UID] {
			t.Errorf("%s: uid %q empty or repeated", name, d.UID)
		}
		uids[d.UID] = true
		ds := wantType[name]
		foundDS := false
		for _, v := range d.Templating.List {
			if v.Type == "datasource" && v.Name == "datasource" && v.Query == ds {
				foundDS = true
			}
		}
		if !foundDS {
			t.Errorf("%s: no datasource variable of type %s", name, ds)
		}
		ids := map[int]bool{}
		queries := 0
		var check func(ps []panelJSON)
		check = func(ps []panelJSON) {
			for _, p := range ps {
				check(p.Panels)
				where := name + ": " + p.Title
				if p.Title == "" {
					t.Errorf("%s: a %s panel without title", name, p.Type)
				}
				if p.ID == nil || ids[*p.ID] {
					t.Errorf("%s: id missing or repeated", where)
				} else {
					ids[*p.ID] = true
				}
				if p.GridPos["w"] == 0 || p.GridPos["h"] == 0 {
					t.Errorf("%s: no size %v", where, p.GridPos)
				}
				if p.Type == "row" {
					continue
				}
				if p.Datasource == nil || p.Datasource.Type != ds || p.Datasource.UID != "${datasource}" {
					t.Errorf("%s: datasource %+v, want %s ${datasource}", where, p.Datasource, ds)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no query", where)
				}
				refs := map[string]bool{}
				for _, q := range p.Targets {
					queries++
					ref, _ := q["refId"].(string)
					if ref == "" || refs[ref] {
						t.Errorf("%s: refId %q empty or repeated", where, ref)
					}
					refs[ref] = true
					switch ds {
					case dashboards.PrometheusType:
						if expr, _ := q["expr"].(string); strings.TrimSpace(expr) == "" {
							t.Errorf("%s %s: no expr", where, ref)
						}
					case dashboards.ClickHouseType:
						sql, _ := q["rawSql"].(string)
						format, ok := q["format"].(float64)
						if q["editorType"] != "sql" || strings.TrimSpace(sql) == "" || !ok {
							t.Errorf("%s %s: not a raw SQL query of grafana-clickhouse-datasource: %v", where, ref, q)
						}
						wantQT := map[float64]string{dashboards.FormatTable: "table", dashboards.FormatTimeSeries: "timeSeries"}[format]
						if q["queryType"] != wantQT {
							t.Errorf("%s %s: queryType %v with format %v", where, ref, q["queryType"], format)
						}
						if (p.Type == "timeseries") != (format == dashboards.FormatTimeSeries) {
							t.Errorf("%s %s: a %s panel with format %v", where, ref, p.Type, format)
						}
					}
				}
			}
		}
		check(d.Panels)
		if queries < 8 {
			t.Errorf("%s: only %d queries", name, queries)
		}
		targets, err := dashboards.Targets(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(targets) < queries {
			t.Errorf("%s: Targets lists %d queries, the panels have %d", name, len(targets), queries)
		}
	}
}

// The MVP rollout dashboard has a panel for everything the issue asks for.
func TestMVPRolloutPanels(t *testing.T) {
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	targets, err := dashboards.Targets(files["mvp-rollout.json"])
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, tg := range targets {
		text += tg.Panel + "\n" + tg.Expr + "\n"
	}
	for _, want := range []string{
		"Proxy hit rate by entry apiserver", "Proxy hit rate by resource", "Forwarding overhead p50 / p99",
		"Chains by class", "Misleading 404s", "Proxy failures", "Broken chains", "Identity on the hop", "Gate verdict",
		metrics.KubeReroutedRequestTotal, metrics.KubePeerProxyErrorsTotal, metrics.KubeRequestTotal, metrics.KubeAuditErrorTotal,
		metrics.IngestEventsTotal, metrics.SpoolConsumerLagBytes, metrics.IngestDeadLettersTotal,
		metrics.StoreNewestRowTimestampSeconds, metrics.GateProceed, metrics.CorrelateForwardingOverheadSeconds, "$apiserver", "$resource",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("MVP rollout has nothing with %q", want)
		}
	}
}

var byAuditID = regexp.MustCompile(`FROM peertrail\.(chains|events)( FINAL)?\s+WHERE audit_id =`)

// The chain of an auditID and its records, and the requests to look at (broken, failed,
// misleading, identity), are asked once, in store/queries: the API (store's ReadChain),
// `peertrail report` and this dashboard run that text. No other code of the
// repository carries its own chain-by-auditID SQL or decodes chain rows.
func TestChainSQLExistsOnce(t *testing.T) {
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	targets, err := dashboards.Targets(files["chain-investigation.json"])
	if err != nil {
		t.Fatal(err)
	}
	with := map[string]string{"since": "$__fromTime", "until": "$__toTime", "audit_id": "${audit_id:sqlstring}"}
	for _, name := range []string{"audit_id_chain", "audit_id_records", "broken_chains", "proxy_failures", "misleading_404s", "identity_mismatches"} {
		q, err := queries.Named(name)
		if err != nil {
			t.Fatal(err)
		}
		text, err := q.Text(with)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tg := range targets {
			if strings.Contains(tg.RawSQL, text) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the chain investigation dashboard runs store/queries/%s.sql in %d panels, want 1", name, n)
		}
	}
	// Outside store, no Go code (but tests) asks for a chain or records by auditID in SQL of
	// its own, or parses the chains table's rows.
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || path == filepath.Join("..", "store")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		if m := byAuditID.FindString(src); m != "" {
			t.Errorf("%s asks for an auditID in SQL of its own (%q): use store/queries (store.ReadChain, NamedQuery.Text)", path, m)
		}
		if strings.Contains(src, `"entry_apiserver")`) || strings.Contains(src, `"peer_code")`) {
			t.Errorf("%s decodes chain rows itself: use store.ChainFromRow", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
