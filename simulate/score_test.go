package simulate

import "testing"

// TestPercentNeverRoundsAMissUp: the demo's summary prints the share of requests classified
// right; one miss in thousands must not read as 100%.
func TestPercentNeverRoundsAMissUp(t *testing.T) {
	for _, c := range []struct {
		matched, requests int
		want              string
	}{
		{5063, 5063, "100%"},
		{5062, 5063, "99.98%"},
		{99999, 100000, "99.99%"},
		{1, 3, "33.33%"},
		{0, 7, "0.00%"},
		{999999, 1000000, "99.99%"},
		{0, 0, "-"},
	} {
		if got := (Scorecard{Matched: c.matched, Requests: c.requests}).Percent(); got != c.want {
			t.Errorf("%d of %d: %s, want %s", c.matched, c.requests, got, c.want)
		}
	}
}
