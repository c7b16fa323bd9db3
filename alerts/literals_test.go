package alerts_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// metricNames reads the metric names spelled in package metrics (its string constants that
// are metric or recording-rule names).
func metricNames(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "metrics", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("metrics package: %v", err)
	}
	var names []string
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				if looksLikeMetric.MatchString(v) || strings.HasPrefix(v, "cluster:") {
					names = append(names, v)
				}
			}
			return true
		})
	}
	if len(names) < 40 {
		t.Fatalf("only %d metric names found in package metrics", len(names))
	}
	return names
}

var looksLikeMetric = regexp.MustCompile(`(^|[^a-z_])(peertrail|apiserver|aggregator)_[a-z0-9_]*_(total|seconds|bytes|info|keys|requests|chains|segments|proceed|failing|value|threshold|timestamp_seconds)($|[^a-z0-9_])`)

// No metric name is spelled in the code of alerts/ or dashboards/: they use package metrics.
func TestNoMetricNameLiterals(t *testing.T) {
	known := metricNames(t)
	var files []string
	for _, dir := range []string{".", "promql", filepath.Join("..", "dashboards")} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	if len(files) < 4 {
		t.Fatalf("only %d files checked: %v", len(files), files)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, _ := strconv.Unquote(lit.Value)
			for _, name := range known {
				if strings.Contains(v, name) {
					t.Errorf("%s: metric name %q spelled in a string literal; use package metrics", fset.Position(lit.Pos()), name)
					return true
				}
			}
			if looksLikeMetric.MatchString(v) {
				t.Errorf("%s: %q looks like a metric name; spell it in package metrics", fset.Position(lit.Pos()), v)
			}
			return true
		})
	}
}
