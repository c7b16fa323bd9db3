package ingest

// The aggregator's side of the HA layout: peertrail agents relay the frames of their spools to
// POST /agent/v1/frames (ingest/ship has the request and the agent's side).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/ship"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
	"github.com/peertrail/peertrail/metrics"
)

// RelayAgent is a peertrail agent that may relay its spool's frames to this receiver, for the
// apiservers it names and no other.
type RelayAgent struct {
	Name       string
	APIServers []string
}

// MaxAgentClockAhead is how far ahead of the receiver's clock the receipt time of an agent's
// frame may be. Frames carry the agent's receipt time, which is the time the correlator joins by
// and the day the store files an event under: a frame from an agent whose clock runs ahead would
// close every open chain at once. Such a frame is refused (400), and so are the ones after it.
const MaxAgentClockAhead = time.Minute

// agentState is what the receiver knows of one agent.
type agentState struct {
	name       string
	apiservers map[string]bool
	// proc is held while one of the agent's requests is processed: an agent relays its frames
	// in order, one request at a time.
	proc sync.Mutex

	mu sync.Mutex // guards the rest
	// stream, acked and newest are durable: the agent spool whose frames were stored, the end
	// of the last frame stored from it, and the receipt time of the newest frame stored.
	stream string
	acked  uint64
	newest time.Time
	saved  bool // what the state file holds is the above
	// heard is when the agent's last request came (this receiver's clock), hdr what it said.
	heard time.Time
	hdr   ship.Header
}

// AgentStatus is what the receiver knows of one agent now: whether it has everything the agent
// had when it last said, and what the agent says of every aggregator it ships to.
type AgentStatus struct {
	Name       string   `json:"name"`
	APIServers []string `json:"apiservers"`
	// Stream is the agent's spool identity; Stored the end of the last frame of it stored here,
	// StoredTime when the newest frame stored from the agent had been received (by the agent).
	Stream     string    `json:"stream,omitempty"`
	Stored     uint64    `json:"stored"`
	StoredTime time.Time `json:"stored_time,omitzero"`
	// Heard is when the agent's last request came (zero: not since this receiver started).
	Heard time.Time `json:"last_heard,omitzero"`
	// Head and HeadTime are the agent's, as it last said (ship.Header).
	Head     uint64    `json:"head"`
	HeadTime time.Time `json:"head_time,omitzero"`
	// LagBytes is the agent's spool not stored here; LagSeconds how much older the newest frame
	// stored here is than the agent's newest (0 when LagBytes is; -1 when not known: the agent
	// was not heard, or nothing of it is stored).
	LagBytes   int64   `json:"lag_bytes"`
	LagSeconds float64 `json:"lag_seconds"`
	// SpoolMaxBytes and Aggregators are the agent's account of its spool and of each aggregator.
	SpoolMaxBytes int64                  `json:"spool_max_bytes,omitempty"`
	Aggregators   []ship.AggregatorState `json:"aggregators,omitempty"`
}

func (st *agentState) status() AgentStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := AgentStatus{Name: st.name, Stream: st.stream, Stored: st.acked, StoredTime: st.newest, Heard: st.heard, LagSeconds: -1}
	for a := range st.apiservers {
		s.APIServers = append(s.APIServers, a)
	}
	sort.Strings(s.APIServers)
	if st.heard.IsZero() {
		return s
	}
	s.Head, s.HeadTime, s.SpoolMaxBytes = st.hdr.Head, st.hdr.HeadTime, st.hdr.SpoolMaxBytes
	s.Aggregators = slices.Clone(st.hdr.Aggregators)
	if st.hdr.Stream != st.stream {
		s.LagBytes = int64(min(st.hdr.Head, 1<<62))
	} else if st.hdr.Head > st.acked {
		s.LagBytes = int64(min(st.hdr.Head-st.acked, 1<<62))
	}
	switch {
	case s.LagBytes == 0:
		s.LagSeconds = 0
	case !st.hdr.HeadTime.IsZero() && !st.newest.IsZero():
		s.LagSeconds = max(0, st.hdr.HeadTime.Sub(st.newest).Seconds())
	}
	return s
}

// agentFile is what AgentStateDir keeps of an agent.
type agentFile struct {
	Stream string    `json:"stream"`
	Acked  uint64    `json:"acked"`
	Newest time.Time `json:"newest"`
}

func (rc *Receiver) agentPath(name string) string {
	return filepath.Join(rc.opts.AgentStateDir, name+".json")
}

// loadAgents makes the agents' states, from AgentStateDir where it has them.
func (rc *Receiver) loadAgents() {
	rc.agents = make(map[string]*agentState, len(rc.opts.Agents))
	for _, a := range rc.opts.Agents {
		st := &agentState{name: a.Name, apiservers: map[string]bool{}}
		for _, n := range a.APIServers {
			st.apiservers[n] = true
		}
		rc.agents[a.Name] = st
		if rc.opts.AgentStateDir == "" {
			continue
		}
		b, err := os.ReadFile(rc.agentPath(a.Name))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				rc.log.Warn("agent state unreadable: its frames are recognised by their events alone until it relays more", "agent", a.Name, "err", err)
			}
			continue
		}
		var f agentFile
		if err := json.Unmarshal(b, &f); err != nil {
			rc.log.Warn("agent state unreadable: its frames are recognised by their events alone until it relays more", "agent", a.Name, "err", err)
			continue
		}
		st.stream, st.acked, st.newest, st.saved = f.Stream, f.Acked, f.Newest, true
	}
}

// SaveAgents writes each agent's stored position that changed to AgentStateDir. The receiver
// recognises a frame it stored by its position (and, after that, by its events, through the
// duplicate index): call it every second or so, and once more after the server stopped. Safe
// for concurrent use.
func (rc *Receiver) SaveAgents() error {
	if rc.opts.AgentStateDir == "" {
		return nil
	}
	if err := os.MkdirAll(rc.opts.AgentStateDir, 0o750); err != nil {
		return fmt.Errorf("agent state: %w", err)
	}
	var errs []error
	for _, st := range rc.agents {
		st.mu.Lock()
		if st.saved {
			st.mu.Unlock()
			continue
		}
		f := agentFile{Stream: st.stream, Acked: st.acked, Newest: st.newest}
		st.saved = true
		st.mu.Unlock()
		b, _ := json.Marshal(f)
		if err := fsutil.WriteFileAtomic(rc.agentPath(st.name), b); err != nil {
			st.mu.Lock()
			st.saved = false
			st.mu.Unlock()
			errs = append(errs, fmt.Errorf("agent %s state: %w", st.name, err))
		}
	}
	return errors.Join(errs...)
}

// Agents returns what the receiver knows of each configured agent, by name. Safe for
// concurrent use.
func (rc *Receiver) Agents() []AgentStatus {
	out := make([]AgentStatus, 0, len(rc.agents))
	for _, st := range rc.agents {
		out = append(out, st.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serveAgent is POST /agent/v1/frames: an agent's frames, or its heartbeat (the header alone).
func (rc *Receiver) serveAgent(w http.ResponseWriter, r *http.Request) {
	start := rc.now()
	a := rc.relay(w, r, start)
	if a.retry {
		w.Header().Set("Retry-After", strconv.Itoa(int((rc.opts.RetryAfter+time.Second-1)/time.Second)))
	}
	if a.code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="peertrail"`)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(a.code)
	io.WriteString(w, a.msg+"\n")
	// answer.apiserver holds the agent here: established, or "unknown".
	rc.rm.requests.WithLabelValues(a.apiserver, strconv.Itoa(a.code)).Inc()
	if a.code != http.StatusOK {
		rc.log.Info("agent request refused", "agent", a.apiserver, "code", a.code, "reason", a.msg, "remote", r.RemoteAddr)
	}
}

// relay authenticates the agent, reads its request within its turns and the shared budgets,
// and stores its frames (acceptFrames).
func (rc *Receiver) relay(w http.ResponseWriter, r *http.Request, start time.Time) answer {
	unknown := metrics.UnknownAPIServer
	id := Identity{}
	if rc.opts.Auth != nil {
		id = rc.opts.Auth.Identify(r)
	}
	switch {
	case id.Role == Invalid:
		return answer{code: http.StatusUnauthorized, apiserver: unknown, msg: "unauthenticated: " + id.Reason}
	case id.Role == Anonymous:
		return answer{code: http.StatusUnauthorized, apiserver: unknown,
			msg: "unauthenticated: present the agent's client certificate (its certSubject in agents:) or its bearer token (agents[].tokenFile)"}
	case id.Role != Agent:
		return answer{code: http.StatusForbidden, apiserver: unknown, msg: fmt.Sprintf("a %s's credential may not relay frames: only an agent's", id.Role)}
	}
	st := rc.agents[id.Agent]
	if st == nil {
		return answer{code: http.StatusForbidden, apiserver: unknown, msg: fmt.Sprintf("agent %q is not configured", id.Agent)}
	}
	name := st.name
	turn := "agent/" + name // apiserver names hold no '/': the agents' turns are their own
	if !rc.takeSenderSlot(turn) {
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true,
			msg: fmt.Sprintf("overloaded: agent %s already has %d requests in flight", name, rc.opts.MaxInflightPerSender)}
	}
	defer rc.releaseSenderSlot(turn)
	body, a := rc.readBody(w, r, name, func(int64) {})
	a.apiserver = name
	defer rc.reading.release(a.reserved)
	if body == nil {
		return a
	}
	defer rc.putBody(a.buf)
	// One request of an agent at a time: its frames come in its spool's order.
	if !st.proc.TryLock() {
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true,
			msg: fmt.Sprintf("agent %s has another request being processed: relay one at a time", name)}
	}
	defer st.proc.Unlock()
	select {
	case rc.slots <- struct{}{}:
		defer func() { <-rc.slots }()
	default:
		return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true,
			msg: fmt.Sprintf("overloaded: %d batches being processed", rc.opts.MaxInflight)}
	}
	req, err := ship.ParseRequest(body)
	if err != nil {
		return answer{code: http.StatusBadRequest, apiserver: name, msg: err.Error()}
	}
	return rc.acceptFrames(r.Context(), st, req, start)
}

// relayFrame is one frame of a request, checked.
type relayFrame struct {
	f         ship.Frame
	apiserver string
	at        time.Time
	dup       bool // stored already (at or before the stored end of its stream)
	stored    bool // stored by this request
}

// acceptFrames checks every frame's header before it stores any: the agent may relay only its
// own apiservers' frames (403 otherwise, nothing stored). Then, in order, it checks each frame's
// records against their header and what the webhook decoder would refuse, and stores the new
// ones (dropping events it has, as the webhook does); a frame that fails is refused (400) with
// the rest, and what was stored before it is kept and counted. It answers once what it stored
// is durable.
func (rc *Receiver) acceptFrames(ctx context.Context, st *agentState, req ship.Request, start time.Time) answer {
	name := st.name
	// What was stored of this request's stream: nothing of a stream not seen before (a new
	// spool of the agent's). The state changes only by what this request stores, and its
	// header only when it is answered 200: a refused request changes nothing.
	st.mu.Lock()
	acked, newStream := st.acked, req.Header.Stream != st.stream
	if newStream {
		acked = 0
	}
	st.mu.Unlock()

	frames := make([]relayFrame, len(req.Frames))
	var largest int
	for i, f := range req.Frames {
		h, err := record.ParseHeader(f.Payload)
		if err != nil {
			return answer{code: http.StatusBadRequest, apiserver: name, msg: fmt.Sprintf("frame %d at %d: %v", i, f.Pos, err)}
		}
		if !st.apiservers[h.APIServer] {
			return answer{code: http.StatusForbidden, apiserver: name,
				msg: fmt.Sprintf("frame %d at %d is apiserver %q's, and agent %s relays only %v's", i, f.Pos, h.APIServer, name, sortedKeys(st.apiservers))}
		}
		switch {
		case f.End <= acked:
			frames[i] = relayFrame{f: f, dup: true}
			continue
		case f.Pos < acked:
			return answer{code: http.StatusBadRequest, apiserver: name,
				msg: fmt.Sprintf("frame %d from %d to %d straddles the end of what was stored of stream %s (%d)", i, f.Pos, f.End, req.Header.Stream, acked)}
		}
		if h.ReceivedAt.After(start.Add(MaxAgentClockAhead)) {
			return answer{code: http.StatusBadRequest, apiserver: name,
				msg: fmt.Sprintf("frame %d at %d was received at %s, %s ahead of this aggregator's clock (at most %s): check the clocks of agent %s's node and this one",
					i, f.Pos, h.ReceivedAt.Format(time.RFC3339Nano), h.ReceivedAt.Sub(start).Round(time.Second), MaxAgentClockAhead, name)}
		}
		n, err := h.BodyLen()
		if err != nil || n > record.MaxFrameBody {
			return answer{code: http.StatusBadRequest, apiserver: name, msg: fmt.Sprintf("frame %d at %d: records of %d bytes decoded (%v)", i, f.Pos, n, err)}
		}
		largest = max(largest, n+len(h.Keys)*decodedItemBytes)
		frames[i] = relayFrame{f: f, apiserver: h.APIServer, at: h.ReceivedAt}
	}
	// The records of one frame are decoded at a time, into memory the receiver keeps: the
	// largest frame's take is reserved from the reading budget, as a webhook body's items are.
	if largest > 0 {
		if !rc.reading.tryTake(int64(largest)) {
			return rc.overBudget(name, 0)
		}
		defer rc.reading.release(int64(largest))
	}

	var (
		end                 spool.Position
		stored, dupFrames   int
		accepted, dupEvents = map[string]int{}, map[string]int{}
		lastEnd             uint64
		newest              time.Time
		refused             *answer
	)
	fr, ok := rc.frameReaders.Get()
	if !ok {
		fr = record.NewFrameReader()
	}
	defer rc.frameReaders.Put(fr)
	for i, x := range frames {
		if x.dup {
			dupFrames++
			continue
		}
		e, acc, dup, err := rc.storeFrame(fr, x, start)
		if err != nil {
			a := answer{code: http.StatusBadRequest, apiserver: name, msg: fmt.Sprintf("frame %d at %d: %v", i, x.f.Pos, err)}
			if errors.Is(err, spool.ErrFull) || errors.Is(err, spool.ErrFailed) || errors.Is(err, spool.ErrClosed) {
				a = answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true, msg: err.Error()}
			}
			refused = &a
			break
		}
		if e > 0 {
			end = e
		}
		stored++
		frames[i].stored = true
		accepted[x.apiserver] += acc
		dupEvents[x.apiserver] += dup
		lastEnd = x.f.End
		if x.at.After(newest) {
			newest = x.at
		}
	}
	if end > 0 {
		if err := rc.spool.Wait(ctx, end); err != nil {
			return answer{code: http.StatusServiceUnavailable, apiserver: name, retry: true, msg: fmt.Sprintf("spool: %v", err)}
		}
	}
	// Durable: what was stored counts, whatever follows.
	rc.rm.frames.WithLabelValues(name, metrics.ResultAccepted).Add(float64(stored))
	rc.rm.frames.WithLabelValues(name, metrics.ResultDuplicate).Add(float64(dupFrames))
	events, dups := 0, 0
	for a, n := range accepted {
		rc.m.events.WithLabelValues(a, metrics.ResultAccepted).Add(float64(n))
		rc.m.events.WithLabelValues(a, metrics.ResultDuplicate).Add(float64(dupEvents[a]))
		events += n
		dups += dupEvents[a]
	}
	rc.lastMu.Lock()
	for _, x := range frames {
		if !x.stored {
			continue
		}
		if x.at.After(rc.last[x.apiserver]) {
			rc.last[x.apiserver] = x.at
			rc.m.lastBatch.WithLabelValues(x.apiserver).Set(float64(x.at.UnixNano()) / 1e9)
		}
		if _, ok := rc.first[x.apiserver]; !ok {
			rc.first[x.apiserver] = x.at
		}
	}
	rc.lastMu.Unlock()
	st.mu.Lock()
	if stored > 0 || refused == nil && newStream {
		if newStream {
			if st.stream != "" {
				rc.log.Info("agent relays a new spool: its frames are recognised by their events until this one's are stored", "agent", name, "was", st.stream, "now", req.Header.Stream)
			}
			st.stream, st.acked, st.saved = req.Header.Stream, 0, false
		}
		if lastEnd > st.acked {
			st.acked, st.saved = lastEnd, false
		}
		if newest.After(st.newest) {
			st.newest, st.saved = newest, false
		}
	}
	if refused == nil {
		st.heard, st.hdr = start, req.Header
	}
	st.mu.Unlock()
	if refused != nil {
		refused.msg += fmt.Sprintf(" (the %d frames before it were stored)", stored)
		return *refused
	}
	return answer{code: http.StatusOK, apiserver: name,
		msg: fmt.Sprintf("stored %d frames (%d events, %d duplicate), %d frames duplicate", stored, events, dups, dupFrames)}
}

// storeFrame checks a frame's records and stores those the receiver does not have, as accept
// does with a webhook batch's: the duplicate index and the append are one step. It returns the
// spool position to wait for (0: nothing appended) and the events it took and found duplicate.
// The frame's own bytes are appended when every event is new (they decoded to these records);
// otherwise the new records are encoded afresh.
func (rc *Receiver) storeFrame(fr *record.FrameReader, x relayFrame, now time.Time) (spool.Position, int, int, error) {
	h, err := record.ParseHeader(x.f.Payload)
	if err != nil {
		return 0, 0, 0, err
	}
	b, err := fr.Decode(x.f.Payload)
	if err != nil {
		return 0, 0, 0, err
	}
	keys := make([]record.Key, len(b.Records))
	stamps := make([]int64, len(b.Records))
	for i := range b.Records {
		r := &b.Records[i]
		switch {
		case r.APIServer != h.APIServer:
			return 0, 0, 0, fmt.Errorf("record %d is apiserver %q's in a frame of %q", i, r.APIServer, h.APIServer)
		case !r.ReceivedAt.Equal(h.ReceivedAt):
			return 0, 0, 0, fmt.Errorf("record %d was received at %s in a frame received at %s", i, r.ReceivedAt.Format(time.RFC3339Nano), h.ReceivedAt.Format(time.RFC3339Nano))
		}
		if err := record.Validate(r); err != nil {
			return 0, 0, 0, fmt.Errorf("record %d: %w", i, err)
		}
		keys[i], stamps[i] = r.Key(), r.KeyStamp()
		if keys[i] != h.Keys[i] {
			return 0, 0, 0, fmt.Errorf("record %d does not have the key the frame gives it", i)
		}
	}
	if len(keys) == 0 {
		return 0, 0, 0, nil
	}
	rc.commit.Lock()
	defer rc.commit.Unlock()
	// Keyed by when this receiver took it, as a webhook batch is: remembered for the horizon
	// from now, however old the frame.
	dup, ndup := rc.index.Filter(now, keys, stamps)
	if ndup == len(keys) {
		return 0, 0, ndup, nil
	}
	frame := x.f.Payload
	if ndup > 0 {
		fresh, freshKeys := make([]record.Record, 0, len(keys)-ndup), make([]record.Key, 0, len(keys)-ndup)
		for i := range b.Records {
			if !dup[i] {
				fresh, freshKeys = append(fresh, b.Records[i]), append(freshKeys, keys[i])
			}
		}
		if frame, err = rc.codec.AppendFrame(nil, h.APIServer, h.ReceivedAt, fresh, freshKeys); err != nil {
			rc.index.Forget(keys, dup)
			return 0, 0, 0, err
		}
	}
	end, err := rc.spool.Append(frame)
	rc.noteAppend(err, len(frame))
	if err != nil {
		rc.index.Forget(keys, dup)
		return 0, 0, 0, err
	}
	return end, len(keys) - ndup, ndup, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// relayMetrics are the aggregator's metrics of its agents.
type relayMetrics struct {
	requests *prometheus.CounterVec
	frames   *prometheus.CounterVec
}

func newRelayMetrics(agents []RelayAgent) *relayMetrics {
	m := &relayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AggregatorRequestsTotal,
			Help: "Agents' requests (frames or a heartbeat) by agent (\"unknown\" until established) and HTTP status code.",
		}, []string{metrics.LabelAgent, metrics.LabelCode}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AggregatorFramesTotal,
			Help: "Agents' spool frames by agent and result: accepted (stored), or duplicate (stored before: a resend).",
		}, []string{metrics.LabelAgent, metrics.LabelResult}),
	}
	for _, a := range agents {
		m.frames.WithLabelValues(a.Name, metrics.ResultAccepted)
		m.frames.WithLabelValues(a.Name, metrics.ResultDuplicate)
	}
	return m
}

var (
	descAgentLag     = prometheus.NewDesc(metrics.AggregatorAgentLagSeconds, "How much older the newest frame stored from the agent is than the agent's newest batch (0 once its head is stored; -1 while not known: not heard from, or nothing of it stored).", []string{metrics.LabelAgent}, nil)
	descAgentLagB    = prometheus.NewDesc(metrics.AggregatorAgentLagBytes, "The agent's spool not stored here, as the agent last said.", []string{metrics.LabelAgent}, nil)
	descAgentHeard   = prometheus.NewDesc(metrics.AggregatorAgentLastHeardTimestampSeconds, "Unix time of the agent's last request (0: not since this aggregator started).", []string{metrics.LabelAgent}, nil)
	descAgentSkipped = prometheus.NewDesc(metrics.AggregatorAgentSkippedEvents, "Audit events the agent says it gave up for an aggregator that stayed away longer than its spool could hold, since its data directory was made.", []string{metrics.LabelAgent, metrics.LabelAggregator}, nil)
)

// agentCollector exports each agent's status.
type agentCollector struct{ rc *Receiver }

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAgentLag, descAgentLagB, descAgentHeard, descAgentSkipped} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.rc.Agents() {
		ch <- prometheus.MustNewConstMetric(descAgentLag, prometheus.GaugeValue, s.LagSeconds, s.Name)
		ch <- prometheus.MustNewConstMetric(descAgentLagB, prometheus.GaugeValue, float64(s.LagBytes), s.Name)
		heard := 0.0
		if !s.Heard.IsZero() {
			heard = float64(s.Heard.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(descAgentHeard, prometheus.GaugeValue, heard, s.Name)
		for _, a := range s.Aggregators {
			ch <- prometheus.MustNewConstMetric(descAgentSkipped, prometheus.GaugeValue, float64(a.Skipped.Events), s.Name, a.Name)
		}
	}
}
