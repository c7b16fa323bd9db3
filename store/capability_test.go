package store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/store"
)

// An apiserver restarts into another version in the middle of a minute in which it both
// forwarded a resource (on the old version) and served it (on the new one), and ran the old
// version more often that minute. Records go through the real correlator into the store, as in
// serve: the history credits each version with what it did, and a reclassified chain moves its
// count within its version. (Labelled by the version the apiserver ran most in the minute, as
// before migration 0011, the new version's serving was credited to the old one.)
func TestCapabilityHistoryCreditsEachVersionInTheRestartMinute(t *testing.T) {
	s := engine(t)
	ctx := context.Background()
	codec := newCodec(t)
	m := time.Now().UTC().Truncate(time.Hour).Add(-7 * time.Hour) // the minute of the restart
	const b, c = "cv-b", "cv-c"
	addr := map[string]string{b: "10.77.0.2", c: "10.77.0.3"}
	loopback := func(apiserver, process, agent string, at time.Time) record.Record {
		id := fmt.Sprintf("cv-loop-%s-%d", apiserver, at.UnixNano())
		return record.Record{APIServer: apiserver, AuditID: id, Stage: "ResponseComplete", Level: "Metadata", Verb: "get",
			RequestURI: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + apiserver, Group: "coordination.k8s.io",
			Version: "v1", Resource: "leases", Namespace: "kube-system", Name: apiserver, UserName: "system:apiserver", UserUID: process,
			UserGroups: []string{"system:authenticated", "system:masters"}, SourceIPs: []string{addr[apiserver]}, UserAgent: agent,
			Code: 200, RequestReceivedTimestamp: at, StageTimestamp: at.Add(time.Millisecond), ReceivedAt: at.Add(time.Second),
			Raw: []byte(`{"auditID":"` + id + `"}`)}
	}
	const podgroups = "/apis/scheduling.k8s.io/v1alpha2/namespaces/cv/podgroups"
	client := func(apiserver, id string, at time.Time, sourceIPs ...string) record.Record {
		return record.Record{APIServer: apiserver, AuditID: id, Stage: "ResponseComplete", Level: "Metadata", Verb: "list",
			RequestURI: podgroups, Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups", Namespace: "cv",
			UserName: "alice", UserGroups: []string{"system:authenticated"}, SourceIPs: sourceIPs, UserAgent: "kubectl/v1.36.3",
			Code: 200, RequestReceivedTimestamp: at, StageTimestamp: at.Add(5 * time.Millisecond), ReceivedAt: at.Add(time.Second),
			Raw: []byte(`{"auditID":"` + id + `"}`)}
	}
	const old, upgraded = "kube-apiserver/v1.35.4 (linux/amd64) kubernetes/abc1234", "kube-apiserver/v1.36.3 (linux/amd64) kubernetes/def5678"
	var recs []record.Record
	recs = append(recs, loopback(c, "uid-c", upgraded, m.Add(time.Second)))
	for i := range 10 { // the old process, ten of its own calls in the minute
		recs = append(recs, loopback(b, "uid-b-old", old, m.Add(time.Duration(1+2*i)*time.Second)))
	}
	// On v1.35.4, cv-b forwards podgroups to cv-c (the peer records the entry's address).
	fwd := m.Add(15 * time.Second)
	recs = append(recs, client(b, "cv-forwarded", fwd, "10.9.0.1"))
	peer := client(c, "cv-forwarded", fwd.Add(time.Millisecond), "10.9.0.1", addr[b])
	peer.StageTimestamp = fwd.Add(4 * time.Millisecond)
	recs = append(recs, peer)
	// Restarted into v1.36.3 at :40, three of its own calls, then it serves podgroups itself.
	for i := range 3 {
		recs = append(recs, loopback(b, "uid-b-new", upgraded, m.Add(time.Duration(40+2*i)*time.Second)))
	}
	recs = append(recs, client(b, "cv-served", m.Add(47*time.Second), "10.9.0.1"))
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].ReceivedAt.Before(recs[j].ReceivedAt) })

	w := store.NewWriter(s, codec, store.WriterOptions{})
	co := correlate.New(correlate.Config{Join: correlate.DefaultJoinOptions(), Codec: codec,
		Caps: correlate.NewCapabilities(24 * time.Hour), Sink: w})
	var pos spool.Position
	feed := func(recs ...record.Record) {
		t.Helper()
		if err := w.WriteEvents(ctx, recs); err != nil {
			t.Fatal(err)
		}
		// One webhook batch per record and apiserver, in the order they were received.
		for i := range recs {
			frame, err := codec.AppendFrame(nil, recs[i].APIServer, recs[i].ReceivedAt, recs[i:i+1], []record.Key{recs[i].Key()})
			if err != nil {
				t.Fatal(err)
			}
			e := spool.Entry{Pos: pos, End: pos + spool.Position(len(frame)), Payload: frame}
			pos = e.End
			if _, err := co.Consume(ctx, []spool.Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed(recs...)
	// A bystander's records move the stream time on, past the chain window and past the one
	// more window a verdict may wait for evidence: every chain is final.
	for i, after := range []time.Duration{10 * time.Minute, 11 * time.Minute} {
		tick := client("cv-tick", fmt.Sprintf("cv-tick-%d", i), m.Add(after), "10.9.0.9")
		tick.Resource, tick.Group, tick.RequestURI = "", "", "/healthz"
		feed(tick)
	}

	for id, want := range map[string]struct {
		class          chain.Class
		entry, peerVer string
	}{"cv-forwarded": {chain.ClassProxied, "v1.35.4", "v1.36.3"}, "cv-served": {chain.ClassLocal, "v1.36.3", ""}} {
		ch, err := store.ReadChain(s)(ctx, id)
		if err != nil || ch == nil {
			t.Fatalf("chain %s from the store: %v %v", id, ch, err)
		}
		peerVer := ""
		if ch.Peer != nil {
			peerVer = ch.Peer.APIServerVersion
		}
		if ch.Class != want.class || ch.Entry == nil || ch.Entry.APIServerVersion != want.entry || peerVer != want.peerVer {
			t.Fatalf("chain %s: %s, entry %+v, peer version %q; want %s with entry version %s, peer version %q", id, ch.Class, ch.Entry, peerVer, want.class, want.entry, want.peerVer)
		}
	}
	// The minute's version by its loopback calls (what labelled it before 0011) is the old one.
	if v := scalar(t, s, "SELECT argMax(version, events) FROM (SELECT version, sum(events) AS events FROM peertrail.apiserver_versions_per_minute WHERE apiserver = {a:String} AND minute = {m:DateTime} GROUP BY version)",
		map[string]string{"a": b, "m": m.Format(time.DateTime)}); v != "v1.35.4" {
		t.Fatalf("the version cv-b ran most in the minute of its restart: %q, want v1.35.4", v)
	}

	history := func() []string {
		t.Helper()
		recs, err := store.CapabilityHistory(s)(ctx, m.Add(-time.Hour), m.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			if r.APIServer == b || r.APIServer == c {
				out = append(out, fmt.Sprintf("%s %s %s %s/%s %s-%s %d", r.APIServer, r.Version, r.Role, r.Group, r.Resource,
					r.From.Format("15:04"), r.Until.Format("15:04"), r.Requests))
			}
		}
		sort.Strings(out)
		return out
	}
	span := m.Format("15:04") + "-" + m.Add(time.Minute).Format("15:04")
	// The apiservers' own lease calls are local chains too: each process served its own.
	want := []string{
		"cv-b v1.35.4 forwarded scheduling.k8s.io/podgroups " + span + " 1",
		"cv-b v1.35.4 served coordination.k8s.io/leases " + span + " 10",
		"cv-b v1.36.3 served coordination.k8s.io/leases " + span + " 3",
		"cv-b v1.36.3 served scheduling.k8s.io/podgroups " + span + " 1",
		"cv-c v1.36.3 served coordination.k8s.io/leases " + span + " 1",
		"cv-c v1.36.3 served scheduling.k8s.io/podgroups " + span + " 1",
	}
	if got := history(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the capability history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The served chain reclassified (a late record: it was a failed forward after all): the
	// writer retracts its row, and the count moves within v1.36.3.
	late, err := store.ReadChain(s)(ctx, "cv-served")
	if err != nil {
		t.Fatal(err)
	}
	late.Revision++
	late.Class, late.LastReceived, late.Code = chain.ClassProxyFailed, late.LastReceived.Add(time.Minute), 503
	late.Entry.Code = 503
	if err := w.WriteChains(ctx, []chain.Chain{*late}); err != nil {
		t.Fatal(err)
	}
	want[3] = "cv-b v1.36.3 forwarded scheduling.k8s.io/podgroups " + span + " 1"
	sort.Strings(want)
	if got := history(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after reclassifying the served chain, the capability history:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func minT(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
