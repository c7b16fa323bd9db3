package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
)

// buildPeertrail builds the binary under test once per test process.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "peertrail-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "peertrail")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/peertrail/peertrail/cmd/peertrail").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

type process struct {
	cmd    *exec.Cmd
	url    string
	sqlURL string // the embedded store's ClickHouse HTTP interface
	logs   *bytes.Buffer
}

var (
	servingURL = regexp.MustCompile(`msg="peertrail serving" url=(\S+)`)
	sqlURL     = regexp.MustCompile(`msg="SQL: [^"]*" url=(\S+)`)
)

// startBinary runs `peertrail serve` and waits until it reports its URL and is ready.
func startBinary(t *testing.T, dataDir string, extra ...string) *process {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--insecure-http", "--listen", "127.0.0.1:0", "--sql-listen", "127.0.0.1:0", "--accept-unknown-apiservers",
		"--data-dir", dataDir, "--reader-token-file", readerTokenFile(t, t.TempDir())}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, logs: &bytes.Buffer{}}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.logs.WriteString(line + "\n")
			if m := sqlURL.FindStringSubmatch(line); m != nil {
				p.sqlURL = withSQLPassword(m[1], dataDir)
			}
			if m := servingURL.FindStringSubmatch(line); m != nil {
				urlc <- m[1]
			}
		}
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	select {
	case p.url = <-urlc:
	case <-time.After(60 * time.Second):
		t.Fatalf("peertrail did not start:\n%s", p.logs)
	}
	waitReady(t, p.url)
	return p
}

func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never became ready", base)
}

type batch struct {
	apiserver string
	body      []byte
	keys      []record.Key
}

func makeBatches(t *testing.T, apiservers []string, perServer, size int) []batch {
	t.Helper()
	var out []batch
	for i, name := range apiservers {
		gen := simulate.NewEvents(uint64(100+i), nil)
		for range perServer {
			body, items, err := gen.EventList(size)
			if err != nil {
				t.Fatal(err)
			}
			b := batch{apiserver: name, body: body}
			for _, it := range items {
				b.keys = append(b.keys, record.KeyOf(name, string(it.AuditID), string(it.Stage), it.StageTimestamp.Time))
			}
			out = append(out, b)
		}
	}
	return out
}

func postBatch(ctx context.Context, base string, b batch) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/audit/"+b.apiserver, bytes.NewReader(b.body))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestKill9LosesNothingAcknowledged kills the server with SIGKILL in the middle of a load,
// three times, and after each restart resends every batch (as apiservers resend what they did
// not see acknowledged, and sometimes what they did). At the end every event must be stored
// exactly once, and every batch acknowledged before a kill must have survived it.
func TestKill9LosesNothingAcknowledged(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	batches := makeBatches(t, []string{"kas-a", "kas-b", "kas-c"}, 60, 200)
	acked := make([]bool, len(batches))

	for round := range 3 {
		p := startBinary(t, dataDir)
		// Everything acknowledged in earlier rounds must be there after the restart.
		if round > 0 {
			checkSpool(t, dataDir, batches, acked, false, p)
		}
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		next := make(chan int)
		for range 6 {
			wg.Go(func() {
				for i := range next {
					code, err := postBatch(ctx, p.url, batches[i])
					if err == nil && code == 200 {
						mu.Lock()
						acked[i] = true
						mu.Unlock()
					}
				}
			})
		}
		killed := make(chan struct{})
		go func() {
			// Kill once a fair share of the batches is in, while senders are mid-request.
			for {
				mu.Lock()
				n := 0
				for _, a := range acked {
					if a {
						n++
					}
				}
				mu.Unlock()
				if n >= (round+1)*len(batches)/4 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			p.cmd.Process.Signal(syscall.SIGKILL)
			p.cmd.Wait()
			close(killed)
		}()
	feed:
		for i := range batches {
			select {
			case next <- i:
			case <-killed:
				break feed
			}
		}
		close(next)
		<-killed
		cancel()
		wg.Wait()
	}

	// Final round: resend everything; all of it is accepted or recognised.
	p := startBinary(t, dataDir)
	checkSpool(t, dataDir, batches, acked, false, p)
	for i, b := range batches {
		code, err := postBatch(context.Background(), p.url, b)
		if err != nil || code != 200 {
			t.Fatalf("resend of batch %d: %d %v", i, code, err)
		}
	}
	// The consumers resumed after each kill: the store, fed from the spool, must hold every
	// event exactly once too, and the correlator must have made one chain of each request.
	total := 0
	for _, b := range batches {
		total += len(b.keys)
	}
	want := fmt.Sprint(total)
	var got []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		rows := sqlRows(t, p.sqlURL, "SELECT count(), uniqExact(apiserver, audit_id, stage, stage_timestamp), "+
			"(SELECT count() FROM peertrail.chains FINAL WHERE state = 'final') FROM peertrail.events FORMAT TabSeparated")
		got = rows[0]
		if got[0] == want && got[2] == want || time.Now().After(deadline) {
			break
		}
	}
	if got[0] != want || got[1] != want || got[2] != want {
		t.Errorf("after the kills the store holds %s event rows (%s distinct) and %s final chains; %s events were sent, one request each",
			got[0], got[1], got[2], want)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, p.logs)
	}
	for i := range acked {
		acked[i] = true
	}
	checkSpool(t, dataDir, batches, acked, true, nil)
}

// checkSpool reads the spool (through a copy when the server is running, since the spool is
// its) and checks: no event twice, every acknowledged batch complete, and with all, nothing else
// missing.
func checkSpool(t *testing.T, dataDir string, batches []batch, acked []bool, all bool, running *process) {
	t.Helper()
	dir := dataDir
	if running != nil {
		dir = filepath.Join(t.TempDir(), "copy")
		if out, err := exec.Command("cp", "-a", dataDir, dir).CombinedOutput(); err != nil {
			t.Fatalf("copy data dir: %v %s", err, out)
		}
	}
	seen := map[record.Key]int{}
	for _, r := range spooled(t, dir) {
		seen[r.Key()]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Fatalf("event %x stored %d times", k, n)
		}
	}
	missing := 0
	for i, b := range batches {
		for _, k := range b.keys {
			if seen[k] == 0 {
				if acked[i] {
					t.Fatalf("batch %d was acknowledged but its event is missing after a kill -9", i)
				}
				missing++
			}
		}
	}
	if all && missing > 0 {
		t.Fatalf("%d events missing after everything was resent", missing)
	}
}
