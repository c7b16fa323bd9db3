package correlate

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/peertrail/peertrail/chain"
)

// TestProxiedChainBecomesATrace checks the trace of a proxied chain: one trace whose ID is the
// auditID, an entry span with the peer's span as its child, timed by the audit timestamps.
func TestProxiedChainBecomesATrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	h := newHarness(t, DefaultJoinOptions())
	h.co.tracer = NewTracerWith(rec)
	h.co.caps.Note("kas-a", Sighting{Version: "v1.35.4", Process: "kas-a-1", At: t0}) // its own call: its version
	r := podgroups("0f0e0d0c-0b0a-4908-8706-050403020100", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
	local := pods("11111111-2222-4333-8444-555555555555", t0)
	h.feed(local.local("kas-b", 200, ""))
	h.settle()
	h.pastLateWindow()
	if err := h.co.tracer.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == TraceID(r.id) {
			spans = append(spans, s)
		}
	}
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (entry and peer of the proxied chain)", len(spans))
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
		attrs["user.name"].AsString() != "alice" || attrs["http.response.status_code"].AsInt64() != 200 ||
		attrs["http.request.method"].AsString() != "GET" || attrs["url.path"].AsString() != "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups" ||
		attrs["peertrail.chain.class"].AsString() != "proxied" || attrs["k8s.apiserver.version"].AsString() != "v1.35.4" {
		t.Errorf("entry span attributes %v", entry.Attributes())
	}
	for _, a := range peer.Attributes() {
		if a.Key == "k8s.apiserver.version" {
			t.Errorf("peer span: %s %s, but kas-c's version is unknown", a.Key, a.Value.String())
		}
	}
}

// Every final chain becomes a trace, whatever its class: a span per side that exists (the
// peer's the entry's child, a loop's further apiserver the peer's), the class and findings on
// each, status Error on the first span of a fault and on a side that answered 5xx.
func TestEveryClassBecomesATrace(t *testing.T) {
	at := t0.Add(time.Minute)
	cases := []struct {
		class   chain.Class
		records func(h *harness) string
		sides   []string // span names, parent first
		status  codes.Code
	}{{
		class:   chain.ClassLocal,
		records: func(h *harness) string { r := pods("l1", at); h.feed(r.local("kas-a", 200, "")); return r.id },
		sides:   []string{"entry kas-a"},
		status:  codes.Unset,
	}, {
		class: chain.ClassProxied,
		records: func(h *harness) string {
			r := podgroups("p1", at)
			h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
			return r.id
		},
		sides:  []string{"entry kas-a", "peer kas-c"},
		status: codes.Unset,
	}, {
		class: chain.ClassProxyFailed,
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("f1", at)
			h.feed(r.entry("kas-a", 503))
			return r.id
		},
		sides:  []string{"entry kas-a"},
		status: codes.Error,
	}, {
		class: chain.ClassMisleading404,
		records: func(h *harness) string {
			learnPodgroupsOnC(h)
			r := podgroups("m1", at)
			h.feed(r.local("kas-a", 404, msgResourceNotFound))
			return r.id
		},
		sides:  []string{"entry kas-a"},
		status: codes.Error,
	}, {
		class: chain.ClassBroken,
		records: func(h *harness) string {
			r := podgroups("b1", at)
			h.feed(r.peer("kas-c", addrA, 201))
			return r.id
		},
		sides:  []string{"peer kas-c"},
		status: codes.Error,
	}, {
		class: chain.ClassLoop,
		records: func(h *harness) string {
			r := podgroups("x1", at)
			second := r.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client, addrA, addrC}, code: 200, objects: true, start: 3 * time.Millisecond, end: 10 * time.Millisecond})
			h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200), second)
			return r.id
		},
		sides:  []string{"entry kas-a", "peer kas-c", "further kas-b"},
		status: codes.Error,
	}, {
		class: chain.ClassInternal,
		records: func(h *harness) string {
			r := req{id: "i1", verb: "get", uri: "/apis", user: userAPIServer, groups: []string{"system:masters"}, at: at}
			recs := r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{addrC}, code: 200, end: time.Millisecond})
			for i := range recs {
				recs[i].UserAgent = ""
			}
			h.feed(recs)
			return r.id
		},
		sides:  []string{"entry kas-a"},
		status: codes.Unset,
	}}
	tested := map[chain.Class]bool{}
	for _, tc := range cases {
		t.Run(string(tc.class), func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			h := newHarness(t, DefaultJoinOptions())
			h.co.tracer = NewTracerWith(rec)
			id := tc.records(h)
			h.settle()
			h.pastLateWindow()
			ch := h.chain(id)
			if ch.Class != tc.class {
				t.Fatalf("class %s, want %s (%s)", ch.Class, tc.class, ch.Explanation)
			}
			tested[tc.class] = true
			// Every final chain the sink got has its trace (the seed chains too).
			traces := map[string]int{}
			for _, s := range rec.Ended() {
				traces[s.SpanContext().TraceID().String()]++
			}
			for _, c := range h.sink.chains {
				if traces[TraceID(c.AuditID).String()] == 0 {
					t.Errorf("final %s chain %s has no trace", c.Class, c.AuditID)
				}
			}
			var spans []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanContext().TraceID() == TraceID(id) {
					spans = append(spans, s)
				}
			}
			byName := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				byName[s.Name()] = s
			}
			if len(spans) != len(tc.sides) || len(byName) != len(tc.sides) {
				t.Fatalf("spans %v, want %v", names(spans), tc.sides)
			}
			for i, name := range tc.sides {
				s := byName[name]
				if s == nil {
					t.Fatalf("no span %q in %v", name, names(spans))
				}
				if i == 0 && s.Parent().IsValid() {
					t.Errorf("%s has a parent", name)
				}
				if i > 0 && s.Parent().SpanID() != byName[tc.sides[i-1]].SpanContext().SpanID() {
					t.Errorf("%s is not the child of %s", name, tc.sides[i-1])
				}
				attrs := map[attribute.Key]attribute.Value{}
				for _, a := range s.Attributes() {
					attrs[a.Key] = a.Value
				}
				findings := attrs["peertrail.chain.findings"].AsStringSlice()
				if attrs["peertrail.chain.class"].AsString() != string(tc.class) || len(findings) != len(ch.Findings) ||
					attrs["k8s.audit_id"].AsString() != id || attrs["peertrail.chain.explanation"].AsString() != ch.Explanation {
					t.Errorf("%s: attributes %v, want the chain's class %s and findings %v", name, s.Attributes(), tc.class, ch.Findings)
				}
				if attrs["http.response.status_code"].AsInt64() == 0 || attrs["client.address"].AsString() == "" {
					t.Errorf("%s: no status code or client address in %v", name, s.Attributes())
				}
				if s.EndTime().Before(s.StartTime()) {
					t.Errorf("%s ends before it starts", name)
				}
			}
			if got := byName[tc.sides[0]].Status().Code; got != tc.status {
				t.Errorf("status %v, want %v", got, tc.status)
			}
			if tc.status == codes.Error && byName[tc.sides[0]].Status().Description == "" {
				t.Errorf("an error status without a description")
			}
		})
	}
	for _, c := range chain.Classes {
		if !tested[c] {
			t.Errorf("no trace test of class %s", c)
		}
	}
}

// pastLateWindow moves the stream's clock past the late window, so that the final chains leave
// memory and are traced.
func (h *harness) pastLateWindow() {
	h.t.Helper()
	next := h.co.now().Add(h.co.opts.LateWindow + time.Minute)
	h.co.now = func() time.Time { return next }
	if _, err := h.co.Consume(context.Background(), nil); err != nil {
		h.t.Fatal(err)
	}
}

// A chain that a late record reclassifies is traced once, in its final class: a span per side
// under its trace ID, not the first verdict's spans beside the second's.
func TestReclassifiedChainIsTracedOnce(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	h := newHarness(t, DefaultJoinOptions())
	h.co.tracer = NewTracerWith(rec)
	r := podgroups("0f0e0d0c-0b0a-4908-8706-0504030201ff", t0)
	h.feed(r.peer("kas-c", addrA, 200))
	// The chain window passes on the stream: other traffic 40 s later.
	other := pods("other", t0.Add(40*time.Second))
	h.feed(other.records(sideOpts{apiserver: "kas-b", sourceIPs: []string{client}, code: 200, received: t0.Add(41 * time.Second)}))
	if c := h.chain(r.id); c.Class != chain.ClassBroken || c.Revision != 1 {
		t.Fatalf("before the late record: %s revision %d", c.Class, c.Revision)
	}
	// kas-a's webhook was backing off; its record arrives two minutes late.
	h.feed(r.records(sideOpts{apiserver: "kas-a", sourceIPs: []string{client}, code: 200, end: 20 * time.Millisecond, received: t0.Add(2 * time.Minute)}))
	h.settle()
	if c := h.chain(r.id); c.Class != chain.ClassProxied || c.Revision != 2 {
		t.Fatalf("after the late record: %s revision %d", c.Class, c.Revision)
	}
	h.pastLateWindow()
	var spans []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == TraceID(r.id) {
			spans = append(spans, s)
		}
	}
	if got := names(spans); len(got) != 2 || got[0] == got[1] {
		t.Fatalf("spans %v, want one entry and one peer span", got)
	}
	for _, s := range spans {
		for _, a := range s.Attributes() {
			switch {
			case a.Key == "peertrail.chain.class" && a.Value.AsString() != string(chain.ClassProxied),
				a.Key == "peertrail.chain.revision" && a.Value.AsInt64() != 2:
				t.Errorf("%s: %s=%s, want the final verdict (proxied, revision 2)", s.Name(), a.Key, a.Value.String())
			}
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("%s: status %v, want unset (proxied)", s.Name(), s.Status())
		}
	}
}

// Close traces the final chains still held (their late window has not passed), so none is lost
// when serve stops.
func TestCloseTracesTheChainsStillHeld(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	h := newHarness(t, DefaultJoinOptions())
	h.co.tracer = NewTracerWith(rec)
	r := podgroups("0f0e0d0c-0b0a-4908-8706-0504030201fe", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
	h.settle()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans while the chain can still be reclassified, want none yet", n)
	}
	if err := h.co.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == TraceID(r.id) {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d spans of the proxied chain after Close, want 2", n)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
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
	h := newHarness(t, DefaultJoinOptions())
	h.co.tracer = tr
	r := podgroups("0f0e0d0c-0b0a-4908-8706-050403020100", t0)
	h.feed(r.entry("kas-a", 200), r.peer("kas-c", addrA, 200))
	h.settle()
	h.pastLateWindow()
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
	default: // Shutdown returns once the batch is exported (or failed)
		t.Fatal("nothing exported")
	}
}

// The exporter honours the standard OTEL_* environment: the endpoint (TLS, with the CA of
// OTEL_EXPORTER_OTLP_CERTIFICATE), headers, the service name and resource attributes.
func TestTracerHonoursOTELEnvironment(t *testing.T) {
	type export struct {
		tenant string
		req    *collectortrace.ExportTraceServiceRequest
	}
	got := make(chan export, 4)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		got <- export{r.Header.Get("X-Tenant"), &req}
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if TracingConfigured("") {
		t.Fatal("tracing configured without an endpoint or OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", ca)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=blue")
	t.Setenv("OTEL_SERVICE_NAME", "peertrail-staging")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging")
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if TracingConfigured("") {
		t.Error("tracing configured with OTEL_TRACES_EXPORTER=none")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	if !TracingConfigured("") {
		t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT does not turn tracing on")
	}
	tr, err := NewTracer(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, DefaultJoinOptions())
	h.co.tracer = tr
	r := podgroups("0f0e0d0c-0b0a-4908-8706-050403020101", t0)
	h.feed(r.peer("kas-c", addrA, 201)) // broken: the entry's record is missing
	h.settle()
	h.pastLateWindow()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e.tenant != "blue" {
			t.Errorf("header X-Tenant %q, want blue (OTEL_EXPORTER_OTLP_HEADERS)", e.tenant)
		}
		res := map[string]string{}
		spans := 0
		for _, rs := range e.req.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				res[a.Key] = a.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				spans += len(ss.Spans)
			}
		}
		if res["service.name"] != "peertrail-staging" || res["deployment.environment.name"] != "staging" {
			t.Errorf("resource %v, want OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES", res)
		}
		if spans != 1 {
			t.Errorf("%d spans of the broken chain, want 1 (its peer's)", spans)
		}
	default: // Shutdown returns once the batch is exported (or failed)
		t.Fatal("nothing exported")
	}
}
