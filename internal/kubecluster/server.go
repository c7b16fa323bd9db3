package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peertrail/peertrail/internal/childproc"
)

// Server is one kube-apiserver of the cluster. Its hostname, port and
// directory stay the same across restarts; Version and Binary change with
// ReplaceServer.
type Server struct {
	Name string
	Port int
	// URL is https://127.0.0.1:<Port>.
	URL string
	// Dir holds the server's logs, webhook kubeconfig and audit log.
	Dir string

	c        *Cluster
	autoPort bool // Port was picked by the harness (may be re-picked if taken)

	mu          sync.Mutex
	Version     string
	Binary      string
	spec        ServerConfig
	incarnation int
	logFiles    []string
	cmd         *exec.Cmd
	done        chan struct{} // closed when the current process exited
	exitErr     error
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the process id of the running kube-apiserver (0 if not running).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// LogFile is the log of the current (or last) process.
func (s *Server) LogFile() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.logFiles) == 0 {
		return ""
	}
	return s.logFiles[len(s.logFiles)-1]
}

// LogFiles are the logs of every process this server has had, oldest first.
func (s *Server) LogFiles() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.logFiles...)
}

// AuditLogFile is --audit-log-path when Config.AuditLog is set.
func (s *Server) AuditLogFile() string { return filepath.Join(s.Dir, "audit.log") }

// Args returns the kube-apiserver arguments for the current version.
func (s *Server) Args() ([]string, error) {
	s.mu.Lock()
	spec := s.spec
	s.mu.Unlock()
	return s.c.serverArgs(s, spec)
}

func (c *Cluster) serverArgs(s *Server, spec ServerConfig) ([]string, error) {
	p := c.PKI
	args := []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Port),
		"--etcd-servers=" + c.Etcd.URL,
		"--tls-cert-file=" + p.Serving.CertFile,
		"--tls-private-key-file=" + p.Serving.KeyFile,
		"--client-ca-file=" + p.ClientCA.CertFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.ServiceAccountPubFile,
		"--service-account-signing-key-file=" + p.ServiceAccountKeyFile,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--endpoint-reconciler-type=none",
		// Mixed Version Proxy: how peers reach and trust each other.
		"--peer-ca-file=" + p.ServerCA.CertFile,
		"--peer-advertise-ip=127.0.0.1",
		"--peer-advertise-port=" + strconv.Itoa(s.Port),
		"--proxy-client-cert-file=" + p.ProxyClient.CertFile,
		"--proxy-client-key-file=" + p.ProxyClient.KeyFile,
		"--requestheader-client-ca-file=" + p.FrontProxyCA.CertFile,
		"--requestheader-allowed-names=" + ProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--audit-policy-file=" + c.policyFile,
		"--v=" + strconv.Itoa(c.cfg.Verbosity),
	}
	if c.cfg.AuditLog {
		args = append(args,
			"--audit-log-path="+s.AuditLogFile(),
			"--audit-log-format=json",
			"--audit-log-mode=blocking",
		)
	}
	if w := c.cfg.Webhook; w != nil {
		kc, err := c.writeWebhookKubeconfig(s)
		if err != nil {
			return nil, err
		}
		args = append(args,
			"--audit-webhook-config-file="+kc,
			"--audit-webhook-mode="+w.Mode,
		)
		if w.Mode == "batch" {
			args = append(args, "--audit-webhook-batch-max-wait="+w.BatchMaxWait.String())
		}
		args = append(args, w.ExtraFlags...)
	}
	gates := map[string]string{"UnknownVersionInteroperabilityProxy": "true"}
	runtime := map[string]string{}
	extra := append(append([]string(nil), c.cfg.ExtraFlags...), spec.ExtraFlags...)
	extra = mergeKV(extra, "feature-gates", gates)
	extra = mergeKV(extra, "runtime-config", runtime)
	for k, v := range spec.FeatureGates {
		gates[k] = strconv.FormatBool(v)
	}
	for k, v := range spec.RuntimeConfig {
		runtime[k] = v
	}
	args = append(args, "--feature-gates="+joinKV(gates))
	if len(runtime) > 0 {
		args = append(args, "--runtime-config="+joinKV(runtime))
	}
	return append(args, extra...), nil
}

func (c *Cluster) writeWebhookKubeconfig(s *Server) (string, error) {
	w := c.cfg.Webhook
	ca := w.CAFile
	if ca == "" {
		ca = c.PKI.ServerCA.CertFile
	}
	var user string
	if w.ClientCertFile != "" {
		user = fmt.Sprintf("    client-certificate: %q\n    client-key: %q\n", w.ClientCertFile, w.ClientKeyFile)
	} else {
		user = "    {}\n"
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: audit-receiver
  cluster:
    server: %q
    certificate-authority: %q
users:
- name: %s
  user:
%scontexts:
- name: default
  context:
    cluster: audit-receiver
    user: %s
current-context: default
`, w.URL(s.Name), ca, s.Name, user, s.Name)
	path := filepath.Join(s.Dir, "audit-webhook.kubeconfig")
	return path, os.WriteFile(path, []byte(kc), 0o600)
}

// start launches the process (not waiting for readiness).
func (s *Server) start() error {
	args, err := s.Args()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			return fmt.Errorf("kubecluster: server %s already running", s.Name)
		}
	}
	s.incarnation++
	logPath := filepath.Join(s.Dir, fmt.Sprintf("kube-apiserver.%d.log", s.incarnation))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "# harness: %s %s (%s) port %d\n# args: %s\n", s.Name, s.Version, s.Binary, s.Port, strings.Join(args, " "))
	// Own UTS namespace so the server has its own hostname (= its own
	// apiserver identity). unshare execs sh which execs kube-apiserver, so
	// the pid we hold is kube-apiserver's.
	argv := append([]string{"--uts", "sh", "-c", `hostname "$0" && exec "$@"`, s.Name, s.Binary}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = s.Dir
	proc, err := childproc.Start(cmd)
	if err != nil {
		logf.Close()
		return fmt.Errorf("kubecluster: %s: %w", s.Name, err)
	}
	done := make(chan struct{})
	s.cmd, s.done, s.exitErr = cmd, done, nil
	s.logFiles = append(s.logFiles, logPath)
	go func() {
		err := proc.Wait()
		logf.Close()
		s.mu.Lock()
		s.exitErr = err
		s.mu.Unlock()
		close(done)
	}()
	return nil
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return fmt.Errorf("kubecluster: server %s not started", s.Name)
	}
	client, err := s.c.httpClient(s.c.AdminConfig(s.Name))
	if err != nil {
		return err
	}
	var last string
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/readyz", nil)
		req.Header.Set("User-Agent", HarnessUserAgent)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, lastLines(string(b), 5))
		} else {
			last = err.Error()
		}
		select {
		case <-done:
			s.mu.Lock()
			exitErr := s.exitErr
			s.mu.Unlock()
			return fmt.Errorf("kubecluster: server %s (%s) exited before ready: %v; log %s:\n%s",
				s.Name, s.Version, exitErr, s.LogFile(), tailFile(s.LogFile(), 25))
		case <-ctx.Done():
			return fmt.Errorf("kubecluster: server %s (%s) not ready: %w (last: %s); log %s:\n%s",
				s.Name, s.Version, ctx.Err(), last, s.LogFile(), tailFile(s.LogFile(), 25))
		case <-tick.C:
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// stop sends SIGTERM and waits up to timeout, then SIGKILL.
func (s *Server) stop(timeout time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("kubecluster: server %s did not stop within %s of SIGTERM; killed", s.Name, timeout)
}

func (s *Server) kill() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-done
	return nil
}
