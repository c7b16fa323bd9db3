//lint:file-ignore SA1019 Grafana's file provisioning takes the v1 dashboard JSON (dashboard.Dashboard); dashboardv2 is the schema of Grafana 12's new dashboards, which peertrail does not target yet.

// Package dashboards generates peertrail's Grafana dashboards with the Grafana Foundation SDK:
// "MVP rollout" (Prometheus: the Mixed Version Proxy as peertrail's chains and the apiservers'
// own metrics show it, the upgrade gate, and peertrail's pipeline health) and "Chain
// investigation" (ClickHouse, grafana-clickhouse-datasource: broken and failed chains,
// misleading 404s, identity mismatches, and one chain by auditID). Metric names come from
// package metrics, tables and columns from the store's schema (store/COLUMNS.md).
//
// `peertrail generate dashboards` writes them to dashboards/generated; a test fails when the
// committed files differ from what this package generates.
package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Board is one generated dashboard.
type Board struct {
	// File is its file name in the output directory.
	File string
	// Build returns it.
	Build func() (dashboard.Dashboard, error)
}

// Boards are every dashboard, in a stable order.
func Boards() []Board {
	return []Board{
		{File: "mvp-rollout.json", Build: MVPRollout},
		{File: "chain-investigation.json", Build: ChainInvestigation},
	}
}

// Dashboard UIDs, stable so links between dashboards and bookmarks keep working.
const (
	UIDMVPRollout         = "peertrail-mvp-rollout"
	UIDChainInvestigation = "peertrail-chain-investigation"
)

// Data source plugin ids.
const (
	PrometheusType = "prometheus"
	ClickHouseType = "grafana-clickhouse-datasource"
)

// Render returns the dashboard as the indented JSON Grafana imports.
func Render(d dashboard.Dashboard) ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: render: %w", err)
	}
	return append(b, '\n'), nil
}

// Files renders every dashboard, by file name.
func Files() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, b := range Boards() {
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("dashboards: %s: %w", b.File, err)
		}
		number(&d)
		if out[b.File], err = Render(d); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Write writes every dashboard into dir (created if needed) and returns the paths.
func Write(dir string) ([]string, error) {
	files, err := Files()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, b := range Boards() {
		p := filepath.Join(dir, b.File)
		if err := os.WriteFile(p, files[b.File], 0o644); err != nil {
			return nil, fmt.Errorf("dashboards: %w", err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// number gives every panel and row an id, in order (the SDK leaves them unset, and Grafana's
// panel links and "view panel" URLs use them).
func number(d *dashboard.Dashboard) {
	var id uint32
	next := func() uint32 { id++; return id }
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			p.RowPanel.Id = next()
			for i := range p.RowPanel.Panels {
				p.RowPanel.Panels[i].Id = ptr(next())
			}
		}
		if p.Panel != nil {
			p.Panel.Id = ptr(next())
		}
	}
}

// Target is one query of a generated dashboard, as Grafana will send it.
type Target struct {
	Dashboard, Panel, RefID string
	// Datasource is the plugin type: PrometheusType or ClickHouseType.
	Datasource string
	// Expr is a Prometheus query; RawSQL a ClickHouse one; Variable names the templating
	// variable whose query this is (Panel is empty then).
	Expr, RawSQL, Variable string
	// Format is the ClickHouse format (FormatTimeSeries or FormatTable).
	Format int
}

// Targets lists every query of the dashboard (rendered JSON), panel queries and variable
// queries alike.
func Targets(rendered []byte) ([]Target, error) {
	var d struct {
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      json.RawMessage `json:"query"`
				Datasource *common.DataSourceRef
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(rendered, &d); err != nil {
		return nil, err
	}
	var out []Target
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				ds := ""
				if t.Datasource != nil && t.Datasource.Type != nil {
					ds = *t.Datasource.Type
				} else if p.Datasource != nil && p.Datasource.Type != nil {
					ds = *p.Datasource.Type
				}
				format, _ := t.Format.(float64)
				out = append(out, Target{Dashboard: d.Title, Panel: p.Title, RefID: t.RefID, Datasource: ds,
					Expr: t.Expr, RawSQL: t.RawSQL, Format: int(format)})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		t := Target{Dashboard: d.Title, Variable: v.Name}
		if v.Datasource != nil && v.Datasource.Type != nil {
			t.Datasource = *v.Datasource.Type
		}
		if t.Datasource == ClickHouseType {
			t.RawSQL = q
		} else {
			t.Expr = q
		}
		out = append(out, t)
	}
	return out, nil
}

type panel struct {
	Title      string                `json:"title"`
	Datasource *common.DataSourceRef `json:"datasource"`
	Panels     []panel               `json:"panels"`
	Targets    []struct {
		RefID      string                `json:"refId"`
		Datasource *common.DataSourceRef `json:"datasource"`
		Expr       string                `json:"expr"`
		RawSQL     string                `json:"rawSql"`
		// Format is a number for ClickHouse, a string ("table") for Prometheus.
		Format any `json:"format"`
	} `json:"targets"`
}

// ptr is cog.ToPtr, shorter.
func ptr[T any](v T) *T { return cog.ToPtr(v) }
