package tracing

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// clearEnv unsets every variable FromEnv reads, for the test.
func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}

func TestFromEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		on   bool
		err  string
	}{
		{"nothing set: off", nil, false, ""},
		{"an endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, ""},
		{"a traces endpoint: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, ""},
		{"otlp exporter: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"grpc: on", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true, ""},
		{"none: off", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}, false, ""},
		{"disabled: off", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"zipkin: refused", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, `OTEL_TRACES_EXPORTER="zipkin": want otlp or none`},
		{"http/json: refused", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, false, "want http/protobuf or grpc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			tr, err := FromEnv(context.Background(), nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			if (tr.Provider != nil) != c.on || (tr.Tracer() != nil) != c.on {
				t.Fatalf("on = %v, want %v", tr.Provider != nil, c.on)
			}
		})
	}
}

// export starts a span through FromEnv's set-up and shuts it down, which
// sends the span.
func export(t *testing.T) {
	t.Helper()
	tr, err := FromEnv(context.Background(), nil)
	if err != nil || tr.Provider == nil {
		t.Fatalf("FromEnv: %v (on: %v)", err, tr.Provider != nil)
	}
	_, span := tr.Tracer().Start(context.Background(), "fairgate.decide")
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// received checks an OTLP export request: one span named fairgate.decide
// from service.name "fairgate" (the default) or OTEL_SERVICE_NAME's.
func received(t *testing.T, req *collectorpb.ExportTraceServiceRequest, service string) {
	t.Helper()
	rs := req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("export request: %v", req)
	}
	if name := rs[0].GetScopeSpans()[0].GetSpans()[0].GetName(); name != "fairgate.decide" {
		t.Errorf("span %q", name)
	}
	for _, a := range rs[0].GetResource().GetAttributes() {
		if a.GetKey() == "service.name" && a.GetValue().GetStringValue() != service {
			t.Errorf("service.name %q, want %q", a.GetValue().GetStringValue(), service)
		}
	}
}

// TestOTLPHTTP: spans reach a real OTLP/HTTP receiver at the endpoint the
// environment names.
func TestOTLPHTTP(t *testing.T) {
	got := make(chan *collectorpb.ExportTraceServiceRequest, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := &collectorpb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, req) != nil {
			t.Errorf("receiver got %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		got <- req
	}))
	defer rcv.Close()
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	export(t)
	received(t, <-got, "fairgate")
}

type traceService struct {
	collectorpb.UnimplementedTraceServiceServer
	got chan *collectorpb.ExportTraceServiceRequest
}

func (s traceService) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.got <- req
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// TestOTLPGRPC: with OTEL_EXPORTER_OTLP_PROTOCOL=grpc, spans reach a real
// OTLP/gRPC receiver, under OTEL_SERVICE_NAME.
func TestOTLPGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	svc := traceService{got: make(chan *collectorpb.ExportTraceServiceRequest, 1)}
	collectorpb.RegisterTraceServiceServer(g, svc)
	go g.Serve(ln)
	defer g.Stop()
	clearEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "edge-limiter")
	export(t)
	received(t, <-svc.got, "edge-limiter")
}

// TestUnaryServer: a gRPC call's traceparent metadata (as Envoy sends it)
// is, trusted, the parent of the call's server span, and its handler's
// spans are children of that; untrusted, the call's span starts a new
// trace linked to the caller's.
func TestUnaryServer(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		exp := tracetest.NewInMemoryExporter()
		tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
		md := metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		ctx := metadata.NewIncomingContext(context.Background(), md)
		info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
		_, err := UnaryServer(tr, trusted)(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
			_, span := tr.Start(ctx, "fairgate.decide")
			span.End()
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans, want 2", len(spans))
		}
		decide, call := spans[0], spans[1]
		joined := call.Parent.SpanID().String() == "00f067aa0ba902b7" && call.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736"
		linked := len(call.Links) == 1 && call.Links[0].SpanContext.SpanID().String() == "00f067aa0ba902b7" && !call.Parent.IsValid()
		if call.Name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || joined != trusted || linked == trusted || decide.Parent.SpanID() != call.SpanContext.SpanID() {
			t.Errorf("trusted %v: call %s (parent %s, trace %s, links %v), decision's parent %s", trusted, call.Name, call.Parent.SpanID(), call.SpanContext.TraceID(), call.Links, decide.Parent.SpanID())
		}
		// Off, it adds nothing.
		if _, err := UnaryServer(nil, trusted)(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil || len(exp.GetSpans()) != 2 {
			t.Errorf("off: %v, %d spans", err, len(exp.GetSpans()))
		}
	}
}

// TestRemoteSampling: under parentbased_traceidratio with a ratio of 0, a
// caller's sampled flag samples fairgate's span only when the caller's
// trace context is trusted; untrusted, the span is a new root (sampled by
// the ratio alone) with the caller's span as a link, and its tracestate is
// bounded.
func TestRemoteSampling(t *testing.T) {
	long := make([]string, 24) // 24 members of 250 bytes: 6 KB
	for i := range long {
		long[i] = fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 246))
	}
	const caller, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, c := range []struct {
		trusted bool
		flags   string
		sampled bool
	}{
		{false, "01", false},
		{false, "00", false},
		{true, "01", true},
		{true, "00", false},
	} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))
		h := http.Header{}
		h.Set("Traceparent", "00-"+caller+"-"+callerSpan+"-"+c.flags)
		h.Set("Tracestate", "short=1,"+strings.Join(long, ","))
		ctx, opts := Remote(context.Background(), propagation.HeaderCarrier(h), c.trusted)
		_, span := tp.Tracer("test").Start(ctx, "fairgate GET", opts...)
		span.End()
		spans := exp.GetSpans()
		if got := len(spans) == 1; got != c.sampled {
			t.Errorf("trusted %v, flags %s: sampled %v, want %v", c.trusted, c.flags, got, c.sampled)
		}
		sc := span.SpanContext()
		if (sc.TraceID().String() == caller) != c.trusted {
			t.Errorf("trusted %v: trace %s, caller's %s", c.trusted, sc.TraceID(), caller)
		}
		if n := len(sc.TraceState().String()); n > MaxTraceState {
			t.Errorf("trusted %v: the span's tracestate is %d bytes", c.trusted, n)
		}
		if len(spans) == 1 && !c.trusted {
			l := spans[0].Links
			if len(l) != 1 || l[0].SpanContext.TraceID().String() != caller || len(l[0].SpanContext.TraceState().String()) > MaxTraceState {
				t.Errorf("untrusted: links %v, want the caller's span with a bounded tracestate", l)
			}
		}
	}
	// The root sampler alone decides an untrusted request: always_on
	// samples it whatever the caller's flag says, with the caller's span
	// as its link.
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := http.Header{}
	h.Set("Traceparent", "00-"+caller+"-"+callerSpan+"-00")
	h.Set("Tracestate", "short=1,"+strings.Join(long, ","))
	ctx, opts := Remote(context.Background(), propagation.HeaderCarrier(h), false)
	_, span := tp.Tracer("test").Start(ctx, "fairgate GET", opts...)
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Parent.IsValid() || len(spans[0].Links) != 1 || spans[0].Links[0].SpanContext.SpanID().String() != callerSpan {
		t.Fatalf("untrusted, unsampled caller under always_on: %+v", spans)
	}
	if ts := spans[0].Links[0].SpanContext.TraceState().String(); len(ts) > MaxTraceState || !strings.HasPrefix(ts, "short=1") {
		t.Errorf("the link's tracestate %q: want at most %d bytes, the short member kept", ts, MaxTraceState)
	}
}

// TestBoundTraceState: a tracestate over 512 bytes loses its members over
// 128 bytes first, then members from the end, as W3C Trace Context says.
func TestBoundTraceState(t *testing.T) {
	// m is a member of n bytes, its key starting with k (a value is at
	// most 256 bytes: long members have long keys too).
	m := func(k string, n int) string {
		k += strings.Repeat("k", max(0, n/2-len(k)))
		return k + "=" + strings.Repeat("v", n-len(k)-1)
	}
	for _, c := range []struct{ in, want string }{
		{"a=1,b=2", "a=1,b=2"},
		{strings.Join([]string{m("a", 100), m("big", 400)}, ","), strings.Join([]string{m("a", 100), m("big", 400)}, ",")}, // 501: fits
		{strings.Join([]string{m("a", 100), m("big", 450), m("c", 100)}, ","), strings.Join([]string{m("a", 100), m("c", 100)}, ",")},
		{strings.Join([]string{m("a", 120), m("b", 120), m("c", 120), m("d", 120), m("e", 120)}, ","), strings.Join([]string{m("a", 120), m("b", 120), m("c", 120), m("d", 120)}, ",")},
	} {
		ts, err := trace.ParseTraceState(c.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := BoundTraceState(ts).String(); got != c.want {
			t.Errorf("BoundTraceState(%d bytes) = %d bytes %.60q…, want %d bytes", len(c.in), len(got), got, len(c.want))
		}
	}
}

// TestFromEnvDefaults: defaults (envoyproxy/ratelimit's TRACING_* as
// OTEL_* variables) turn tracing on where the environment says nothing,
// name the service, and a bad sampling ratio is refused; a variable the
// environment sets wins over its default.
func TestFromEnvDefaults(t *testing.T) {
	clearEnv(t)
	defaults := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "RateLimit",
		"OTEL_RESOURCE_ATTRIBUTES": "service.namespace=edge", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}
	tr, err := FromEnv(context.Background(), defaults)
	if err != nil || tr.Provider == nil || tr.Exporter != "otlp grpc" {
		t.Fatalf("with TRACING_* defaults: %+v %v, want on over grpc", tr, err)
	}
	tr.Shutdown(context.Background())
	if on, err := Requested(defaults); !on || err != nil {
		t.Errorf("Requested with the defaults: %v %v", on, err)
	}
	defaults["OTEL_TRACES_SAMPLER_ARG"] = "1.5"
	if _, err := FromEnv(context.Background(), defaults); err == nil || !strings.Contains(err.Error(), "1.5") {
		t.Errorf("a ratio of 1.5: %v, want an error naming it", err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if on, _ := Requested(defaults); on {
		t.Error("OTEL_TRACES_EXPORTER=none in the environment did not win over the default")
	}
}
