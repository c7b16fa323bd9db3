// Package config is peertrail's configuration: the YAML file given with --config, with every
// setting also available as a flag of the same meaning (a flag given on the command line wins
// over the file).
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/ship"
)

// APIServer describes one kube-apiserver of the control plane.
type APIServer struct {
	// Name is how the apiserver is known: its webhook URL path (/audit/<name>) and the
	// apiserver label of every metric and record.
	Name string `json:"name"`
	// Address is the IP the apiserver connects from when it forwards a request to a peer
	// (usually its --peer-advertise-ip or --advertise-address). Optional: it makes telling the
	// entry of a forwarded request from its peer certain instead of inferred.
	Address string `json:"address,omitempty"`
	// Version is the apiserver's version as its distribution writes it (v1.35.4,
	// v1.35.4+k3s1, v1.35.4-eks-4a1b2c3, or v1.35 alone). Optional: peertrail learns it from
	// the apiserver's own requests too.
	Version string `json:"version,omitempty"`
	// CertSubject is the subject of the client certificate this apiserver's webhook presents:
	// its common name, or the whole subject as "CN=...,O=...". Optional.
	CertSubject string `json:"certSubject,omitempty"`
	// TokenFile holds the bearer token this apiserver's webhook presents (its webhook
	// kubeconfig's token), instead of or besides a client certificate. The token authenticates
	// this apiserver only: posting under another name with it is refused (403). Optional.
	TokenFile string `json:"tokenFile,omitempty"`
}

// File is the YAML configuration file.
type File struct {
	Listen string `json:"listen,omitempty"`
	// APIListen, when set, serves /metrics, the probes and the chain and gate APIs apart from
	// the webhook on Listen, so that a NetworkPolicy can admit only the apiservers to Listen.
	APIListen               string      `json:"apiListen,omitempty"`
	DataDir                 string      `json:"dataDir,omitempty"`
	APIServers              []APIServer `json:"apiservers,omitempty"`
	AcceptUnknownAPIServers bool        `json:"acceptUnknownAPIServers,omitempty"`
	InsecureHTTP            bool        `json:"insecureHTTP,omitempty"`
	TLS                     TLS         `json:"tls,omitempty"`
	Readers                 Readers     `json:"readers,omitempty"`
	Limits                  Limits      `json:"limits,omitempty"`
	Spool                   Spool       `json:"spool,omitempty"`
	Correlate               Correlate   `json:"correlate,omitempty"`
	Tracing                 Tracing     `json:"tracing,omitempty"`
	Gate                    Gate        `json:"gate,omitempty"`
	Store                   Store       `json:"store,omitempty"`
	// EnablePprof serves Go's profiler under /debug/pprof/ (for performance investigations).
	EnablePprof bool `json:"enablePprof,omitempty"`
	// MemoryLimit is the memory the whole process may use (0: its cgroup's limit, or the
	// host's RAM). The embedded engine gets half (unless Store.MaxMemory) and Go's garbage
	// collector keeps the rest under a soft limit (see server.MemoryBudget).
	MemoryLimit ByteSize `json:"memoryLimit,omitempty"`
	// RedactResources are resources whose events keep no requestObject or responseObject, in
	// addition to Secrets, TokenReviews and TokenRequests, which are always redacted. Each is
	// resource[.group][/subresource], e.g. "widgets.example.com" (record.NewRedaction).
	RedactResources []string `json:"redactResources,omitempty"`
	// Agents are the peertrail agents an aggregator (peertrail serve) takes frames from, in the
	// HA layout: each relays its own apiservers' audit, and no other's.
	Agents []Agent `json:"agents,omitempty"`
	// Relay configures peertrail agent: the aggregators it relays its spool to, and its
	// credential there. serve ignores it.
	Relay Relay `json:"relay,omitempty"`
}

// Agent is a peertrail agent an aggregator takes frames from.
type Agent struct {
	// Name is how the aggregator knows it (a label value and a file name): lowercase letters,
	// digits, '.' and '-'.
	Name string `json:"name"`
	// APIServers are the apiservers it relays: the one (or ones) on its node. A frame of any
	// other is refused (403).
	APIServers []string `json:"apiservers"`
	// CertSubject is the subject of the client certificate it presents (signed by
	// tls.clientCAFile, as the apiservers' are), and TokenFile its bearer token: one of them.
	CertSubject string `json:"certSubject,omitempty"`
	TokenFile   string `json:"tokenFile,omitempty"`
}

// Relay is where peertrail agent relays its spool.
type Relay struct {
	// Aggregators each get every frame; the spool keeps a frame until every one has it.
	Aggregators []Aggregator `json:"aggregators,omitempty"`
	// CAFile verifies the aggregators' serving certificates.
	CAFile string `json:"caFile,omitempty"`
	// TokenFile holds the agent's bearer token (one line), or CertFile and KeyFile its client
	// certificate: what the aggregators know it by (their agents[]).
	TokenFile string `json:"tokenFile,omitempty"`
	CertFile  string `json:"certFile,omitempty"`
	KeyFile   string `json:"keyFile,omitempty"`
	// GiveUpAt is the share of the spool's limit at which the oldest frames of the aggregator
	// whose backlog holds the spool are given up (0: 0.9), so that an aggregator away for longer
	// than the spool can hold costs that aggregator its oldest frames, never the apiserver its
	// audit.
	GiveUpAt float64 `json:"giveUpAt,omitempty"`
	// MaxRequestBytes bounds the frames of one request (0: 4Mi).
	MaxRequestBytes ByteSize `json:"maxRequestBytes,omitempty"`
}

// Aggregator is one aggregator an agent relays to.
type Aggregator struct {
	// Name is the agent's name for it: its spool consumer (ship-<name>) and its label value.
	Name string `json:"name"`
	// URL is its base URL, https://host:port (its --listen).
	URL string `json:"url"`
}

// Store says where records and chains are kept for SQL investigation.
type Store struct {
	// Engine is "embedded" (ClickHouse linked as a library, data under dataDir; the default),
	// "clickhouse" (a ClickHouse server or cluster) or "none" (chains in memory only).
	Engine string `json:"engine,omitempty"`
	// LibPath is the embedded engine's libchdb.so ("" looks in the usual places).
	LibPath string `json:"libPath,omitempty"`
	// SQLListen is where the embedded engine answers the ClickHouse HTTP interface, read-only
	// ("" turns it off). Off loopback it needs SQLPasswordFile.
	SQLListen string `json:"sqlListen,omitempty"`
	SQLUser   string `json:"sqlUser,omitempty"`
	// SQLPasswordFile holds the SQL interface's password. Without it, serve makes one up
	// and keeps it in <dataDir>/sql-password (mode 0600), where peertrail sql finds it.
	SQLPasswordFile string `json:"sqlPasswordFile,omitempty"`
	// SQLMaxConcurrentQueries, SQLMaxQueryMemory (bytes) and SQLMaxExecutionTime bound the
	// SQL interface's reads (0: 2 queries, 1 GiB or half the engine's cap shared by the
	// queries, 30s); the engine enforces them.
	SQLMaxConcurrentQueries int      `json:"sqlMaxConcurrentQueries,omitempty"`
	SQLMaxQueryMemory       ByteSize `json:"sqlMaxQueryMemory,omitempty"`
	SQLMaxExecutionTime     Duration `json:"sqlMaxExecutionTime,omitempty"`
	// MaxMemory caps the embedded engine as a whole (0: half of the memory the process may
	// use, read from its cgroup or the host).
	MaxMemory ByteSize `json:"maxMemory,omitempty"`
	// Unconfined leaves the embedded engine's threads free to reach the whole file system and
	// the network; by default, where the kernel has Landlock, they reach only the engine's
	// directory and the system files it reads (SECURITY.md).
	Unconfined bool `json:"unconfinedEngine,omitempty"`
	// Retention is how long events and chains are kept.
	Retention Duration `json:"retention,omitempty"`
	// FlushInterval is how long records and final chains may wait before they are inserted
	// (sooner at 50,000 records, FlushBytes, or 32,768 chains): each insert is a part of its table and of
	// every view on it for the engine to write and merge again, so fewer inserts at low rates
	// cost less CPU, and the SQL interface sees records that much later (the chain API and
	// the gate read chains from memory). At least 1s; serve uses at most half the late window
	// (File.StoreFlushInterval).
	FlushInterval Duration `json:"flushInterval,omitempty"`
	// FlushBytes bounds the audit records of one insert by their decoded size (0: 128 MiB):
	// the engine holds an insert's rows whole, about twice over at its peak, so large events
	// (the RequestResponse level) are inserted sooner than at 50,000 records.
	FlushBytes ByteSize `json:"flushBytes,omitempty"`
	// ClickHouse server connection, for Engine "clickhouse".
	DSN          string `json:"clickhouseDSN,omitempty"`
	User         string `json:"clickhouseUser,omitempty"`
	PasswordFile string `json:"clickhousePasswordFile,omitempty"`
	CAFile       string `json:"clickhouseCAFile,omitempty"`
	CertFile     string `json:"clickhouseCertFile,omitempty"`
	KeyFile      string `json:"clickhouseKeyFile,omitempty"`
	Cluster      string `json:"clickhouseCluster,omitempty"`
	// Deduplicate makes every events insert into a ClickHouse server one agent frame with
	// ClickHouse's insert_deduplication_token, so that two aggregators writing one server store
	// each row once (the HA layout with a shared store).
	Deduplicate bool `json:"clickhouseDeduplicate,omitempty"`
}

// Gate sets the thresholds of the upgrade gate.
type Gate struct {
	Window              Duration `json:"window,omitempty"`
	MaxProxied5xxRatio  float64  `json:"maxProxied5xxRatio,omitempty"`
	MinForwarded        int      `json:"minForwarded,omitempty"`
	MaxMisleading404    int      `json:"maxMisleading404,omitempty"`
	MaxBroken           int      `json:"maxBroken,omitempty"`
	MaxIdentityMismatch int      `json:"maxIdentityMismatch,omitempty"`
	MaxIngestGap        Duration `json:"maxIngestGap,omitempty"`
	MaxMinorSkew        int      `json:"maxMinorSkew,omitempty"`
	// MaxEntryStarting and MaxPeerDown are the restart-noise budgets: how long one episode of
	// a starting entry's errors, or of a peer's absence, may last before it pauses the gate
	// (0: 10s and 30s).
	MaxEntryStarting Duration `json:"maxEntryStarting,omitempty"`
	MaxPeerDown      Duration `json:"maxPeerDown,omitempty"`
	ForgetAfter      Duration `json:"forgetAfter,omitempty"`
	// MaxAgentLag and MaxAgentSilence (an aggregator only): how far behind an agent's newest
	// batch the aggregator may be, and how long an agent may go unheard (it posts a heartbeat
	// every second when idle), before the aggregator counts as behind and its gate pauses
	// (0: 10s and 15s).
	MaxAgentLag     Duration `json:"maxAgentLag,omitempty"`
	MaxAgentSilence Duration `json:"maxAgentSilence,omitempty"`
}

// Correlate tunes how records are joined into chains.
type Correlate struct {
	// ChainWindow: a chain is final when no record of it arrived for this long.
	ChainWindow Duration `json:"chainWindow,omitempty"`
	// LateWindow: how long a final chain can still be reopened by a late record.
	LateWindow Duration `json:"lateWindow,omitempty"`
	// MaxOpenChains bounds memory; beyond it the oldest open chain is finalised early.
	MaxOpenChains int `json:"maxOpenChains,omitempty"`
	// CapabilityHorizon: how old evidence of what an apiserver serves may be and still count.
	CapabilityHorizon Duration `json:"capabilityHorizon,omitempty"`
}

// Tracing exports chains as OpenTelemetry traces.
type Tracing struct {
	// OTLPEndpoint is an OTLP/HTTP base URL such as http://otel-collector:4318; "" leaves it
	// to the standard environment (OTEL_EXPORTER_OTLP_ENDPOINT; no traces without either).
	OTLPEndpoint string `json:"otlpEndpoint,omitempty"`
}

// TLS is the receiver's transport security.
type TLS struct {
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ClientCAFile verifies the apiservers' client certificates; such a certificate may post
	// audit batches as the apiserver its subject names, and nothing else.
	ClientCAFile string `json:"clientCAFile,omitempty"`
	// TokenFile is the old single bearer token shared by every sender. It cannot tell one
	// apiserver from another, so it is accepted only when exactly one apiserver is configured
	// (as that apiserver's token, with a warning); use apiservers[].tokenFile instead.
	TokenFile string `json:"tokenFile,omitempty"`
}

// Readers are the credentials that may read: /metrics, the chain, apiserver and gate APIs and
// /debug/pprof. Without any, those endpoints refuse everyone. Reader credentials may not post
// audit batches.
type Readers struct {
	// TokenFile holds readers' bearer tokens, one a line (# starts a comment line).
	TokenFile string `json:"tokenFile,omitempty"`
	// ClientCAFile verifies readers' client certificates. It must be another CA than
	// tls.clientCAFile's.
	ClientCAFile string `json:"clientCAFile,omitempty"`
}

// MaxBodyBytesLimit is the largest Limits.MaxBodyBytes allowed: the records decoded from a body
// of that size fit one spool frame (record.MaxFrameBody, 256 MiB) even at their worst, about
// four times the body.
const MaxBodyBytesLimit = 64 << 20

// Limits protect the receiver.
type Limits struct {
	MaxBodyBytes ByteSize `json:"maxBodyBytes,omitempty"`
	// MaxBatchItems bounds the items of one webhook batch (ingest.Options.MaxBatchItems); it
	// must be at least the apiservers' --audit-webhook-batch-max-size.
	MaxBatchItems int `json:"maxBatchItems,omitempty"`
	// MaxUnknownAPIServers bounds the apiserver names not configured that
	// acceptUnknownAPIServers takes (ingest.Options.MaxUnknownAPIServers).
	MaxUnknownAPIServers int `json:"maxUnknownAPIServers,omitempty"`
	// MaxInflight bounds the batches processed at once (after their bodies are read).
	MaxInflight int `json:"maxInflight,omitempty"`
	// MaxInflightPerAPIServer bounds one apiserver's requests being read or processed at once
	// (0: maxInflight / number of apiservers + 1), so one sender cannot starve the others.
	MaxInflightPerAPIServer int `json:"maxInflightPerAPIServer,omitempty"`
	// MaxReadingBytes bounds the memory of request bodies being read, all senders together.
	MaxReadingBytes    ByteSize `json:"maxReadingBytes,omitempty"`
	ReadTimeout        Duration `json:"readTimeout,omitempty"`
	MaxDeadLetterBytes ByteSize `json:"maxDeadLetterBytes,omitempty"`
}

// Spool is the write-ahead log's configuration.
type Spool struct {
	MaxBytes     ByteSize `json:"maxBytes,omitempty"`
	SegmentBytes ByteSize `json:"segmentBytes,omitempty"`
	Fsync        string   `json:"fsync,omitempty"`
	FsyncPeriod  Duration `json:"fsyncInterval,omitempty"`
	DedupHorizon Duration `json:"dedupHorizon,omitempty"`
}

// LoadInto reads a configuration file strictly (an unknown key is an error, not a silent
// default) over f: what the file does not mention keeps its value in f.
func LoadInto(path string, f *File) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, f); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Validate checks what a file can get wrong on its own.
func (f File) Validate() error {
	seen := map[string]bool{}
	subjects := map[string]string{}
	var errs []error
	for i, a := range f.APIServers {
		switch {
		case a.Name == "":
			errs = append(errs, fmt.Errorf("apiservers[%d]: name is required", i))
		case seen[a.Name]:
			errs = append(errs, fmt.Errorf("apiservers[%d]: duplicate name %q", i, a.Name))
		}
		seen[a.Name] = true
		if _, err := chain.ParseVersion(a.Version); a.Version != "" && err != nil {
			errs = append(errs, fmt.Errorf("apiservers[%d] (%s): %w", i, a.Name, err))
		}
		if a.CertSubject != "" {
			if other, ok := subjects[a.CertSubject]; ok {
				errs = append(errs, fmt.Errorf("apiservers[%d]: certSubject %q already names %q", i, a.CertSubject, other))
			}
			subjects[a.CertSubject] = a.Name
		}
	}
	if f.TLS.TokenFile != "" {
		switch {
		case len(f.APIServers) != 1 || f.AcceptUnknownAPIServers:
			errs = append(errs, fmt.Errorf("tls.tokenFile (--token-file) is one token for every apiserver, so its holder could post as any of them; "+
				"give each apiserver its own token with apiservers[].tokenFile in the --config file (a shared token is accepted only with exactly one apiserver configured and without acceptUnknownAPIServers)"))
		case f.APIServers[0].TokenFile != "":
			errs = append(errs, fmt.Errorf("apiserver %s has both tls.tokenFile (--token-file) and its own tokenFile: keep its own", f.APIServers[0].Name))
		}
	}
	errs = append(errs, f.validateAgents(subjects)...)
	if f.Readers.ClientCAFile != "" && f.Readers.ClientCAFile == f.TLS.ClientCAFile {
		errs = append(errs, errors.New("--reader-client-ca-file is the apiservers' --client-ca-file: readers need a CA of their own, or an apiserver's certificate could read and a reader's could post"))
	}
	if f.Limits.MaxInflight < 0 || f.Limits.MaxInflightPerAPIServer < 0 {
		errs = append(errs, errors.New("limits: maxInflight and maxInflightPerAPIServer cannot be negative"))
	}
	if f.Limits.MaxBatchItems < 0 || f.Limits.MaxUnknownAPIServers < 0 {
		errs = append(errs, errors.New("limits: maxBatchItems and maxUnknownAPIServers cannot be negative"))
	}
	if f.Limits.MaxBodyBytes > MaxBodyBytesLimit {
		errs = append(errs, fmt.Errorf("limits: maxBodyBytes (%s) is above %s: the records of a larger body might not fit one spool frame; lower the apiservers' --audit-webhook-batch-max-size instead", f.Limits.MaxBodyBytes, ByteSize(MaxBodyBytesLimit)))
	}
	if f.Limits.MaxReadingBytes > 0 && f.Limits.MaxReadingBytes < f.Limits.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("limits: maxReadingBytes (%s) is below maxBodyBytes (%s): a body of the largest size could never be read", f.Limits.MaxReadingBytes, f.Limits.MaxBodyBytes))
	}
	if fi := f.Store.FlushInterval; fi != 0 && fi < Duration(time.Second) {
		errs = append(errs, fmt.Errorf("store.flushInterval (%s) must be at least 1s", fi))
	}
	if f.MemoryLimit > 0 && f.Store.MaxMemory >= f.MemoryLimit {
		errs = append(errs, fmt.Errorf("store.maxMemory (%s) is not below memoryLimit (%s): the engine's cap is part of the process's memory", f.Store.MaxMemory, f.MemoryLimit))
	}
	switch f.Store.Engine {
	case "", "embedded", "none":
		if f.Store.DSN != "" {
			errs = append(errs, fmt.Errorf("a ClickHouse DSN is set but the store engine is %q: add --store clickhouse (or drop --clickhouse-dsn)", f.Store.Engine))
		}
	case "clickhouse":
		if f.Store.DSN == "" {
			errs = append(errs, errors.New("store engine clickhouse needs --clickhouse-dsn"))
		}
		if f.Store.Deduplicate && f.Store.Cluster != "" {
			errs = append(errs, errors.New("--clickhouse-deduplicate is for one shared ClickHouse server: replicated tables deduplicate inserts by their data already"))
		}
	default:
		errs = append(errs, fmt.Errorf("store engine %q: want embedded, clickhouse or none", f.Store.Engine))
	}
	if f.Store.Deduplicate && f.Store.Engine != "clickhouse" {
		errs = append(errs, errors.New("--clickhouse-deduplicate needs --store clickhouse: an embedded store is one aggregator's own"))
	}
	return errors.Join(errs...)
}

// StoreFlushInterval is the flush interval serve uses: Store.FlushInterval (zero: the
// default's), but at most half the late window, so that a final chain reaches the store before
// a late record could no longer find it in memory (a short late window is a test's or a
// replay's choice, not a reason to refuse the default).
func (f File) StoreFlushInterval() time.Duration {
	fi := time.Duration(f.Store.FlushInterval)
	if fi == 0 {
		fi = time.Duration(Defaults().Store.FlushInterval)
	}
	if lw := time.Duration(f.Correlate.LateWindow); lw > 0 && fi > lw/2 {
		fi = lw / 2
	}
	return fi
}

// validateAgents checks the agents an aggregator takes frames from: names, credentials (a
// certificate subject names one apiserver or one agent), and apiservers, each relayed by one
// agent and configured unless unknown ones are accepted.
func (f File) validateAgents(subjects map[string]string) []error {
	var errs []error
	configured := map[string]bool{}
	for _, a := range f.APIServers {
		configured[a.Name] = true
	}
	names := map[string]bool{}
	relayedBy := map[string]string{}
	for i, a := range f.Agents {
		switch {
		case !ship.NameRE.MatchString(a.Name):
			errs = append(errs, fmt.Errorf("agents[%d]: name %q: lowercase letters, digits, '.' and '-', at most 63", i, a.Name))
		case names[a.Name]:
			errs = append(errs, fmt.Errorf("agents[%d]: duplicate name %q", i, a.Name))
		}
		names[a.Name] = true
		if a.CertSubject == "" && a.TokenFile == "" {
			errs = append(errs, fmt.Errorf("agent %s: give its certSubject or tokenFile: an agent is always authenticated", a.Name))
		}
		if a.CertSubject != "" {
			if other, ok := subjects[a.CertSubject]; ok {
				errs = append(errs, fmt.Errorf("agent %s: certSubject %q already names %q", a.Name, a.CertSubject, other))
			}
			subjects[a.CertSubject] = "agent " + a.Name
		}
		if len(a.APIServers) == 0 {
			errs = append(errs, fmt.Errorf("agent %s: no apiservers: it relays the audit of the apiservers on its node", a.Name))
		}
		for _, n := range a.APIServers {
			if other, ok := relayedBy[n]; ok {
				errs = append(errs, fmt.Errorf("apiserver %s is relayed by agents %s and %s: an apiserver's webhook posts to the agent on its node", n, other, a.Name))
			}
			relayedBy[n] = a.Name
			if !configured[n] && !f.AcceptUnknownAPIServers {
				errs = append(errs, fmt.Errorf("agent %s relays apiserver %s, which the apiservers list does not name", a.Name, n))
			}
		}
	}
	return errs
}

// ValidateRelay checks what peertrail agent needs beyond Validate: the aggregators and a
// credential for them.
func (f File) ValidateRelay() error {
	var errs []error
	r := f.Relay
	if len(r.Aggregators) == 0 {
		errs = append(errs, errors.New("no aggregator: give --aggregator name=https://host:port (or relay.aggregators in --config)"))
	}
	seen := map[string]bool{}
	for i, a := range r.Aggregators {
		switch {
		case !ship.NameRE.MatchString(a.Name):
			errs = append(errs, fmt.Errorf("aggregator %d: name %q: lowercase letters, digits, '.' and '-', at most 63", i, a.Name))
		case seen[a.Name]:
			errs = append(errs, fmt.Errorf("aggregator %q named twice", a.Name))
		}
		seen[a.Name] = true
		if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("aggregator %s: URL %q: want https://host:port", a.Name, a.URL))
		}
	}
	if r.TokenFile == "" && r.CertFile == "" {
		errs = append(errs, errors.New("no credential for the aggregators: give --relay-token-file or --relay-client-cert and --relay-client-key"))
	}
	if (r.CertFile == "") != (r.KeyFile == "") {
		errs = append(errs, errors.New("--relay-client-cert and --relay-client-key go together"))
	}
	if r.GiveUpAt < 0 || r.GiveUpAt > 1 {
		errs = append(errs, fmt.Errorf("relay.giveUpAt %v: a share of the spool, between 0 and 1", r.GiveUpAt))
	}
	if len(f.Agents) > 0 {
		errs = append(errs, errors.New("agents: configures an aggregator (peertrail serve); an agent relays to aggregators (relay:)"))
	}
	if f.Spool.Fsync != "always" {
		errs = append(errs, fmt.Errorf("--spool-fsync %s: an agent acknowledges its apiserver only once a batch is on disk, and the aggregators know its frames by their positions: it needs always", f.Spool.Fsync))
	}
	return errors.Join(errs...)
}

// Duration is a time.Duration written as "30s" in YAML and flags.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements pflag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Type implements pflag.Value.
func (d *Duration) Type() string { return "duration" }

// UnmarshalJSON accepts "30s" (and, for convenience, a number of seconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	if s, err := strconv.Unquote(string(b)); err == nil {
		return d.Set(s)
	}
	secs, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string like \"30s\"", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(d.String())), nil }

// ByteSize is a size in bytes, written as 33554432, "32Mi", "32MiB" or "1G".
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"B", 1},
}

// ParseByteSize parses a size.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q (want e.g. 33554432, 32Mi or 1Gi)", s)
	}
	return ByteSize(n * mult), nil
}

func (b ByteSize) String() string {
	for _, u := range []struct {
		s string
		m int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if int64(b) >= u.m && int64(b)%u.m == 0 {
			return strconv.FormatInt(int64(b)/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set implements pflag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type implements pflag.Value.
func (b *ByteSize) Type() string { return "size" }

// UnmarshalJSON accepts a number or a string with a unit.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	if s, err := strconv.Unquote(string(data)); err == nil {
		return b.Set(s)
	}
	return b.Set(string(data))
}

// MarshalJSON writes the size as a string with a unit.
func (b ByteSize) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(b.String())), nil }
