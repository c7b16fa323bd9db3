package correlate

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
)

var podgroupsGVR = chain.GVR{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}

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
	d := restored(t, c)
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

// TestRestartWithTheSameVersionStartsAnEpoch: a new process of an apiserver (another loopback
// UID) is a new epoch even when the version stays, and the history says why each began.
func TestRestartWithTheSameVersionStartsAnEpoch(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", Address: addrC, At: t0})
	c.Learn("kas-c", podgroupsGVR, t0.Add(time.Minute), true)
	// Records of the same process, in and out of order, change nothing.
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0.Add(2 * time.Minute)})
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0.Add(90 * time.Second)})
	if h := c.Servers()[0].History; len(h) != 1 || h[0].Cause != chain.CauseFirstSeen || h[0].Process != "uid-1" {
		t.Fatalf("history after one process: %+v", h)
	}
	// Restarted with other runtime-config, same binary: what it served is history.
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-2", At: t0.Add(3 * time.Minute)})
	if _, known := c.Serves("kas-c", podgroupsGVR, t0.Add(4*time.Minute)); known {
		t.Fatal("evidence from the previous process counts for the new one")
	}
	if served, known := c.Serves("kas-c", podgroupsGVR, t0.Add(90*time.Second)); !known || !served {
		t.Fatalf("the previous process's evidence lost for its own time: served=%v known=%v", served, known)
	}
	// A late record of the previous process neither flips the process back nor starts an epoch,
	// even when its time is after the restart (two processes sending under one name).
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0.Add(150 * time.Second)})
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0.Add(5 * time.Minute)})
	// Then an upgrade.
	c.Note("kas-c", Sighting{Version: "v1.37.2", Process: "uid-3", At: t0.Add(6 * time.Minute)})
	s := c.Servers()[0]
	want := []chain.VersionEpoch{
		{Since: t0, Version: "v1.36.3", Process: "uid-1", Cause: chain.CauseFirstSeen},
		{Since: t0.Add(3 * time.Minute), Version: "v1.36.3", Process: "uid-2", Cause: chain.CauseRestart},
		{Since: t0.Add(6 * time.Minute), Version: "v1.37.2", Process: "uid-3", Cause: chain.CauseVersionChange},
	}
	if !slices.Equal(s.History, want) || s.Process != "uid-3" || s.Version != "v1.37.2" {
		t.Fatalf("server %+v\nwant history %+v", s, want)
	}

	// The history and the current process survive a restart of peertrail, and the spool's
	// replay of records peertrail saw before it starts no epoch.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d := NewCapabilities(15 * time.Minute)
	d.NoteServer("kas-c", "v1.36", "", time.Time{}) // configured, as the server does before loading
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	d.Note("kas-c", Sighting{Version: "v1.37.2", Process: "uid-3", At: t0.Add(6 * time.Minute)})
	d.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-2", At: t0.Add(3 * time.Minute)})
	if got := d.Servers()[0]; !slices.Equal(got.History, want) || got.Process != "uid-3" || got.Version != "v1.37.2" {
		t.Fatalf("restored %+v", got)
	}
	if _, known := d.Serves("kas-c", podgroupsGVR, t0.Add(4*time.Minute)); known {
		t.Fatal("the restored view lost the restart's epoch")
	}
}

// TestConfiguredVersionAndTheAgent: a configured full version is kept when the agent shows the
// same release cut at its first "-"; a configured version the server does not run is replaced
// and begins an epoch, as the old prefix rule did.
func TestConfiguredVersionAndTheAgent(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.NoteServer("kas-a", "v1.35.4-eks-4a1b2c3", "", time.Time{})
	c.NoteServer("kas-b", "v1.35.4", "", time.Time{})
	c.NoteServer("kas-c", "v1.36", "", time.Time{})
	c.Note("kas-a", Sighting{Version: "v1.35.4", Process: "uid-a", At: t0})
	c.Note("kas-b", Sighting{Version: "v1.36.3", Process: "uid-b", At: t0})
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-c", At: t0})
	got := map[string]chain.ServerInfo{}
	for _, s := range c.Servers() {
		got[s.Name] = s
	}
	for name, want := range map[string]struct{ version, cause string }{
		"kas-a": {"v1.35.4-eks-4a1b2c3", chain.CauseFirstSeen},
		"kas-b": {"v1.36.3", chain.CauseVersionChange},
		"kas-c": {"v1.36.3", chain.CauseFirstSeen},
	} {
		s := got[name]
		if s.Version != want.version || len(s.History) != 1 || s.History[0].Cause != want.cause {
			t.Errorf("%s: version %q history %+v; want %q, one entry %s", name, s.Version, s.History, want.version, want.cause)
		}
	}
	// An apiserver without a loopback UID (none in its records) still gets version epochs.
	c.Note("kas-d", Sighting{Version: "v1.35.4", At: t0})
	c.Note("kas-d", Sighting{Version: "v1.35.4", At: t0.Add(time.Minute)})
	c.Note("kas-d", Sighting{Version: "v1.36.3", At: t0.Add(2 * time.Minute)})
	for _, s := range c.Servers() {
		if s.Name == "kas-d" && (len(s.History) != 2 || s.History[1].Cause != chain.CauseVersionChange || s.Process != "") {
			t.Errorf("kas-d: %+v", s)
		}
	}
}

// TestPastProcessesInAnyArrivalOrder: an apiserver's stream late and reversed shows its newest
// process first; each older process, seen later but from before the one known, begins a past
// epoch of its own, so the history, the epochs and what each process served come out as when
// the records came in order.
func TestPastProcessesInAnyArrivalOrder(t *testing.T) {
	sightings := []Sighting{
		{Version: "v1.35.4", Process: "uid-1", At: t0},
		{Version: "v1.35.4", Process: "uid-1", At: t0.Add(time.Minute)},
		{Version: "v1.35.4", Process: "uid-2", At: t0.Add(3 * time.Minute)},
		{Version: "v1.35.4", Process: "uid-2", At: t0.Add(4 * time.Minute)},
		{Version: "v1.36.3", Process: "uid-3", At: t0.Add(6 * time.Minute)},
		{Version: "v1.36.3", Process: "uid-3", At: t0.Add(7 * time.Minute)},
	}
	want := []chain.VersionEpoch{
		{Since: t0, Version: "v1.35.4", Process: "uid-1", Cause: chain.CauseFirstSeen},
		{Since: t0.Add(3 * time.Minute), Version: "v1.35.4", Process: "uid-2", Cause: chain.CauseRestart},
		{Since: t0.Add(6 * time.Minute), Version: "v1.36.3", Process: "uid-3", Cause: chain.CauseVersionChange},
	}
	orders := map[string][]int{
		"in order":          {0, 1, 2, 3, 4, 5},
		"reversed":          {5, 4, 3, 2, 1, 0},
		"newest first":      {4, 5, 0, 1, 2, 3},
		"middle last":       {0, 1, 4, 5, 3, 2},
		"latest of each":    {5, 3, 1, 4, 2, 0},
		"oldest inserted 2": {4, 2, 1, 0, 3, 5},
	}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			c := NewCapabilities(15 * time.Minute)
			// Evidence learned before any process was known, and between the sightings.
			c.Learn("kas-c", podgroupsGVR, t0.Add(30*time.Second), true)
			for i, k := range order {
				c.Note("kas-c", sightings[k])
				if i == 2 {
					c.Learn("kas-c", podgroupsGVR, t0.Add(5*time.Minute), true)
				}
			}
			s := c.Servers()[0]
			if !slices.Equal(s.History, want) || s.Process != "uid-3" || s.Version != "v1.36.3" {
				t.Fatalf("server %+v\nwant history %+v", s, want)
			}
			if got := c.epochs["kas-c"]; !slices.Equal(got, []time.Time{t0.Add(3 * time.Minute), t0.Add(6 * time.Minute)}) {
				t.Fatalf("epochs %v", got)
			}
			for _, q := range []struct {
				at           time.Duration
				served, know bool
			}{{40 * time.Second, true, true}, {150 * time.Second, true, true}, {4 * time.Minute, true, true}, {6 * time.Minute, false, false}} {
				served, known := c.Serves("kas-c", podgroupsGVR, t0.Add(q.at))
				if served != q.served || known != q.know {
					t.Errorf("at +%s: served=%v known=%v, want %v %v", q.at, served, known, q.served, q.know)
				}
			}
			if from, ok := c.StartedAt("kas-c", t0.Add(7*time.Minute)); !ok || !from.Equal(t0.Add(6*time.Minute)) {
				t.Errorf("uid-3 started at %v %v", from, ok)
			}
		})
	}
}

// TestPastProcessKeepsWhenTheLaterOneServed: the first answer a process gave to others marks
// the end of its start (Starting); an older process inserted before it keeps that answer with
// the later process, not with itself.
func TestPastProcessKeepsWhenTheLaterOneServed(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-2", At: t0.Add(3 * time.Minute)})
	c.NoteServing("kas-c", t0.Add(3*time.Minute+time.Second))
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0})
	c.NoteServing("kas-c", t0.Add(time.Second))
	if _, starting := c.Starting("kas-c", t0.Add(3*time.Minute+30*time.Second), StartingWindow); starting {
		t.Fatal("uid-2 still starting 29 s after it first served")
	}
	if _, starting := c.Starting("kas-c", t0.Add(3*time.Minute+500*time.Millisecond), StartingWindow); !starting {
		t.Fatal("uid-2 not starting before it first served")
	}
	// The current process seen before the one inserted before it moves nothing, nor does
	// the past process seen after the current one started (two processes sending under one
	// name).
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-2", At: t0.Add(-time.Minute)})
	c.Note("kas-c", Sighting{Version: "v1.36.3", Process: "uid-1", At: t0.Add(3*time.Minute + time.Second)})
	want := []chain.VersionEpoch{
		{Since: t0, Version: "v1.36.3", Process: "uid-1", Cause: chain.CauseFirstSeen},
		{Since: t0.Add(3 * time.Minute), Version: "v1.36.3", Process: "uid-2", Cause: chain.CauseRestart},
	}
	if h := c.Servers()[0].History; !slices.Equal(h, want) {
		t.Fatalf("history %+v", h)
	}
}

// TestObservedForwardsOutrankAssumedServing: a lone success without objects may be a forward's
// entry record whose peer record is late; what it says is only assumed, and a forward seen in
// the same process outranks it in either arrival order, but not in another process.
func TestObservedForwardsOutrankAssumedServing(t *testing.T) {
	for _, order := range []string{"assumed first", "observed first"} {
		t.Run(order, func(t *testing.T) {
			c := NewCapabilities(15 * time.Minute)
			c.Note("kas-a", Sighting{Version: "v1.35.4", Process: "p1", At: t0})
			assume := func() { c.Assume("kas-a", podgroupsGVR, t0.Add(2*time.Minute)) }
			observe := func() { c.Learn("kas-a", podgroupsGVR, t0.Add(30*time.Second), false) }
			if order == "assumed first" {
				assume()
				if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(2*time.Minute)); !known || !served {
					t.Fatalf("with only the assumption: served=%v known=%v, want served", served, known)
				}
				observe()
			} else {
				observe()
				assume()
			}
			// Nearer in time to the assumption, yet the observed forward decides.
			if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(2*time.Minute)); !known || served {
				t.Fatalf("served=%v known=%v, want not served", served, known)
			}
			if other, ok := c.OtherServer("kas-b", podgroupsGVR, t0.Add(2*time.Minute)); ok {
				t.Fatalf("%s reported as serving on an assumption outranked", other)
			}
			// A new process starts afresh: the old process's forwards say nothing of it.
			c.Note("kas-a", Sighting{Version: "v1.35.4", Process: "p2", At: t0.Add(5 * time.Minute)})
			c.Assume("kas-a", podgroupsGVR, t0.Add(6*time.Minute))
			if served, known := c.Serves("kas-a", podgroupsGVR, t0.Add(6*time.Minute)); !known || !served {
				t.Fatalf("new process: served=%v known=%v, want served (assumed)", served, known)
			}
			// Restored from its file, the view still tells the two apart.
			r := restored(t, c)
			if served, known := r.Serves("kas-a", podgroupsGVR, t0.Add(2*time.Minute)); !known || served {
				t.Fatalf("restored: served=%v known=%v, want not served", served, known)
			}
			// The current process's view is the assumption: nothing observed contradicts it.
			snap := r.Snapshot()
			if len(snap) != 1 || len(snap[0].Resources) != 1 || !snap[0].Resources[0].Served || !snap[0].Resources[0].Assumed {
				t.Fatalf("snapshot %+v, want podgroups served (assumed) in the current process", snap)
			}
		})
	}
}

// VersionAt names the version of the process that ran at a time, from the version history:
// the first process seen ran before its first sighting too; a restart's version holds from its
// first loopback call, also when a later batch of it arrived first; an unknown apiserver has
// its configured version or none.
func TestVersionAtFollowsTheHistory(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.NoteServer("kas-z", "v1.36", "", time.Time{}) // configured only
	c.Note("kas-b", Sighting{Version: "v1.35.4", Process: "old", At: t0})
	c.Note("kas-b", Sighting{Version: "v1.35.4", Process: "old", At: t0.Add(20 * time.Second)})
	c.Note("kas-b", Sighting{Version: "v1.36.3", Process: "new", At: t0.Add(45 * time.Second)})
	// The new process's first call arrives after a later one of it.
	c.Note("kas-b", Sighting{Version: "v1.36.3", Process: "new", At: t0.Add(40 * time.Second)})
	for _, tc := range []struct {
		apiserver string
		at        time.Duration
		want      string
	}{
		{"kas-b", -time.Minute, "v1.35.4"},
		{"kas-b", 15 * time.Second, "v1.35.4"},
		{"kas-b", 39 * time.Second, "v1.35.4"},
		{"kas-b", 40 * time.Second, "v1.36.3"},
		{"kas-b", 42 * time.Second, "v1.36.3"},
		{"kas-b", time.Hour, "v1.36.3"},
		{"kas-z", 0, "v1.36"},
		{"kas-unknown", 0, ""},
	} {
		if got := c.VersionAt(tc.apiserver, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s at t0%+v: %q, want %q", tc.apiserver, tc.at, got, tc.want)
		}
	}
}

// LastSeen tells the version an apiserver runs now and when it was last seen: the latest
// sighting, not the one that arrived last; nothing for a configured or unknown apiserver.
func TestLastSeenIsTheLatestSighting(t *testing.T) {
	c := NewCapabilities(15 * time.Minute)
	c.NoteServer("kas-z", "v1.36", "", time.Time{})
	c.Note("kas-b", Sighting{Version: "v1.35.4", Process: "old", At: t0})
	c.Note("kas-b", Sighting{Version: "v1.36.3", Process: "new", At: t0.Add(45 * time.Second)})
	c.Note("kas-b", Sighting{Version: "v1.36.3", Process: "new", At: t0.Add(40 * time.Second)})
	for _, tc := range []struct {
		apiserver, version string
		at                 time.Time
	}{
		{"kas-b", "v1.36.3", t0.Add(45 * time.Second)},
		{"kas-z", "", time.Time{}},
		{"kas-unknown", "", time.Time{}},
	} {
		if v, at := c.LastSeen(tc.apiserver); v != tc.version || !at.Equal(tc.at) {
			t.Errorf("LastSeen(%s) = %q, %s; want %q, %s", tc.apiserver, v, at, tc.version, tc.at)
		}
	}
}

// TestOtherServerAsksInNameOrder: of the apiservers that serve a resource, OtherServer names
// the first by name, whatever order they were learned in, from evidence, from assumed
// answers and from a restored view alike; one only seen to forward it is not asked.
func TestOtherServerAsksInNameOrder(t *testing.T) {
	at := t0.Add(time.Minute)
	c := NewCapabilities(15 * time.Minute)
	c.NoteProxied("kas-0", podgroupsGVR, t0)
	c.Learn("kas-d", podgroupsGVR, t0, true)
	c.Assume("kas-c", podgroupsGVR, t0)
	c.Learn("kas-b", podgroupsGVR, t0, false)
	c.Learn("kas-a", podgroupsGVR, t0, true)
	d := restored(t, c)
	for name, v := range map[string]*Capabilities{"learned": c, "restored": d} {
		for except, want := range map[string]string{"kas-a": "kas-c", "kas-c": "kas-a", "kas-x": "kas-a"} {
			if got, ok := v.OtherServer(except, podgroupsGVR, at); !ok || got != want {
				t.Errorf("%s: OtherServer(%s) = %q %v, want %q", name, except, got, ok, want)
			}
		}
		if got := v.learned; !slices.Equal(got, []string{"kas-a", "kas-b", "kas-c", "kas-d"}) {
			t.Errorf("%s: learned %v", name, got)
		}
	}
}

// restored is c saved and restored into a new view with a 15-minute horizon, as a restart of
// peertrail does.
func restored(t *testing.T, c *Capabilities) *Capabilities {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	d := NewCapabilities(15 * time.Minute)
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatal(err)
	}
	return d
}
