// Package tracing sets up OpenTelemetry traces from the standard OTEL_*
// environment variables, off unless they ask for it, and carries W3C
// trace context across fairgate's listeners and its proxy.
package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

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
func FromEnv(ctx context.Context) (Tracing, error) {
	if ok, err := on(); !ok {
		return Tracing{}, err
	}
	proto := cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
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
	res, err := resource.Merge(
		resource.NewSchemaless(semconv.ServiceName("fairgate"), semconv.ServiceVersion(version())),
		resource.Environment(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return Tracing{}, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return Tracing{Provider: tp, Exporter: "otlp " + proto}, nil
}

// on reports whether the environment asks for traces, or what is wrong
// with what it asks.
func on() (bool, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false, nil
	}
	switch e := os.Getenv("OTEL_TRACES_EXPORTER"); strings.ToLower(e) {
	case "otlp":
		return true, nil
	case "none":
		return false, nil
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", nil
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

// UnaryServer is a gRPC interceptor that, when tracer is not nil, makes a
// server span of each call, its parent from the call's traceparent
// metadata (as Envoy sends it with tracing on).
func UnaryServer(tracer trace.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if tracer == nil {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = Propagator.Extract(ctx, mdCarrier(md))
		ctx, span := tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"), trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", info.FullMethod)))
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
