// Package tracing sets up OpenTelemetry traces from the standard OTEL_*
// environment variables, off unless they ask for it, and carries W3C
// trace context across fairgate's listeners and its proxy.
package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Propagator reads and writes W3C trace context (traceparent, tracestate)
// and baggage.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Tracing is the set-up: a TracerProvider and how to stop it.
type Tracing struct {
	// Provider makes tracers; nil when tracing is off.
	Provider *sdktrace.TracerProvider
	// Exporter says where spans go, for the start-up log: "otlp grpc",
	// "otlp http/protobuf".
	Exporter string
}

// Tracer returns fairgate's tracer, or nil when tracing is off.
func (t Tracing) Tracer() trace.Tracer {
	if t.Provider == nil {
		return nil
	}
	return t.Provider.Tracer("github.com/fairgate/fairgate")
}

// Shutdown flushes the spans still queued and stops the exporter.
func (t Tracing) Shutdown(ctx context.Context) error {
	if t.Provider == nil {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

// FromEnv sets tracing up as the process's OTEL_* variables say. It is off
// unless OTEL_TRACES_EXPORTER is "otlp" or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set;
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc; the
// exporter reads the rest of OTEL_EXPORTER_OTLP_* (headers, timeout,
// certificates, compression), the SDK OTEL_TRACES_SAMPLER(_ARG) (default:
// parentbased_always_on), OTEL_BSP_* and OTEL_SERVICE_NAME /
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to "fairgate").
//
// defaults (may be nil) holds values of OTEL_* variables for those the
// environment does not set: envoyproxy/ratelimit's TRACING_* variables
// arrive so (package envoyenv). Of them FromEnv reads
// OTEL_TRACES_EXPORTER, the protocols, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER(_ARG)
// (parentbased_traceidratio only); the endpoint and the rest come from the
// environment.
func FromEnv(ctx context.Context, defaults map[string]string) (Tracing, error) {
	get := lookup(defaults)
	if ok, err := on(get); !ok {
		return Tracing{}, err
	}
	proto := cmp.Or(get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), get("OTEL_EXPORTER_OTLP_PROTOCOL"))
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		proto = "http/protobuf"
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return Tracing{}, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL=%q: want http/protobuf or grpc (http/json is not supported)", proto)
	}
	if err != nil {
		return Tracing{}, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	base := []attribute.KeyValue{semconv.ServiceName("fairgate"), semconv.ServiceVersion(version())}
	if name := defaults["OTEL_SERVICE_NAME"]; name != "" {
		base[0] = semconv.ServiceName(name)
	}
	res, err := resource.Merge(resource.NewSchemaless(base...), resource.Environment())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return Tracing{}, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if attrs := defaults["OTEL_RESOURCE_ATTRIBUTES"]; attrs != "" && os.Getenv("OTEL_RESOURCE_ATTRIBUTES") == "" {
		var kvs []attribute.KeyValue
		for _, kv := range strings.Split(attrs, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				kvs = append(kvs, attribute.String(k, v))
			}
		}
		if res, err = resource.Merge(res, resource.NewSchemaless(kvs...)); err != nil {
			return Tracing{}, fmt.Errorf("tracing: resource attributes: %w", err)
		}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" && defaults["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio" {
		ratio, err := strconv.ParseFloat(defaults["OTEL_TRACES_SAMPLER_ARG"], 64)
		if err != nil || ratio < 0 || ratio > 1 {
			return Tracing{}, fmt.Errorf("tracing: sampling ratio %q: want a number from 0 to 1", defaults["OTEL_TRACES_SAMPLER_ARG"])
		}
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return Tracing{Provider: tp, Exporter: "otlp " + proto}, nil
}

// LogErrors sends the OpenTelemetry SDK's own errors (an export that
// failed: a collector down or refusing) to log as WARN lines, instead of
// the plain-text lines the SDK prints by default into the log stream. The
// handler is the process's (OpenTelemetry keeps one).
func LogErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: the OpenTelemetry SDK failed (spans may be lost)", slog.String("error", err.Error()))
	}))
}

// Requested reports whether the process's environment (with defaults, as
// FromEnv takes them) asks for traces, or what is wrong with what it asks.
func Requested(defaults map[string]string) (bool, error) { return on(lookup(defaults)) }

// lookup reads an environment variable, else (unset or empty) its
// default.
func lookup(defaults map[string]string) func(string) string {
	return func(name string) string {
		return cmp.Or(os.Getenv(name), defaults[name])
	}
}

// on reports whether the environment asks for traces, or what is wrong
// with what it asks.
func on(get func(string) string) (bool, error) {
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch e := get("OTEL_TRACES_EXPORTER"); strings.ToLower(e) {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
	default:
		return false, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: want otlp or none", e)
	}
}

// version is the module's version from the build info ("devel" for a
// development build).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// MaxTraceState is the longest tracestate fairgate keeps, in bytes: the
// W3C Trace Context's 512, past which it lets a vendor truncate.
const MaxTraceState = 512

// maxTraceStateMember is the longest tracestate member kept when the whole
// is over MaxTraceState: W3C Trace Context removes longer ones first.
const maxTraceStateMember = 128

// Remote reads a caller's trace context from carrier for the server span
// of its request, and returns the context to start that span in with the
// options it needs. The caller's baggage is read either way.
//
// Trusted, the caller's span is the span's parent (its sampled flag then
// decides a parent-based sampler), as a service mesh whose proxies start
// the traces wants. Untrusted (fairgate's default), a caller cannot steer
// fairgate's traces: the span starts a new root, sampled by the root
// sampler alone, and the caller's span is only a link. Either way the
// caller's tracestate is bounded ([BoundTraceState]).
func Remote(ctx context.Context, carrier propagation.TextMapCarrier, trusted bool) (context.Context, []trace.SpanStartOption) {
	ctx = propagation.Baggage{}.Extract(ctx, carrier)
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return ctx, []trace.SpanStartOption{trace.WithNewRoot()}
	}
	sc = sc.WithTraceState(BoundTraceState(sc.TraceState()))
	if trusted {
		return trace.ContextWithRemoteSpanContext(ctx, sc), nil
	}
	return ctx, []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc})}
}

// BoundTraceState returns ts if it is at most MaxTraceState bytes long;
// else, as W3C Trace Context says, ts without its members over 128 bytes,
// then without members from the end until it fits.
func BoundTraceState(ts trace.TraceState) trace.TraceState {
	if len(ts.String()) <= MaxTraceState {
		return ts
	}
	var kept []string
	ts.Walk(func(k, v string) bool {
		if m := k + "=" + v; len(m) <= maxTraceStateMember {
			kept = append(kept, m)
		}
		return true
	})
	for len(strings.Join(kept, ",")) > MaxTraceState {
		kept = kept[:len(kept)-1]
	}
	out, err := trace.ParseTraceState(strings.Join(kept, ","))
	if err != nil { // cannot be: the members came from a parsed state
		return trace.TraceState{}
	}
	return out
}

// UnaryServer is a gRPC interceptor that, when tracer is not nil, makes a
// server span of each call; the call's traceparent metadata (as Envoy
// sends it with tracing on) is its parent when trusted, else a link (see
// [Remote]).
func UnaryServer(tracer trace.Tracer, trusted bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if tracer == nil {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx, opts := Remote(ctx, mdCarrier(md), trusted)
		ctx, span := tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"), append(opts, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", info.FullMethod)))...)
		defer span.End()
		resp, err := h(ctx, req)
		if err != nil {
			span.SetStatus(codes.Error, status.Code(err).String())
		}
		return resp, err
	}
}

// mdCarrier reads W3C trace context from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
