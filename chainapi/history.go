package chainapi

import (
	"time"

	"github.com/peertrail/peertrail/chain"
)

// AtWindow is how far around an ?at= time the API reads the history: the version epoch that
// holds the time is told by the evidence on both sides of it.
const AtWindow = 7 * 24 * time.Hour

// EpochsAt keeps the records of each apiserver's version epoch that holds at: the records of one
// apiserver and version whose span, from its first From to its last Until, includes at. The
// history's lines land a chain window after their minute, so the epoch an apiserver still
// runs reaches further, to when it was last seen (lastSeen, Servers.LastSeen; nil when
// nothing is remembered): a moment just after an upgrade belongs to the new version's epoch
// before the store has that minute's lines.
func EpochsAt(records []chain.CapabilityRecord, at time.Time, lastSeen func(apiserver string) (version string, at time.Time)) []chain.CapabilityRecord {
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
	out := []chain.CapabilityRecord{}
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
// both versions' lines hold at. Where versionAt (Servers.VersionAt) knows the version an
// apiserver ran at at, only that version's lines are kept; where it does not (a time older
// than this process remembers), the minute's answer stays.
func exactEpochs(records []chain.CapabilityRecord, at time.Time, versionAt func(apiserver string, t time.Time) string) []chain.CapabilityRecord {
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
