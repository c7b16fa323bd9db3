package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/peertrail/peertrail/bench"
)

// TestBenchRunsEndToEnd runs a small `peertrail bench` as a user does, in a process of its own
// (it opens the embedded engine for the bulk-insert ceiling, and a process holds one), against
// a real serve child on the embedded store: every acknowledged event must be stored, every
// request's chain final, every forwarded pair joined, and every figure measured. No timing is
// asserted: the machine is shared.
func TestBenchRunsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs serve with the embedded store (about half a minute)")
	}
	requireEngine(t)
	// Twice into one kept data directory: the second run counts only what it added.
	dataDir := t.TempDir()
	for run := 1; run <= 2; run++ {
		t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) { benchRun(t, dataDir) })
	}
}

func benchRun(t *testing.T, dataDir string) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "bench", "--apiservers", "2", "--events", "20000", "--chain-window", "2s", "--data-dir", dataDir, "-o", "json")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("peertrail bench: %v\n%s", err, stderr.String())
	}
	var r bench.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("bench -o json: %v\n%s", err, stdout.String())
	}
	t.Logf("%+v", r)
	if r.EventsSent != 20000 || r.EventsAcked != r.EventsSent || r.EventsStored != r.EventsAcked {
		t.Errorf("events sent %d, acknowledged %d, stored %d: want 20000 each", r.EventsSent, r.EventsAcked, r.EventsStored)
	}
	if r.ChainsExpected == 0 || r.ChainsFinal != r.ChainsExpected {
		t.Errorf("chains final %d, want %d", r.ChainsFinal, r.ChainsExpected)
	}
	if r.Forwarded == 0 || r.Classes["proxied"] != r.Forwarded {
		t.Errorf("proxied chains %d, want every forwarded request's (%d): %v", r.Classes["proxied"], r.Forwarded, r.Classes)
	}
	answers := r.Retries
	for _, n := range r.Codes {
		answers += n
	}
	if r.ServerAcks != answers || r.ServerAcksOver10ms > r.ServerAcksOver5ms || r.ServerAcksOver5ms > r.ServerAcks {
		t.Errorf("the server's ack histogram: %d answers, %d over 5 ms, %d over 10 ms; want %d answers (codes %v, retries %d), nested counts",
			r.ServerAcks, r.ServerAcksOver5ms, r.ServerAcksOver10ms, answers, r.Codes, r.Retries)
	}
	sum := 0
	for _, n := range r.Classes {
		sum += n
	}
	if sum != r.ChainsExpected {
		t.Errorf("chains by class sum to %d, want %d: %v", sum, r.ChainsExpected, r.Classes)
	}
	for name, v := range map[string]float64{
		"accepted": r.AcceptedPerSec, "end to end": r.EndToEndPerSec, "decode-only": r.DecodeOnlyPerSec,
		"decode-only (encoding/json)": r.DecodeOnlyJSONPerSec, "engine bulk": r.EngineBulkPerSec, "engine bulk with chains": r.EngineStorePerSec,
		"ack p50": r.AckP50ms, "ack max": r.AckMaxms, "server CPU": r.ServerCPUSeconds, "server cores under load": r.ServerLoadCores,
		"peak RSS": float64(r.PeakRSSBytes), "RSS under load": float64(r.LoadRSSMeanBytes), "bytes per event": r.BytesPerEvent, "spool": float64(r.PeakSpoolBytes),
	} {
		if v <= 0 {
			t.Errorf("%s: %v, want a measurement", name, v)
		}
	}
	// The same events' inserts are timed within the chains' (EngineBulk): never faster.
	if r.EngineStorePerSec > r.EngineBulkPerSec {
		t.Errorf("engine ceiling with the chains %.0f ev/s, over the events alone (%.0f)", r.EngineStorePerSec, r.EngineBulkPerSec)
	}
	if !bytes.Contains(stderr.Bytes(), []byte(" acked ")) {
		t.Errorf("no progress line on stderr:\n%s", stderr.String())
	}
}

func TestBenchAPIServers(t *testing.T) {
	for in, want := range map[string][][]string{
		"2":           {{"kas-1", "kas-2"}},
		"1,3":         {{"kas-1"}, {"kas-1", "kas-2", "kas-3"}},
		"kas-a,kas-b": {{"kas-a", "kas-b"}},
	} {
		got, err := benchAPIServers(in)
		if err != nil || !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("benchAPIServers(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "a,,b", "5000"} {
		if _, err := benchAPIServers(bad); err == nil {
			t.Errorf("benchAPIServers(%q): no error", bad)
		}
	}
}
