package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/store"
	"github.com/peertrail/peertrail/test/storetest"
)

// TestVersionRollupOfAnyBinary: the dashboard's "Apiserver versions" panel (the
// apiserver_versions query over the rollup of migration 0004) learns each apiserver's version
// from its own loopback calls whatever its binary is called, and agrees with the correlator
// (chain.AgentVersion) on the version of every real-world agent; calls that only look like
// an apiserver's own (a forwarded copy, peer discovery, a kubelet) teach it nothing.
func TestVersionRollupOfAnyBinary(t *testing.T) {
	s := engine(t)
	at := time.Now().UTC().Add(-96 * time.Hour).Truncate(time.Hour) // a window of its own, within retention
	loop := func(apiserver, agent string, off time.Duration) record.Record {
		ts := at.Add(off)
		id := fmt.Sprintf("ver-%s-%d", apiserver, off)
		return record.Record{APIServer: apiserver, AuditID: id, Stage: "ResponseComplete", Level: "Metadata", Verb: "get",
			RequestURI: "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + apiserver, Group: "coordination.k8s.io",
			Version: "v1", Resource: "leases", UserName: "system:apiserver", UserUID: "uid-" + apiserver,
			UserGroups: []string{"system:authenticated", "system:masters"}, SourceIPs: []string{"127.0.0.1"}, UserAgent: agent,
			Code: 200, RequestReceivedTimestamp: ts, StageTimestamp: ts.Add(time.Millisecond), ReceivedAt: ts.Add(time.Second),
			Raw: []byte(`{"auditID":"` + id + `"}`)}
	}
	// The apiservers' own calls, as the binaries of distributions name themselves.
	own := map[string]string{
		"ver-kubeadm":  "kube-apiserver/v1.35.4 (linux/amd64) kubernetes/abc1234",
		"ver-k3s":      "k3s/v1.35.4+k3s1 (linux/amd64) kubernetes/9f1c2d3",
		"ver-rke2":     "kube-apiserver/v1.35.4+rke2r1 (linux/amd64) kubernetes/abc1234",
		"ver-renamed":  "kube-apiserver-1.36/v1.36.3 (linux/amd64) kubernetes/abc1234",
		"ver-kubelite": "kubelite/v1.36.3 (linux/amd64) kubernetes/abc1234",
		"ver-minor":    "kube-apiserver/v1.17 (linux/amd64) kubernetes/abc1234",
		"ver-suffixed": "kube-apiserver-1.35.4/v1.35.4 (linux/amd64) kubernetes/unknown/leader-election",
	}
	var recs []record.Record
	var i time.Duration
	for a, agent := range own {
		recs = append(recs, loop(a, agent, i*time.Second))
		i++
	}
	// Not an apiserver's own calls.
	fwd := loop("ver-forwarded", "kube-apiserver/v1.36.3 (linux/amd64) kubernetes/abc", 10*time.Second)
	fwd.SourceIPs = []string{"127.0.0.1", "10.0.0.12"}
	disc := loop("ver-discovery", "", 11*time.Second)
	disc.UserGroups = []string{"system:authenticated"}
	disc.UserUID = ""
	kubelet := loop("ver-kubelet", "kubelet/v1.36.3 (linux/amd64) kubernetes/abc", 12*time.Second)
	kubelet.UserName, kubelet.UserGroups = "system:node:n1", []string{"system:nodes"}
	recs = append(recs, fwd, disc, kubelet)
	if err := storetest.Write(context.Background(), s, recs, nil); err != nil {
		t.Fatal(err)
	}

	r := runNamed(t, "apiserver_versions", map[string]string{
		"since": store.FormatTime(at), "until": store.FormatTime(at.Add(time.Hour)),
	})
	got := map[string]string{}
	for i := range r.Rows {
		got[r.Value(i, "apiserver")] += r.Value(i, "version")
	}
	for a, agent := range own {
		want, err := chain.AgentVersion(agent)
		if err != nil {
			t.Fatalf("the correlator refuses %q: %v", agent, err)
		}
		if got[a] != want {
			t.Errorf("%s (%q): the panel shows version %q, the correlator %q", a, agent, got[a], want)
		}
	}
	for _, a := range []string{"ver-forwarded", "ver-discovery", "ver-kubelet"} {
		if v, ok := got[a]; ok {
			t.Errorf("%s is not an apiserver's own call, yet the panel shows version %q", a, v)
		}
	}
}
