package correlate

import (
	"context"
	"time"
)

// CapabilityRecord is one line of the capability history: an apiserver, in the version it ran
// (Side.APIServerVersion of the chains: its own loopback requests tell it; "" before the
// first), served or forwarded a group/version/resource from From to Until (the first and the
// end of the last minute it was seen doing so), Requests times. In the minute of a restart into
// another version, each version has a line of what it did. The store keeps the history for as
// long as its rollups.
type CapabilityRecord struct {
	APIServer string `json:"apiserver"`
	// Version is the apiserver's version (v1.36.3), not the resource's.
	Version string `json:"version"`
	// Role is RoleServed or RoleForwarded.
	Role       string    `json:"role"`
	Group      string    `json:"group"`
	APIVersion string    `json:"api_version"`
	Resource   string    `json:"resource"`
	From       time.Time `json:"from"`
	Until      time.Time `json:"until"`
	Requests   int64     `json:"requests"`
}

// Values of CapabilityRecord.Role.
const (
	// RoleServed: the apiserver answered 2xx itself, or as the peer of a forward.
	RoleServed = "served"
	// RoleForwarded: the apiserver was the entry of a forward (proxied or failed).
	RoleForwarded = "forwarded"
)

// HistoryLookup returns the capability history between since and until (the store's).
type HistoryLookup func(ctx context.Context, since, until time.Time) ([]CapabilityRecord, error)

// AtWindow is how far around an ?at= time the API reads the history: the version epoch that
// holds the time is told by the evidence on both sides of it.
const AtWindow = 7 * 24 * time.Hour

// EpochsAt keeps the records of each apiserver's version epoch that holds at: the records of one
// apiserver and version whose span, from its first From to its last Until, includes at. The
// history's lines land a chain window after their minute, so the epoch an apiserver still
// runs reaches further, to when it was last seen (lastSeen, Capabilities.LastSeen; nil when
// nothing is remembered): a moment just after an upgrade belongs to the new version's epoch
// before the store has that minute's lines.
func EpochsAt(records []CapabilityRecord, at time.Time, lastSeen func(apiserver string) (version string, at time.Time)) []CapabilityRecord {
	type epoch struct{ apiserver, version string }
	from, until := map[epoch]time.Time{}, map[epoch]time.Time{}
	for _, r := range records {
		e := epoch{r.APIServer, r.Version}
		if f, ok := from[e]; !ok || r.From.Before(f) {
			from[e] = r.From
		}
		if u, ok := until[e]; !ok || r.Until.After(u) {
			until[e] = r.Until
		}
	}
	if lastSeen != nil {
		for e, u := range until {
			if v, seen := lastSeen(e.apiserver); v == e.version && seen.After(u) {
				until[e] = seen
			}
		}
	}
	out := []CapabilityRecord{}
	for _, r := range records {
		e := epoch{r.APIServer, r.Version}
		if !at.Before(from[e]) && at.Before(until[e]) {
			out = append(out, r)
		}
	}
	return out
}

// exactEpochs narrows EpochsAt's answer with each apiserver's version history to the second:
// the history's lines are by the minute, so in the minute of a restart into another version
// both versions' lines hold at. Where versionAt (Capabilities.VersionAt) knows the version an
// apiserver ran at at, only that version's lines are kept; where it does not (a time older
// than this process remembers), the minute's answer stays.
func exactEpochs(records []CapabilityRecord, at time.Time, versionAt func(apiserver string, t time.Time) string) []CapabilityRecord {
	ran := map[string]string{}
	for _, r := range records {
		if _, ok := ran[r.APIServer]; !ok {
			ran[r.APIServer] = versionAt(r.APIServer, at)
		}
	}
	out := records[:0]
	for _, r := range records {
		if v := ran[r.APIServer]; v == "" || v == r.Version {
			out = append(out, r)
		}
	}
	return out
}
