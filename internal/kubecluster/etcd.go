package kubecluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/peertrail/peertrail/internal/childproc"
)

// Etcd is a single-member etcd on loopback.
type Etcd struct {
	// URL is the client URL, http://127.0.0.1:<port>.
	URL     string
	Dir     string
	LogFile string

	cmd  *exec.Cmd
	done chan struct{}
}

// EtcdBinary finds etcd: $PEERTRAIL_ETCD, /usr/bin/etcd, or PATH.
func EtcdBinary() (string, error) {
	if p := os.Getenv("PEERTRAIL_ETCD"); p != "" {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("kubecluster: etcd not found: run `scripts/build-kube.sh` (it installs Debian's etcd-server) or `apt-get install -y etcd-server`")
}

// StartEtcd starts etcd with its data in dir/data and waits until /health is ok.
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	bin, err := EtcdBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	clientPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	e := &Etcd{
		URL:     "http://127.0.0.1:" + strconv.Itoa(clientPort),
		Dir:     dir,
		LogFile: filepath.Join(dir, "etcd.log"),
		done:    make(chan struct{}),
	}
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	logf, err := os.Create(e.LogFile)
	if err != nil {
		return nil, err
	}
	e.cmd = exec.Command(bin,
		"--name=harness",
		"--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+e.URL,
		"--advertise-client-urls="+e.URL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=harness="+peerURL,
		"--initial-cluster-state=new",
		"--quota-backend-bytes=2147483648",
		"--log-level=warn",
	)
	// Debian's etcd reads ETCD_* from the environment; keep ours clean.
	e.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	proc, err := childproc.Start(e.cmd)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("kubecluster: etcd: %w", err)
	}
	go func() {
		_ = proc.Wait()
		logf.Close()
		close(e.done)
	}()

	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(e.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return e, nil
			}
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("kubecluster: etcd exited before ready; log %s:\n%s", e.LogFile, tailFile(e.LogFile, 25))
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("kubecluster: etcd not healthy: %w; log %s:\n%s", ctx.Err(), e.LogFile, tailFile(e.LogFile, 25))
		case <-tick.C:
		}
	}
}

// Stop terminates etcd (SIGTERM, SIGKILL after 10s) and waits.
func (e *Etcd) Stop() error {
	if e == nil || e.cmd == nil || e.cmd.Process == nil {
		return nil
	}
	select {
	case <-e.done:
		return nil
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.done
	}
	return nil
}
