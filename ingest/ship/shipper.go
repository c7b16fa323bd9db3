package ship

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/fsutil"
	"github.com/peertrail/peertrail/metrics"
)

// ConsumerName is the spool consumer name of the Shipper to aggregator: its committed position
// is how far that aggregator has acknowledged the agent's spool, across restarts, and the spool
// keeps a segment until every aggregator's shipper has passed it.
func ConsumerName(aggregator string) string { return "ship-" + aggregator }

// Aggregator is where a Shipper posts.
type Aggregator struct {
	// Name is the aggregator's name (NameRE): its consumer and its label value.
	Name string
	// URL is the aggregator's base URL (https://host:port); requests go to URL + Path.
	URL string
	// Client carries the agent's credential (client certificate or a bearer token transport)
	// and verifies the aggregator. Its Timeout bounds each request.
	Client *http.Client
}

// FleetOptions configure a Fleet.
type FleetOptions struct {
	// Spool is the agent's spool; every aggregator's ConsumerName must be among its consumers.
	Spool *spool.Spool
	// HeadTime returns when the newest batch the agent accepted was received (zero: none).
	HeadTime func() time.Time
	// SkipFile keeps what was given up for each aggregator across restarts ("" keeps it in
	// memory only).
	SkipFile string
	// MaxRequestBytes bounds the frames' payloads of one request (at least one frame goes
	// whatever its size); default 4 MiB.
	MaxRequestBytes int
	// GiveUpAt and KeepAt are fractions of the spool's size limit: when the spool holds GiveUpAt
	// of it and an aggregator's backlog is the largest (it holds the oldest segment), that
	// aggregator's oldest frames are given up until the spool would hold KeepAt. Defaults 0.9
	// and 0.8. The receiver refuses batches (503) only once the spool is full, so an aggregator
	// that stays away costs that aggregator its oldest frames, never the apiserver its audit
	// (run each Shipper with spool.RunOptions.RetrySooner set to its GivingUp, so that a backoff
	// does not outlast the spool's last tenth).
	GiveUpAt, KeepAt float64
	Log              *slog.Logger
}

// Fleet is an agent's shipping: a Shipper for each aggregator, and what each was given up. It
// is safe for concurrent use; each Shipper is run by one spool.Run.
type Fleet struct {
	opts     FleetOptions
	log      *slog.Logger
	m        *shipMetrics
	shippers []*Shipper

	mu    sync.Mutex
	skips map[string]Skipped
}

// NewFleet returns the shippers of aggs over o.Spool, reading what was given up from o.SkipFile.
func NewFleet(o FleetOptions, aggs []Aggregator) (*Fleet, error) {
	if o.Spool == nil {
		return nil, errors.New("ship: no spool")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 4 << 20
	}
	if o.GiveUpAt <= 0 || o.GiveUpAt > 1 {
		o.GiveUpAt = 0.9
	}
	if o.KeepAt <= 0 || o.KeepAt >= o.GiveUpAt {
		o.KeepAt = min(0.8, o.GiveUpAt*0.9)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.HeadTime == nil {
		o.HeadTime = func() time.Time { return time.Time{} }
	}
	f := &Fleet{opts: o, log: o.Log, skips: map[string]Skipped{}}
	if o.SkipFile != "" {
		b, err := os.ReadFile(o.SkipFile)
		switch {
		case err == nil:
			if err := json.Unmarshal(b, &f.skips); err != nil {
				f.log.Warn("ship: what was given up before is unreadable; counting afresh", "file", o.SkipFile, "err", err)
				f.skips = map[string]Skipped{}
			}
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("ship: read %s: %w", o.SkipFile, err)
		}
	}
	names := make([]string, 0, len(aggs))
	seen := map[string]bool{}
	for _, a := range aggs {
		switch {
		case !NameRE.MatchString(a.Name):
			return nil, fmt.Errorf("ship: aggregator name %q: lowercase letters, digits, '.' and '-', at most 63", a.Name)
		case seen[a.Name]:
			return nil, fmt.Errorf("ship: aggregator %q named twice", a.Name)
		case a.Client == nil:
			return nil, fmt.Errorf("ship: aggregator %q has no client", a.Name)
		}
		if _, err := o.Spool.Committed(ConsumerName(a.Name)); err != nil {
			return nil, fmt.Errorf("ship: aggregator %q: %w", a.Name, err)
		}
		seen[a.Name] = true
		names = append(names, a.Name)
	}
	f.m = newShipMetrics(names)
	for _, a := range aggs {
		s := &Shipper{f: f, agg: a, url: strings.TrimRight(a.URL, "/") + Path, consumer: ConsumerName(a.Name), log: f.log.With("aggregator", a.Name)}
		s.acked, _ = o.Spool.Committed(s.consumer)
		sk := f.skips[a.Name]
		f.m.skippedEvents.WithLabelValues(a.Name).Add(float64(sk.Events))
		f.m.skippedFrames.WithLabelValues(a.Name).Add(float64(sk.Frames))
		f.m.skippedBytes.WithLabelValues(a.Name).Add(float64(sk.Bytes))
		f.shippers = append(f.shippers, s)
	}
	return f, nil
}

// Shippers returns one Shipper per aggregator, in the order given to NewFleet.
func (f *Fleet) Shippers() []*Shipper { return f.shippers }

// Collectors returns the fleet's metrics, for registration.
func (f *Fleet) Collectors() []prometheus.Collector {
	return append(f.m.collectors(), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metrics.AgentSpoolGiveUpRatio,
		Help: "Share of the spool's size limit at which the agent gives up the oldest frames of the aggregator whose backlog holds the spool.",
	}, func() float64 { return f.opts.GiveUpAt }), backlogCollector{f})
}

// header is what the agent says about itself now.
func (f *Fleet) header() Header {
	st := f.opts.Spool.Stats()
	h := Header{Stream: f.opts.Spool.Identity(), Head: uint64(st.Durable), HeadTime: f.opts.HeadTime(), SentAt: time.Now(), SpoolMaxBytes: st.MaxBytes}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.shippers {
		h.Aggregators = append(h.Aggregators, AggregatorState{Name: s.agg.Name, BacklogBytes: st.Lag[s.consumer], LastSuccess: s.lastSuccess(), Skipped: f.skips[s.agg.Name]})
	}
	return h
}

// noteSkip adds what was given up for aggregator and keeps it in the skip file.
func (f *Fleet) noteSkip(aggregator string, frames, events, bytes uint64, from, to time.Time) {
	now := time.Now()
	f.mu.Lock()
	sk := f.skips[aggregator]
	if sk.Last.IsZero() || now.Sub(sk.Last) > time.Minute {
		// A new episode: the hole it leaves begins here.
		sk.From = from
	} else if from.Before(sk.From) {
		sk.From = from
	}
	if to.After(sk.To) || now.Sub(sk.Last) > time.Minute {
		sk.To = to
	}
	sk.Frames += frames
	sk.Events += events
	sk.Bytes += bytes
	sk.Last = now
	f.skips[aggregator] = sk
	var b []byte
	var err error
	if f.opts.SkipFile != "" {
		b, err = json.Marshal(f.skips)
	}
	f.mu.Unlock()
	f.m.skippedEvents.WithLabelValues(aggregator).Add(float64(events))
	f.m.skippedFrames.WithLabelValues(aggregator).Add(float64(frames))
	f.m.skippedBytes.WithLabelValues(aggregator).Add(float64(bytes))
	if err == nil && f.opts.SkipFile != "" {
		err = fsutil.WriteFileAtomic(f.opts.SkipFile, b)
	}
	if err != nil {
		f.log.Warn("ship: keeping what was given up", "file", f.opts.SkipFile, "err", err)
	}
}

// Shipper posts the agent's spool frames, in order, to one aggregator. It is the spool consumer
// ConsumerName(aggregator): the position it returns is the end of the last frame the aggregator
// acknowledged (answered 200: stored durably), so after a restart of either side shipping
// resumes there, and the aggregator recognises what it had already (by position, then by event
// identity). With no entries (the spool idle) it posts a heartbeat: the header alone, so that
// the aggregator knows the agent's head and that it is caught up. Consume is called by one
// spool.Run; the other methods are safe for concurrent use.
type Shipper struct {
	f        *Fleet
	agg      Aggregator
	url      string
	consumer string
	log      *slog.Logger

	// Consume's state: acked is the end of the last frame acknowledged (or given up),
	// skipTarget the bytes still to give up in this episode, buf the request being built.
	acked      spool.Position
	skipTarget int64
	skipDone   spool.Position // where the last episode ended
	buf        []byte
	frames     []Frame

	successMu sync.Mutex
	success   time.Time
}

// Name is the aggregator's name.
func (s *Shipper) Name() string { return s.agg.Name }

func (s *Shipper) lastSuccess() time.Time {
	s.successMu.Lock()
	defer s.successMu.Unlock()
	return s.success
}

// Consume implements spool.Consumer.
func (s *Shipper) Consume(ctx context.Context, entries []spool.Entry) (spool.Position, error) {
	if len(entries) == 0 {
		if err := s.post(ctx, nil); err != nil {
			s.log.Debug("ship: heartbeat failed", "err", err)
		}
		return s.acked, nil
	}
	// What an earlier try of these entries had acknowledged before it failed.
	for len(entries) > 0 && entries[0].End <= s.acked {
		entries = entries[1:]
	}
	if len(entries) > 0 && s.giveUp(entries) {
		// Returned as done, so that the spool commits past them and frees their segments
		// (a failed Consume commits nothing).
		return s.acked, nil
	}
	for len(entries) > 0 {
		n, size := 0, 0
		for n < len(entries) && (n == 0 || size+len(entries[n].Payload) <= s.f.opts.MaxRequestBytes) {
			size += len(entries[n].Payload)
			n++
		}
		if err := s.post(ctx, entries[:n]); err != nil {
			return s.acked, err
		}
		s.acked = entries[n-1].End
		entries = entries[n:]
	}
	return s.acked, nil
}

// Heartbeat posts the header alone, as Consume does when the spool is idle. It must not be
// called while the Shipper runs (it uses Consume's memory).
func (s *Shipper) Heartbeat(ctx context.Context) error { return s.post(ctx, nil) }

// giveUp gives up entries, all of them, when the spool holds GiveUpAt of its limit and this
// aggregator's backlog is the largest (so that the oldest segments are held for it), and goes on
// doing so, call after call, until what it gave up would bring the spool down to KeepAt; it
// reports whether it did. (All of a call's entries or none: Consume either passes them all, or
// fails and gets them all again.) Each episode is logged once, counted and kept
// (Fleet.noteSkip), and told to every aggregator in each request's header.
func (s *Shipper) giveUp(entries []spool.Entry) bool {
	if s.skipTarget <= 0 {
		st, ok := s.mustGiveUp()
		if !ok {
			return false
		}
		s.skipTarget = st.Bytes - int64(s.f.opts.KeepAt*float64(st.MaxBytes))
		s.log.Error("ship: giving up the oldest frames of an aggregator that does not take them: the spool is nearly full and this aggregator's backlog holds it; it will lack them",
			"spool_bytes", st.Bytes, "spool_max_bytes", st.MaxBytes, "backlog_bytes", st.Lag[s.consumer], "giving_up_bytes", s.skipTarget)
	}
	var frames, events, size uint64
	var from, to time.Time
	for _, e := range entries {
		frames++
		size += uint64(e.End - e.Pos)
		s.skipTarget -= int64(e.End - e.Pos)
		h, err := record.ParseHeader(e.Payload)
		if err != nil {
			continue
		}
		events += uint64(len(h.Keys))
		if from.IsZero() || h.ReceivedAt.Before(from) {
			from = h.ReceivedAt
		}
		if h.ReceivedAt.After(to) {
			to = h.ReceivedAt
		}
	}
	s.acked = entries[len(entries)-1].End
	if s.skipTarget <= 0 {
		s.skipTarget, s.skipDone = 0, s.acked
	}
	s.f.noteSkip(s.agg.Name, frames, events, size, from, to)
	return true
}

// mustGiveUp reports whether an episode of giving up starts now: the spool holds GiveUpAt of its
// limit and this aggregator's backlog is the largest.
func (s *Shipper) mustGiveUp() (spool.Stats, bool) {
	if c, err := s.f.opts.Spool.Committed(s.consumer); err == nil && c < s.skipDone {
		return spool.Stats{}, false // the last episode's frames are not yet committed as passed: the spool still counts them
	}
	st := s.f.opts.Spool.Stats()
	if float64(st.Bytes) < s.f.opts.GiveUpAt*float64(st.MaxBytes) {
		return st, false
	}
	mine := st.Lag[s.consumer]
	for name, lag := range st.Lag {
		if name != s.consumer && lag > mine {
			return st, false // another consumer holds the oldest data: it gives up first
		}
	}
	return st, true
}

// GivingUp reports whether the next Consume with entries would give them up rather than post
// them: the Shipper's spool.RunOptions.RetrySooner, so that a backoff after a failed post never
// lets the spool fill (and the receiver refuse its apiserver) while the frames to give up are
// this aggregator's. Called from the goroutine that runs Consume.
func (s *Shipper) GivingUp() bool {
	if s.skipTarget > 0 {
		return true
	}
	_, ok := s.mustGiveUp()
	return ok
}

// post sends entries (none: a heartbeat) in one request and returns nil once the aggregator
// answered 200.
func (s *Shipper) post(ctx context.Context, entries []spool.Entry) error {
	s.frames = s.frames[:0]
	events := 0
	for _, e := range entries {
		s.frames = append(s.frames, Frame{Pos: uint64(e.Pos), End: uint64(e.End), Payload: e.Payload})
		if h, err := record.ParseHeader(e.Payload); err == nil {
			events += len(h.Keys)
		}
	}
	var err error
	s.buf, err = AppendRequest(s.buf[:0], s.f.header(), s.frames)
	if err != nil {
		return err
	}
	defer func() {
		if cap(s.buf) > 2*s.f.opts.MaxRequestBytes+MaxHeaderBytes {
			s.buf = nil
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(s.buf))
	if err != nil {
		return fmt.Errorf("ship: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	start := time.Now()
	resp, err := s.agg.Client.Do(req)
	s.f.m.duration.WithLabelValues(s.agg.Name).Observe(time.Since(start).Seconds())
	if err != nil {
		s.f.m.requests.WithLabelValues(s.agg.Name, "error").Inc()
		return fmt.Errorf("ship: post to %s: %w", s.agg.Name, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	s.f.m.requests.WithLabelValues(s.agg.Name, strconv.Itoa(resp.StatusCode)).Inc()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ship: aggregator %s answered %d: %s", s.agg.Name, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	now := time.Now()
	s.successMu.Lock()
	s.success = now
	s.successMu.Unlock()
	s.f.m.lastSuccess.WithLabelValues(s.agg.Name).Set(float64(now.UnixNano()) / 1e9)
	if len(entries) > 0 {
		s.f.m.frames.WithLabelValues(s.agg.Name).Add(float64(len(entries)))
		s.f.m.events.WithLabelValues(s.agg.Name).Add(float64(events))
		s.f.m.bytes.WithLabelValues(s.agg.Name).Add(float64(len(s.buf)))
	}
	return nil
}

var _ spool.Consumer = (*Shipper)(nil)

type shipMetrics struct {
	requests                                   *prometheus.CounterVec
	frames, events, bytes                      *prometheus.CounterVec
	skippedFrames, skippedEvents, skippedBytes *prometheus.CounterVec
	lastSuccess                                *prometheus.GaugeVec
	duration                                   *prometheus.HistogramVec
}

func newShipMetrics(aggregators []string) *shipMetrics {
	lbl := []string{metrics.LabelAggregator}
	m := &shipMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipRequestsTotal,
			Help: "Requests the agent posted to each aggregator (frames or a heartbeat), by the HTTP status of the answer (\"error\": none came).",
		}, []string{metrics.LabelAggregator, metrics.LabelCode}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipFramesTotal, Help: "Spool frames (webhook batches) each aggregator acknowledged.",
		}, lbl),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipEventsTotal, Help: "Audit events in the frames each aggregator acknowledged.",
		}, lbl),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipBytesTotal, Help: "Request bytes each aggregator acknowledged.",
		}, lbl),
		skippedFrames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipSkippedFramesTotal, Help: "Spool frames given up for an aggregator: the spool was nearly full and that aggregator's backlog held it (counted since the data directory was made).",
		}, lbl),
		skippedEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipSkippedEventsTotal, Help: "Audit events given up for an aggregator (see " + metrics.AgentShipSkippedFramesTotal + "): that aggregator's store lacks them.",
		}, lbl),
		skippedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.AgentShipSkippedBytesTotal, Help: "Spool bytes given up for an aggregator.",
		}, lbl),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metrics.AgentShipLastSuccessTimestampSeconds, Help: "Unix time each aggregator last acknowledged a request of the agent.",
		}, lbl),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    metrics.AgentShipDurationSeconds,
			Help:    "Time of one request to an aggregator, until its answer (the aggregator fsyncs the frames first).",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, lbl),
	}
	// Every aggregator's series exist from the start, at 0, so that increase() sees the first
	// frame given up.
	for _, a := range aggregators {
		for _, v := range []*prometheus.CounterVec{m.frames, m.events, m.bytes, m.skippedFrames, m.skippedEvents, m.skippedBytes} {
			v.WithLabelValues(a)
		}
	}
	return m
}

func (m *shipMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.frames, m.events, m.bytes, m.skippedFrames, m.skippedEvents, m.skippedBytes, m.lastSuccess, m.duration}
}

var descBacklog = prometheus.NewDesc(metrics.AgentShipBacklogBytes,
	"Spool bytes an aggregator has not acknowledged. Past the give-up share of the spool's limit, the largest backlog's oldest frames are given up.",
	[]string{metrics.LabelAggregator}, nil)

// backlogCollector exports each aggregator's backlog from the spool's consumer positions.
type backlogCollector struct{ f *Fleet }

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descBacklog }

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.f.opts.Spool.Stats()
	for _, s := range c.f.shippers {
		ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(st.Lag[s.consumer]), s.agg.Name)
	}
}
