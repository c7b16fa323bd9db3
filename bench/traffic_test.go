package bench

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Every batch holds exactly Batch events; each forwarded request's entry record is in its
// sender's batch and its peer record, with the same auditID, in the next sender's batch of the
// same number, shaped as real apiservers write them; nothing else shares an auditID.
func TestTrafficPairsBothSides(t *testing.T) {
	names := []string{"kas-1", "kas-2", "kas-3"}
	tr, err := NewTraffic(names, 400, 0.3, 7)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		sender int
		ev     auditv1.Event
	}
	byID := map[string][]rec{}
	// Rendered a minute after the templates: their times must be the render's, as an
	// apiserver's on-time stream is, not the template's (a stream a minute late).
	sent := time.Now().Add(time.Minute)
	tr.dates.now = func() time.Time { return sent }
	for seq := range 3 {
		for si := range names {
			b, err := tr.Body(si)
			if err != nil {
				t.Fatal(err)
			}
			var list auditv1.EventList
			if err := json.Unmarshal(b.AppendRender(nil, si, seq), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 400 {
				t.Fatalf("sender %d batch %d: %d events, want 400", si, seq, len(list.Items))
			}
			for _, ev := range list.Items {
				if age := sent.Sub(ev.StageTimestamp.Time); age < 0 || age > 10*time.Second {
					t.Fatalf("sender %d batch %d: an event written %v before it was sent", si, seq, age)
				}
				byID[string(ev.AuditID)] = append(byID[string(ev.AuditID)], rec{si, ev})
			}
		}
	}
	if got, want := len(byID), 3*len(names)*tr.Requests(); got != want {
		t.Errorf("%d auditIDs, want %d requests", got, want)
	}
	forwarded := 0
	for id, recs := range byID {
		senders := map[int][]auditv1.Event{}
		for _, r := range recs {
			if r.ev.Stage == auditv1.StageResponseComplete {
				senders[r.sender] = append(senders[r.sender], r.ev)
			}
		}
		if len(senders) == 1 {
			continue
		}
		forwarded++
		if len(senders) != 2 {
			t.Fatalf("%s: ResponseComplete from %d senders", id, len(senders))
		}
		var entry, peer auditv1.Event
		for _, evs := range senders {
			if len(evs) != 1 {
				t.Fatalf("%s: %d ResponseCompletes from one sender", id, len(evs))
			}
			if len(evs[0].SourceIPs) == 2 {
				peer = evs[0]
			} else {
				entry = evs[0]
			}
		}
		if len(entry.SourceIPs) != 1 || len(peer.SourceIPs) != 2 || !slices.Equal(entry.SourceIPs, peer.SourceIPs[:1]) {
			t.Errorf("%s: sourceIPs entry %v, peer %v", id, entry.SourceIPs, peer.SourceIPs)
		}
		if entry.Verb != peer.Verb || entry.User.Username != peer.User.Username || entry.ResponseStatus.Code != peer.ResponseStatus.Code {
			t.Errorf("%s: the sides disagree on the request: %+v / %+v", id, entry, peer)
		}
		if entry.RequestReceivedTimestamp.After(peer.RequestReceivedTimestamp.Time) || peer.StageTimestamp.After(entry.StageTimestamp.Time) {
			t.Errorf("%s: the peer's times are not inside the entry's", id)
		}
	}
	if want := 3 * len(names) * tr.Forwarded(); forwarded != want || want == 0 {
		t.Errorf("%d forwarded requests with both sides, want %d", forwarded, want)
	}
}
