package store_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/metrics"
	"github.com/peertrail/peertrail/store"
)

// The writer's per-table series exist before its first insert (or failure): the alert on
// insert errors and the dashboards' rates see the first one.
func TestWriterSeriesExistFromTheStart(t *testing.T) {
	w := store.NewWriter(engine(t), newCodec(t), store.WriterOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collectors()...)
	for _, name := range []string{metrics.StoreInsertErrorsTotal, metrics.StoreRowsWrittenTotal, metrics.StoreChainsRetractedTotal} {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		want := 2 // events and chains
		if name == metrics.StoreChainsRetractedTotal {
			want = 1
		}
		if n != want {
			t.Errorf("%s: %d series before the first insert, want %d", name, n, want)
		}
	}
}
