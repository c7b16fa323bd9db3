package correlate

import (
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

// TestDeliveredCoversWhatBatchesSpan: each batch's span is delivered whole; batches that
// overlap or lie within activityGap of each other join, in whatever order they come; a longer
// silence is a gap that nothing covers across.
func TestDeliveredCoversWhatBatchesSpan(t *testing.T) {
	c := NewCapabilities(time.Hour)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	c.NoteDelivered("kas-a", at(2000), at(2900))
	c.NoteDelivered("kas-a", at(0), at(900)) // an earlier batch, late
	c.NoteDelivered("kas-a", at(1000), at(1900))
	c.NoteDelivered("kas-a", at(6000), at(7000)) // after 3.1 s of silence
	for _, tc := range []struct {
		from, to int
		want     bool
	}{
		{100, 2800, true},   // across three batches
		{500, 700, true},    // inside one
		{2500, 6500, false}, // across the silence
		{6100, 6900, true},
		{6900, 7100, false}, // past what came
		{-100, 100, false},  // before it
	} {
		if got := c.Delivered("kas-a", at(tc.from), at(tc.to)); got != tc.want {
			t.Errorf("Delivered %d..%d ms: %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	if c.Delivered("kas-b", at(100), at(200)) {
		t.Error("an apiserver that delivered nothing covers nothing")
	}
	if n := c.DeliveredChanges(); n != 4 {
		t.Errorf("DeliveredChanges %d, want 4", n)
	}
}

// TestForwardingAddresses: an apiserver's configured address, or one learned from its own
// calls that is not a loopback address, is where it forwards from; a loopback address learned
// from its calls (an apiserver bound to all interfaces) says nothing of that.
func TestForwardingAddresses(t *testing.T) {
	c := NewCapabilities(time.Hour)
	c.NoteServer("configured", "", "10.0.0.11", time.Time{})
	c.Note("learned", Sighting{Address: "10.0.0.12", At: t0, Process: "p1"})
	c.Note("loopback", Sighting{Address: "127.0.0.1", At: t0, Process: "p2"})
	c.Note("loopback6", Sighting{Address: "::1", At: t0, Process: "p3"})
	for name, want := range map[string]bool{"configured": true, "learned": true, "loopback": false, "loopback6": false, "unknown": false} {
		if got := c.HasForwardingAddress(name); got != want {
			t.Errorf("HasForwardingAddress(%s) = %v, want %v", name, got, want)
		}
	}
	if !c.Configured("configured") || c.Configured("learned") {
		t.Error("Configured")
	}
}

// TestKnownResourceIsWhatAnApiserverServed: only a resource-level answer (Learn served, or
// Assume) makes a group/resource known; not being served, forwarding, or a made-up name do not.
func TestKnownResourceIsWhatAnApiserverServed(t *testing.T) {
	c := NewCapabilities(time.Hour)
	c.Learn("kas-a", chain.GVR{Group: "apps", Version: "v1", Resource: "deployments"}, t0, true)
	c.Assume("kas-a", chain.GVR{Version: "v1", Resource: "configmaps"}, t0)
	c.Learn("kas-a", chain.GVR{Group: "g1.example", Version: "v1", Resource: "r1"}, t0, false)
	c.NoteProxied("kas-a", chain.GVR{Group: "g2.example", Version: "v1", Resource: "r2"}, t0)
	for _, tc := range []struct {
		group, resource string
		want            bool
	}{{"apps", "deployments", true}, {"", "configmaps", true}, {"g1.example", "r1", false}, {"g2.example", "r2", false}, {"apps", "configmaps", false}} {
		if got := c.KnownResource(tc.group, tc.resource); got != tc.want {
			t.Errorf("KnownResource(%q, %q) = %v, want %v", tc.group, tc.resource, got, tc.want)
		}
	}
	// Restored from the saved view.
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := NewCapabilities(time.Hour)
	if err := r.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if !r.KnownResource("apps", "deployments") || !r.KnownResource("", "configmaps") || r.KnownResource("g1.example", "r1") {
		t.Error("KnownResource after a restore")
	}
}
