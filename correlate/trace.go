package correlate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/peertrail/peertrail/chain"
)

// Tracer turns every final chain into an OpenTelemetry trace: one trace per request, one span
// per side that exists (the entry's, then the peer's as its child, then any further
// apiserver's of a loop as the peer's child), timed by their audit timestamps. The chain's
// class, findings and explanation are on every span; a span whose side answered 5xx, and the
// first span of a chain whose class is a fault (proxy_failed, misleading_404, broken, loop),
// have status Error. Attributes use the OpenTelemetry semantic conventions where they have a
// name (http.request.method, http.response.status_code, url.path, url.query, user.name,
// client.address, user_agent.original, k8s.namespace.name, error.type) and peertrail.* or k8s.*
// names otherwise. The trace ID is the auditID itself (a UUID is 16 bytes, like a trace ID), so
// a trace is found by auditID. The Correlator emits a chain once, when it leaves memory (a late
// window after it became final, or when serve stops), so its trace has the final verdict and one
// span per side even when a late record reclassified it.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// TracingConfigured says whether traces are to be exported: an endpoint was given, or the
// standard environment names one (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_TRACES_EXPORTER is not "none".
func TracingConfigured(endpoint string) bool {
	if endpoint != "" {
		return true
	}
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTracer exports over OTLP/HTTP, configured by the standard OTEL_* environment (endpoint,
// headers, TLS certificates, compression, timeout: OTEL_EXPORTER_OTLP_* and
// OTEL_EXPORTER_OTLP_TRACES_*; the resource: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES).
// endpoint, when not "", is the base URL (http://otel-collector:4318) and overrides the
// environment's endpoint; the rest of the environment still applies.
func NewTracer(ctx context.Context, endpoint string) (*Tracer, error) {
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(endpoint, "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName("peertrail")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, over the defaults
	)
	if err != nil {
		return nil, fmt.Errorf("OTel resource: %w", err)
	}
	return newTracer(sdktrace.NewBatchSpanProcessor(exp), res), nil
}

// NewTracerWith sends spans to sp (tests pass an in-memory recorder).
func NewTracerWith(sp sdktrace.SpanProcessor) *Tracer {
	return newTracer(sp, resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("peertrail")))
}

func newTracer(sp sdktrace.SpanProcessor, res *resource.Resource) *Tracer {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithIDGenerator(auditIDs{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(res),
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

// faultClasses are the classes whose trace has status Error.
var faultClasses = map[chain.Class]bool{chain.ClassProxyFailed: true, chain.ClassMisleading404: true, chain.ClassBroken: true, chain.ClassLoop: true}

// httpMethod is the HTTP method of a Kubernetes verb (a non-resource request's verb is the
// method already, in lower case).
func httpMethod(verb string) string {
	switch verb {
	case "get", "list", "watch", "head":
		if verb == "head" {
			return "HEAD"
		}
		return "GET"
	case "create", "post":
		return "POST"
	case "update", "put":
		return "PUT"
	case "patch":
		return "PATCH"
	case "delete", "deletecollection":
		return "DELETE"
	case "options":
		return "OPTIONS"
	}
	return "_OTHER"
}

// Emit records the chain as a trace: a span per side that exists, none for a chain without
// sides.
func (t *Tracer) Emit(ctx context.Context, c *chain.Chain) {
	type role struct {
		name string
		side *chain.Side
	}
	var sides []role
	if c.Entry != nil {
		sides = append(sides, role{"entry", c.Entry})
	}
	if c.Peer != nil {
		sides = append(sides, role{"peer", c.Peer})
	}
	for _, o := range c.Others {
		if o != nil {
			sides = append(sides, role{"further", o})
		}
	}
	if len(sides) == 0 {
		return
	}
	ctx = context.WithValue(ctx, traceIDKey{}, TraceID(c.AuditID))
	findings := make([]string, len(c.Findings))
	for i, f := range c.Findings {
		findings[i] = string(f)
	}
	path, query, _ := strings.Cut(c.RequestURI, "?")
	common := []attribute.KeyValue{
		attribute.String("k8s.audit_id", c.AuditID),
		attribute.String("peertrail.chain.id", c.ID),
		attribute.String("peertrail.chain.class", string(c.Class)),
		attribute.StringSlice("peertrail.chain.findings", findings),
		attribute.String("peertrail.chain.explanation", c.Explanation),
		attribute.Int("peertrail.chain.revision", c.Revision),
		attribute.String("k8s.verb", c.Verb),
		semconv.HTTPRequestMethodKey.String(httpMethod(c.Verb)),
		attribute.String("k8s.group", c.Group),
		attribute.String("k8s.version", c.Version),
		attribute.String("k8s.resource", c.Resource),
		semconv.URLPath(path),
		semconv.UserName(c.User),
	}
	if query != "" {
		common = append(common, semconv.URLQuery(query))
	}
	if c.Subresource != "" {
		common = append(common, attribute.String("k8s.subresource", c.Subresource))
	}
	if c.Namespace != "" {
		common = append(common, semconv.K8SNamespaceName(c.Namespace))
	}
	if c.Name != "" {
		common = append(common, attribute.String("k8s.object.name", c.Name))
	}
	if c.RealUser != "" {
		common = append(common, attribute.String("peertrail.real_user", c.RealUser))
	}
	spans := make([]trace.Span, len(sides))
	for i, r := range sides {
		s := r.side
		start, _ := spanTimes(c, s)
		attrs := append(slices.Clip(common),
			attribute.String("peertrail.side", r.name),
			attribute.String("k8s.apiserver", s.APIServer),
			attribute.StringSlice("k8s.audit.stages", s.Stages),
		)
		if s.Code != 0 {
			attrs = append(attrs, semconv.HTTPResponseStatusCode(int(s.Code)))
		}
		if len(s.SourceIPs) > 0 {
			attrs = append(attrs, semconv.ClientAddress(s.SourceIPs[0]), attribute.StringSlice("k8s.audit.source_ips", s.SourceIPs))
		}
		if s.UserAgent != "" {
			attrs = append(attrs, semconv.UserAgentOriginal(s.UserAgent))
		}
		if s.APIServerVersion != "" {
			attrs = append(attrs, attribute.String("k8s.apiserver.version", s.APIServerVersion))
		}
		var span trace.Span
		ctx, span = t.tracer.Start(ctx, r.name+" "+s.APIServer,
			trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		switch {
		case s.Code >= 500:
			span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(int(s.Code))))
			span.SetStatus(codes.Error, firstNonEmpty(s.Message, c.Explanation))
		case i == 0 && faultClasses[c.Class]:
			span.SetAttributes(semconv.ErrorTypeKey.String(string(c.Class)))
			span.SetStatus(codes.Error, c.Explanation)
		}
		spans[i] = span
	}
	// Children end before their parents.
	for i := len(sides) - 1; i >= 0; i-- {
		_, end := spanTimes(c, sides[i].side)
		spans[i].End(trace.WithTimestamp(end))
	}
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// spanTimes are a side's span's start and end: its audit timestamps, the one it has for both
// when a stage is missing, and when it has neither, when peertrail received the chain.
func spanTimes(c *chain.Chain, s *chain.Side) (start, end time.Time) {
	start, end = s.RequestReceived, s.Completed
	if start.IsZero() {
		start = end
	}
	if start.IsZero() {
		start = c.FirstReceived
	}
	if end.IsZero() || end.Before(start) {
		end = start
	}
	return start, end
}
