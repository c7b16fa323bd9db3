package correlate

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
)

// replayCapture feeds the loopback records of a real capture (test/testdata/real/<scenario>,
// in the order its batches arrived) to a correlator's noteServer.
func replayCapture(t *testing.T, co *Correlator, scenario string) {
	t.Helper()
	dir := filepath.Join("..", "test", "testdata", "real", scenario)
	b, err := os.ReadFile(filepath.Join(dir, "labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	var labels struct {
		Posts []struct {
			File      string    `json:"file"`
			APIServer string    `json:"apiserver"`
			Received  time.Time `json:"received"`
		} `json:"posts"`
	}
	if err := json.Unmarshal(b, &labels); err != nil {
		t.Fatal(err)
	}
	for _, p := range labels.Posts {
		body, err := os.ReadFile(filepath.Join(dir, p.File))
		if err != nil {
			t.Fatal(err)
		}
		recs, invalid, err := record.Decode(body, p.APIServer, p.Received)
		if err != nil || len(invalid) > 0 {
			t.Fatalf("%s/%s: %v %v", scenario, p.File, err, invalid)
		}
		for i := range recs {
			co.noteServer(&recs[i])
		}
	}
}

func serverInfo(c *Capabilities, name string) chain.ServerInfo {
	for _, s := range c.Servers() {
		if s.Name == name {
			return s
		}
	}
	return chain.ServerInfo{}
}

// TestRealCapturesShowRestartsAndUpgrades: in the real captures, kas-c restarted into the
// same v1.36.3 (peer-stopped) and kas-b was replaced by v1.36.3 (rolling-upgrade-step); each
// shows up as a new epoch, told apart by the loopback UID and the version. Peer-discovery
// fetches (system:apiserver without system:masters) teach nothing.
func TestRealCapturesShowRestartsAndUpgrades(t *testing.T) {
	co := New(Config{Join: DefaultJoinOptions(), Caps: NewCapabilities(15 * time.Minute)})
	replayCapture(t, co, "peer-stopped")
	c := serverInfo(co.caps, "kas-c")
	if len(c.History) != 2 || c.History[1].Cause != chain.CauseRestart || c.History[1].Version != "v1.36.3" ||
		c.History[0].Process == c.History[1].Process || c.Process != c.History[1].Process {
		t.Fatalf("kas-c restarted with the same version: %+v", c)
	}
	if got := serverInfo(co.caps, "kas-a"); got.Version != "v1.35.4" || len(got.History) != 1 {
		t.Fatalf("kas-a never restarted: %+v", got)
	}

	co = New(Config{Join: DefaultJoinOptions(), Caps: NewCapabilities(15 * time.Minute)})
	replayCapture(t, co, "rolling-upgrade-step")
	b := serverInfo(co.caps, "kas-b")
	if b.Version != "v1.36.3" || len(b.History) != 2 || b.History[0].Version != "v1.35.4" || b.History[1].Cause != chain.CauseVersionChange {
		t.Fatalf("kas-b upgraded: %+v", b)
	}
	if n := testutil.CollectAndCount(co.versionErrors); n != 0 {
		t.Fatalf("real kube-apiserver agents reported unparseable (%d series)", n)
	}
}

// TestLoopbackCallsOfAnyBinary: an apiserver's own calls are recognised by who makes them, so a
// binary not called kube-apiserver is learned too; an agent without a version is counted and
// logged once, naming the agent; calls that only look similar teach nothing.
func TestLoopbackCallsOfAnyBinary(t *testing.T) {
	var logs bytes.Buffer
	co := New(Config{Join: DefaultJoinOptions(), Caps: NewCapabilities(15 * time.Minute),
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	loop := func(apiserver, agent, uid string, at time.Time, ips ...string) *record.Record {
		if ips == nil {
			ips = []string{"127.0.0.1"}
		}
		return &record.Record{APIServer: apiserver, AuditID: "a", Stage: "ResponseComplete", Verb: "watch",
			UserName: userAPIServer, UserUID: uid, UserGroups: []string{"system:authenticated", "system:masters"},
			SourceIPs: ips, UserAgent: agent, RequestReceivedTimestamp: at, StageTimestamp: at.Add(time.Millisecond)}
	}
	for _, r := range []*record.Record{
		loop("k3s-1", "k3s/v1.35.4+k3s1 (linux/amd64) kubernetes/9f1c2d3", "u1", t0),
		loop("rke2-1", "kube-apiserver/v1.35.4+rke2r1 (linux/amd64) kubernetes/abc1234", "u2", t0),
		loop("kas-a", "kube-apiserver-1.36/v1.36.3 (linux/amd64) kubernetes/abc1234", "u3", t0),
		loop("kas-b", "hyperkube/v1.18.20 (linux/amd64) kubernetes/1f3e19b", "u4", t0),
		// Older apiservers put their loopback identity in system:masters alone and call over
		// ::1, as public audit logs of v1.20 to v1.28 show (1.35 adds system:authenticated).
		{APIServer: "kas-old", AuditID: "o", Stage: "ResponseComplete", Verb: "list", UserName: userAPIServer,
			UserUID: "521bb98f-fbc7-4e61-b96e-0a1510efabad", UserGroups: []string{"system:masters"}, SourceIPs: []string{"::1"},
			UserAgent: "kube-apiserver/v1.23.17 (linux/amd64) kubernetes/953be89", RequestReceivedTimestamp: t0, StageTimestamp: t0},
		loop("usernetes", "kube-apiserver/v1.17 (linux/amd64) kubernetes/abc1234", "u6", t0),
		// Not the apiserver's own: a forwarded copy (two addresses), peer discovery (no
		// system:masters), another user.
		loop("fwd", "kube-apiserver/v1.36.3 (linux/amd64) kubernetes/abc", "u5", t0, "127.0.0.1", "10.0.0.12"),
		{APIServer: "disc", UserName: userAPIServer, UserGroups: []string{"system:authenticated"}, SourceIPs: []string{"10.0.0.11"},
			Stage: "ResponseComplete", RequestReceivedTimestamp: t0},
		{APIServer: "kubelet", UserName: "system:node:n1", UserGroups: []string{"system:nodes"}, SourceIPs: []string{"10.0.0.50"},
			UserAgent: "kubelet/v1.36.3 (linux/amd64) kubernetes/abc", Stage: "ResponseComplete", RequestReceivedTimestamp: t0},
	} {
		co.noteServer(r)
	}
	for name, want := range map[string]string{"k3s-1": "v1.35.4+k3s1", "rke2-1": "v1.35.4+rke2r1", "kas-a": "v1.36.3", "kas-b": "v1.18.20", "kas-old": "v1.23.17", "usernetes": "v1.17", "fwd": "", "disc": "", "kubelet": ""} {
		if got := serverInfo(co.caps, name).Version; got != want {
			t.Errorf("%s: version %q, want %q", name, got, want)
		}
	}
	if s := serverInfo(co.caps, "disc"); len(s.Addresses) > 0 {
		t.Errorf("peer discovery taught an address: %+v", s)
	}

	// An agent without a version: counted per request (its final stage), logged once.
	for i, agent := range []string{"", "kube-apiserver/unknown (linux/amd64) kubernetes/unknown", "", ""} {
		r := loop("kas-x", agent, "u9", t0.Add(time.Duration(i)*time.Second))
		rr := *r
		rr.Stage = "RequestReceived"
		co.noteServer(&rr)
		co.noteServer(r)
	}
	if got := testutil.ToFloat64(co.versionErrors.WithLabelValues("kas-x")); got != 4 {
		t.Errorf("unparseable counted %v times, want 4", got)
	}
	out := logs.String()
	if strings.Count(out, "apiserver=kas-x") != 2 || !strings.Contains(out, `user_agent=""`) ||
		!strings.Contains(out, `user_agent="kube-apiserver/unknown (linux/amd64) kubernetes/unknown"`) {
		t.Errorf("log:\n%s", out)
	}
	// Its process is still followed: the restart shows even without a version.
	co.noteServer(loop("kas-x", "", "u10", t0.Add(time.Minute)))
	if h := serverInfo(co.caps, "kas-x").History; len(h) != 2 || h[1].Cause != chain.CauseRestart || h[1].Version != "" {
		t.Errorf("kas-x history %+v", h)
	}
}
