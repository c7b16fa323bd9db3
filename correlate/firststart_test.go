package correlate

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/peertrail/peertrail/chain"
	"github.com/peertrail/peertrail/ingest/record"
)

// TestRealFirstStartPreDiscovery replays test/testdata/real/first-start/pre-discovery, real
// kube-apiservers' audit (issue 39): kas-c (v1.36.3, batch/v1 off) answered lists of jobs with
// its not-found handler's bare 404 before its peer discovery synced kas-a and kas-b, which
// serve jobs and delivered their audit across those requests without a record of them; then
// it forwarded jobs. peertrail sees the cluster's first start (no restart, no
// entry_starting) and learns every address from the apiservers' own calls. The 404s are
// misleading, none broken, in the order the batches came and shuffled.
func TestRealFirstStartPreDiscovery(t *testing.T) {
	dir := filepath.Join("..", "test", "testdata", "real", "first-start", "pre-discovery")
	b, err := os.ReadFile(filepath.Join(dir, "labels.json"))
	if err != nil {
		t.Fatal(err)
	}
	var labels struct {
		Posts []struct {
			File      string    `json:"file"`
			APIServer string    `json:"apiserver"`
			Received  time.Time `json:"received"`
		} `json:"posts"`
		Requests []struct {
			AuditID string `json:"auditID"`
			Expect  string `json:"expect"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(b, &labels); err != nil {
		t.Fatal(err)
	}
	var posts [][]record.Record
	for _, p := range labels.Posts {
		body, err := os.ReadFile(filepath.Join(dir, p.File))
		if err != nil {
			t.Fatal(err)
		}
		recs, invalid, err := record.Decode(body, p.APIServer, p.Received)
		if err != nil || len(invalid) > 0 {
			t.Fatalf("%s: %v %v", p.File, err, invalid)
		}
		posts = append(posts, recs)
	}
	want := map[string]chain.Class{}
	for _, r := range labels.Requests {
		switch r.Expect {
		case "misleading_404":
			want[r.AuditID] = chain.ClassMisleading404
		case "proxied":
			want[r.AuditID] = chain.ClassProxied
		default:
			t.Fatalf("label %q", r.Expect)
		}
	}
	if len(want) < 3 {
		t.Fatalf("the capture has %d labelled requests", len(want))
	}
	for _, seed := range []uint64{0, 1, 2} {
		t.Run(map[uint64]string{0: "as sent", 1: "shuffled", 2: "shuffled again"}[seed], func(t *testing.T) {
			codec, err := record.NewCodec()
			if err != nil {
				t.Fatal(err)
			}
			defer codec.Close()
			sink := &memSink{}
			co := New(Config{Join: DefaultJoinOptions(), Codec: codec, Caps: NewCapabilities(15 * time.Minute), Sink: sink})
			h := &harness{t: t, co: co, sink: sink}
			co.now = func() time.Time { return labels.Posts[len(labels.Posts)-1].Received.Add(time.Hour) }
			order := make([][]record.Record, len(posts))
			copy(order, posts)
			if seed > 0 {
				rand.New(rand.NewPCG(seed, seed)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			}
			for _, recs := range order {
				h.feed(recs)
			}
			h.settle()
			for id, class := range want {
				c := h.chain(id)
				if class == chain.ClassProxied {
					expect(t, c, chain.ClassProxied)
					continue
				}
				expect(t, c, chain.ClassMisleading404)
				if c.Entry == nil || c.Entry.APIServer != "kas-c" || c.Entry.Code != 404 || c.Entry.Message != "" {
					t.Errorf("%s: entry %+v, want kas-c's bare 404", id, c.Entry)
				}
			}
			if n := co.Recent(24 * time.Hour).Chains[chain.ClassBroken]; n != 0 {
				t.Errorf("%d broken chains", n)
			}
		})
	}
}
