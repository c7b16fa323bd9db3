package promqlcheck

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/peertrail/peertrail/alerts"
	"github.com/peertrail/peertrail/dashboards"
	"github.com/peertrail/peertrail/metrics"
)

// root is the peertrail repository, seen from this package.
var root = filepath.Join("..", "..")

// names are what package metrics spells: metric names (the values of constants whose value is a
// metric name) and label names (the values of constants named Label*).
type names struct {
	metrics, labels map[string]bool
}

var metricName = regexp.MustCompile(`^(peertrail|apiserver|aggregator)_[a-z0-9_]+$|^up$|^[a-z]+:[a-z0-9_]+:[a-z0-9_]+$`)

func readNames(t *testing.T) names {
	t.Helper()
	n := names{metrics: map[string]bool{}, labels: map[string]bool{}}
	files, _ := filepath.Glob(filepath.Join(root, "metrics", "*.go"))
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					switch {
					case strings.HasPrefix(id.Name, "Label"):
						n.labels[v] = true
					case metricName.MatchString(v):
						n.metrics[v] = true
					}
				}
			}
		}
	}
	if len(n.metrics) < 40 || len(n.labels) < 15 {
		t.Fatalf("package metrics: %d metric names, %d label names: not parsed?", len(n.metrics), len(n.labels))
	}
	return n
}

// grafanaVars replaces Grafana's interval variables with durations (they stand where PromQL
// expects one); the other variables sit inside label matcher strings and parse as they are.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// check parses expr and checks its metric and label names; allowed adds metric names (the
// recording rules) to those of package metrics.
func (n names) check(t *testing.T, where, expr string, allowed map[string]bool) {
	t.Helper()
	for _, p := range n.problems(expr, allowed) {
		t.Errorf("%s: %s", where, p)
	}
}

// problems are what is wrong with expr.
func (n names) problems(expr string, allowed map[string]bool) []string {
	var out []string
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return []string{fmt.Sprintf("%v\n%s", err, expr)}
	}
	known := func(name string) bool {
		if n.metrics[name] || allowed[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && n.metrics[base] {
				return true
			}
		}
		return false
	}
	label := func(l string) {
		if l != labels.MetricName && !n.labels[l] {
			out = append(out, fmt.Sprintf("label %q is not spelled in package metrics", l))
		}
	}
	selectors := 0
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		switch x := node.(type) {
		case *parser.VectorSelector:
			selectors++
			name := x.Name
			for _, m := range x.LabelMatchers {
				if m.Name == labels.MetricName {
					name = m.Value
				}
				label(m.Name)
			}
			if !known(name) {
				out = append(out, fmt.Sprintf("metric %q is exported neither by peertrail nor by kube-apiserver (package metrics)", name))
			}
		case *parser.AggregateExpr:
			for _, l := range x.Grouping {
				label(l)
			}
		case *parser.BinaryExpr:
			if x.VectorMatching != nil {
				for _, l := range x.VectorMatching.MatchingLabels {
					label(l)
				}
				for _, l := range x.VectorMatching.Include {
					label(l)
				}
			}
		case *parser.Call:
			if x.Func.Name == "label_replace" || x.Func.Name == "label_join" {
				out = append(out, x.Func.Name+" creates labels package metrics does not spell")
			}
		}
		return nil
	})
	if selectors == 0 {
		out = append(out, "selects no series: "+expr)
	}
	return out
}

// Every rule of the generated rule file loads with Prometheus' own rule loader, and every
// expression parses and names only exported metrics.
func TestRules(t *testing.T) {
	n := readNames(t)
	path := filepath.Join(root, "alerts", "generated", alerts.RulesFile)
	groups, errs := rulefmt.ParseFile(path, false, model.LegacyValidation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", path, errs)
	}
	records := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = true
				if !n.metrics[r.Record] && !(strings.HasPrefix(r.Record, metrics.RecordReroutedErrorRatioPrefix) &&
					isDuration(strings.TrimPrefix(r.Record, metrics.RecordReroutedErrorRatioPrefix))) {
					t.Errorf("recording rule %s is not spelled in package metrics", r.Record)
				}
			}
		}
	}
	rules := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			n.check(t, g.Name+"/"+r.Alert+r.Record, r.Expr, records)
		}
	}
	if rules < 20 {
		t.Fatalf("only %d rules", rules)
	}
	t.Logf("%d rules parsed and checked", rules)
}

func isDuration(s string) bool {
	_, err := model.ParseDuration(s)
	return err == nil
}

// label_values(metric, label): Grafana's variable query, not PromQL.
var labelValues = regexp.MustCompile(`^label_values\(\s*([^,]+?)\s*,\s*([a-z_]+)\s*\)$`)

// Every Prometheus query of the generated dashboards parses and names only exported metrics.
func TestDashboards(t *testing.T) {
	n := readNames(t)
	exprs := 0
	for _, b := range dashboards.Boards() {
		raw, err := os.ReadFile(filepath.Join(root, "dashboards", "generated", b.File))
		if err != nil {
			t.Fatal(err)
		}
		targets, err := dashboards.Targets(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range targets {
			if tg.Datasource != dashboards.PrometheusType {
				continue
			}
			where := b.File + ": " + tg.Panel + tg.Variable + " " + tg.RefID
			expr := tg.Expr
			if m := labelValues.FindStringSubmatch(expr); m != nil {
				expr = m[1]
				if !n.labels[m[2]] {
					t.Errorf("%s: label %q is not spelled in package metrics", where, m[2])
				}
			}
			exprs++
			n.check(t, where, expr, nil)
		}
	}
	if exprs < 30 {
		t.Fatalf("only %d Prometheus expressions in the dashboards", exprs)
	}
	t.Logf("%d dashboard expressions parsed and checked", exprs)
}

// The checker itself rejects what it must.
func TestCheckerRejects(t *testing.T) {
	n := readNames(t)
	for _, bad := range []string{
		`sum(rate(` + metrics.CorrelateChainsTotal + `{class="broken"}[5m])`, // does not parse
		`rate(peertrail_chains_total[5m])`,                                   // not a metric peertrail exports
		`sum by (clas) (rate(` + metrics.CorrelateChainsTotal + `[5m]))`,     // a label no metric has
	} {
		if len(n.problems(bad, nil)) == 0 {
			t.Errorf("accepted %s", bad)
		}
	}
}
