package chainapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// TestAtTellsTheVersionToTheSecond: kas-b restarted from v1.35.4 into v1.36.3 at 16:53:43, so
// the history's lines by the minute have both versions in 16:53. ?at= a second before the
// restart gives the old version's lines alone, a second after the new one's, and where the
// version history does not reach (nothing known) both, as the minutes say.
func TestAtTellsTheVersionToTheSecond(t *testing.T) {
	m := func(hh, mm int) time.Time { return time.Date(2026, 11, 29, hh, mm, 0, 0, time.UTC) }
	records := []chain.CapabilityRecord{
		{APIServer: "kas-b", Version: "v1.35.4", Role: chain.RoleForwarded, Resource: "podgroups", From: m(16, 51), Until: m(16, 54), Requests: 9},
		{APIServer: "kas-b", Version: "v1.36.3", Role: chain.RoleServed, Resource: "podgroups", From: m(16, 53), Until: m(16, 56), Requests: 6},
		{APIServer: "kas-c", Version: "v1.36.3", Role: chain.RoleServed, Resource: "podgroups", From: m(16, 50), Until: m(16, 56), Requests: 23},
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
		in := append([]chain.CapabilityRecord(nil), records...)
		got := exactEpochs(EpochsAt(in, tc.at, nil), tc.at, tc.versionAt)
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

// TestAtReachesPastTheStoredMinutes: the store's lines of kas-b's new epoch end with 16:54 (the
// minute of 16:54:xx has not landed: chains are written a window after their requests), but
// peertrail saw kas-b on v1.36.3 at 16:54:20. ?at=16:54:05 is then in the new epoch, not in no
// epoch at all; kas-a, last seen at 16:52:30 and not since, has no epoch after it; an epoch
// the apiserver no longer runs is not stretched by a later sighting in another version.
func TestAtReachesPastTheStoredMinutes(t *testing.T) {
	m := func(mm, ss int) time.Time { return time.Date(2026, 11, 29, 16, mm, ss, 0, time.UTC) }
	records := []chain.CapabilityRecord{
		{APIServer: "kas-b", Version: "v1.35.4", Role: chain.RoleForwarded, Resource: "podgroups", From: m(50, 0), Until: m(54, 0)},
		{APIServer: "kas-b", Version: "v1.36.3", Role: chain.RoleServed, Resource: "podgroups", From: m(53, 0), Until: m(54, 0)},
		{APIServer: "kas-a", Version: "v1.35.4", Role: chain.RoleForwarded, Resource: "podgroups", From: m(50, 0), Until: m(52, 0)},
	}
	lastSeen := func(apiserver string) (string, time.Time) {
		switch apiserver {
		case "kas-b":
			return "v1.36.3", m(54, 20)
		case "kas-a":
			return "v1.35.4", m(52, 30)
		}
		return "", time.Time{}
	}
	for _, tc := range []struct {
		at       time.Time
		lastSeen func(string) (string, time.Time)
		want     []string // apiserver and version of each line kept
	}{
		{m(54, 5), lastSeen, []string{"kas-b v1.36.3"}},
		{m(54, 5), nil, nil},
		{m(54, 20), lastSeen, nil}, // the last sighting itself is the epoch's known end
		{m(52, 10), lastSeen, []string{"kas-b v1.35.4", "kas-a v1.35.4"}},
		{m(52, 40), lastSeen, []string{"kas-b v1.35.4"}},
		{m(53, 30), lastSeen, []string{"kas-b v1.35.4", "kas-b v1.36.3"}},
	} {
		var got []string
		for _, r := range EpochsAt(records, tc.at, tc.lastSeen) {
			got = append(got, r.APIServer+" "+r.Version)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("at %s (last sightings known: %v): %v, want %v", tc.at.Format(time.TimeOnly), tc.lastSeen != nil, got, tc.want)
		}
	}
}
