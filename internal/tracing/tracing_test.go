package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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
			tr, err := FromEnv(context.Background())
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
	tr, err := FromEnv(context.Background())
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
// is the parent of the call's server span, and its handler's spans are
// children of that.
func TestUnaryServer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	md := metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := metadata.NewIncomingContext(context.Background(), md)
	info := &grpc.UnaryServerInfo{FullMethod: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	_, err := UnaryServer(tr)(ctx, nil, info, func(ctx context.Context, _ any) (any, error) {
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
	if call.Name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || call.Parent.SpanID().String() != "00f067aa0ba902b7" ||
		call.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || decide.Parent.SpanID() != call.SpanContext.SpanID() {
		t.Errorf("spans: call %s (parent %s, trace %s), decision's parent %s", call.Name, call.Parent.SpanID(), call.SpanContext.TraceID(), decide.Parent.SpanID())
	}
	// Off, it adds nothing.
	if _, err := UnaryServer(nil)(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil }); err != nil || len(exp.GetSpans()) != 2 {
		t.Errorf("off: %v, %d spans", err, len(exp.GetSpans()))
	}
}
