package attack

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/simulate"
)

// TestManyTinyItemsAreRefusedAndNothingElseIsLost replays issue 39's batch of 2,000,000 `{}`
// items (a 6 MB body, well under --max-body-bytes) against a real `peertrail serve`, three at
// once, while another apiserver posts a good batch. Before the item limit it took the process
// from 237 MB to 3.3 GB and wrote 305 MB of dead letters. Now each is refused 413 with what to
// change, the process's memory stays where it was, nothing of them is stored or kept, the good
// batch is stored whole, and a batch of exactly the limit of real events is taken.
func TestManyTinyItemsAreRefusedAndNothingElseIsLost(t *testing.T) {
	st := startSQLTarget(t)
	st.loadEvents(t, 1, 400) // warm: the engine, the writer and the decoder have run once
	pid := st.cmd.Process.Pid
	before := rss(t, pid)

	tiny := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}` + strings.Repeat(`,{}`, 2_000_000-1) + `]}`)
	good, _, err := simulate.NewEvents(2, nil).EventList(400)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	peak := make(chan int64)
	go func() {
		var most int64
		for {
			most = max(most, rss(t, pid))
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			code, msg := postBatch(t, st.url, fmt.Sprintf("kas-evil-%d", i), tiny)
			if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, fmt.Sprint(record.DefaultMaxItems)) || !strings.Contains(msg, "--max-batch-items") {
				t.Errorf("2,000,000 items: %d %q, want 413 naming the limit and the flag", code, msg)
			}
		})
	}
	wg.Go(func() {
		if code, msg := postBatch(t, st.url, "kas-b", good); code != http.StatusOK || msg != "accepted 400, duplicate 0, invalid 0" {
			t.Errorf("the good batch beside them: %d %q", code, msg)
		}
	})
	wg.Wait()
	close(stop)
	most := <-peak
	t.Logf("resident memory: %d MiB before, at most %d MiB during the attack", before>>20, most>>20)
	if grew := most - before; grew > 256<<20 {
		t.Errorf("resident memory grew by %d MiB refusing three batches of 2,000,000 items", grew>>20)
	}

	st.waitCount(t, "SELECT count() FROM peertrail.events WHERE apiserver = 'kas-b'", 400)
	if n := st.count(t, "SELECT count() FROM peertrail.events WHERE apiserver LIKE 'kas-evil-%'"); n != 0 {
		t.Errorf("%d events stored from the refused batches", n)
	}
	if b := deadLetterBytes(t, st.dataDir); b != 0 {
		t.Errorf("%d bytes of dead letters from batches refused whole", b)
	}

	// A real apiserver's batch of exactly the limit is taken whole.
	full, _, err := simulate.NewEvents(3, nil).EventList(record.DefaultMaxItems)
	if err != nil {
		t.Fatal(err)
	}
	if code, msg := postBatch(t, st.url, "kas-c", full); code != http.StatusOK || msg != fmt.Sprintf("accepted %d, duplicate 0, invalid 0", record.DefaultMaxItems) {
		t.Fatalf("a batch of %d real events: %d %q", record.DefaultMaxItems, code, msg)
	}
	st.waitCount(t, "SELECT count() FROM peertrail.events WHERE apiserver = 'kas-c'", record.DefaultMaxItems)
}

// postBatch posts body as apiserver's webhook batch and returns the answer.
func postBatch(t *testing.T, base, apiserver string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/audit/"+apiserver, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// rss is the process's resident set now (VmRSS).
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Error(err)
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	t.Error("no VmRSS")
	return 0
}

// deadLetterBytes is the size of every dead-letter file under dataDir.
func deadLetterBytes(t *testing.T, dataDir string) int64 {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "deadletter", "*"))
	var n int64
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}
