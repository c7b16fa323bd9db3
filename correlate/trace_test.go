package correlate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestProxiedChainBecomesATrace checks the trace of a proxied chain: one trace whose ID is the
// auditID, an entry span with the peer's span as its child, timed by the audit timestamps.
func TestProxiedChainBecomesATrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	h := newHarness(t, DefaultOptions())
	h.co.tracer = NewTracerWith(rec)
	r := podgroups("0f0e0d0c-0b0a-4908-8706-050403020100", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
	local := pods("11111111-2222-4333-8444-555555555555", t0)
	h.feed(local.local("kas-b", 200, ""))
	h.settle()
	if err := h.co.tracer.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (entry and peer of the one proxied chain)", len(spans))
	}
	var entry, peer sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.Name() {
		case "entry kas-a":
			entry = s
		case "peer kas-c":
			peer = s
		}
	}
	if entry == nil || peer == nil {
		t.Fatalf("spans %q and %q", spans[0].Name(), spans[1].Name())
	}
	if got := entry.SpanContext().TraceID().String(); got != "0f0e0d0c0b0a49088706050403020100" {
		t.Errorf("trace ID %s is not the auditID", got)
	}
	if peer.Parent().SpanID() != entry.SpanContext().SpanID() || peer.SpanContext().TraceID() != entry.SpanContext().TraceID() {
		t.Errorf("the peer span is not the entry span's child")
	}
	if !entry.StartTime().Equal(t0) || !entry.EndTime().Equal(t0.Add(20*time.Millisecond)) {
		t.Errorf("entry span %s..%s, want the entry's audit timestamps", entry.StartTime(), entry.EndTime())
	}
	if !peer.StartTime().Equal(t0.Add(2*time.Millisecond)) || !peer.EndTime().Equal(t0.Add(15*time.Millisecond)) {
		t.Errorf("peer span %s..%s, want the peer's audit timestamps", peer.StartTime(), peer.EndTime())
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range entry.Attributes() {
		attrs[a.Key] = a.Value
	}
	if attrs["k8s.audit_id"].AsString() != r.id || attrs["k8s.resource"].AsString() != "podgroups" ||
		attrs["k8s.user"].AsString() != "alice" || attrs["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("entry span attributes %v", entry.Attributes())
	}
}

func TestTraceIDOfAnyAuditID(t *testing.T) {
	if TraceID("client-chosen-id") == TraceID("another-id") || !TraceID("client-chosen-id").IsValid() {
		t.Fatal("non-UUID auditIDs must still map to distinct valid trace IDs")
	}
}

// TestTracerExportsOverOTLP sends a chain's trace to an OTLP/HTTP endpoint and reads it back.
func TestTracerExportsOverOTLP(t *testing.T) {
	got := make(chan *collectortrace.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		got <- &req
	}))
	defer srv.Close()
	tr, err := NewTracer(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, DefaultOptions())
	h.co.tracer = tr
	r := podgroups("0f0e0d0c-0b0a-4908-8706-050403020100", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
	h.settle()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case req := <-got:
		n := 0
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					n++
					if fmt.Sprintf("%x", s.TraceId) != "0f0e0d0c0b0a49088706050403020100" {
						t.Errorf("exported trace ID %x", s.TraceId)
					}
				}
			}
		}
		if n != 2 {
			t.Fatalf("exported %d spans, want 2", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing exported")
	}
}
