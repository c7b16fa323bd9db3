// Package server assembles peertrail's long-running processes: the spool and its consumers, the
// audit webhook receiver, and the HTTP(S) endpoint that serves the webhook, health, metrics
// and APIs. It owns their lifecycle: open in data-flow order, close in reverse.
//
// One process (New, peertrail serve) receives, correlates and stores; with agents configured it
// is also an aggregator of the HA layout, taking agents' frames beside (or instead of) the
// apiservers' webhooks. An agent (NewAgent, peertrail agent) receives its node's apiserver's
// webhook into its own spool, exactly as serve does, and relays the spool to every aggregator,
// with no correlator, store or gate.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/peertrail/peertrail/chainapi"
	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/correlate"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/ingest/dedup"
	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/ingest/ship"
	"github.com/peertrail/peertrail/ingest/spool"
	"github.com/peertrail/peertrail/internal/pageout"
	"github.com/peertrail/peertrail/internal/version"
	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store"
)

// Server is a running peertrail.
type Server struct {
	cfg      config.File
	log      *slog.Logger
	registry *prometheus.Registry

	spool      *spool.Spool
	codec      *record.Codec
	receiver   *ingest.Receiver
	auth       *ingest.Authenticator
	correlator *correlate.Correlator
	gate       *gate.Gate
	store      store.Store
	writer     *store.Writer
	sqlHTTP    *http.Server
	sqlLn      net.Listener
	http       *http.Server
	listener   net.Listener
	scheme     string
	// apiHTTP and apiListener serve --api-listen; nil when the API shares the webhook's listener.
	apiHTTP     *http.Server
	apiListener net.Listener

	cancel    context.CancelFunc
	consumers sync.WaitGroup
	errc      chan error
	budget    Budget

	// agent says this is peertrail agent: it relays its spool with fleet, and has no
	// correlator, store or gate.
	agent bool
	fleet *ship.Fleet
}

// WarnNoAPIServerAuth is the warning New logs when no apiserver has to authenticate (no
// client CA, no apiserver token); the demo, whose apiservers have no credentials on purpose,
// leaves it out.
const WarnNoAPIServerAuth = "no client CA and no apiserver token configured: any client that reaches the listener can post audit events as any apiserver"

// New opens the data directory and prepares everything of peertrail serve; Run serves.
func New(ctx context.Context, cfg config.File, log *slog.Logger) (*Server, error) {
	return newServer(ctx, cfg, log, false)
}

// NewAgent opens the data directory and prepares peertrail agent: the webhook receiver, its
// spool, duplicate index and dead letters as New makes them, and a ship.Shipper per aggregator
// of cfg.Relay; Run serves. It has no correlator, store, gate or SQL interface.
func NewAgent(ctx context.Context, cfg config.File, log *slog.Logger) (*Server, error) {
	if err := cfg.ValidateRelay(); err != nil {
		return nil, err
	}
	cfg.Store.Engine, cfg.Store.SQLListen = "none", ""
	return newServer(ctx, cfg, log, true)
}

func newServer(ctx context.Context, cfg config.File, log *slog.Logger, agent bool) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, registry: prometheus.NewRegistry(), errc: make(chan error, 4), agent: agent}
	defer func() {
		if err != nil {
			s.closeStores()
		}
	}()
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector())

	s.budget = MemoryBudget(cfg)
	applyGoLimit(s.budget, log)

	policy, err := spool.ParseSyncPolicy(cfg.Spool.Fsync)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	s.spool, err = spool.Open(spool.Options{
		Dir:          filepath.Join(cfg.DataDir, "spool"),
		SegmentBytes: int64(cfg.Spool.SegmentBytes),
		MaxBytes:     int64(cfg.Spool.MaxBytes),
		Sync:         policy,
		SyncInterval: time.Duration(cfg.Spool.FsyncPeriod),
		Consumers:    consumers(cfg, agent),
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	s.registry.MustRegister(s.spool.Collector())

	started := time.Now()
	horizon := time.Duration(cfg.Spool.DedupHorizon)
	keysDir := filepath.Join(cfg.DataDir, "dedup")
	index, fromFiles, fromSpool, err := dedup.Load(ctx, log, keysDir, horizon, s.spool, time.Now())
	if err != nil {
		return nil, err
	}
	log.Info("duplicate index rebuilt", "keys", index.Len(), "from_files", fromFiles, "from_spool", fromSpool, "took", time.Since(started).Round(time.Millisecond))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metrics.DedupKeys, Help: "Event keys remembered for duplicate detection.",
	}, func() float64 { return float64(index.Len()) }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metrics.DedupMemoryBytes, Help: "Estimated bytes the duplicate index holds in memory (a sealed minute about 3 bytes a key, the rest in a file; a minute still written about 31).",
	}, func() float64 { return float64(index.Bytes()) }))
	s.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: metrics.DedupFileErrorsTotal, Help: "Failed writes (the minute stays in memory) and reads (the event is taken as new) of the duplicate index's spilled minutes.",
	}, func() float64 { return float64(index.FileErrors()) }))

	dead, err := ingest.OpenDeadLetters(filepath.Join(cfg.DataDir, "deadletter"), int64(cfg.Limits.MaxDeadLetterBytes), policy == spool.SyncAlways)
	if err != nil {
		return nil, err
	}
	if s.codec, err = record.NewCodec(); err != nil {
		return nil, err
	}

	opts, err := receiverOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if len(cfg.Agents) > 0 {
		opts.AgentStateDir = filepath.Join(cfg.DataDir, "agents")
	}
	s.auth = opts.Auth
	if len(cfg.Agents) > 0 && !opts.RequireAuth {
		// An aggregator whose apiservers have no credential here: their webhooks post to the
		// agents, and nobody may post here as an apiserver.
		opts.RelayOnly = true
		log.Info("no apiserver credential configured: the webhook refuses every post; audit comes from the agents only")
	} else if !opts.RequireAuth {
		log.Warn(WarnNoAPIServerAuth)
	}
	if !s.auth.HasReaderCredentials() {
		log.Warn("no reader credential configured: /metrics, the chain, apiserver and gate APIs and pprof refuse every request; give --reader-token-file or --reader-client-ca-file to read them")
	}
	s.receiver = ingest.NewReceiver(opts, s.spool, index, s.codec, dead, log)
	s.registry.MustRegister(s.receiver.Collectors()...)

	if agent {
		return s.startAgent(index, keysDir, horizon)
	}

	var emb *store.Embedded
	if s.store, emb, err = s.openStore(ctx, cfg); err != nil {
		return nil, err
	}
	if s.store != nil {
		s.writer = store.NewWriter(s.store, s.codec, store.WriterOptions{Logger: log, Deduplicate: cfg.Store.Deduplicate,
			FlushInterval: cfg.StoreFlushInterval(), FlushBytes: int(cfg.Store.FlushBytes), Spool: s.spool})
		s.registry.MustRegister(s.writer.Collectors()...)
	}
	if emb != nil {
		s.registry.MustRegister(store.NewEngineCollector(emb, log))
	}
	if s.sqlHTTP, s.sqlLn, err = s.sqlServer(ctx, cfg, emb); err != nil {
		return nil, err
	}
	if emb != nil {
		// The engine's one-time work (loading, the schema, the SQL front's sessions) ran code
		// of its library that the steady state does not (BENCHMARKS.md, "An eighth session").
		if err := emb.Engine().ReleaseLibraryPages(); err != nil {
			log.Debug("engine library pages stay resident", "err", err)
		}
	}
	// So did peertrail's own start (the commands, the configuration, the Kubernetes types'
	// registration, the schema): its binary's pages are paged out once too.
	if exe, err := os.Executable(); err == nil {
		if err := pageout.Release(exe); err != nil {
			log.Debug("peertrail's binary pages stay resident", "err", err)
		}
	}
	if err := s.newCorrelator(ctx, cfg); err != nil {
		return nil, err
	}

	s.newGate(cfg, started)

	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	persister := &dedup.Persister{Dir: keysDir, Horizon: horizon, Log: log}
	s.runConsumer(bg, dedup.ConsumerName, persister)
	s.runConsumer(bg, correlate.ConsumerName, s.correlator)
	if s.writer != nil {
		s.runConsumer(bg, storeConsumer, s.writer)
	}
	s.expireLoop(bg, index)
	if len(cfg.Agents) > 0 {
		s.consumers.Go(func() {
			// Where each agent's stored frames end, so that a resend after a restart is
			// recognised by its position.
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-bg.Done():
					return
				case <-t.C:
					if err := s.receiver.SaveAgents(); err != nil {
						log.Warn("saving agents' positions", "err", err)
					}
				}
			}
		})
	}

	if err := s.listen(); err != nil {
		cancel()
		s.consumers.Wait()
		return nil, err
	}
	return s, nil
}

// expireLoop lets the duplicate index forget and seal its minutes until ctx ends.
func (s *Server) expireLoop(ctx context.Context, index *dedup.Index) {
	s.consumers.Go(func() {
		// Often enough that a finished minute leaves its map (31 bytes a key) for a sorted run
		// (17) soon after the clock leaves it.
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				index.Expire(now)
			}
		}
	})
}

// startAgent starts peertrail agent's consumers (the duplicate index's persister and a shipper
// per aggregator) and its listeners.
func (s *Server) startAgent(index *dedup.Index, keysDir string, horizon time.Duration) (*Server, error) {
	aggs := make([]ship.Aggregator, 0, len(s.cfg.Relay.Aggregators))
	client, err := relayClient(s.cfg.Relay)
	if err != nil {
		return nil, err
	}
	for _, a := range s.cfg.Relay.Aggregators {
		aggs = append(aggs, ship.Aggregator{Name: a.Name, URL: a.URL, Client: client})
	}
	s.fleet, err = ship.NewFleet(ship.FleetOptions{
		Spool: s.spool, HeadTime: s.newestBatch, SkipFile: filepath.Join(s.cfg.DataDir, "ship-skipped.json"),
		MaxRequestBytes: int(s.cfg.Relay.MaxRequestBytes), GiveUpAt: s.cfg.Relay.GiveUpAt, Log: s.log,
	}, aggs)
	if err != nil {
		return nil, err
	}
	s.registry.MustRegister(s.fleet.Collectors()...)
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.runConsumer(bg, dedup.ConsumerName, &dedup.Persister{Dir: keysDir, Horizon: horizon, Log: s.log})
	for _, sh := range s.fleet.Shippers() {
		// A refused connection costs nothing to try again: an aggregator that comes back gets
		// the backlog within two seconds, not after a backoff grown to half a minute.
		// Within a backoff it is retried as soon as it would give up frames for a full spool.
		s.runConsumerWith(bg, ship.ConsumerName(sh.Name()), sh, spool.RunOptions{RetryMax: 2 * time.Second, RetrySooner: sh.GivingUp})
	}
	s.expireLoop(bg, index)
	if err := s.listen(); err != nil {
		cancel()
		s.consumers.Wait()
		return nil, err
	}
	return s, nil
}

// newestBatch is when the newest batch the receiver accepted was received (zero: none yet).
func (s *Server) newestBatch() time.Time {
	var newest time.Time
	for _, t := range s.receiver.LastBatches() {
		if t.After(newest) {
			newest = t
		}
	}
	return newest
}

func (s *Server) newCorrelator(ctx context.Context, cfg config.File) error {
	caps := correlate.NewCapabilities(time.Duration(cfg.Correlate.CapabilityHorizon))
	for _, a := range cfg.APIServers {
		caps.NoteServer(a.Name, a.Version, a.Address, time.Time{})
	}
	var tracer *correlate.Tracer
	// --otlp-endpoint, or the standard OTEL_EXPORTER_OTLP_* environment.
	if correlate.TracingConfigured(cfg.Tracing.OTLPEndpoint) {
		var err error
		if tracer, err = correlate.NewTracer(ctx, cfg.Tracing.OTLPEndpoint); err != nil {
			return err
		}
	}
	opts := correlate.DefaultJoinOptions()
	opts.Window = time.Duration(cfg.Correlate.ChainWindow)
	opts.LateWindow = time.Duration(cfg.Correlate.LateWindow)
	opts.MaxOpen = cfg.Correlate.MaxOpenChains
	ccfg := correlate.Config{
		Join: opts, Codec: s.codec, Caps: caps, Tracer: tracer, Log: s.log, FlushEvery: cfg.StoreFlushInterval(),
		StateFile: filepath.Join(cfg.DataDir, "correlate", "capabilities.json"), SpoolEnd: s.spool.Written(),
	}
	if s.writer != nil {
		ccfg.Sink = s.writer
	}
	s.correlator = correlate.New(ccfg)
	s.registry.MustRegister(s.correlator.Collectors()...)
	return nil
}

func (s *Server) newGate(cfg config.File, started time.Time) {
	expected := make([]string, len(cfg.APIServers))
	for i, a := range cfg.APIServers {
		expected[i] = a.Name
	}
	g := cfg.Gate
	var agents func() []gate.Agent
	var streamTime func() time.Time
	if len(cfg.Agents) > 0 {
		agents, streamTime = func() []gate.Agent { return gateAgents(s.receiver.Agents()) }, s.correlator.StreamTime
	}
	s.gate = gate.New(gate.Thresholds{
		Window: time.Duration(g.Window), MaxProxied5xxRatio: g.MaxProxied5xxRatio, MinForwarded: g.MinForwarded,
		MaxMisleading404: g.MaxMisleading404, MaxBroken: g.MaxBroken, MaxIdentityMismatch: g.MaxIdentityMismatch,
		MaxIngestGap: time.Duration(g.MaxIngestGap), MaxMinorSkew: g.MaxMinorSkew, ForgetAfter: time.Duration(g.ForgetAfter),
		MaxEntryStarting: time.Duration(g.MaxEntryStarting), MaxPeerDown: time.Duration(g.MaxPeerDown),
		MaxAgentLag: time.Duration(g.MaxAgentLag), MaxAgentSilence: time.Duration(g.MaxAgentSilence),
	}, gate.Sources{
		Recent:       s.correlator.Recent,
		APIServers:   s.correlator.Capabilities().Servers,
		LastBatches:  s.receiver.LastBatches,
		FirstBatches: s.receiver.FirstBatches,
		Expected:     expected,
		Started:      started,
		Agents:       agents,
		StreamTime:   streamTime,
	}, s.log)
	s.registry.MustRegister(s.gate.Collector())
}

func (s *Server) runConsumer(ctx context.Context, name string, c spool.Consumer) {
	s.runConsumerWith(ctx, name, c, spool.RunOptions{})
}

func (s *Server) runConsumerWith(ctx context.Context, name string, c spool.Consumer, opts spool.RunOptions) {
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name:        metrics.SpoolConsumerErrorsTotal,
		Help:        "Failed deliveries to a spool consumer (each is retried with backoff).",
		ConstLabels: prometheus.Labels{metrics.LabelConsumer: name},
	})
	s.registry.MustRegister(failures)
	s.consumers.Go(func() {
		opts.OnError = func(error) { failures.Inc() }
		if err := s.spool.Run(ctx, name, c, opts); err != nil {
			s.errc <- fmt.Errorf("consumer %s: %w", name, err)
		}
	})
}

// receiverOptions turns the configuration into the receiver's options and the authenticator
// that tells apiservers (client CA, per-apiserver tokens) from readers (reader CA, reader
// tokens).
func receiverOptions(cfg config.File, log *slog.Logger) (ingest.Options, error) {
	o := ingest.Options{
		AcceptUnknown:        cfg.AcceptUnknownAPIServers,
		MaxBodyBytes:         int64(cfg.Limits.MaxBodyBytes),
		MaxBatchItems:        cfg.Limits.MaxBatchItems,
		MaxUnknownAPIServers: cfg.Limits.MaxUnknownAPIServers,
		MaxInflight:          cfg.Limits.MaxInflight,
		MaxInflightPerSender: cfg.Limits.MaxInflightPerAPIServer,
		MaxReadingBytes:      int64(cfg.Limits.MaxReadingBytes),
		ReadTimeout:          time.Duration(cfg.Limits.ReadTimeout),
	}
	redaction, rerr := record.NewRedaction(cfg.RedactResources...)
	if rerr != nil {
		return o, fmt.Errorf("redactResources: %w", rerr)
	}
	o.Redaction = redaction
	ao := ingest.AuthOptions{CertSubjects: map[string]string{}}
	oneToken := func(path, whose string) (string, error) {
		toks, err := ingest.ReadTokenFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", whose, err)
		}
		if len(toks) != 1 {
			return "", fmt.Errorf("%s: token file %s holds %d tokens, want one", whose, path, len(toks))
		}
		return toks[0], nil
	}
	ao.AgentSubjects = map[string]string{}
	for _, a := range cfg.Agents {
		o.Agents = append(o.Agents, ingest.RelayAgent{Name: a.Name, APIServers: a.APIServers})
		if a.CertSubject != "" {
			ao.AgentSubjects[a.CertSubject] = a.Name
		}
		if a.TokenFile != "" {
			tok, err := oneToken(a.TokenFile, "agent "+a.Name)
			if err != nil {
				return o, err
			}
			ao.AgentTokens = append(ao.AgentTokens, ingest.AgentToken{Agent: a.Name, Token: tok})
		}
	}
	for _, a := range cfg.APIServers {
		o.APIServers = append(o.APIServers, a.Name)
		if a.CertSubject != "" {
			ao.CertSubjects[a.CertSubject] = a.Name
		}
		if a.TokenFile != "" {
			tok, err := oneToken(a.TokenFile, "apiserver "+a.Name)
			if err != nil {
				return o, err
			}
			ao.SenderTokens = append(ao.SenderTokens, ingest.NamedToken{APIServer: a.Name, Token: tok})
		}
	}
	if cfg.TLS.TokenFile != "" {
		// Validate allows it with exactly one apiserver only: then it can name no other.
		name := cfg.APIServers[0].Name
		tok, err := oneToken(cfg.TLS.TokenFile, "--token-file")
		if err != nil {
			return o, err
		}
		ao.SenderTokens = append(ao.SenderTokens, ingest.NamedToken{APIServer: name, Token: tok})
		log.Warn("DEPRECATED: --token-file (tls.tokenFile) is one token shared by every sender; it is taken as apiserver "+name+"'s token "+
			"because it is the only apiserver configured, and will be refused as soon as another is added: use apiservers[].tokenFile", "apiserver", name)
	}
	var err error
	if cfg.TLS.ClientCAFile != "" {
		if ao.SenderCAs, err = ingest.LoadCAs(cfg.TLS.ClientCAFile); err != nil {
			return o, fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if cfg.Readers.ClientCAFile != "" {
		if ao.ReaderCAs, err = ingest.LoadCAs(cfg.Readers.ClientCAFile); err != nil {
			return o, fmt.Errorf("--reader-client-ca-file: %w", err)
		}
	}
	if cfg.Readers.TokenFile != "" {
		if ao.ReaderTokens, err = ingest.ReadTokenFile(cfg.Readers.TokenFile); err != nil {
			return o, fmt.Errorf("--reader-token-file: %w", err)
		}
	}
	if o.Auth, err = ingest.NewAuthenticator(ao); err != nil {
		return o, err
	}
	o.RequireAuth = o.Auth.HasSenderCredentials()
	if o.RequireAuth {
		// Once any credential is required, one without a certSubject or a token can never post.
		token := map[string]bool{}
		for _, t := range ao.SenderTokens {
			token[t.APIServer] = true
		}
		for _, a := range cfg.APIServers {
			if a.CertSubject == "" && !token[a.Name] {
				log.Warn("apiserver has neither certSubject nor tokenFile: every batch it posts will be refused (401/403)", "apiserver", a.Name)
			}
		}
	}
	return o, nil
}

func (s *Server) listen() error {
	mux := http.NewServeMux()
	s.receiver.Register(mux)
	s.healthRoutes(mux)
	api := mux
	if s.cfg.APIListen != "" {
		api = http.NewServeMux()
		s.healthRoutes(api)
	}
	s.apiRoutes(api)
	s.http = s.newHTTPServer(mux)
	var err error
	if s.listener, s.scheme, err = s.bind(s.http, s.cfg.Listen, "--listen"); err != nil {
		return err
	}
	if s.cfg.APIListen != "" {
		s.apiHTTP = s.newHTTPServer(api)
		if s.apiListener, _, err = s.bind(s.apiHTTP, s.cfg.APIListen, "--api-listen"); err != nil {
			s.listener.Close()
			return err
		}
	}
	return nil
}

// apiRoutes are what people and Prometheus read: metrics, the chain and gate APIs, pprof (an
// agent: metrics and pprof). Only reader credentials reach them (ingest.Authenticator.Readers):
// whatever is under /api/, /metrics and /debug/pprof/ is refused to anyone else, routes added
// later included.
func (s *Server) apiRoutes(outer *http.ServeMux) {
	mux := http.NewServeMux()
	readers := s.auth.Readers(mux)
	outer.Handle("/api/", readers)
	outer.Handle("/metrics", readers)
	outer.Handle("/debug/pprof/", readers)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	if s.cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if s.agent {
		return
	}
	if len(s.cfg.Agents) > 0 {
		mux.HandleFunc("GET /api/v1/agents", s.agentsAPI)
	}
	var stored chainapi.Stores
	if s.store != nil {
		stored = chainapi.Stores{Chains: store.ReadChains(s.store), Chain: store.ReadChain(s.store), List: store.ListChains(s.store), Records: store.ReadRecords(s.store),
			History: store.CapabilityHistory(s.store)}
	}
	chainapi.New(s.correlator, s.correlator.Capabilities(), stored).Register(mux)
	s.gate.Register(mux)
}

// agentsAPI is GET /api/v1/agents: what this aggregator knows of each agent, and whether it is
// caught up with them (the gate's check agents_caught_up).
func (s *Server) agentsAPI(w http.ResponseWriter, _ *http.Request) {
	v := s.gate.Evaluate()
	out := struct {
		CaughtUp bool                 `json:"caught_up"`
		Detail   string               `json:"detail"`
		Agents   []ingest.AgentStatus `json:"agents"`
	}{Agents: s.receiver.Agents()}
	for _, c := range v.Checks {
		if c.Name == metrics.CheckAgentsCaughtUp {
			out.CaughtUp, out.Detail = c.OK, c.Detail
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// healthRoutes are the probes, on every listener.
func (s *Server) healthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.receiver.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Headers are small (a bearer token at most); the default of 1 MiB per connection would
		// let idle connections hold memory.
		MaxHeaderBytes: 64 << 10,
		IdleTimeout:    2 * time.Minute,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// bind listens on addr (named by flag in errors) for srv: plain HTTP on loopback with
// --insecure-http, TLS with the serving certificate otherwise.
func (s *Server) bind(srv *http.Server, addr, flag string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	if s.cfg.InsecureHTTP {
		if !isLoopback(ln.Addr()) {
			ln.Close()
			return nil, "", fmt.Errorf("--insecure-http serves plain HTTP on loopback only, and %s %s is not loopback (use e.g. 127.0.0.1:8443, or configure TLS)", flag, addr)
		}
		return ln, "http", nil
	}
	tc, err := ingest.ServerTLS(s.cfg.TLS.CertFile, s.cfg.TLS.KeyFile, s.cfg.TLS.ClientCAFile, s.cfg.Readers.ClientCAFile)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	// The server's TLSConfig is the listener's, so that net/http's HTTP/2 setup applies to it.
	srv.TLSConfig = tc
	return tls.NewListener(ln, tc), "https", nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// URL is the base URL of the webhook listener (--listen).
func (s *Server) URL() string {
	return s.scheme + "://" + s.listener.Addr().String()
}

// APIURL is the base URL of /metrics and the APIs: --api-listen's, or URL when it is not set.
func (s *Server) APIURL() string {
	if s.apiListener == nil {
		return s.URL()
	}
	return s.scheme + "://" + s.apiListener.Addr().String()
}

// SQLURL is the base URL of the embedded store's ClickHouse HTTP interface ("" when off).
func (s *Server) SQLURL() string {
	if s.sqlLn == nil {
		return ""
	}
	if sqlTLS(s.cfg) {
		return "https://" + s.sqlLn.Addr().String()
	}
	return "http://" + s.sqlLn.Addr().String()
}

// consumers are the spool consumers the configuration runs; the spool keeps segments until
// every one of them has passed. An agent's are the duplicate index's and one per aggregator.
func consumers(cfg config.File, agent bool) []string {
	if agent {
		c := []string{dedup.ConsumerName}
		for _, a := range cfg.Relay.Aggregators {
			c = append(c, ship.ConsumerName(a.Name))
		}
		return c
	}
	c := []string{dedup.ConsumerName, correlate.ConsumerName}
	if cfg.Store.Engine != "none" {
		c = append(c, storeConsumer)
	}
	return c
}

// Agents is what the server knows of each configured agent (the HA layout's aggregator).
// Safe for concurrent use.
func (s *Server) Agents() []ingest.AgentStatus { return s.receiver.Agents() }

// Store is the server's store (nil with engine "none").
func (s *Server) Store() store.Store { return s.store }

// Registry is the server's metrics registry, for the components added by later stages.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Run serves until ctx ends or a component fails, then shuts down gracefully: in-flight
// webhook requests finish (and are acknowledged) before the spool closes.
func (s *Server) Run(ctx context.Context) error {
	serveErr := make(chan error, 3)
	go func() { serveErr <- s.http.Serve(s.listener) }()
	if s.apiHTTP != nil {
		go func() { serveErr <- s.apiHTTP.Serve(s.apiListener) }()
		s.log.Info("API: metrics, probes, chain and gate APIs", "url", s.APIURL())
	}
	if s.sqlHTTP != nil {
		go func() { serveErr <- s.sqlHTTP.Serve(s.sqlLn) }()
		s.log.Info("SQL: the ClickHouse HTTP interface of the embedded store, read-only", "url", s.SQLURL())
	}
	if s.agent {
		names := make([]string, 0, len(s.cfg.Relay.Aggregators))
		for _, a := range s.cfg.Relay.Aggregators {
			names = append(names, a.Name+"="+a.URL)
		}
		s.log.Info("peertrail agent serving", "url", s.URL(), "data_dir", s.cfg.DataDir, "aggregators", strings.Join(names, ","))
	} else {
		s.log.Info("peertrail serving", "url", s.URL(), "data_dir", s.cfg.DataDir, "store", s.cfg.Store.Engine)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case err = <-s.errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := s.http.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = fmt.Errorf("shutdown: %w", serr)
	}
	if s.apiHTTP != nil {
		s.apiHTTP.Shutdown(shutdownCtx)
	}
	if s.sqlHTTP != nil {
		s.sqlHTTP.Shutdown(shutdownCtx)
	}
	s.cancel()
	s.consumers.Wait()
	if s.correlator != nil {
		if cerr := s.correlator.Close(shutdownCtx); cerr != nil {
			s.log.Warn("closing the correlator", "err", cerr)
		}
	}
	if cerr := s.receiver.SaveAgents(); cerr != nil {
		s.log.Warn("saving agents' positions", "err", cerr)
	}
	if cerr := s.closeStores(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) closeStores() error {
	var err error
	if s.store != nil {
		if cerr := s.store.Close(); cerr != nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}
	if s.sqlLn != nil {
		s.sqlLn.Close()
	}
	if s.spool != nil {
		if cerr := s.spool.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if s.codec != nil {
		s.codec.Close()
	}
	return err
}

// gateAgents is the receiver's account of the agents as the gate reads it.
func gateAgents(in []ingest.AgentStatus) []gate.Agent {
	out := make([]gate.Agent, len(in))
	for i, a := range in {
		g := gate.Agent{Name: a.Name, Heard: a.Heard, StoredTime: a.StoredTime, LagBytes: a.LagBytes, LagSeconds: a.LagSeconds, SpoolMaxBytes: a.SpoolMaxBytes}
		for _, ag := range a.Aggregators {
			g.Aggregators = append(g.Aggregators, gate.AgentAggregator{Name: ag.Name, BacklogBytes: ag.BacklogBytes,
				GaveUpEvents: ag.Skipped.Events, GaveUpLast: ag.Skipped.Last, GaveUpFrom: ag.Skipped.From, GaveUpTo: ag.Skipped.To})
		}
		out[i] = g
	}
	return out
}
