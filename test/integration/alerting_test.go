package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peertrail/peertrail/alerts"
	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/dashboards"
	"github.com/peertrail/peertrail/metrics"
)

// TestAlertsThroughPrometheusAndAlertmanager runs the generated rules where they will run: a
// real Prometheus (Debian's) scrapes a running peertrail every second and evaluates the
// committed rule file, and sends what fires to a real Alertmanager configured with the
// generated example route, whose receivers are webhooks of this test. The faults are the real
// captures of kube-apiservers in an MVP upgrade (a peer stopped: misleading 404s; a peer killed:
// failed forwards and a broken chain). Then peertrail itself is killed.
func TestAlertsThroughPrometheusAndAlertmanager(t *testing.T) {
	promBin := requireTool(t, "prometheus", "prometheus")
	amBin := requireTool(t, "prometheus-alertmanager", "prometheus-alertmanager")
	rules, err := filepath.Abs(filepath.Join("..", "..", "alerts", "generated", alerts.RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pt := startBinary(t, filepath.Join(dir, "data"), "--chain-window", "2s")

	hooks := newAlertSink(t)
	amConfig, err := alerts.AlertmanagerYAML(alerts.AlertmanagerOptions{
		PageURL: hooks.url + "/" + alerts.ReceiverPage, NotifyURL: hooks.url + "/" + alerts.ReceiverNotify,
		GroupWait: time.Second, GroupInterval: time.Second, RepeatInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	am := startServer(t, "alertmanager", filepath.Join(dir, "am"), amConfig, func(configFile, addr, dataDir string) *exec.Cmd {
		return exec.Command(amBin, "--config.file="+configFile, "--storage.path="+dataDir,
			"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	})
	ptAddr := strings.TrimPrefix(pt.url, "http://")
	promConfig := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
scrape_configs:
  - job_name: peertrail
    authorization:
      credentials_file: %q
    static_configs:
      - targets: [%q]
`, rules, strings.TrimPrefix(am.url, "http://"), readerTokenFile(t, dir), ptAddr)
	prom := startServer(t, "prometheus", filepath.Join(dir, "prom"), []byte(promConfig), func(configFile, addr, dataDir string) *exec.Cmd {
		return exec.Command(promBin, "--config.file="+configFile, "--storage.tsdb.path="+dataDir,
			"--web.listen-address="+addr, "--log.level=warn")
	})

	// The rules loaded, and peertrail is being scraped.
	waitFor(t, 30*time.Second, "Prometheus to load the rules", func() (bool, string) {
		var r struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []any  `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		err := getJSON(prom.url+"/api/v1/rules", &r)
		n := 0
		for _, g := range r.Data.Groups {
			n += len(g.Rules)
		}
		return err == nil && n == ruleCount(), fmt.Sprintf("%d rules (err %v)", n, err)
	})
	waitFor(t, 30*time.Second, "Prometheus to scrape peertrail", func() (bool, string) {
		v, err := instant(prom.url, metrics.PrometheusUp+`{job="peertrail"}`)
		return err == nil && len(v) == 1 && v[0].Value[1] == "1", fmt.Sprint(v, err)
	})

	// The faults: every real capture, in capture order.
	for _, s := range loadScenarios(t) {
		for _, p := range s.Posts {
			postFile(t, pt.url, s, p)
		}
	}

	// The alerts the captures must raise fire in Prometheus...
	expect := map[string]map[string]string{
		alerts.AlertMisleading404s: {metrics.LabelResource: "podgroups", "severity": alerts.SeverityWarning, alerts.LabelComponent: alerts.Component},
		alerts.AlertBrokenChains:   {"severity": alerts.SeverityWarning, alerts.LabelComponent: alerts.Component},
	}
	waitFor(t, 90*time.Second, "the alerts to fire in Prometheus", func() (bool, string) {
		firing, err := promAlerts(prom.url, "firing")
		if err != nil {
			return false, err.Error()
		}
		for name, labels := range expect {
			if !slices.ContainsFunc(firing, func(a promAlert) bool { return a.Labels["alertname"] == name && hasLabels(a.Labels, labels) }) {
				return false, fmt.Sprintf("firing: %v", firing)
			}
		}
		return true, ""
	})
	// ...and reach Alertmanager's route: warnings go to the notify receiver, with their runbook.
	waitFor(t, 60*time.Second, "Alertmanager to deliver the alerts to the webhook", func() (bool, string) {
		got := hooks.received(alerts.ReceiverNotify)
		for name, labels := range expect {
			if !slices.ContainsFunc(got, func(a amAlert) bool {
				return a.Status == "firing" && a.Labels["alertname"] == name && hasLabels(a.Labels, labels) &&
					a.Annotations["runbook_url"] == alerts.DefaultRunbookBaseURL+name+".md" && a.Annotations["summary"] != ""
			}) {
				return false, fmt.Sprintf("received: %v", got)
			}
		}
		return true, ""
	})
	for _, a := range hooks.received(alerts.ReceiverNotify) {
		t.Logf("notified: %s %v: %s", a.Labels["alertname"], a.Labels, a.Annotations["summary"])
	}

	// What the captures do not show stays silent: no identity mismatch (impersonation flattened
	// by the hop is not one), versions within the skew policy, nothing critical paged.
	active, err := promAlerts(prom.url, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range active {
		switch a.Labels["alertname"] {
		case alerts.AlertIdentityMismatch, alerts.AlertVersionSkew, alerts.AlertErrorBudgetBurn, alerts.AlertSpoolNearlyFull, alerts.AlertSpoolGrowing:
			t.Errorf("%s is %s: %v", a.Labels["alertname"], a.State, a.Labels)
		}
	}
	if got := hooks.received(alerts.ReceiverPage); len(got) > 0 {
		t.Errorf("paged for %v", got)
	}
	if bad := hooks.misrouted(); len(bad) > 0 {
		t.Errorf("notifications that reached another receiver's webhook: %v", bad)
	}

	checkDashboardQueries(t, prom.url)

	// The cross-check's recording rule counts, per apiserver, the forwards peertrail saw as the
	// entry's (the kube-apiservers are not scraped here, so their side stays empty).
	waitFor(t, 30*time.Second, "the cross-check's recording rule", func() (bool, string) {
		v, err := instant(prom.url, metrics.RecordPeertrailForwarded)
		if err != nil || len(v) == 0 {
			return false, fmt.Sprint(v, err)
		}
		for _, s := range v {
			if s.Metric[metrics.LabelAPIServer] == "" {
				return false, fmt.Sprintf("a series without apiserver: %v", v)
			}
		}
		return true, ""
	})

	// peertrail dies: its scrape fails and PeertrailDown goes pending at once (it fires after
	// its 2 minutes, which the unit tests cover).
	pt.cmd.Process.Signal(syscall.SIGKILL)
	pt.cmd.Wait()
	waitFor(t, 30*time.Second, "PeertrailDown to go pending", func() (bool, string) {
		active, err := promAlerts(prom.url, "pending")
		return err == nil && slices.ContainsFunc(active, func(a promAlert) bool {
			return a.Labels["alertname"] == alerts.AlertPeertrailDown && a.Labels[metrics.LabelInstance] == ptAddr
		}), fmt.Sprint(active, err)
	})
}

// checkDashboardQueries runs every Prometheus query of the MVP rollout dashboard on the real
// Prometheus, with the dashboard's variables at "All": each must run, and the panels on
// peertrail's own metrics must show the captures.
func checkDashboardQueries(t *testing.T, promURL string) {
	t.Helper()
	files, err := dashboards.Files()
	if err != nil {
		t.Fatal(err)
	}
	targets, err := dashboards.Targets(files["mvp-rollout.json"])
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "2m", "$apiserver", ".*", "$resource", ".*")
	label := regexp.MustCompile(`^label_values\((.+), *([a-z_]+)\)$`)
	results := map[string]int{}
	for _, tg := range targets {
		if tg.Datasource != dashboards.PrometheusType {
			continue
		}
		expr := vars.Replace(tg.Expr)
		if m := label.FindStringSubmatch(expr); m != nil {
			expr = m[1]
		}
		v, err := instant(promURL, expr)
		if err != nil {
			t.Errorf("%s%s %s: %v\n%s", tg.Panel, tg.Variable, tg.RefID, err, expr)
			continue
		}
		results[tg.Panel+tg.Variable] += len(v)
	}
	t.Logf("dashboard queries on the real Prometheus: %v", results)
	for _, panel := range []string{"Gate verdict", "Gate checks", "Apiserver versions", "Proxy hit rate by entry apiserver",
		"Proxy hit rate by resource", "Chains by class", "Forwarding overhead p50 / p99", "Misleading 404s", "Proxy failures",
		"Broken chains", "Identity on the hop", "Audit events received", "Webhook answers", "Spool: consumer lag and use",
		"Webhook acknowledge latency p50 / p99", "apiserver", "resource",
		"Forwarded: peertrail vs the apiserver", "Failed forwards: peertrail vs the apiserver"} {
		if results[panel] == 0 {
			t.Errorf("dashboard panel %q shows nothing on the captures", panel)
		}
	}
	// The classes of chains the captures make all show in "Chains by class".
	v, err := instant(promURL, fmt.Sprintf("sum by (class) (%s)", metrics.CorrelateChainsTotal))
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, s := range v {
		classes = append(classes, s.Metric[metrics.LabelClass])
	}
	for _, c := range []chain.Class{chain.ClassLocal, chain.ClassProxied, chain.ClassProxyFailed, chain.ClassMisleading404, chain.ClassBroken, chain.ClassInternal} {
		if !slices.Contains(classes, string(c)) {
			t.Errorf("no %s chains in Prometheus (classes %v)", c, classes)
		}
	}
}

func ruleCount() int {
	n := 0
	for _, g := range alerts.Groups(alerts.Options{}) {
		n += len(g.Rules)
	}
	return n
}

func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required and not installed: apt-get install -y %s (CI installs it)", name, pkg)
	}
	return p
}

// promServer is a Prometheus or an Alertmanager this test started.
type promServer struct {
	url string
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer writes config into dir, starts the process command returns on a free loopback
// port, and waits until it answers GET /-/ready (retrying on another port when the one picked
// was taken meanwhile). The process is stopped (SIGTERM, then SIGKILL) when the test ends.
func startServer(t *testing.T, name, dir string, config []byte, command func(configFile, addr, dataDir string) *exec.Cmd) promServer {
	t.Helper()
	configFile := filepath.Join(dir, "config.yml")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(configFile, config, 0o644); err != nil {
		t.Fatal(err)
	}
	var lastLogs string
	for attempt := 0; attempt < 3; attempt++ {
		addr := freeAddr(t)
		cmd := command(configFile, addr, filepath.Join(dir, "data"))
		logs := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("%s output:\n%s", name, logs)
			}
		})
		base := "http://" + addr
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{}
				continue
			default:
			}
			if resp, err := http.Get(base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return promServer{url: base}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		lastLogs = logs.String()
		if !strings.Contains(lastLogs, "address already in use") {
			break
		}
	}
	t.Fatalf("%s did not become ready:\n%s", name, lastLogs)
	return promServer{}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitFor polls cond until it holds, failing the test with cond's last word after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getJSON(u string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// instant evaluates expr now; a scalar result counts as one sample.
func instant(promURL, expr string) ([]sample, error) {
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(promURL+"/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("status %s", r.Status)
	}
	if r.Data.ResultType != "vector" {
		return []sample{{}}, nil
	}
	var v []sample
	err := json.Unmarshal(r.Data.Result, &v)
	return v, err
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// promAlerts lists Prometheus' active alerts in state ("" for any).
func promAlerts(promURL, state string) ([]promAlert, error) {
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := getJSON(promURL+"/api/v1/alerts", &r); err != nil {
		return nil, err
	}
	var out []promAlert
	for _, a := range r.Data.Alerts {
		if state == "" || a.State == state {
			out = append(out, a)
		}
	}
	return out, nil
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// amAlert is one alert of an Alertmanager webhook notification.
type amAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alertSink is the receivers' webhook: POST /<receiver> with Alertmanager's webhook payload.
type alertSink struct {
	url string
	mu  sync.Mutex
	got map[string][]amAlert
}

func newAlertSink(t *testing.T) *alertSink {
	s := &alertSink{got: map[string][]amAlert{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			Receiver string    `json:"receiver"`
			Status   string    `json:"status"`
			Alerts   []amAlert `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		path := strings.TrimPrefix(r.URL.Path, "/")
		s.mu.Lock()
		defer s.mu.Unlock()
		if msg.Receiver != path {
			// The route sent it to a receiver other than the one whose URL this is.
			path = "mismatch:" + msg.Receiver + "->" + path
		}
		s.got[path] = append(s.got[path], msg.Alerts...)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *alertSink) received(receiver string) []amAlert {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got[receiver])
}

// misrouted lists the receiver->webhook pairs that did not match.
func (s *alertSink) misrouted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.got {
		if strings.HasPrefix(k, "mismatch:") {
			out = append(out, k)
		}
	}
	return out
}
