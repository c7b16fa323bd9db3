package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/peertrail/peertrail/simulate"
)

// The two benchmarks below are a pair: BenchmarkDecodeOnly is the baseline the issue sets
// (decoding the same bodies with encoding/json into the audit types and nothing else), and
// BenchmarkReceiver is the whole acknowledged path: auth and naming, decode, normalise,
// duplicate check, frame encoding and compression, spool append and fsync. Both report
// events/s; compare them with -cpu 1 in one run (see BENCHMARKS.md).

const benchBatch = 400

func benchTemplate(b *testing.B) simulate.Template {
	tmpl, err := simulate.NewTemplate(simulate.NewEvents(1, nil), benchBatch)
	if err != nil {
		b.Fatal(err)
	}
	return tmpl
}

func BenchmarkDecodeOnly(b *testing.B) {
	tmpl := benchTemplate(b)
	b.ReportAllocs()
	var n int
	var body []byte
	for i := 0; b.Loop(); i++ {
		body = tmpl.AppendRender(body, 0, i)
		n += len(body)
		var list auditv1.EventList
		if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != benchBatch {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(n / max(b.N, 1)))
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkReceiver(b *testing.B) {
	tmpl := benchTemplate(b)
	f := newFixture(b, Options{}, 1<<40)
	h := f.handler()
	b.ReportAllocs()
	var n int
	var body []byte
	for i := 0; b.Loop(); i++ {
		body = tmpl.AppendRender(body, 0, i)
		n += len(body)
		req := httptest.NewRequest(http.MethodPost, "/audit/kas-a", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.SetBytes(int64(n / max(b.N, 1)))
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}
