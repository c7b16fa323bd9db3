package e2e

// Helpers of TestRollingUpgrade: the real peertrail binary as a process, its chain API, its
// SQL interface, and the apiservers' own MVP metrics.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/internal/childproc"
	"github.com/peertrail/peertrail/server"
	"github.com/peertrail/peertrail/test/e2e/harness"
)

// ptProc is a running `peertrail serve`.
type ptProc struct {
	bin     string
	URL     string // https://127.0.0.1:<port>
	SQLURL  string // http://127.0.0.1:<port> (embedded store, read-only)
	LogFile string
	hc      *http.Client
	stop    func()
	done    chan struct{}
	exitErr error // valid once done is closed
	// caFile verifies its serving certificate; tokenFile holds a reader's token (empty when
	// the caller gave --reader-token-file).
	caFile, tokenFile string
}

// exited returns an error when the process has ended on its own (before stop).
func (p *ptProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("peertrail exited before the test stopped it: %v (its log: %s)", p.exitErr, p.LogFile)
	default:
		return nil
	}
}

var (
	ptServingRE = regexp.MustCompile(`msg="peertrail serving" url=(\S+)`)
	ptSQLRE     = regexp.MustCompile(`msg="SQL: [^"]*" url=(\S+)`)
)

// buildPeertrail builds ./cmd/peertrail of this checkout into dir.
func buildPeertrail(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// Not named peertrail: a broad `pkill peertrail` elsewhere on a shared machine must not
	// take this test's process with it.
	bin := filepath.Join(dir, "pt-e2e")
	build := exec.Command("go", "build", "-o", bin, "./cmd/peertrail")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build peertrail: %v\n%s", err, out)
	}
	return bin
}

// startPT runs `peertrail serve args...` (which must listen on 127.0.0.1:0 and
// --sql-listen 127.0.0.1:0), waits for the URLs it logs and for /readyz, and stops it
// (SIGTERM, then SIGKILL) at cleanup. ca verifies its serving certificate. Unless args name a
// --reader-token-file, serve gets one with a token of its own, which the ptProc's API reads
// present (the API answers readers only).
func startPT(ctx context.Context, t *testing.T, bin string, args []string, logFile string, ca *harness.CA) *ptProc {
	t.Helper()
	token, tf := "", ""
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--reader-token-file") }) {
		token = rand.Text()
		tf = logFile + ".reader-token"
		if err := os.WriteFile(tf, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(slices.Clip(args), "--reader-token-file", tf)
	}
	lf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	proc, err := childproc.Start(cmd)
	if err != nil {
		lf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	p := &ptProc{bin: bin, LogFile: logFile, done: done, caFile: ca.CertFile, tokenFile: tf}
	go func() {
		p.exitErr = proc.Wait()
		lf.Close()
		close(done)
	}()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			if p.exited() != nil {
				return
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		if err := p.exited(); err != nil {
			t.Errorf("%v", err)
		}
		p.stop()
		if t.Failed() {
			t.Logf("==== last lines of %s ====\n%s", logFile, lastLinesOf(logFile, 60))
		}
	})
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	if token != "" {
		rt = bearerRT{rt: rt, token: token}
	}
	p.hc = &http.Client{Timeout: 30 * time.Second, Transport: rt}
	err = pollUntil(ctx, 90*time.Second, func() (bool, error) {
		select {
		case <-done:
			return false, fmt.Errorf("peertrail exited:\n%s", lastLinesOf(logFile, 40))
		default:
		}
		b, _ := os.ReadFile(logFile)
		if m := ptServingRE.FindSubmatch(b); m != nil {
			p.URL = string(m[1])
		}
		if m := ptSQLRE.FindSubmatch(b); m != nil {
			p.SQLURL = withSQLPassword(string(m[1]), args)
		}
		if p.URL == "" || p.SQLURL == "" {
			return false, nil
		}
		resp, err := p.hc.Get(p.URL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("peertrail not ready: %v\n%s", err, lastLinesOf(logFile, 40))
	}
	return p
}

// cli runs a reader's command of the peertrail binary (apiservers, chain, ...) against the
// running serve, as a user would: its URL, its CA and the reader's token.
func (p *ptProc) cli(ctx context.Context, args ...string) (string, error) {
	if p.tokenFile == "" {
		return "", fmt.Errorf("peertrail %s: no reader token file of this serve", args[0])
	}
	args = append(slices.Clip(args), "--server", p.URL, "--ca-file", p.caFile, "--token-file", p.tokenFile)
	out, err := exec.CommandContext(ctx, p.bin, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return "", fmt.Errorf("peertrail %s: %w\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out), nil
}

// chain returns the chain API's view of auditID (nil, 404 when unknown).
func (p *ptProc) chain(ctx context.Context, auditID string) (*chain.Chain, int, error) {
	var c chain.Chain
	code, err := p.getJSON(ctx, "/api/v1/chains/"+auditID, &c)
	if err != nil || code != http.StatusOK {
		return nil, code, err
	}
	return &c, code, nil
}

// chains lists the chains in memory that match the query (class=...&apiserver=...).
func (p *ptProc) chains(ctx context.Context, query string) ([]*chain.Chain, error) {
	var v struct {
		Chains []*chain.Chain `json:"chains"`
	}
	code, err := p.getJSON(ctx, "/api/v1/chains?"+query, &v)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/chains?%s: %d", query, code)
	}
	return v.Chains, nil
}

func (p *ptProc) apiservers(ctx context.Context) (map[string]chain.APIServerView, error) {
	var v struct {
		APIServers []chain.APIServerView `json:"apiservers"`
	}
	code, err := p.getJSON(ctx, "/api/v1/apiservers", &v)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/apiservers: %d", code)
	}
	out := map[string]chain.APIServerView{}
	for _, s := range v.APIServers {
		out[s.Name] = s
	}
	return out, nil
}

// serves reports what peertrail's latest evidence says about server serving gvr.
func serves(v chain.APIServerView, group, version, resource string) (served, known bool) {
	for _, r := range v.Resources {
		if r.Group == group && r.Version == version && r.Resource == resource {
			return r.Served, true
		}
	}
	return false, false
}

func (p *ptProc) getJSON(ctx context.Context, path string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", p.URL+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(v)
}

// metrics returns peertrail's /metrics text.
func (p *ptProc) metrics(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", p.URL+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// sql runs query on the store's ClickHouse HTTP interface and decodes its JSONEachRow rows
// into out (a pointer to a slice of structs). The query must not have a FORMAT clause.
func (p *ptProc) sql(ctx context.Context, query string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "POST", p.SQLURL+"/", strings.NewReader(query+"\nFORMAT JSONEachRow"))
	if err != nil {
		return err
	}
	resp, err := p.hc.Do(req) // the SQL interface serves TLS with the serving certificate
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("SQL %q: %d %s", query, resp.StatusCode, bytes.TrimSpace(b))
	}
	// JSONEachRow: one object a line; turn it into an array.
	var arr bytes.Buffer
	arr.WriteByte('[')
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if n > 0 {
			arr.WriteByte(',')
		}
		arr.Write(line)
		n++
	}
	arr.WriteByte(']')
	if err := json.Unmarshal(arr.Bytes(), out); err != nil {
		return fmt.Errorf("SQL %q: decode: %w", query, err)
	}
	return nil
}

// sqlStrings quotes ids as a ClickHouse string list; ids must be plain (auditIDs are UUIDs).
var plainID = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func sqlStrings(t *testing.T, ids []string) string {
	t.Helper()
	q := make([]string, len(ids))
	for i, id := range ids {
		if !plainID.MatchString(id) {
			t.Fatalf("auditID %q is not plain", id)
		}
		q[i] = "'" + id + "'"
	}
	return strings.Join(q, ",")
}

// promSample is one sample of a Prometheus text exposition.
type promSample struct {
	Labels map[string]string
	Value  float64
}

// promSamples returns the samples of metric name in text (the plain text format).
func promSamples(text, name string) ([]promSample, error) {
	var out []promSample
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := map[string]string{}
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("bad sample %q", line)
			}
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("bad label %q in %q", kv, line)
				}
				uv, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("bad label value %q in %q", v, line)
				}
				labels[k] = uv
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("bad sample %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bad value in %q", line)
		}
		out = append(out, promSample{Labels: labels, Value: v})
	}
	return out, nil
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQ, esc, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			inQ = !inQ
		case c == ',' && !inQ:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func labelNames(s promSample) string {
	var n []string
	for k := range s.Labels {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

// pollUntil calls f every 200ms until it returns true or an error, or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func lastLinesOf(path string, n int) string {
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

// withSQLPassword puts the SQL password that `peertrail serve` made up under its --data-dir
// into base's user info, which net/http sends as basic auth.
func withSQLPassword(base string, args []string) string {
	dir := ""
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			dir = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			dir = v
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, server.SQLPasswordFileName))
	if err != nil {
		return base
	}
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.User = url.UserPassword("default", strings.TrimSpace(string(b)))
	return u.String()
}

// bearerRT presents a reader's bearer token on every request that has no Authorization of its
// own (the SQL interface's requests carry its user and password).
type bearerRT struct {
	rt    http.RoundTripper
	token string
}

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") != "" {
		return b.rt.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
