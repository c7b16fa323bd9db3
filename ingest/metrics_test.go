package ingest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/metrics"
)

// The dead-letter counter has every reason's series before the first dead letter.
func TestDeadLetterSeriesExistFromTheStart(t *testing.T) {
	m := newReceiverMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.collectors()...)
	n, err := testutil.GatherAndCount(reg, metrics.IngestDeadLettersTotal)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("%d series of %s before any dead letter, want 2 (invalid_item, not_eventlist)", n, metrics.IngestDeadLettersTotal)
	}
}
