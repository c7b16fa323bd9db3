// Package kubecluster starts a real HA Kubernetes control plane on loopback, for the
// end-to-end tests (test/e2e, through test/e2e/harness) and for `peertrail demo --real`: one etcd (Debian's /usr/bin/etcd) and N kube-apiservers of chosen
// versions, each with its own hostname (so its own apiserver identity), the
// Mixed Version Proxy on and its audit webhook pointed at a URL the caller
// chooses.
//
// The kube-apiserver binaries are built by scripts/build-kube.sh into
// ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}/kube/<version>/kube-apiserver.
// When one is missing, Start fails (it never skips) and says to run that script.
//
// It does not import package testing (the demo links it): a test passes its
// *testing.T as a TB. Everything is cleaned up by t.Cleanup (or Close). Waiting is done by polling,
// never by fixed sleeps. Server logs are files in the cluster directory; their
// tails are printed when the test fails. PEERTRAIL_E2E_KEEP=<dir> keeps the
// directory of every run (see TempDir).
//
// Typical use (test/e2e/harness gives the end-to-end tests the same names):
//
//	pki, _ := kubecluster.NewPKI(kubecluster.TempDir(t) + "/pki")
//	rec, _ := kubecluster.StartRecorder(pki.ServerCA, "") // or your own receiver
//	c, err := kubecluster.Start(ctx, t, kubecluster.Config{
//		PKI: pki,
//		Servers: []kubecluster.ServerConfig{
//			{Name: "kas-a", Version: kubecluster.OldVersion},
//			{Name: "kas-c", Version: kubecluster.NewVersion,
//				FeatureGates:  map[string]bool{"GenericWorkload": true},
//				RuntimeConfig: map[string]string{"scheduling.k8s.io/v1alpha2": "true"}},
//		},
//		Webhook: &kubecluster.WebhookConfig{URL: rec.WebhookURL}, // batch, max wait 1s
//	})
//	if err != nil { t.Fatal(err) }
//	err = c.WaitPeerProxy(ctx, "kas-a", "/apis/scheduling.k8s.io/v1alpha2/podgroups")
//	cfg, _ := c.UserConfig("kas-a", "alice", "team-a") // rest.Config; also AdminConfig, ImpersonateConfig
//	c.StopGraceful("kas-c"); c.Kill("kas-c"); c.StartServer(ctx, "kas-c", "")
//	c.ReplaceServer(ctx, "kas-a", kubecluster.NewVersion) // a rolling-upgrade step
package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// TB is what the cluster needs of a test (testing.TB satisfies it): a directory, cleanup,
// whether it failed (to print the servers' logs) and a log.
type TB interface {
	Helper()
	Cleanup(func())
	Failed() bool
	Logf(format string, args ...any)
	Fatal(args ...any)
	TempDir() string
	Name() string
}

// Default versions of the 1.35 -> 1.36 upgrade under test.
const (
	OldVersion = "v1.35.4"
	NewVersion = "v1.36.3"
)

// Config describes a control plane.
type Config struct {
	// Dir holds certificates, configs, etcd data and logs. Default: t.TempDir().
	Dir string
	// PKI to use. Default: NewPKI(Dir/pki). Create it yourself first (NewPKI)
	// when the audit receiver needs a serving certificate from the same CA.
	PKI *PKI
	// Servers started by Start (concurrently), in this order.
	Servers []ServerConfig
	// AuditPolicyFile is --audit-policy-file. Default: DefaultAuditPolicy
	// written to Dir/audit-policy.yaml.
	AuditPolicyFile string
	// Webhook configures --audit-webhook-*. Nil: no webhook backend.
	Webhook *WebhookConfig
	// AuditLog also writes each server's audit events as JSON lines to
	// <Dir>/<server>/audit.log (--audit-log-path), for cross-checking.
	AuditLog bool
	// ExtraFlags are passed to every kube-apiserver (before its own ExtraFlags).
	ExtraFlags []string
	// ReadyTimeout bounds the wait for one server to become ready. Default 2m.
	ReadyTimeout time.Duration
	// LogTailLines: how many lines of each server log to print when the test
	// fails. Default 60; negative prints nothing.
	LogTailLines int
	// Verbosity is kube-apiserver's -v. Default 1.
	Verbosity int
}

// ServerConfig describes one kube-apiserver.
type ServerConfig struct {
	// Name is the server's hostname (and so its apiserver identity) and its
	// name in this harness. Required, unique.
	Name string
	// Version like "v1.36.3": picks the binary from the cache. Default NewVersion.
	Version string
	// Binary overrides the cached binary path.
	Binary string
	// Port is the secure port. Default: a free loopback port.
	Port int
	// FeatureGates merged into --feature-gates (after the harness defaults).
	FeatureGates map[string]bool
	// RuntimeConfig merged into --runtime-config, e.g. {"batch/v1": "false"}.
	RuntimeConfig map[string]string
	// ExtraFlags for this server only. --feature-gates= and --runtime-config=
	// given here are merged with the maps above into one flag each.
	ExtraFlags []string
}

// WebhookConfig configures the audit webhook backend of every server.
type WebhookConfig struct {
	// URL returns the webhook URL for a server, e.g.
	// func(name string) string { return "https://127.0.0.1:8443/audit/" + name }.
	URL func(server string) string
	// CAFile verifies the receiver. Default: the PKI's ServerCA.
	CAFile string
	// ClientCertFile/ClientKeyFile: optional client certificate the
	// apiservers present to the receiver.
	ClientCertFile string
	ClientKeyFile  string
	// Mode is --audit-webhook-mode. Default "batch".
	Mode string
	// BatchMaxWait is --audit-webhook-batch-max-wait. Default 1s.
	BatchMaxWait time.Duration
	// ExtraFlags, e.g. "--audit-webhook-batch-max-size=100".
	ExtraFlags []string
}

// DefaultAuditPolicy logs everything at Metadata level, except the resources
// the e2e scenarios exercise (podgroups, batch, configmaps, namespaces) at
// RequestResponse. All stages are kept.
const DefaultAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: RequestResponse
  resources:
  - group: "scheduling.k8s.io"
  - group: "batch"
  - group: ""
    resources: ["configmaps", "namespaces"]
- level: Metadata
`

// Cluster is a running control plane.
type Cluster struct {
	Dir  string
	PKI  *PKI
	Etcd *Etcd

	cfg        Config
	tb         TB
	policyFile string

	mu      sync.Mutex
	servers map[string]*Server
	order   []string
	closed  bool
}

// Start starts etcd and the configured servers and waits until every server
// is ready. The cluster is closed by t.Cleanup; on test failure the tails of
// all logs are printed first. t may be nil (then call Close yourself and
// Dir must be set).
func Start(ctx context.Context, t TB, cfg Config) (*Cluster, error) {
	if t != nil {
		t.Helper()
	}
	if cfg.Dir == "" {
		if t == nil {
			return nil, errors.New("kubecluster: Config.Dir is required without a TB")
		}
		cfg.Dir = TempDir(t)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.LogTailLines == 0 {
		cfg.LogTailLines = 60
	}
	if cfg.Verbosity == 0 {
		cfg.Verbosity = 1
	}
	if cfg.Webhook != nil {
		if cfg.Webhook.URL == nil {
			return nil, errors.New("kubecluster: Webhook.URL is required")
		}
		if cfg.Webhook.Mode == "" {
			cfg.Webhook.Mode = "batch"
		}
		if cfg.Webhook.BatchMaxWait == 0 {
			cfg.Webhook.BatchMaxWait = time.Second
		}
	}
	// Check every binary before starting anything: a clear message beats a
	// half-started cluster.
	seen := map[string]bool{}
	for i := range cfg.Servers {
		sc := &cfg.Servers[i]
		if sc.Name == "" {
			return nil, fmt.Errorf("kubecluster: server %d has no name", i)
		}
		if seen[sc.Name] {
			return nil, fmt.Errorf("kubecluster: duplicate server name %q", sc.Name)
		}
		seen[sc.Name] = true
		if _, err := resolveBinary(sc); err != nil {
			return nil, err
		}
	}
	if _, err := EtcdBinary(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: cfg.Dir, cfg: cfg, tb: t, servers: map[string]*Server{}}
	if t != nil {
		t.Cleanup(func() {
			if t.Failed() {
				c.DumpLogs(t.Logf)
			}
			c.Close()
		})
	}
	var err error
	c.PKI = cfg.PKI
	if c.PKI == nil {
		if c.PKI, err = NewPKI(filepath.Join(cfg.Dir, "pki")); err != nil {
			return nil, fmt.Errorf("kubecluster: pki: %w", err)
		}
	}
	c.policyFile = cfg.AuditPolicyFile
	if c.policyFile == "" {
		c.policyFile = filepath.Join(cfg.Dir, "audit-policy.yaml")
		if err := os.WriteFile(c.policyFile, []byte(DefaultAuditPolicy), 0o644); err != nil {
			return nil, err
		}
	}
	if c.Etcd, err = StartEtcd(ctx, filepath.Join(cfg.Dir, "etcd")); err != nil {
		return nil, err
	}
	if err := c.addServers(ctx, cfg.Servers); err != nil {
		return c, err
	}
	return c, nil
}

// AddServer starts one more server and waits until it is ready.
func (c *Cluster) AddServer(ctx context.Context, sc ServerConfig) (*Server, error) {
	if err := c.addServers(ctx, []ServerConfig{sc}); err != nil {
		return c.Server(sc.Name), err
	}
	return c.Server(sc.Name), nil
}

func (c *Cluster) addServers(ctx context.Context, scs []ServerConfig) error {
	var started []*Server
	for _, sc := range scs {
		c.mu.Lock()
		_, dup := c.servers[sc.Name]
		c.mu.Unlock()
		if dup {
			return fmt.Errorf("kubecluster: server %q already exists", sc.Name)
		}
		if sc.Version == "" {
			sc.Version = NewVersion
		}
		bin, err := resolveBinary(&sc)
		if err != nil {
			return err
		}
		autoPort := sc.Port == 0
		if autoPort {
			if sc.Port, err = pickPort(); err != nil {
				return err
			}
		}
		s := &Server{
			autoPort: autoPort,
			Name:     sc.Name,
			Version:  sc.Version,
			Binary:   bin,
			Port:     sc.Port,
			URL:      fmt.Sprintf("https://127.0.0.1:%d", sc.Port),
			Dir:      filepath.Join(c.Dir, sc.Name),
			spec:     sc,
			c:        c,
		}
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			return err
		}
		c.mu.Lock()
		c.servers[s.Name] = s
		c.order = append(c.order, s.Name)
		c.mu.Unlock()
		if err := s.start(); err != nil {
			return err
		}
		started = append(started, s)
	}
	errs := make([]error, len(started))
	var wg sync.WaitGroup
	for i, s := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.waitReady(ctx, c.cfg.ReadyTimeout)
			// A port picked by FreePort can be taken by someone else before
			// the server binds it: retry with another one.
			for try := 0; try < 3 && errs[i] != nil && s.autoPort && !s.Running() &&
				strings.Contains(tailFile(s.LogFile(), 40), "address already in use"); try++ {
				port, err := pickPort()
				if err != nil {
					break
				}
				s.mu.Lock()
				s.Port, s.URL = port, fmt.Sprintf("https://127.0.0.1:%d", port)
				s.spec.Port = port
				s.mu.Unlock()
				if errs[i] = s.start(); errs[i] == nil {
					errs[i] = s.waitReady(ctx, c.cfg.ReadyTimeout)
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Server returns the named server, or nil.
func (c *Cluster) Server(name string) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[name]
}

// Servers returns all servers in the order they were added.
func (c *Cluster) Servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Server, 0, len(c.order))
	for _, n := range c.order {
		out = append(out, c.servers[n])
	}
	return out
}

func (c *Cluster) mustServer(name string) (*Server, error) {
	s := c.Server(name)
	if s == nil {
		return nil, fmt.Errorf("kubecluster: no server %q", name)
	}
	return s, nil
}

// StopGraceful sends SIGTERM to the server and waits for it to exit (up to
// 60s, then SIGKILL).
func (c *Cluster) StopGraceful(name string) error {
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	return s.stop(60 * time.Second)
}

// Kill sends SIGKILL to the server and waits for it to be gone.
func (c *Cluster) Kill(name string) error {
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	return s.kill()
}

// StartServer (re)starts a stopped server with the same hostname and port,
// running version (empty: the version it had), and waits until it is ready.
func (c *Cluster) StartServer(ctx context.Context, name, version string) error {
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	if s.Running() {
		return fmt.Errorf("kubecluster: server %q is still running", name)
	}
	if version != "" && version != s.Version {
		sc := s.spec
		sc.Version = version
		sc.Binary = ""
		bin, err := resolveBinary(&sc)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.spec = sc
		s.Version = version
		s.Binary = bin
		s.mu.Unlock()
	}
	if err := s.start(); err != nil {
		return err
	}
	return s.waitReady(ctx, c.cfg.ReadyTimeout)
}

// ReplaceServer is one rolling-upgrade step: stop the server gracefully and
// start the same hostname (same identity, same port) with newVersion.
func (c *Cluster) ReplaceServer(ctx context.Context, name, newVersion string) error {
	if newVersion == "" {
		return errors.New("kubecluster: ReplaceServer needs a version")
	}
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	sc := s.spec
	sc.Version, sc.Binary = newVersion, ""
	if _, err := resolveBinary(&sc); err != nil {
		return err // before stopping anything
	}
	if err := c.StopGraceful(name); err != nil {
		return err
	}
	return c.StartServer(ctx, name, newVersion)
}

// WaitReady waits until the named server answers /readyz with 200.
func (c *Cluster) WaitReady(ctx context.Context, name string) error {
	s, err := c.mustServer(name)
	if err != nil {
		return err
	}
	return s.waitReady(ctx, c.cfg.ReadyTimeout)
}

// Close stops every server (SIGTERM, then SIGKILL after 20s) and etcd.
// Safe to call more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	servers := make([]*Server, 0, len(c.servers))
	for _, s := range c.servers {
		servers = append(servers, s)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.stop(20 * time.Second)
		}()
	}
	wg.Wait()
	if c.Etcd != nil {
		errs = append(errs, c.Etcd.Stop())
	}
	return errors.Join(errs...)
}

// DumpLogs prints the tail of every log (servers and etcd) via logf.
func (c *Cluster) DumpLogs(logf func(format string, args ...any)) {
	n := c.cfg.LogTailLines
	if n < 0 {
		return
	}
	var files []string
	for _, s := range c.Servers() {
		files = append(files, s.LogFiles()...)
	}
	if c.Etcd != nil {
		files = append(files, c.Etcd.LogFile)
	}
	for _, f := range files {
		logf("==== last %d lines of %s ====\n%s", n, f, tailFile(f, n))
	}
}

// TempDir is t.TempDir(), unless $PEERTRAIL_E2E_KEEP names a directory: then
// a fresh directory under it that is kept after the test (logs, certs, etcd
// data, audit logs) for debugging.
func TempDir(t TB) string {
	t.Helper()
	root := os.Getenv("PEERTRAIL_E2E_KEEP")
	if root == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir, err := os.MkdirTemp(root, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubecluster: keeping %s (PEERTRAIL_E2E_KEEP)", dir)
	return dir
}

// pickPort chooses ports for servers (a variable for tests).
var pickPort = FreePort

// FreePort returns a currently free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CacheDir is ${PEERTRAIL_CACHE:-$HOME/.cache/peertrail}.
func CacheDir() string {
	if d := os.Getenv("PEERTRAIL_CACHE"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "peertrail")
}

// BinaryPath is where scripts/build-kube.sh puts kube-apiserver of version.
func BinaryPath(version string) string {
	return filepath.Join(CacheDir(), "kube", version, "kube-apiserver")
}

// ErrMissingBinary is wrapped by the error for a binary that is not built.
var ErrMissingBinary = errors.New("kube-apiserver binary missing")

// Binary returns the cached kube-apiserver for version, or an error telling
// how to build it.
func Binary(version string) (string, error) {
	p := BinaryPath(version)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("kubecluster: %w: %s not found: build it with `scripts/build-kube.sh %s` (from the repo root; ~5 min per version)", ErrMissingBinary, p, version)
	}
	return p, nil
}

func resolveBinary(sc *ServerConfig) (string, error) {
	if sc.Binary != "" {
		if _, err := os.Stat(sc.Binary); err != nil {
			return "", fmt.Errorf("kubecluster: server %s: binary %s: %w", sc.Name, sc.Binary, err)
		}
		return sc.Binary, nil
	}
	v := sc.Version
	if v == "" {
		v = NewVersion
	}
	return Binary(v)
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// mergeKV merges "--name=k=v,k=v" flags into m (later wins) and returns the
// flags that are not --name.
func mergeKV(flags []string, name string, m map[string]string) []string {
	var rest []string
	prefix := "--" + name + "="
	for _, f := range flags {
		if !strings.HasPrefix(f, prefix) {
			rest = append(rest, f)
			continue
		}
		for _, kv := range strings.Split(strings.TrimPrefix(f, prefix), ",") {
			if kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				v = "true"
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return rest
}

func joinKV(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}
