package correlate

import (
	"encoding/json"
	"testing"
	"time"
)

var podgroupsGVR = GVR{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}

func TestCapabilitiesFollowAnUpgrade(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.NoteServer("kas-a", "v1.35.4", "10.0.0.11", t0)
	// As a 1.35 entry, kas-a forwarded podgroups: it does not serve them.
	c.Learn("kas-a", podgroupsGVR, t0.Add(time.Minute), false)
	if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(2*time.Minute)); !known || served {
		t.Fatalf("before the upgrade: served=%v known=%v", served, known)
	}
	// kas-a restarts as 1.36: its own loopback calls say so.
	c.NoteServer("kas-a", "v1.36.3", "10.0.0.11", t0.Add(3*time.Minute))
	if _, known := c.Serves("kas-a", podgroupsGVR, t0.Add(4*time.Minute)); known {
		t.Fatalf("evidence from 1.35 still counts for the 1.36 server")
	}
	if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(90*time.Second)); !known || served {
		t.Fatalf("history before the restart lost: served=%v known=%v", served, known)
	}
	c.Learn("kas-a", podgroupsGVR, t0.Add(5*time.Minute), true)
	if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(6*time.Minute)); !known || !served {
		t.Fatalf("after the upgrade: served=%v known=%v", served, known)
	}
	// A late record from before the restart does not flip the version back.
	c.NoteServer("kas-a", "v1.35.4", "", t0.Add(2*time.Minute))
	if v := c.Servers()[0].Version; v != "v1.36.3" {
		t.Fatalf("version %s after a late old record", v)
	}

	// The view survives a restart of peertrail.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d := NewCapabilities(15 * time.Minute)
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{90 * time.Second, 4 * time.Minute, 6 * time.Minute} {
		s1, k1 := c.Serves("kas-a", podgroupsGVR, t0.Add(at))
		s2, k2 := d.Serves("kas-a", podgroupsGVR, t0.Add(at))
		if s1 != s2 || k1 != k2 {
			t.Fatalf("at +%s: restored view says %v/%v, original %v/%v", at, s2, k2, s1, k1)
		}
	}
	if !d.HasAddress("kas-a", "10.0.0.11") {
		t.Fatal("addresses lost in the restored view")
	}
}

func TestEvidenceOlderThanTheHorizonIsIgnored(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.Learn("kas-c", podgroupsGVR, t0, true)
	if _, ok := c.OtherServer("kas-a", podgroupsGVR, t0.Add(10*time.Minute)); !ok {
		t.Fatal("recent evidence ignored")
	}
	if _, ok := c.OtherServer("kas-a", podgroupsGVR, t0.Add(20*time.Minute)); ok {
		t.Fatal("evidence 20 minutes old still counts with a 15-minute horizon")
	}
}
