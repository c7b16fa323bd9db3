package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Panel sizes on Grafana's 24-column grid.
const (
	full    = 24
	half    = 12
	third   = 8
	quarter = 6
	tall    = 9
	short   = 5
)

// datasourceVar is the name of each dashboard's data source variable.
const datasourceVar = "datasource"

func dsRef(pluginType string) common.DataSourceRef {
	return common.DataSourceRef{Type: ptr(pluginType), Uid: ptr("${" + datasourceVar + "}")}
}

// refID names the queries of one panel A, B, C...
func refID(i int) string { return string(rune('A' + i)) }

// query is one Prometheus query of a panel.
type query struct {
	expr, legend string
	// instant asks for the value now rather than a range (stat and table panels).
	instant bool
	// table asks for the table format (one row per series).
	table bool
}

func promTargets(qs []query) []cog.Builder[variants.Dataquery] {
	var out []cog.Builder[variants.Dataquery]
	for i, q := range qs {
		t := prometheus.NewDataqueryBuilder().Datasource(dsRef(PrometheusType)).Expr(q.expr).RefId(refID(i))
		if q.legend != "" {
			t = t.LegendFormat(q.legend)
		}
		if q.instant {
			t = t.Instant()
		} else {
			t = t.Range()
		}
		if q.table {
			t = t.Format(prometheus.PromQueryFormatTable)
		}
		out = append(out, t)
	}
	return out
}

func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeTable).
		Placement(common.LegendPlacementRight).Calcs([]string{"max", "lastNotNull"})
}

func tooltip() *common.VizTooltipOptionsBuilder {
	return common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)
}

// graph is a time series panel.
type graph struct {
	title, description, unit string
	width, height            uint32
	stacked, bars            bool
	// min and max fix the axis (nil: automatic).
	min, max *float64
	// threshold draws a dashed red line at this value (nil: none).
	threshold *float64
}

func (g graph) panel(ds string, targets []cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(g.title).Description(g.description).Datasource(dsRef(ds)).
		Targets(targets).Unit(g.unit).Legend(legend()).Tooltip(tooltip()).
		Span(orDefault(g.width, half)).Height(orDefault(g.height, tall)).
		FillOpacity(10).LineWidth(1).ShowPoints(common.VisibilityModeNever).SpanNulls(common.BoolOrFloat64{Bool: ptr(false)})
	if g.stacked {
		p = p.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
	}
	if g.bars {
		p = p.DrawStyle(common.GraphDrawStyleBars).FillOpacity(80)
	}
	if g.min != nil {
		p = p.Min(*g.min)
	}
	if g.max != nil {
		p = p.Max(*g.max)
	}
	if g.threshold != nil {
		p = p.Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
			{Color: "transparent", Value: nil}, {Color: "red", Value: g.threshold},
		})).ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed))
	}
	return p
}

func (g graph) prom(qs ...query) *timeseries.PanelBuilder {
	return g.panel(PrometheusType, promTargets(qs))
}

func orDefault(v, d uint32) uint32 {
	if v == 0 {
		return d
	}
	return v
}

// mapping is a value-to-text mapping of a stat panel.
type mapping struct {
	value, text, color string
}

func valueMappings(ms []mapping) []dashboard.ValueMapping {
	opts := map[string]dashboard.ValueMappingResult{}
	for i, m := range ms {
		opts[m.value] = dashboard.ValueMappingResult{Text: ptr(m.text), Color: ptr(m.color), Index: ptr(int32(i))}
	}
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: opts}}}
}

// statPanel shows the latest value of each series, colored by its mapping.
func statPanel(title, description string, width, height uint32, ms []mapping, qs ...query) *stat.PanelBuilder {
	for i := range qs {
		qs[i].instant = true
	}
	return stat.NewPanelBuilder().Title(title).Description(description).Datasource(dsRef(PrometheusType)).
		Targets(promTargets(qs)).Span(width).Height(height).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
		TextMode(common.BigValueTextModeValueAndName).Mappings(valueMappings(ms)).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps([]dashboard.Threshold{
			{Color: "text", Value: nil},
		}))
}

// tablePanel is a table of query results; columns hides or renames fields (name -> title).
func tablePanel(title, description, ds string, width, height uint32, targets []cog.Builder[variants.Dataquery], transformations ...dashboard.DataTransformerConfig) *table.PanelBuilder {
	p := table.NewPanelBuilder().Title(title).Description(description).Datasource(dsRef(ds)).
		Targets(targets).Span(width).Height(height).CellHeight(common.TableCellHeightSm)
	for _, t := range transformations {
		p = p.WithTransformation(t)
	}
	return p
}

// organize hides fields of a table and orders the rest.
func organize(exclude []string, order []string) dashboard.DataTransformerConfig {
	ex := map[string]bool{}
	for _, f := range exclude {
		ex[f] = true
	}
	idx := map[string]int{}
	for i, f := range order {
		idx[f] = i
	}
	return dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": ex, "indexByName": idx, "renameByName": map[string]string{},
	}}
}
