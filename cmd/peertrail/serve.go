package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/server"
)

func newServeCommand(g *globalFlags) *cobra.Command {
	cfg := config.Defaults()
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the audit webhook receiver",
		Long: `serve runs the receiver that every kube-apiserver's audit webhook posts to.

Each apiserver posts its audit.k8s.io/v1 EventLists to POST /audit/<apiserver> (or to POST
/audit with a client certificate mapped to its name). Each accepted batch is appended to an
on-disk spool under --data-dir, and fsynced, before it is answered 200; a batch the apiserver
resends is recognised and counted, never stored twice. Invalid items are kept in
<data-dir>/deadletter and the rest of their batch is accepted.

Every accepted record is also written to the store (embedded ClickHouse by default, under
--data-dir; a ClickHouse server with --store clickhouse), and the embedded store answers SQL on
--sql-listen (peertrail sql, peertrail report, Grafana's ClickHouse data source), read-only,
with a password, within per-query limits the engine enforces. The embedded
engine's threads run below the rest of the process (on Linux: the threads it starts at
SCHED_IDLE, those that call into it at nice 10), and the Go scheduler gets twice as many Ps as
CPUs unless $GOMAXPROCS is set, so that acknowledgements come before the store's work
(BENCHMARKS.md).

Every accepted record is joined with the records other apiservers wrote of the same request
into a chain (entry and peer), classified (local, proxied, proxy_failed, misleading_404,
broken, loop, internal) with findings, counted in metrics and optionally traced (OTLP).

Endpoints on the same port: GET /metrics (Prometheus), GET /healthz, GET /readyz (ready while
the spool is writable and has room, and accepted the last batch or the cause of its refusal
is gone), GET /api/v1/chains/<auditID>, GET /api/v1/chains?class=&finding=&apiserver=&since=
&limit= (newest first; memory holds open chains and final ones for --late-window, since=
reaches into the store), GET /api/v1/apiservers, GET /api/v1/gate (the upgrade gate's
verdict: proceed or pause, with reasons).

Who may do what:
  POST /audit/<name>  only apiserver <name>'s credential: a client certificate signed by
                      --client-ca-file whose subject is its certSubject, or its own bearer
                      token (apiservers[].tokenFile). Another apiserver's credential, an
                      unmapped certificate or a reader's credential: 403; none: 401.
  reads               /metrics, /api/..., /debug/pprof/: only a reader's credential, a bearer
                      token of --reader-token-file or a client certificate signed by
                      --reader-client-ca-file (a CA of its own). An apiserver's credential:
                      403; none: 401. With no reader credential configured every read is
                      refused (403): reads are never open to whoever reaches the port.
  /healthz, /readyz   open, for probes.
The clients (peertrail chain, gate, simulate --score) send a reader token with --token-file or
$PEERTRAIL_TOKEN, or a reader certificate with --client-cert/--client-key. A store outage does
not fail /readyz (batches are still acknowledged into the spool); the alert
PeertrailStoreWriteFailing reports it.

Limits: an apiserver's request takes one of its --max-inflight-per-apiserver turns while its
body is read (within --read-timeout) and processed, and one of --max-inflight processing slots
only once the body is in memory, so slow bodies hold their own sender's turns only; bodies being
read share --max-reading-bytes of memory. Beyond any of them: 503 with Retry-After.

Settings come from flags and from an optional YAML file (--config); a flag given on the command
line wins over the file. The file also lists the apiservers:

  apiservers:
  - name: kas-a                 # the <apiserver> of its webhook URL
    address: 10.0.0.11          # optional: the IP it forwards peer requests from
    version: v1.35.4            # optional
    certSubject: kas-a-audit    # optional: client certificate CN (or full subject) naming it
    tokenFile: kas-a.token      # optional: its own bearer token (one line), valid for kas-a only
  tls: {certFile: ..., keyFile: ..., clientCAFile: ...}
  readers: {tokenFile: readers.tokens, clientCAFile: readers-ca.crt}   # one token a line, or a directory
  limits: {maxBodyBytes: 32Mi, maxInflight: 64, maxInflightPerAPIServer: 0, maxReadingBytes: 256Mi,
           readTimeout: 60s, maxDeadLetterBytes: 1Gi}
  spool: {maxBytes: 10Gi, segmentBytes: 64Mi, fsync: always, fsyncInterval: 1s, dedupHorizon: 10m}
  correlate: {chainWindow: 30s, lateWindow: 5m, maxOpenChains: 1000000, capabilityHorizon: 15m}
  store: {engine: embedded, sqlListen: 127.0.0.1:8123, retention: 720h,
          clickhouseDSN: clickhouse://clickhouse:9000, clickhouseCluster: ...}
  tracing: {otlpEndpoint: http://otel-collector:4318}
  gate: {window: 10m, maxProxied5xxRatio: 0.01, minForwarded: 20, maxMisleading404: 0,
         maxBroken: 0, maxIdentityMismatch: 0, maxIngestGap: 2m, maxMinorSkew: 1, forgetAfter: 30m}`,
		Example: `  # TLS, apiservers authenticated by client certificates, names from a config file,
  # readers (peertrail gate, Prometheus) by bearer tokens
  peertrail serve --config /etc/peertrail/config.yaml \
    --tls-cert-file tls.crt --tls-key-file tls.key --client-ca-file apiserver-audit-ca.crt \
    --reader-token-file readers.tokens

  # Local trial: plain HTTP on loopback, any apiserver name accepted, a reader token
  head -c 24 /dev/urandom | base64 > reader.token
  peertrail serve --insecure-http --listen 127.0.0.1:8443 --accept-unknown-apiservers --reader-token-file reader.token
  PEERTRAIL_TOKEN=$(cat reader.token) peertrail gate`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfigFile(cmd.Flags(), configFile, &cfg); err != nil {
				return errorf(exitUsage, "see peertrail serve --help", "%v", oneLine(err.Error()))
			}
			log, err := g.logger()
			if err != nil {
				return usageError(cmd, "%v", err)
			}
			// Everything that can be checked before a side effect (the data directory, the
			// schema) is checked first.
			if err := preflight(cfg); err != nil {
				return err
			}
			if procs, set := server.WidenScheduler(); set {
				log.Debug("Go scheduler widened", "gomaxprocs", procs)
			}
			srv, err := server.New(cmd.Context(), cfg, log)
			if err != nil {
				return addrInUse(err)
			}
			return addrInUse(srv.Run(cmd.Context()))
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML configuration file (apiserver list, TLS, limits); flags given on the command line win over it")
	bindServeFlags(cmd.Flags(), &cfg)
	return cmd
}

// bindServeFlags binds serve's flags to cfg's fields, with cfg's values as defaults.
func bindServeFlags(f *pflag.FlagSet, cfg *config.File) {
	bindIngestFlags(f, cfg)
	bindStoreFlags(f, cfg)
}

// bindIngestFlags binds the flags of what serve and agent share (the webhook receiver, its
// credentials and limits, the spool) to cfg's fields, with cfg's values as defaults.
func bindIngestFlags(f *pflag.FlagSet, cfg *config.File) {
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on for the webhook (and, without --api-listen, metrics, health and APIs)")
	f.StringVar(&cfg.APIListen, "api-listen", cfg.APIListen, "address for /metrics, the probes and the chain and gate APIs apart from the webhook, so that a\n"+
		"NetworkPolicy can admit only the apiservers to --listen (same TLS; default: all on --listen)")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the spool, the duplicate index and the dead letters")
	f.BoolVar(&cfg.AcceptUnknownAPIServers, "accept-unknown-apiservers", false, "accept batches from apiserver names not in the config file (otherwise 403)")
	f.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve plain HTTP instead of TLS; only allowed on a loopback address (tests, demos)")
	f.StringVar(&cfg.TLS.CertFile, "tls-cert-file", "", "serving certificate (PEM); re-read when the file changes")
	f.StringVar(&cfg.TLS.KeyFile, "tls-key-file", "", "serving certificate's private key (PEM)")
	f.StringVar(&cfg.TLS.ClientCAFile, "client-ca-file", "", "CA bundle that verifies the apiservers' client certificates; setting it requires authentication")
	f.StringVar(&cfg.TLS.TokenFile, "token-file", "", "DEPRECATED: one bearer token for every apiserver; accepted only with exactly one apiserver configured (as\n"+
		"its token, with a warning), refused otherwise: give each apiserver its own with apiservers[].tokenFile in --config")
	f.StringVar(&cfg.Readers.TokenFile, "reader-token-file", "", "file of bearer tokens, one a line, or a directory of such files (a mounted Secret, a key per reader),\n"+
		"that may read /metrics, the chain, apiserver and gate APIs and pprof (never post); without it and\n"+
		"--reader-client-ca-file those endpoints refuse everyone")
	f.StringVar(&cfg.Readers.ClientCAFile, "reader-client-ca-file", "", "CA bundle that verifies readers' client certificates (a CA of its own, not --client-ca-file's); such a\n"+
		"certificate may read and never post")
	f.Var(&cfg.Limits.MaxBodyBytes, "max-body-bytes", "largest accepted body, before and after gzip decoding (413 beyond; at most 64Mi)")
	f.IntVar(&cfg.Limits.MaxBatchItems, "max-batch-items", cfg.Limits.MaxBatchItems, "most items (events) one webhook batch may hold, refused 413 beyond before any is decoded; at least the\n"+
		"apiservers' --audit-webhook-batch-max-size (theirs is 400 unless set)")
	f.IntVar(&cfg.Limits.MaxUnknownAPIServers, "max-unknown-apiservers", cfg.Limits.MaxUnknownAPIServers, "with --accept-unknown-apiservers, how many apiserver names not in the config are taken; a new one past it is refused 403")
	f.IntVar(&cfg.Limits.MaxInflight, "max-inflight", cfg.Limits.MaxInflight, "webhook batches processed at once, once their bodies are read; more are answered 503 with Retry-After")
	f.IntVar(&cfg.Limits.MaxInflightPerAPIServer, "max-inflight-per-apiserver", cfg.Limits.MaxInflightPerAPIServer, "one apiserver's webhook requests being read or processed at once, so one sender cannot starve\n"+
		"the others (0: --max-inflight / number of apiservers + 1); more are answered 503 with Retry-After")
	f.Var(&cfg.Limits.MaxReadingBytes, "max-reading-bytes", "memory of the request bodies being read and processed, all apiservers together (at least --max-body-bytes);\n"+
		"a body beyond it is answered 503 with Retry-After")
	f.Var(&cfg.Limits.ReadTimeout, "read-timeout", "time allowed to read one request body (408 beyond)")
	f.Var(&cfg.Limits.MaxDeadLetterBytes, "max-dead-letter-bytes", "size limit of the dead-letter files; beyond it invalid items are counted but not kept")
	f.Var(&cfg.Spool.MaxBytes, "spool-max-bytes", "size limit of the spool's data; when full, batches are answered 503 with Retry-After (the disk holds up to two segments more, allocated ahead of use)")
	f.Var(&cfg.Spool.SegmentBytes, "spool-segment-bytes", "size of one spool segment file, allocated whole before it is written")
	f.StringVar(&cfg.Spool.Fsync, "spool-fsync", cfg.Spool.Fsync, "when to fsync the spool: always (before answering, the default), interval, or never")
	f.Var(&cfg.Spool.FsyncPeriod, "spool-fsync-interval", "fsync period with --spool-fsync=interval")
	f.Var(&cfg.Spool.DedupHorizon, "dedup-horizon", "how long accepted events are remembered to recognise resent batches (the apiserver's webhook gives a batch up\n"+
		"81-98 s after its first failure when its connection is refused, after about 4 minutes when every try hangs)")
	f.BoolVar(&cfg.EnablePprof, "enable-pprof", false, "serve Go's profiler under /debug/pprof/ on the API address, to readers only (performance investigations)")
	f.Var(&cfg.MemoryLimit, "memory-limit", "memory the whole process may use (default: its cgroup's limit, or the host's RAM): the embedded engine gets half (--store-max-memory),\n"+
		"and Go's garbage collector keeps its heap under 90% of it less the engine's share (a soft limit; GOMEMLIMIT in the environment wins),\n"+
		"collecting whenever the heap grew by an eighth (GOGC=12 unless GOGC is set)")
	f.Var((*commaList)(&cfg.RedactResources), "redact-resources", "comma-separated resources whose events keep no requestObject or responseObject, as resource[.group][/subresource]\n"+
		"(e.g. widgets.example.com,serviceaccounts), besides secrets, tokenreviews.authentication.k8s.io and serviceaccounts/token, always redacted")
}

// bindStoreFlags binds serve's own flags (correlation, the gate, the store, tracing).
func bindStoreFlags(f *pflag.FlagSet, cfg *config.File) {
	f.Var(&cfg.Correlate.ChainWindow, "chain-window", "a chain is final when no record of it arrived for this long (cover the apiservers' --audit-webhook-batch-max-wait)")
	f.Var(&cfg.Correlate.LateWindow, "late-window", "how long a final chain can still be reopened and reclassified by a late record")
	f.IntVar(&cfg.Correlate.MaxOpenChains, "max-open-chains", cfg.Correlate.MaxOpenChains, "open chains kept in memory; beyond it the oldest is finalised early (counted as an eviction)")
	f.Var(&cfg.Correlate.CapabilityHorizon, "capability-horizon", "how old evidence of what an apiserver serves may be and still count")
	f.Var(&cfg.Gate.Window, "gate-window", "how far back the upgrade gate looks")
	f.Float64Var(&cfg.Gate.MaxProxied5xxRatio, "gate-max-proxied-5xx-ratio", cfg.Gate.MaxProxied5xxRatio, "gate: largest share of forwarded requests answered 5xx (KEP-4020 aims for under 1%)")
	f.IntVar(&cfg.Gate.MaxMisleading404, "gate-max-misleading-404", cfg.Gate.MaxMisleading404, "gate: misleading 404s allowed in the window")
	f.IntVar(&cfg.Gate.MaxBroken, "gate-max-broken", cfg.Gate.MaxBroken, "gate: broken chains allowed in the window")
	f.IntVar(&cfg.Gate.MaxIdentityMismatch, "gate-max-identity-mismatch", cfg.Gate.MaxIdentityMismatch, "gate: identity mismatches allowed in the window")
	f.Var(&cfg.Gate.MaxEntryStarting, "gate-max-entry-starting", "gate: how long a restarted apiserver's first errors (entry_starting) may last before they pause it (default 10s)")
	f.Var(&cfg.Gate.MaxPeerDown, "gate-max-peer-down", "gate: how long a peer's absence (peer_down) may fail forwarded requests before it pauses it (default 30s)")
	f.Var(&cfg.Gate.MaxIngestGap, "gate-max-ingest-gap", "gate: longest silence allowed from any apiserver's audit webhook")
	f.IntVar(&cfg.Gate.MaxMinorSkew, "gate-max-minor-skew", cfg.Gate.MaxMinorSkew, "gate: the version-skew policy, minors apiservers may be apart")
	f.IntVar(&cfg.Gate.MinForwarded, "gate-min-forwarded", cfg.Gate.MinForwarded, "gate: forwarded requests needed before the 5xx ratio counts as a ratio (fewer still pause on failures)")
	f.Var(&cfg.Gate.ForgetAfter, "gate-forget-after", "gate: an apiserver not in the config and silent this long, or longer than it had been heard (at least\n"+
		"--gate-max-ingest-gap), leaves the ingest-gap and version-skew checks (an upgrade that replaces machines under new\n"+
		"names retires the old ones; a name made up in a trial and heard once never pauses); configured apiservers are never forgotten")
	f.StringVar(&cfg.Store.Engine, "store", cfg.Store.Engine, "where records and chains are kept for SQL: embedded (ClickHouse as a library, under --data-dir), clickhouse (a server: --clickhouse-dsn) or none")
	f.StringVar(&cfg.Store.LibPath, "chdb-lib", "", "the embedded engine's libchdb.so (default: $CHDB_LIB_PATH, then the cache scripts/fetch-chdb.sh fills)")
	f.StringVar(&cfg.Store.SQLListen, "sql-listen", cfg.Store.SQLListen, "where the embedded store answers the ClickHouse HTTP interface, read-only, for peertrail sql, Grafana and curl (\"\" turns it off; off loopback it needs --sql-password-file)")
	f.StringVar(&cfg.Store.SQLUser, "sql-user", "", "user the SQL interface asks for (with --sql-password-file)")
	f.StringVar(&cfg.Store.SQLPasswordFile, "sql-password-file", "", "file holding the password of the SQL interface (default: one made up and kept in <data-dir>/sql-password, mode 0600)")
	f.IntVar(&cfg.Store.SQLMaxConcurrentQueries, "sql-max-concurrent-queries", 0, "SQL queries that run at once, beside the store writer; more wait up to 10s, then get 503 (default 2)")
	f.Var(&cfg.Store.SQLMaxQueryMemory, "sql-max-query-memory", "memory one SQL query may use, enforced by the engine (default 1Gi, or less when the engine's cap is small: the reads at once take at most half of it)")
	f.Var(&cfg.Store.SQLMaxExecutionTime, "sql-max-execution-time", "time one SQL query may run before the engine stops it (default 30s; a client may ask for less)")
	f.BoolVar(&cfg.Store.Unconfined, "unconfined-engine", false, "leave the embedded engine's threads free to reach the whole file system and the network (by default, where the\n"+
		"kernel has Landlock, they reach only <data-dir>/clickhouse and the system files the engine reads: not the credentials)")
	f.Var(&cfg.Store.MaxMemory, "store-max-memory", "memory the embedded engine may use in all, writer and queries together, a hard cap (default: half of --memory-limit)")
	f.Var(&cfg.Store.Retention, "retention", "how long events and chains are kept in the store (TTL)")
	f.Var(&cfg.Store.FlushInterval, "store-flush-interval", "how long records and final chains may wait before they are inserted into the store (sooner at 50,000 records, --store-flush-bytes, or 32,768 chains): each insert is\n"+
		"parts for the engine to write and merge, so a longer wait costs less CPU at low rates, and SQL sees records that much later (the chain API and the gate read from memory);\n"+
		"at most half of --late-window")
	f.Var(&cfg.Store.FlushBytes, "store-flush-bytes", "insert the audit records sooner once they are this large decoded (default 128MiB): the engine holds an insert's rows whole, about twice\n"+
		"over at its peak, so this bounds its memory when events are large (the RequestResponse level)")
	f.StringVar(&cfg.Store.DSN, "clickhouse-dsn", "", "ClickHouse server to use with --store clickhouse: clickhouse://host:9000 (native protocol), http(s)://host:8123 (HTTP); ?secure=true for TLS")
	f.StringVar(&cfg.Store.User, "clickhouse-user", "", "ClickHouse user (default: the DSN's, or $CLICKHOUSE_USER)")
	f.StringVar(&cfg.Store.PasswordFile, "clickhouse-password-file", "", "file holding the ClickHouse password (default: the DSN's, or $CLICKHOUSE_PASSWORD)")
	f.StringVar(&cfg.Store.CAFile, "clickhouse-ca-file", "", "CA bundle that verifies the ClickHouse server's certificate (turns TLS on)")
	f.StringVar(&cfg.Store.CertFile, "clickhouse-cert-file", "", "client certificate for ClickHouse (PEM; turns TLS on)")
	f.StringVar(&cfg.Store.KeyFile, "clickhouse-key-file", "", "client certificate key for ClickHouse (PEM)")
	f.StringVar(&cfg.Store.Cluster, "clickhouse-cluster", "", "ClickHouse cluster name: create replicated tables ON CLUSTER with Distributed tables in front")
	f.BoolVar(&cfg.Store.Deduplicate, "clickhouse-deduplicate", false, "insert every agent frame's events into the ClickHouse server as an insert of its own with\n"+
		"insert_deduplication_token, so that two aggregators writing one server store each row once (the HA layout with a shared store)")
	f.Var(&cfg.Gate.MaxAgentLag, "gate-max-agent-lag", "gate (an aggregator): how far behind an agent's newest batch this aggregator may be before it counts as behind and pauses (default 10s)")
	f.Var(&cfg.Gate.MaxAgentSilence, "gate-max-agent-silence", "gate (an aggregator): how long an agent may go unheard (it posts a heartbeat every second) before this aggregator counts as behind (default 15s)")
	f.StringVar(&cfg.Tracing.OTLPEndpoint, "otlp-endpoint", "", "OTLP/HTTP endpoint (e.g. http://otel-collector:4318) to export every final chain as a trace (the trace ID is the auditID), once in its final class,\n"+
		"when --late-window has passed and no late record can reclassify it;\n"+
		"without it, OTEL_EXPORTER_OTLP_ENDPOINT turns tracing on; the rest of the standard OTEL_* environment (headers, TLS, OTEL_RESOURCE_ATTRIBUTES) applies either way")
}

// commaList is a flag of comma-separated values that replaces the list each time it is set,
// so that applyConfigFile's re-setting of a flag from its String gives the same list.
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }
func (l *commaList) Type() string   { return "strings" }
func (l *commaList) Set(v string) error {
	*l = nil
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l = append(*l, e)
		}
	}
	return nil
}

// applyConfigFile loads the file over cfg, then re-applies the flags given on the command line,
// which are bound to cfg's fields, so that they win.
func applyConfigFile(fs *pflag.FlagSet, path string, cfg *config.File) error {
	if path == "" {
		return cfg.Validate()
	}
	set := map[string]string{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = f.Value.String() })
	if err := config.LoadInto(path, cfg); err != nil {
		return err
	}
	for name, v := range set {
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	return cfg.Validate()
}
