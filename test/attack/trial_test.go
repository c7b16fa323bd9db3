package attack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peertrail/peertrail/config"
	"github.com/peertrail/peertrail/gate"
	"github.com/peertrail/peertrail/ingest"
	"github.com/peertrail/peertrail/metrics"
)

// TestMadeUpApiserverNamesFlood replays issue 39's trial-mode flood (item 7): with
// --accept-unknown-apiservers anyone may post under a name of their own, and 1000 made-up
// names each added 6 series and held the gate at pause for 30 minutes. Beside two configured
// apiservers that keep sending, 1000 names post one batch each: only --max-unknown-apiservers
// of them are taken, the rest are refused 403 and counted without a series of their own, and
// the names taken, heard for a moment, never pause the gate for their silence. A name that
// streams for a while and then goes silent still pauses it, until it has been silent for as
// long as it was heard: the evidence a stream gives.
func TestMadeUpApiserverNamesFlood(t *testing.T) {
	const gap = 2 * time.Second
	tokenFile := filepath.Join(t.TempDir(), "reader-token")
	if err := os.WriteFile(tokenFile, []byte("trial-reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := start(t, func(c *config.File) {
		c.APIServers = []config.APIServer{{Name: "kas-a"}, {Name: "kas-b"}}
		c.Gate.MaxIngestGap = config.Duration(gap)
		c.Readers.TokenFile = tokenFile
	})
	verdict := func() gate.Verdict {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, tg.srv.APIURL()+"/api/v1/gate", nil)
		req.Header.Set("Authorization", "Bearer trial-reader")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v gate.Verdict
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("gate: %d %s", resp.StatusCode, b)
		}
		return v
	}
	gapCheck := func(v gate.Verdict) gate.Check {
		for _, c := range v.Checks {
			if c.Name == metrics.CheckIngestGap {
				return c
			}
		}
		t.Fatalf("no %s check in %+v", metrics.CheckIngestGap, v)
		return gate.Check{}
	}

	// The configured apiservers send all along.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seq atomic.Int64
	stream := func(name string, until <-chan struct{}) {
		for {
			id := fmt.Sprintf("%s-%d", name, seq.Add(1))
			if code, msg := tg.post(name, eventList(event(id, now(0), now(time.Millisecond)))); code != http.StatusOK {
				t.Errorf("%s: %d %s", name, code, msg)
			}
			select {
			case <-until:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	for _, n := range []string{"kas-a", "kas-b"} {
		wg.Go(func() { stream(n, stop) })
	}
	defer func() { close(stop); wg.Wait() }()

	// 1000 made-up names, one batch each.
	const names = 1000
	var taken, refused atomic.Int64
	work := make(chan int)
	var flood sync.WaitGroup
	for range 16 {
		flood.Go(func() {
			for i := range work {
				code, msg := tg.post(fmt.Sprintf("made-up-%d", i), eventList(event(fmt.Sprintf("made-up-%d", i), now(0), now(time.Millisecond))))
				switch {
				case code == http.StatusOK:
					taken.Add(1)
				case code == http.StatusForbidden && strings.Contains(msg, "--max-unknown-apiservers"):
					refused.Add(1)
				default:
					t.Errorf("made-up-%d: %d %s", i, code, msg)
				}
			}
		})
	}
	floodStart := time.Now() // made-up-0 is posted first
	for i := range names {
		work <- i
	}
	close(work)
	flood.Wait()
	floodEnd := time.Now()
	if taken.Load() != ingest.DefaultMaxUnknownAPIServers || refused.Load() != names-ingest.DefaultMaxUnknownAPIServers {
		t.Fatalf("%d names taken, %d refused; want %d taken", taken.Load(), refused.Load(), ingest.DefaultMaxUnknownAPIServers)
	}
	if got := tg.metric(metrics.IngestUnknownAPIServersRefusedTotal); got != names-ingest.DefaultMaxUnknownAPIServers {
		t.Errorf("%s = %v", metrics.IngestUnknownAPIServersRefusedTotal, got)
	}
	if got := tg.metric(metrics.IngestUnknownAPIServers); got != ingest.DefaultMaxUnknownAPIServers {
		t.Errorf("%s = %v", metrics.IngestUnknownAPIServers, got)
	}
	// Series by apiserver: the two configured, the names taken, and "unknown" for refusals.
	for _, m := range []string{metrics.IngestRequestsTotal, metrics.IngestEventsTotal, metrics.IngestLastEventTimestampSeconds} {
		if n := apiserverLabels(t, tg, m); n > 2+ingest.DefaultMaxUnknownAPIServers+1 {
			t.Errorf("%s has %d apiserver label values", m, n)
		}
	}

	// The names taken were heard once: their silence never pauses the gate, while the gap
	// check would have fired on them (past MaxIngestGap) and well after.
	for time.Since(floodEnd) < 3*gap {
		if c := gapCheck(verdict()); !c.OK {
			t.Fatalf("%s after the flood: %s", metrics.CheckIngestGap, c.Detail)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c := gapCheck(verdict()); !strings.Contains(c.Detail, "no longer watched") || strings.Count(c.Detail, "made-up-") != ingest.DefaultMaxUnknownAPIServers {
		t.Errorf("the check does not name the %d names it no longer watches: %s", ingest.DefaultMaxUnknownAPIServers, c.Detail)
	}

	// A name taken that streams for a while, then stops: that silence pauses the gate, until
	// it has lasted as long as the name was heard (since its batch in the flood).
	const heardFor = 8 * time.Second
	streamStop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); stream("made-up-0", streamStop) }()
	time.Sleep(heardFor)
	close(streamStop)
	<-done
	last := time.Now()
	paused := false
	deadline := last.Add(heardFor + 20*time.Second)
	for {
		c := gapCheck(verdict())
		silent := time.Since(last)
		if !c.OK {
			if !strings.Contains(c.Detail, "made-up-0") {
				t.Fatalf("the gap check fails for another apiserver: %s", c.Detail)
			}
			paused = true
		} else if paused {
			// The receiver's own times of made-up-0's first and last batch are within a post
			// (and the 300 ms between posts) of floodStart and last.
			if silent < last.Sub(floodStart)-2*time.Second {
				t.Errorf("the pause ended after %s of silence, before the %s made-up-0 was heard", silent, last.Sub(floodStart))
			}
			t.Logf("made-up-0, heard for %s, paused the gate from about %s to %s of silence", last.Sub(floodStart).Round(100*time.Millisecond), gap, silent.Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s of silence: paused %v, check %+v", silent, paused, c)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// apiserverLabels counts the values of the apiserver label on metric name.
func apiserverLabels(t *testing.T, tg *target, name string) int {
	t.Helper()
	mfs, err := tg.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelAPIServer {
					seen[l.GetValue()] = true
				}
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("no series of %s", name)
	}
	return len(seen)
}
