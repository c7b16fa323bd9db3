package attack

// Attacks on the HA layout's aggregator endpoint (POST /agent/v1/frames): forged frames, an
// agent posting another agent's apiserver, replayed frames, a slow agent, and every other
// credential. Each checks the answer and that nothing changed: no event accepted, nothing
// written to the spool, where each agent's frames end unchanged.

import (
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/ship"
	"github.com/peertrail/peertrail/ingest/spool"
)

const (
	agentAToken = "node-a-agent-token-0123456789"
	agentBToken = "node-b-agent-token-9876543210"
	streamA     = "0123456789abcdef0123456789abcdef"
)

// agentTarget is an aggregator (server.New with agents, TLS) whose agent node-a relays kas-a
// with a bearer token and node-b relays kas-b with a client certificate; kas-a may also post
// its webhook directly with its token.
type agentTarget struct {
	*authTarget
	nodeBCert *http.Client
	codec     *record.Codec
}

func startAgentTarget(t *testing.T, edit func(*config.File)) *agentTarget {
	t.Helper()
	dir := t.TempDir()
	tokenA := filepath.Join(dir, "node-a.token")
	if err := os.WriteFile(tokenA, []byte(agentAToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := startAuthTarget(t, func(c *config.File) {
		c.Agents = []config.Agent{
			{Name: "node-a", APIServers: []string{"kas-a"}, TokenFile: tokenA},
			{Name: "node-b", APIServers: []string{"kas-b"}, CertSubject: "node-b-agent"},
		}
		if edit != nil {
			edit(c)
		}
	})
	codec, err := record.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	return &agentTarget{authTarget: at, codec: codec,
		nodeBCert: at.client(at.auditCA.Client(t, "node-b", pkix.Name{CommonName: "node-b-agent"}).TLS)}
}

// frame is what an agent's receiver spools for a batch of n events of apiserver: the records
// decoded as the receiver decodes them, encoded as it encodes them.
func (a *agentTarget) frame(seed uint64, apiserver string, n int, pos uint64) ship.Frame {
	a.t.Helper()
	recs, invalid, err := record.Decode(batch(a.t, seed, n), apiserver, time.Now())
	if err != nil || len(invalid) > 0 {
		a.t.Fatal(err, invalid)
	}
	keys := make([]record.Key, len(recs))
	for i := range recs {
		keys[i] = recs[i].Key()
	}
	return a.encode(recs, keys, pos)
}

func (a *agentTarget) encode(recs []record.Record, keys []record.Key, pos uint64) ship.Frame {
	a.t.Helper()
	p, err := a.codec.AppendFrame(nil, recs[0].APIServer, recs[0].ReceivedAt, recs, keys)
	if err != nil {
		a.t.Fatal(err)
	}
	return ship.Frame{Pos: pos, End: pos + spool.FrameOverhead + uint64(len(p)), Payload: p}
}

// relay posts frames as the agent whose credential c (and token) carries.
func (a *agentTarget) relay(c *http.Client, token, stream string, frames ...ship.Frame) (int, string) {
	a.t.Helper()
	var head uint64
	if len(frames) > 0 {
		head = frames[len(frames)-1].End
	}
	body, err := ship.AppendRequest(nil, ship.Header{Stream: stream, Head: head, SentAt: time.Now()}, frames)
	if err != nil {
		a.t.Fatal(err)
	}
	return a.do(c, http.MethodPost, ship.Path, token, body)
}

// state is what the aggregator holds: events accepted, spool bytes written, each agent's status.
type aggState struct {
	accepted, written float64
	agents            []ingest.AgentStatus
}

func (a *agentTarget) state() aggState {
	var s aggState
	s.accepted, s.written = a.accepted(""), a.spoolWritten()
	// What the agents' statuses say beside their last contact and its header.
	for _, st := range a.agentsNow() {
		st.Heard, st.Head, st.HeadTime, st.LagBytes, st.LagSeconds, st.Aggregators, st.SpoolMaxBytes = time.Time{}, 0, time.Time{}, 0, 0, nil, 0
		s.agents = append(s.agents, st)
	}
	return s
}

func (a *agentTarget) agentsNow() []ingest.AgentStatus {
	a.t.Helper()
	return a.srv.Agents()
}

func (s aggState) String() string {
	return fmt.Sprintf("accepted %v, spool written %v, agents %+v", s.accepted, s.written, s.agents)
}

func (a *agentTarget) unchanged(before aggState, what string) {
	a.t.Helper()
	if after := a.state(); after.String() != before.String() {
		a.t.Fatalf("%s changed the aggregator:\nbefore %s\nafter  %s", what, before, after)
	}
}

func TestForgedAgentFramesChangeNothing(t *testing.T) {
	a := startAgentTarget(t, nil)
	good := a.frame(1, "kas-a", 5, 0)
	if code, msg := a.relay(a.anon, agentAToken, streamA, good); code != 200 {
		t.Fatalf("node-a's own frame: %d %s", code, msg)
	}
	before := a.state()
	if before.accepted != 5 {
		t.Fatalf("accepted %v, want 5", before.accepted)
	}
	recs, _, _ := record.Decode(batch(t, 2, 5), "kas-a", time.Now())
	keys := func(rs []record.Record) []record.Key {
		ks := make([]record.Key, len(rs))
		for i := range rs {
			ks[i] = rs[i].Key()
		}
		return ks
	}
	changed := func(change func(*record.Record)) []record.Record {
		out := make([]record.Record, len(recs))
		copy(out, recs)
		for i := range out {
			change(&out[i])
		}
		return out
	}
	next := good.End
	stage := changed(func(r *record.Record) { r.Stage = "Panic" })
	for _, c := range []struct {
		name  string
		frame ship.Frame
		want  int
	}{
		{"records that are not the keys' (the keys of events the aggregator has, to hide new ones)", a.encode(stage, keys(recs), next), 400},
		{"a record of another apiserver in kas-a's frame", a.encode(changed(func(r *record.Record) {
			if r.AuditID == recs[len(recs)-1].AuditID {
				r.APIServer = "kas-b"
			}
		}), keys(changed(func(r *record.Record) {
			if r.AuditID == recs[len(recs)-1].AuditID {
				r.APIServer = "kas-b"
			}
		})), next), 400},
		{"records received an hour ahead of the aggregator's clock", a.encode(changed(func(r *record.Record) { r.ReceivedAt = r.ReceivedAt.Add(time.Hour) }),
			keys(recs), next), 400},
		{"a time the store cannot hold", a.encode(changed(func(r *record.Record) { r.StageTimestamp = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }),
			keys(changed(func(r *record.Record) { r.StageTimestamp = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) })), next), 400},
		{"not a frame", ship.Frame{Pos: next, End: next + spool.FrameOverhead + 4, Payload: []byte("\x03\x05kas-a")}, 400},
		{"a frame over the one stored", ship.Frame{Pos: good.Pos + 1, End: good.Pos + 1 + spool.FrameOverhead + uint64(len(good.Payload)), Payload: good.Payload}, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, msg := a.relay(a.anon, agentAToken, streamA, c.frame); code != c.want {
				t.Fatalf("status %d (%s), want %d", code, msg, c.want)
			}
			a.unchanged(before, c.name)
		})
	}
	// A body that is not a request at all.
	for _, body := range [][]byte{nil, []byte(`{"items":[]}`), append([]byte("PTSHIP\x00\x01\x05{}"), 0xff)} {
		if code, _ := a.do(a.anon, http.MethodPost, ship.Path, agentAToken, body); code != 400 {
			t.Fatalf("body %q: %d, want 400", body, code)
		}
	}
	a.unchanged(before, "bodies that are not requests")
	// The real next frame still goes through.
	if code, msg := a.relay(a.anon, agentAToken, streamA, a.frame(3, "kas-a", 4, next)); code != 200 {
		t.Fatalf("the next real frame: %d %s", code, msg)
	}
	if n := a.accepted(""); n != 9 {
		t.Fatalf("accepted %v, want 9", n)
	}
}

func TestAgentsSpeakOnlyForTheirOwnAPIServers(t *testing.T) {
	a := startAgentTarget(t, nil)
	kasA, kasB := a.frame(1, "kas-a", 5, 0), a.frame(2, "kas-b", 5, 0)
	before := a.state()
	for _, c := range []struct {
		name   string
		client *http.Client
		token  string
		frames []ship.Frame
		want   int
	}{
		{"node-a's token relaying kas-b", a.anon, agentAToken, []ship.Frame{kasB}, 403},
		{"node-a's token relaying kas-a then kas-b", a.anon, agentAToken, []ship.Frame{kasA, {Pos: kasA.End, End: kasA.End + kasB.End, Payload: kasB.Payload}}, 403},
		{"node-b's certificate relaying kas-a", a.nodeBCert, "", []ship.Frame{kasA}, 403},
		{"node-b's certificate with node-a's token", a.nodeBCert, agentAToken, []ship.Frame{kasA}, 401},
		{"kas-a's own token (an apiserver's)", a.anon, authKasAToken, []ship.Frame{kasA}, 403},
		{"kas-a's certificate", a.kasACert, "", []ship.Frame{kasA}, 403},
		{"a reader's token", a.anon, authReaderToken, []ship.Frame{kasA}, 403},
		{"a certificate of another CA with node-b's subject", a.client(a.otherCA.Client(t, "forged-node-b", pkix.Name{CommonName: "node-b-agent"}).TLS), "", []ship.Frame{kasB}, 0},
		{"no credential", a.anon, "", []ship.Frame{kasA}, 401},
		{"an unknown token", a.anon, agentAToken + "x", []ship.Frame{kasA}, 401},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, msg := a.relay(c.client, c.token, streamA, c.frames...); code != c.want {
				t.Fatalf("status %d (%s), want %d", code, msg, c.want)
			}
			a.unchanged(before, c.name)
		})
	}
	// An agent's credential may neither post audit as an apiserver nor read.
	for _, c := range []struct {
		client       *http.Client
		token, path  string
		method, what string
	}{
		{a.anon, agentAToken, "/audit/kas-a", http.MethodPost, "node-a's token posting kas-a's webhook"},
		{a.nodeBCert, "", "/audit/kas-b", http.MethodPost, "node-b's certificate posting kas-b's webhook"},
		{a.anon, agentAToken, "/metrics", http.MethodGet, "node-a's token reading /metrics"},
		{a.nodeBCert, "", "/api/v1/agents", http.MethodGet, "node-b's certificate reading the agents"},
	} {
		var body []byte
		if c.method == http.MethodPost {
			body = batch(t, 9, 3)
		}
		if code, msg := a.do(c.client, c.method, c.path, c.token, body); code != 403 {
			t.Fatalf("%s: %d %s, want 403", c.what, code, msg)
		}
	}
	a.unchanged(before, "an agent's credential on the webhook and the API")
	// Each with its own.
	if code, msg := a.relay(a.anon, agentAToken, streamA, kasA); code != 200 {
		t.Fatalf("node-a relaying kas-a: %d %s", code, msg)
	}
	if code, msg := a.relay(a.nodeBCert, "", strings.Repeat("b", 32), kasB); code != 200 {
		t.Fatalf("node-b relaying kas-b: %d %s", code, msg)
	}
	if x, y := a.accepted("kas-a"), a.accepted("kas-b"); x != 5 || y != 5 {
		t.Fatalf("accepted kas-a %v, kas-b %v; want 5 each", x, y)
	}
}

func TestReplayedAgentFramesStoreNothing(t *testing.T) {
	a := startAgentTarget(t, nil)
	f1 := a.frame(1, "kas-a", 5, 0)
	f2 := a.frame(2, "kas-a", 5, f1.End)
	if code, msg := a.relay(a.anon, agentAToken, streamA, f1, f2); code != 200 {
		t.Fatalf("node-a: %d %s", code, msg)
	}
	before := a.state()
	for _, c := range []struct {
		name   string
		stream string
		frames []ship.Frame
	}{
		{"the same request again", streamA, []ship.Frame{f1, f2}},
		{"the first frame alone", streamA, []ship.Frame{f1}},
		{"under another stream (positions say nothing: the events do)", strings.Repeat("c", 32), []ship.Frame{f2, {Pos: f2.End, End: f2.End + f1.End, Payload: f1.Payload}}},
		{"at other positions of the same stream", streamA, []ship.Frame{{Pos: f2.End + 100, End: f2.End + 100 + f1.End, Payload: f1.Payload}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := a.relay(a.anon, agentAToken, c.stream, c.frames...)
			if code != 200 || !strings.Contains(msg, "0 events") && !strings.Contains(msg, "stored 0 frames") {
				t.Fatalf("status %d (%s), want 200 storing nothing", code, msg)
			}
			if n, w := a.accepted(""), a.spoolWritten(); n != before.accepted || w != before.written {
				t.Fatalf("a replay stored: accepted %v (was %v), spool %v (was %v)", n, before.accepted, w, before.written)
			}
		})
	}
	// Replayed by another agent: refused, nothing stored.
	if code, _ := a.relay(a.nodeBCert, "", streamA, f1); code != 403 {
		t.Fatalf("node-b replaying node-a's frame: %d, want 403", code)
	}
	// And through the webhook as kas-a itself: the same events are duplicates there too.
	if n, w := a.accepted(""), a.spoolWritten(); n != before.accepted || w != before.written {
		t.Fatalf("replays stored: accepted %v (was %v), spool %v (was %v)", n, before.accepted, w, before.written)
	}
}

func TestSlowAgentHoldsOnlyItsOwnTurns(t *testing.T) {
	a := startAgentTarget(t, func(c *config.File) { c.Limits.ReadTimeout = config.Duration(3 * time.Second) })
	addr := strings.TrimPrefix(a.srv.URL(), "https://")
	nodeB := a.auditCA.Client(t, "node-b-slow", pkix.Name{CommonName: "node-b-agent"}).TLS
	// 100 connections of node-b's certificate, each sending a byte a second of a 1 MB request.
	var ends []func()
	for range 100 {
		ends = append(ends, slowPost(t, addr, a.auditCA, nodeB, ship.Path, 1<<20))
	}
	defer func() {
		for _, end := range ends {
			end()
		}
	}()
	time.Sleep(time.Second)
	before := a.state()
	// node-a's frames and kas-a's own webhook batches are taken promptly meanwhile.
	next := uint64(0)
	for i := range 5 {
		start := time.Now()
		f := a.frame(uint64(10+i), "kas-a", 20, next)
		next = f.End
		if code, msg := a.relay(a.anon, agentAToken, streamA, f); code != 200 || time.Since(start) > 5*time.Second {
			t.Fatalf("node-a's frame %d behind 100 slow node-b requests: %d %s after %s", i, code, msg, time.Since(start))
		}
	}
	if code, msg := a.do(a.anon, http.MethodPost, "/audit/kas-a", authKasAToken, batch(t, 50, 7)); code != 200 {
		t.Fatalf("kas-a's webhook behind the slow agent: %d %s", code, msg)
	}
	// node-b itself is over its turns: 503 with Retry-After.
	code, msg := a.relay(a.nodeBCert, "", strings.Repeat("b", 32), a.frame(60, "kas-b", 3, 0))
	if code != http.StatusServiceUnavailable || !strings.Contains(msg, "node-b") {
		t.Fatalf("node-b beyond its turns: %d %s, want 503", code, msg)
	}
	if x, y := a.accepted("kas-a"), a.accepted("kas-b"); x != before.accepted+107 || y != 0 {
		t.Fatalf("accepted kas-a %v, kas-b %v; want %v and 0", x, y, before.accepted+107)
	}
	// The slow bodies time out and free their turns: node-b gets through afterwards.
	for _, end := range ends {
		end()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, msg := a.relay(a.nodeBCert, "", strings.Repeat("b", 32), a.frame(61, "kas-b", 3, 0))
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-b never got its turns back: %d %s", code, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if y := a.accepted("kas-b"); y != 3 {
		t.Fatalf("accepted kas-b %v, want 3", y)
	}
}

// TestAggregatorWithoutAPIServerCredentialsTakesNoWebhook: an aggregator whose apiservers have
// no credential there (their webhooks post to their agents) refuses every webhook post, where
// serve without credentials would take any name from anyone.
func TestAggregatorWithoutAPIServerCredentialsTakesNoWebhook(t *testing.T) {
	dir := t.TempDir()
	tokenA := filepath.Join(dir, "node-a.token")
	if err := os.WriteFile(tokenA, []byte(agentAToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := startAuthTarget(t, func(c *config.File) {
		c.TLS.ClientCAFile = ""
		c.APIServers = []config.APIServer{{Name: "kas-a"}}
		c.Agents = []config.Agent{{Name: "node-a", APIServers: []string{"kas-a"}, TokenFile: tokenA}}
	})
	a := &agentTarget{authTarget: at}
	a.codec, _ = record.NewCodec()
	for _, path := range []string{"/audit/kas-a", "/audit"} {
		if code, msg := at.do(at.anon, http.MethodPost, path, "", batch(t, 1, 3)); code != 403 || !strings.Contains(msg, "from its agents only") {
			t.Fatalf("anonymous POST %s: %d %s, want 403", path, code, msg)
		}
	}
	if n, w := at.accepted(""), at.spoolWritten(); n != 0 || w != 0 {
		t.Fatalf("webhook posts stored: accepted %v, spool %v", n, w)
	}
	if code, msg := a.relay(at.anon, agentAToken, streamA, a.frame(2, "kas-a", 4, 0)); code != 200 {
		t.Fatalf("node-a: %d %s", code, msg)
	}
	if n := at.accepted("kas-a"); n != 4 {
		t.Fatalf("accepted %v, want node-a's 4", n)
	}
}
