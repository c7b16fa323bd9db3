package correlate

import (
	"testing"
	"time"
)

// TestAtTellsTheVersionToTheSecond: kas-b restarted from v1.35.4 into v1.36.3 at 16:53:43, so
// the history's lines by the minute have both versions in 16:53. ?at= a second before the
// restart gives the old version's lines alone, a second after the new one's, and where the
// version history does not reach (nothing known) both, as the minutes say.
func TestAtTellsTheVersionToTheSecond(t *testing.T) {
	m := func(hh, mm int) time.Time { return time.Date(2026, 11, 29, hh, mm, 0, 0, time.UTC) }
	records := []CapabilityRecord{
		{APIServer: "kas-b", Version: "v1.35.4", Role: RoleForwarded, Resource: "podgroups", From: m(16, 51), Until: m(16, 54), Requests: 9},
		{APIServer: "kas-b", Version: "v1.36.3", Role: RoleServed, Resource: "podgroups", From: m(16, 53), Until: m(16, 56), Requests: 6},
		{APIServer: "kas-c", Version: "v1.36.3", Role: RoleServed, Resource: "podgroups", From: m(16, 50), Until: m(16, 56), Requests: 23},
	}
	change := time.Date(2026, 11, 29, 16, 53, 43, 0, time.UTC)
	versionAt := func(apiserver string, at time.Time) string {
		switch {
		case apiserver == "kas-c":
			return "v1.36.3"
		case apiserver == "kas-b" && at.Before(change):
			return "v1.35.4"
		case apiserver == "kas-b":
			return "v1.36.3"
		}
		return ""
	}
	unknown := func(string, time.Time) string { return "" }
	for _, tc := range []struct {
		at        time.Time
		versionAt func(string, time.Time) string
		want      []string // kas-b's versions
	}{
		{change.Add(-time.Second), versionAt, []string{"v1.35.4"}},
		{change.Add(time.Second), versionAt, []string{"v1.36.3"}},
		{change.Add(time.Second), unknown, []string{"v1.35.4", "v1.36.3"}},
		{m(16, 52), versionAt, []string{"v1.35.4"}},
		{m(16, 55), versionAt, []string{"v1.36.3"}},
	} {
		in := append([]CapabilityRecord(nil), records...)
		got := exactEpochs(EpochsAt(in, tc.at), tc.at, tc.versionAt)
		var versions []string
		kasC := false
		for _, r := range got {
			if r.APIServer == "kas-b" {
				versions = append(versions, r.Version)
			}
			kasC = kasC || r.APIServer == "kas-c"
		}
		if len(versions) != len(tc.want) || !kasC {
			t.Errorf("at %s: kas-b %v (kas-c kept: %v), want %v", tc.at.Format(time.TimeOnly), versions, kasC, tc.want)
			continue
		}
		for i := range versions {
			if versions[i] != tc.want[i] {
				t.Errorf("at %s: kas-b %v, want %v", tc.at.Format(time.TimeOnly), versions, tc.want)
			}
		}
	}
}
