package main

import (
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/gate"
)

// TestGateAndChainReachATLSServe: serve listens with TLS by default, so gate and chain must
// verify it with --ca-file; the gate's exit status follows the verdict.
func TestGateAndChainReachATLSServe(t *testing.T) {
	broken := 0
	g := gate.New(gate.DefaultThresholds(), gate.Sources{
		Recent: func(time.Duration) chain.Totals {
			return chain.Totals{Chains: map[chain.Class]int{chain.ClassBroken: broken}, Findings: map[chain.Finding]int{}}
		},
		APIServers:  func() []chain.ServerInfo { return nil },
		LastBatches: func() map[string]time.Time { return map[string]time.Time{"kas-a": time.Now()} },
		Started:     time.Now(),
	}, slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	g.Register(mux)
	mux.HandleFunc("GET /api/v1/chains/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":"no chain with auditID ` + r.PathValue("id") + `"}`))
	})
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := runCLI(t, "gate", "--server", srv.URL); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("gate without --ca-file: %v, want a certificate error", err)
	}
	out, err := runCLI(t, "gate", "--server", srv.URL, "--ca-file", ca)
	if err != nil || !strings.Contains(out, "PROCEED") {
		t.Fatalf("gate --ca-file on a healthy window: %v\n%s", err, out)
	}
	broken = 2
	out, err = runCLI(t, "gate", "--server", srv.URL, "--ca-file", ca)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != exitPause || !strings.Contains(out, "broken_chains") {
		t.Fatalf("gate with broken chains: %v, want exit %d\n%s", err, exitPause, out)
	}
	if _, err := runCLI(t, "gate", "--server", srv.URL, "--insecure-skip-tls-verify"); !errors.As(err, &exit) {
		t.Fatalf("gate --insecure-skip-tls-verify: %v", err)
	}
	if _, err := runCLI(t, "chain", "abc", "--server", srv.URL, "--ca-file", ca); err == nil || !strings.Contains(err.Error(), "no chain with auditID abc") {
		t.Fatalf("chain --ca-file of an unknown auditID: %v", err)
	}
}

// TestGateOverSeveralAggregators: gate --server a,b asks both and takes the verdict only from
// the aggregators caught up with their agents (real gates with agent sources, over HTTP).
func TestGateOverSeveralAggregators(t *testing.T) {
	type agg struct {
		agents []gate.Agent
		broken int
	}
	start := func(a *agg) string {
		g := gate.New(gate.DefaultThresholds(), gate.Sources{
			Recent: func(time.Duration) chain.Totals {
				return chain.Totals{Chains: map[chain.Class]int{chain.ClassBroken: a.broken}, Findings: map[chain.Finding]int{}}
			},
			APIServers:  func() []chain.ServerInfo { return nil },
			LastBatches: func() map[string]time.Time { return map[string]time.Time{"kas-a": time.Now()} },
			Started:     time.Now(),
			Agents:      func() []gate.Agent { return a.agents },
			StreamTime:  time.Now,
		}, slog.New(slog.DiscardHandler))
		mux := http.NewServeMux()
		g.Register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	caughtUp := func() []gate.Agent {
		return []gate.Agent{{Name: "node-a", Heard: time.Now(), StoredTime: time.Now()}}
	}
	behind := func() []gate.Agent {
		return []gate.Agent{{Name: "node-a", Heard: time.Now().Add(-time.Minute), LagSeconds: -1, LagBytes: 100}}
	}
	a, b := &agg{agents: caughtUp()}, &agg{agents: behind()}
	ua, ub := start(a), start(b)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	var exit exitError
	for _, c := range []struct {
		name    string
		setup   func()
		servers string
		want    int // exit code
		says    string
	}{
		{"one caught up and proceeding, one behind", func() {}, ua + "," + ub, exitOK, "not counted: behind its agents"},
		{"the behind one alone: pause", func() {}, ub, exitPause, "agents_caught_up"},
		{"both behind", func() { a.agents = behind() }, ua + "," + ub, exitPause, "no aggregator that answered is caught up"},
		{"both caught up, one pausing on its chains", func() { a.agents, b.agents, b.broken = caughtUp(), caughtUp(), 3 }, ua + "," + ub, exitPause, "broken_chains"},
		{"one answering and caught up, one unreachable", func() { b.broken = 0 }, closed.URL + "," + ua, exitOK, "no answer"},
		{"none answering", func() {}, closed.URL + "," + closed.URL, exitUnreachable, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.setup()
			out, err := runCLI(t, "gate", "--server", c.servers)
			code := exitOK
			if errors.As(err, &exit) {
				code = exit.code
			} else if err != nil {
				code = exitCode(err)
			}
			if code != c.want || !strings.Contains(out+fmt.Sprint(err), c.says) {
				t.Fatalf("exit %d (%v), want %d saying %q:\n%s", code, err, c.want, c.says, out)
			}
		})
	}
	// The flag may also be given once per server; -o json lists every answer.
	a.agents, b.agents = caughtUp(), behind()
	out, err := runCLI(t, "gate", "--server", ua, "--server", ub, "-o", "json")
	var doc struct {
		Proceed bool `json:"proceed"`
		Servers []struct {
			Server   string        `json:"server"`
			CaughtUp bool          `json:"caught_up"`
			Verdict  *gate.Verdict `json:"verdict"`
		} `json:"servers"`
	}
	if err != nil || json.Unmarshal([]byte(out), &doc) != nil || !doc.Proceed || len(doc.Servers) != 2 ||
		!doc.Servers[0].CaughtUp || doc.Servers[1].CaughtUp || doc.Servers[1].Verdict == nil || doc.Servers[1].Verdict.Proceed {
		t.Fatalf("gate -o json over two servers: %v %+v\n%s", err, doc, out)
	}
}

// What a client chose reaches the operator's terminal escaped: a gate detail naming an
// apiserver version taken from a user agent, and an error quoting a stored value.
func TestVerdictAndErrorsEscapeForTheTerminal(t *testing.T) {
	var b strings.Builder
	printVerdict(&b, gate.Verdict{Verdict: "pause", Checks: []gate.Check{{Name: "version_skew", Detail: "kas-x runs v1.36.0\x1b]0;owned\x07\u202e"}}})
	if strings.ContainsAny(b.String(), "\x1b\x07\u202e") {
		t.Errorf("the verdict printed a control character: %q", b.String())
	}
	if s := oneLine("Code: 6. DB::Exception: Cannot parse 'a\x1b[2J\u009b'"); strings.ContainsAny(s, "\x1b\u009b") {
		t.Errorf("an error printed a control character: %q", s)
	}
}
