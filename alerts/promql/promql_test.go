package promql

import "testing"

func TestText(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Sel("m"), "m"},
		{Sel("m", Eq("a", `x"y`), Neq("b", ""), Re("c", "5..")), `m{a="x\"y", b!="", c=~"5.."}`},
		{Sel("m", OneOf("class", "a.b", "c|d")), `m{class=~"a\\.b|c\\|d"}`},
		{Sum(Rate(Sel("m"), "5m"), "x", "y"), "sum by (x, y) (rate(m[5m]))"},
		{Sum("m"), "sum(m)"},
		{Quantile(0.99, "h", "le", "1m", []Matcher{Eq("a", "b")}, "x"), `histogram_quantile(0.99, sum by (le, x) (rate(h_bucket{a="b"}[1m])))`},
		{NewEvents(`c{k="v"}`, "5m"), `((c{k="v"} - c{k="v"} offset 5m) >= 0 or c{k="v"})`},
	} {
		if c.got != c.want {
			t.Errorf("got %s\nwant %s", c.got, c.want)
		}
	}
}
