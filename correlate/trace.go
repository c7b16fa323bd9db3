package correlate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracer turns proxied chains into OpenTelemetry traces: one trace per request, a span for the
// entry apiserver and a child span for the peer, timed by their audit timestamps. The trace ID
// is the auditID itself (a UUID is 16 bytes, like a trace ID), so a trace is found by auditID.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// NewTracer exports to an OTLP/HTTP endpoint (e.g. http://otel-collector:4318).
func NewTracer(ctx context.Context, endpoint string) (*Tracer, error) {
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/") + "/v1/traces")}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", endpoint, err)
	}
	return NewTracerWith(sdktrace.NewBatchSpanProcessor(exp)), nil
}

// NewTracerWith sends spans to sp (tests pass an in-memory recorder).
func NewTracerWith(sp sdktrace.SpanProcessor) *Tracer {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithIDGenerator(auditIDs{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("peertrail"))),
	)
	return &Tracer{tp: tp, tracer: tp.Tracer("github.com/peertrail/peertrail/correlate")}
}

// Shutdown flushes and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.tp.Shutdown(ctx) }

type traceIDKey struct{}

// auditIDs gives a root span the trace ID carried in its context.
type auditIDs struct{}

func (auditIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, _ := ctx.Value(traceIDKey{}).(trace.TraceID)
	if !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	return tid, newSpanID()
}

func (auditIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var s trace.SpanID
	_, _ = rand.Read(s[:])
	return s
}

// TraceID is the trace ID of the chain with auditID: the UUID's bytes, or a hash of any other ID.
func TraceID(auditID string) trace.TraceID {
	var tid trace.TraceID
	if b, err := hex.DecodeString(strings.ReplaceAll(auditID, "-", "")); err == nil && len(b) == 16 {
		copy(tid[:], b)
	} else {
		tid = trace.TraceID(xxh3.HashString128(auditID).Bytes())
	}
	return tid
}

// Emit records the chain as a trace.
func (t *Tracer) Emit(ctx context.Context, c *Chain) {
	if c.Entry == nil || c.Peer == nil {
		return
	}
	ctx = context.WithValue(ctx, traceIDKey{}, TraceID(c.AuditID))
	common := []attribute.KeyValue{
		attribute.String("k8s.audit_id", c.AuditID),
		attribute.String("k8s.verb", c.Verb),
		attribute.String("k8s.group", c.Group),
		attribute.String("k8s.version", c.Version),
		attribute.String("k8s.resource", c.Resource),
		attribute.String("k8s.namespace", c.Namespace),
		attribute.String("k8s.user", c.User),
		attribute.String("url.path", c.RequestURI),
		attribute.String("peertrail.class", string(c.Class)),
	}
	findings := make([]string, len(c.Findings))
	for i, f := range c.Findings {
		findings[i] = string(f)
	}
	ctx, entry := t.tracer.Start(ctx, "entry "+c.Entry.APIServer,
		trace.WithTimestamp(c.Entry.RequestReceived), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(common...),
		trace.WithAttributes(
			attribute.String("k8s.apiserver", c.Entry.APIServer),
			attribute.Int("http.response.status_code", int(c.Entry.Code)),
			attribute.StringSlice("peertrail.findings", findings),
			attribute.String("k8s.real_user", c.RealUser),
		))
	_, peer := t.tracer.Start(ctx, "peer "+c.Peer.APIServer,
		trace.WithTimestamp(c.Peer.RequestReceived), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(common...),
		trace.WithAttributes(
			attribute.String("k8s.apiserver", c.Peer.APIServer),
			attribute.Int("http.response.status_code", int(c.Peer.Code)),
		))
	if c.Peer.Code >= 500 {
		peer.SetStatus(codes.Error, c.Peer.Message)
	}
	peer.End(trace.WithTimestamp(c.Peer.Completed))
	if c.Entry.Code >= 500 {
		entry.SetStatus(codes.Error, c.Entry.Message)
	}
	entry.End(trace.WithTimestamp(c.Entry.Completed))
}
