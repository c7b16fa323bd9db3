// Package promql builds the PromQL text of peertrail's alert rules and dashboards from the
// metric and label names in package metrics, so that no expression spells a name itself.
// It only assembles text; Prometheus' own parser checks every result (see tools/promqlcheck).
package promql

import (
	"fmt"
	"strconv"
	"strings"
)

// Matcher is one label matcher of a selector.
type Matcher struct {
	Label, Op, Value string
}

// String renders the matcher, its value quoted as a PromQL string.
func (m Matcher) String() string { return m.Label + m.Op + strconv.Quote(m.Value) }

// Eq matches label = value.
func Eq(label, value string) Matcher { return Matcher{label, "=", value} }

// Neq matches label != value.
func Neq(label, value string) Matcher { return Matcher{label, "!=", value} }

// Re matches label =~ regexp (anchored by Prometheus).
func Re(label, regexp string) Matcher { return Matcher{label, "=~", regexp} }

// OneOf matches label against any of values (a regexp alternation of the literal values).
func OneOf(label string, values ...string) Matcher {
	q := make([]string, len(values))
	for i, v := range values {
		q[i] = regexpQuote(v)
	}
	return Re(label, strings.Join(q, "|"))
}

// regexpQuote escapes RE2 metacharacters.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Sel is the instant vector selector name{matchers}.
func Sel(name string, matchers ...Matcher) string {
	if len(matchers) == 0 {
		return name
	}
	parts := make([]string, len(matchers))
	for i, m := range matchers {
		parts[i] = m.String()
	}
	return name + "{" + strings.Join(parts, ", ") + "}"
}

// Range is the range vector selector sel[window].
func Range(sel, window string) string { return sel + "[" + window + "]" }

// Rate is rate(sel[window]).
func Rate(sel, window string) string { return "rate(" + Range(sel, window) + ")" }

// Increase is increase(sel[window]).
func Increase(sel, window string) string { return "increase(" + Range(sel, window) + ")" }

// Sum is sum by (labels) (expr), or sum(expr) without labels.
func Sum(expr string, by ...string) string { return Agg("sum", expr, by...) }

// Agg is op by (labels) (expr), or op(expr) without labels.
func Agg(op, expr string, by ...string) string {
	if len(by) == 0 {
		return op + "(" + expr + ")"
	}
	return op + " by (" + strings.Join(by, ", ") + ") (" + expr + ")"
}

// Quantile is histogram_quantile(q, sum by (le, labels) (rate(histogram_bucket[window]))).
func Quantile(q float64, histogram, bucketLabel, window string, matchers []Matcher, by ...string) string {
	return fmt.Sprintf("histogram_quantile(%s, %s)", strconv.FormatFloat(q, 'f', -1, 64),
		Sum(Rate(Sel(histogram+"_bucket", matchers...), window), append([]string{bucketLabel}, by...)...))
}

// NewEvents is how much the counter sel grew over the last window, exactly and including
// series that appeared within it: (sel - sel offset window) >= 0 where the series existed a
// window ago, else sel itself (a series created within the window, or reset by a restart,
// counts from zero).
//
// increase() cannot be used for rare events: it needs two samples of a series, so a counter
// vector child created by the very event it counts (peertrail creates a chains_total series
// the first time a class is seen for an apiserver and resource) would never show that event.
func NewEvents(sel, window string) string {
	return fmt.Sprintf("((%s - %s offset %s) >= 0 or %s)", sel, sel, window, sel)
}
