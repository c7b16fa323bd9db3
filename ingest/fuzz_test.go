package ingest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/peertrail/peertrail/ingest/record"
	"github.com/peertrail/peertrail/metrics"
)

// FuzzReceiver posts arbitrary bodies, plain and as gzip, and checks that the receiver never
// panics, answers only with the codes its contract allows, and acknowledges exactly what it
// stored.
func FuzzReceiver(f *testing.F) {
	paths, _ := filepath.Glob("record/testdata/*.json")
	real, _ := filepath.Glob("../test/testdata/real/*/*.json")
	for _, p := range append(paths, real...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b, false)
		}
	}
	f.Add(events(f, 1, 3), true)
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"auditID":"a","stage":"x","stageTimestamp":"2026-01-01T00:00:00Z"},7]}`), false)
	f.Add([]byte("\x1f\x8b\x08\x00\x00\x00\x00\x00"), true)

	// More items than the second receiver takes (MaxBatchItems 2), and more than any takes.
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{},{},{}]}`), false)
	f.Add([]byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}`+strings.Repeat(`,{}`, record.DefaultMaxItems)+`]}`), true)

	fx := newFixture(f, Options{MaxBodyBytes: 1 << 20}, 1<<30)
	limited := newFixture(f, Options{MaxBodyBytes: 1 << 20, MaxBatchItems: 2}, 1<<30)
	allowed := map[int]bool{200: true, 400: true, 413: true, 415: true}
	f.Fuzz(func(t *testing.T, body []byte, gzipped bool) {
		hdr := map[string]string{}
		if gzipped {
			body = gz(body)
			hdr["Content-Encoding"] = "gzip"
		}
		w := fx.post(t, "/audit/kas-a", body, hdr)
		if !allowed[w.Code] {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if w.Code == http.StatusOK {
			accepted := int(testutil.ToFloat64(fx.rc.m.events.WithLabelValues("kas-a", metrics.ResultAccepted)))
			if got := len(fx.stored(t)); got != accepted {
				t.Fatalf("spool holds %d records, %d acknowledged as accepted", got, accepted)
			}
		}
		// The receiver that takes two items answers as this one, but 413 for exactly the
		// batches of more, and holds none of its reading budget once it has answered.
		lw := limited.post(t, "/audit/kas-a", body, hdr)
		var a, d, i int
		if _, err := fmt.Sscanf(w.Body.String(), "accepted %d, duplicate %d, invalid %d", &a, &d, &i); err == nil && w.Code == http.StatusOK {
			if want := map[bool]int{true: 413, false: 200}[a+d+i > 2]; lw.Code != want {
				t.Fatalf("%d items: %d %s from the receiver that takes 2", a+d+i, lw.Code, lw.Body)
			}
		} else if lw.Code != w.Code && lw.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, %d from the receiver that takes 2: %s", w.Code, lw.Code, lw.Body)
		}
		if held := limited.rc.reading.inUse() + fx.rc.reading.inUse(); held != 0 {
			t.Fatalf("%d bytes of the reading budget held after the answers", held)
		}
	})
}
