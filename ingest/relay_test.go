package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/ingest/dedup"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/ship"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/metrics"
)

// relayPair is an agent's receiver with its spool (the webhook side) and an aggregator's
// receiver that takes the agent's frames, over a real HTTP server.
type relayPair struct {
	agent, agg *fixture
	srv        *httptest.Server
}

const (
	agentToken  = "token-of-node-a"
	agentBToken = "token-of-node-b"
	apiToken    = "token-of-kas-a"
	readerToken = "reader-token"
)

func newRelayPair(t *testing.T) *relayPair {
	t.Helper()
	auth, err := NewAuthenticator(AuthOptions{
		SenderTokens: []NamedToken{{"kas-a", apiToken}},
		ReaderTokens: []string{readerToken},
		AgentTokens:  []AgentToken{{"node-a", agentToken}, {"node-b", agentBToken}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &relayPair{agent: newFixture(t, Options{}, 0)}
	p.agg = newFixture(t, Options{Auth: auth, RequireAuth: true,
		Agents: []RelayAgent{{Name: "node-a", APIServers: []string{"kas-a"}}, {Name: "node-b", APIServers: []string{"kas-b"}}}}, 0)
	p.agg.rc.opts.AgentStateDir = filepath.Join(p.agg.dir, "agents")
	p.srv = httptest.NewServer(p.agg.handler())
	t.Cleanup(p.srv.Close)
	return p
}

// entries are the agent spool's frames.
func (p *relayPair) entries(t *testing.T) []spool.Entry {
	t.Helper()
	r := p.agent.spool.NewReader(0)
	defer r.Close()
	var out []spool.Entry
	for {
		e, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

// post sends a request of frames (and header h) to the aggregator with token.
func (p *relayPair) post(t *testing.T, token string, h ship.Header, frames ...ship.Frame) (int, string) {
	t.Helper()
	body, err := ship.AppendRequest(nil, h, frames)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, p.srv.URL+ship.Path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg bytes.Buffer
	msg.ReadFrom(resp.Body)
	return resp.StatusCode, msg.String()
}

func (p *relayPair) header() ship.Header {
	st := p.agent.spool.Stats()
	return ship.Header{Stream: p.agent.spool.Identity(), Head: uint64(st.Durable), SentAt: time.Now()}
}

func framesOf(es []spool.Entry) []ship.Frame {
	out := make([]ship.Frame, len(es))
	for i, e := range es {
		out[i] = ship.Frame{Pos: uint64(e.Pos), End: uint64(e.End), Payload: e.Payload}
	}
	return out
}

func keysOf(recs []record.Record) map[record.Key]int {
	m := map[record.Key]int{}
	for i := range recs {
		m[recs[i].Key()]++
	}
	return m
}

func TestAgentFramesAreStoredOnceWhateverIsResent(t *testing.T) {
	p := newRelayPair(t)
	for seed := range uint64(3) {
		if w := p.agent.post(t, "/audit/kas-a", events(t, seed, 40), nil); w.Code != 200 {
			t.Fatalf("agent: %d %s", w.Code, w.Body)
		}
	}
	es := p.entries(t)
	if len(es) != 3 {
		t.Fatalf("agent spooled %d frames, want 3", len(es))
	}
	if code, msg := p.post(t, agentToken, p.header(), framesOf(es[:2])...); code != 200 {
		t.Fatalf("relay: %d %s", code, msg)
	}
	// The agent lost its cursor: it sends everything again, then the rest.
	code, msg := p.post(t, agentToken, p.header(), framesOf(es)...)
	if code != 200 || !strings.Contains(msg, "stored 1 frames") || !strings.Contains(msg, "2 frames duplicate") {
		t.Fatalf("resend: %d %s", code, msg)
	}
	want := p.agent.stored(t)
	got := p.agg.stored(t)
	if len(got) != len(want) || len(keysOf(got)) != len(want) {
		t.Fatalf("aggregator holds %d records (%d distinct), the agent %d", len(got), len(keysOf(got)), len(want))
	}
	for i := range got {
		if got[i].Key() != want[i].Key() || !got[i].ReceivedAt.Equal(want[i].ReceivedAt) || !bytes.Equal(got[i].Raw, want[i].Raw) {
			t.Fatalf("record %d differs: %+v vs %+v", i, got[i], want[i])
		}
	}
	// The agent's spool made anew (a new stream): positions say nothing, events do.
	h := p.header()
	h.Stream = strings.Repeat("ab", 16)
	code, msg = p.post(t, agentToken, h, framesOf(es)...)
	if code != 200 || !strings.Contains(msg, "stored 3 frames (0 events, 120 duplicate)") {
		t.Fatalf("a new stream with the same events: %d %s", code, msg)
	}
	if n := len(p.agg.stored(t)); n != len(want) {
		t.Fatalf("aggregator holds %d records after the new stream, want %d", n, len(want))
	}
	if got := int(testutil.ToFloat64(p.agg.rc.rm.frames.WithLabelValues("node-a", metrics.ResultDuplicate))); got != 2 {
		t.Fatalf("%d duplicate frames counted, want 2", got)
	}
	// Where the stored frames end survives a restart of the aggregator.
	if err := p.agg.rc.SaveAgents(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(p.agg.rc.opts.AgentStateDir, "node-a.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f agentFile
	if err := json.Unmarshal(b, &f); err != nil || f.Stream != h.Stream || f.Acked != uint64(es[2].End) {
		t.Fatalf("agent state %s (%v), want stream %s acked %d", b, err, h.Stream, es[2].End)
	}
	again := NewReceiver(p.agg.rc.opts, p.agg.spool, dedup.NewIndex(time.Minute), p.agg.codec, p.agg.rc.dead, slog.New(slog.DiscardHandler))
	if st := again.Agents()[0]; st.Stream != h.Stream || st.Stored != uint64(es[2].End) {
		t.Fatalf("restarted receiver knows %+v", st)
	}
}

func TestAgentsRelayOnlyTheirOwnAPIServersWithTheirOwnCredential(t *testing.T) {
	p := newRelayPair(t)
	if w := p.agent.post(t, "/audit/kas-a", events(t, 1, 5), nil); w.Code != 200 {
		t.Fatal(w.Code)
	}
	if w := p.agent.post(t, "/audit/kas-b", events(t, 2, 5), nil); w.Code != 200 {
		t.Fatal(w.Code)
	}
	es := p.entries(t)
	for _, c := range []struct {
		name, token string
		frames      []ship.Frame
		code        int
	}{
		{"no credential", "", framesOf(es[:1]), 401},
		{"an unknown token", "nope", framesOf(es[:1]), 401},
		{"an apiserver's token", apiToken, framesOf(es[:1]), 403},
		{"a reader's token", readerToken, framesOf(es[:1]), 403},
		{"node-a relaying kas-b", agentToken, framesOf(es[1:]), 403},
		{"node-a relaying kas-a then kas-b", agentToken, framesOf(es), 403},
		{"node-b relaying kas-a", agentBToken, framesOf(es[:1]), 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code, msg := p.post(t, c.token, p.header(), c.frames...); code != c.code {
				t.Fatalf("status %d, want %d: %s", code, c.code, msg)
			}
		})
	}
	if n := len(p.agg.stored(t)); n != 0 {
		t.Fatalf("refused requests stored %d records", n)
	}
	// An agent's credential may neither post audit as an apiserver nor read.
	for _, path := range []string{"/audit/kas-a", "/audit"} {
		if w := p.agg.post(t, path, events(t, 3, 1), map[string]string{"Authorization": "Bearer " + agentToken}); w.Code != 403 {
			t.Fatalf("agent token on %s: %d %s", path, w.Code, w.Body)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+agentToken)
	w := httptest.NewRecorder()
	p.agg.rc.opts.Auth.Readers(http.NotFoundHandler()).ServeHTTP(w, req)
	if w.Code != 403 {
		t.Fatalf("agent token reading: %d", w.Code)
	}
	if code, msg := p.post(t, agentBToken, p.header(), framesOf(es[1:])...); code != 200 {
		t.Fatalf("node-b relaying kas-b: %d %s", code, msg)
	}
	if n := len(p.agg.stored(t)); n != 5 {
		t.Fatalf("aggregator holds %d records, want kas-b's 5", n)
	}
}

// forge returns a copy of the frame of e with its records changed by change and encoded afresh,
// under keys: the records' own, or the original ones.
func forge(t *testing.T, codec *record.Codec, e spool.Entry, change func(*record.Record), keepKeys bool) ship.Frame {
	t.Helper()
	b, err := codec.DecodeFrame(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := record.ParseHeader(e.Payload)
	keys := make([]record.Key, len(b.Records))
	for i := range b.Records {
		change(&b.Records[i])
		keys[i] = b.Records[i].Key()
		if keepKeys {
			keys[i] = h.Keys[i]
		}
	}
	payload, err := codec.AppendFrame(nil, b.APIServer, b.ReceivedAt, b.Records, keys)
	if err != nil {
		t.Fatal(err)
	}
	return ship.Frame{Pos: uint64(e.Pos), End: uint64(e.Pos) + spool.FrameOverhead + uint64(len(payload)), Payload: payload}
}

func TestForgedFramesAreRefusedAndWhatCameBeforeIsKept(t *testing.T) {
	p := newRelayPair(t)
	for seed := range uint64(2) {
		if w := p.agent.post(t, "/audit/kas-a", events(t, seed, 5), nil); w.Code != 200 {
			t.Fatal(w.Code)
		}
	}
	es := p.entries(t)
	second := func(f ship.Frame) []ship.Frame {
		first := framesOf(es[:1])[0]
		f.Pos += first.End
		f.End += first.End
		return []ship.Frame{first, f}
	}
	for _, c := range []struct {
		name  string
		frame ship.Frame
		want  string
	}{
		{"keys that are not the records'", forge(t, p.agent.codec, es[1], func(r *record.Record) { r.Stage = "Panic" }, true), "does not have the key"},
		{"a record of another apiserver", forge(t, p.agent.codec, es[1], func(r *record.Record) { r.APIServer = "kas-b" }, false), "apiserver \"kas-b\"'s in a frame of \"kas-a\""},
		{"a record received at another time", forge(t, p.agent.codec, es[1], func(r *record.Record) { r.ReceivedAt = r.ReceivedAt.Add(time.Hour) }, false), "was received at"},
		{"a record without an auditID", forge(t, p.agent.codec, es[1], func(r *record.Record) { r.AuditID = "" }, false), "no auditID"},
		{"a time the store cannot hold", forge(t, p.agent.codec, es[1], func(r *record.Record) { r.StageTimestamp = time.Date(1800, 1, 1, 0, 0, 0, 0, time.UTC) }, false), "outside the range"},
		{"not a frame", ship.Frame{Pos: uint64(es[1].Pos), End: uint64(es[1].Pos) + spool.FrameOverhead + 3, Payload: []byte{9, 9, 9}}, "bad spool frame"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, msg := p.post(t, agentToken, p.header(), second(c.frame)...)
			if code != http.StatusBadRequest || !strings.Contains(msg, c.want) {
				t.Fatalf("status %d, want 400 saying %q: %s", code, c.want, msg)
			}
		})
	}
	// Each time, the first frame was stored (once) and the forged one refused.
	if got := len(p.agg.stored(t)); got != 5 {
		t.Fatalf("aggregator holds %d records, want the first frame's 5", got)
	}
	// A frame received ahead of the aggregator's clock.
	ahead := forge(t, p.agent.codec, es[1], func(r *record.Record) { r.ReceivedAt = time.Now().Add(time.Hour) }, false)
	b, _ := p.agent.codec.DecodeFrame(ahead.Payload)
	keys := make([]record.Key, len(b.Records))
	for i := range b.Records {
		keys[i] = b.Records[i].Key()
	}
	ahead.Payload, _ = p.agent.codec.AppendFrame(nil, "kas-a", time.Now().Add(time.Hour), b.Records, keys)
	ahead.End = ahead.Pos + spool.FrameOverhead + uint64(len(ahead.Payload))
	if code, msg := p.post(t, agentToken, p.header(), ahead); code != 400 || !strings.Contains(msg, "ahead of this aggregator's clock") {
		t.Fatalf("frame from the future: %d %s", code, msg)
	}
	if code, msg := p.post(t, agentToken, p.header(), framesOf(es)...); code != 200 || !strings.Contains(msg, "stored 1 frames") {
		t.Fatalf("the real frames: %d %s", code, msg)
	}
	if got := len(p.agg.stored(t)); got != 10 {
		t.Fatalf("aggregator holds %d records, want 10", got)
	}
}

func TestAgentStatusSaysHowFarBehind(t *testing.T) {
	p := newRelayPair(t)
	if st := p.agg.rc.Agents()[0]; st.LagSeconds != -1 || !st.Heard.IsZero() {
		t.Fatalf("before any request: %+v", st)
	}
	for seed := range uint64(2) {
		if w := p.agent.post(t, "/audit/kas-a", events(t, seed, 5), nil); w.Code != 200 {
			t.Fatal(w.Code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	es := p.entries(t)
	h := p.header()
	b0, _ := record.ParseHeader(es[0].Payload)
	b1, _ := record.ParseHeader(es[1].Payload)
	h.HeadTime = b1.ReceivedAt
	if code, msg := p.post(t, agentToken, h, framesOf(es[:1])...); code != 200 {
		t.Fatal(code, msg)
	}
	st := p.agg.rc.Agents()[0]
	if st.LagBytes != int64(es[1].End-es[0].End) || st.LagSeconds != b1.ReceivedAt.Sub(b0.ReceivedAt).Seconds() {
		t.Fatalf("one frame behind: %+v", st)
	}
	if code, msg := p.post(t, agentToken, h, framesOf(es[1:])...); code != 200 {
		t.Fatal(code, msg)
	}
	if st := p.agg.rc.Agents()[0]; st.LagBytes != 0 || st.LagSeconds != 0 || st.Stored != uint64(es[1].End) {
		t.Fatalf("caught up: %+v", st)
	}
}

// TestShipperRelaysAndGivesUpForAnAggregatorThatStaysAway runs the agent's side for real: a
// Fleet with one aggregator that takes frames and one that refuses every connection, over a
// small spool. The first gets every frame; for the second, once the spool is nearly full, the
// oldest frames are given up, counted, kept in a file and told in every header.
func TestShipperRelaysAndGivesUpForAnAggregatorThatStaysAway(t *testing.T) {
	p := newRelayPair(t)
	dir := t.TempDir()
	sp, err := spool.Open(spool.Options{Dir: filepath.Join(dir, "spool"), MaxBytes: 4 << 20, SegmentBytes: 256 << 10,
		Consumers: []string{ship.ConsumerName("up"), ship.ConsumerName("away")}})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	agent := NewReceiver(Options{APIServers: []string{"kas-a"}, MaxBodyBytes: 32 << 20}, sp, dedup.NewIndex(time.Minute), p.agent.codec, p.agent.rc.dead, slog.New(slog.DiscardHandler))
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens there any more
	tokenClient := &http.Client{Transport: tokenRT{agentToken}, Timeout: 10 * time.Second}
	skipFile := filepath.Join(dir, "skipped.json")
	fleet, err := ship.NewFleet(ship.FleetOptions{Spool: sp, SkipFile: skipFile, MaxRequestBytes: 64 << 10}, []ship.Aggregator{
		{Name: "up", URL: p.srv.URL, Client: tokenClient},
		{Name: "away", URL: closed.URL, Client: tokenClient},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for _, s := range fleet.Shippers() {
		go func() {
			sp.Run(ctx, ship.ConsumerName(s.Name()), s, spool.RunOptions{RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, CommitEvery: 10 * time.Millisecond, RetrySooner: s.GivingUp})
			done <- struct{}{}
		}()
	}
	mux := http.NewServeMux()
	agent.Register(mux)
	sent := 0
	for seed := uint64(0); sent < 20000; seed++ {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/audit/kas-a", bytes.NewReader(events(t, 100+seed, 100))))
		if w.Code != 200 {
			t.Fatalf("after %d events the agent answered %d: %s (the spool must never refuse for an aggregator away)", sent, w.Code, w.Body)
		}
		sent += 100
		time.Sleep(2 * time.Millisecond) // an apiserver's batches come apart in time
	}
	waitUntil(t, func() bool { return len(p.agg.stored(t)) == sent })
	cancel()
	<-done
	<-done
	b, err := os.ReadFile(skipFile)
	if err != nil {
		t.Fatal(err)
	}
	var skips map[string]ship.Skipped
	if err := json.Unmarshal(b, &skips); err != nil {
		t.Fatal(err)
	}
	sk := skips["away"]
	if sk.Events == 0 || sk.Events > uint64(sent) || sk.Events%100 != 0 || skips["up"].Events != 0 || sk.From.IsZero() || sk.To.Before(sk.From) {
		t.Fatalf("given up: %+v", skips)
	}
	st := sp.Stats()
	if float64(st.Bytes) > 0.9*float64(st.MaxBytes)+float64(64<<10) {
		t.Fatalf("spool holds %d of %d bytes", st.Bytes, st.MaxBytes)
	}
	// A restarted agent still says so.
	again, err := ship.NewFleet(ship.FleetOptions{Spool: sp, SkipFile: skipFile}, []ship.Aggregator{
		{Name: "up", URL: p.srv.URL, Client: tokenClient}, {Name: "away", URL: closed.URL, Client: tokenClient}})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Shippers()[0].Heartbeat(context.Background()); err != nil {
		t.Fatal(err)
	}
	var told ship.Skipped
	for _, a := range p.agg.rc.Agents()[0].Aggregators {
		if a.Name == "away" {
			told = a.Skipped
		}
	}
	if told.Events != sk.Events {
		t.Fatalf("the aggregator was told %+v, the agent's file says %+v", told, sk)
	}
	t.Logf("sent %d events, %d given up for the aggregator away, spool at %d of %d bytes", sent, sk.Events, st.Bytes, st.MaxBytes)
}

type tokenRT struct{ token string }

func (r tokenRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+r.token)
	return http.DefaultTransport.RoundTrip(req)
}
