package limiter

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestTraces: a decision is a span with its policy, outcome and store
// latency, parent of one span per store call; the tenant ID is on it only
// when asked for; the store call histogram carries the trace ID.
func TestTraces(t *testing.T) {
	for _, tenants := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		reg := prometheus.NewRegistry()
		l := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) {
			c.Tracer, c.TraceTenants, c.Registerer = tp.Tracer("test"), tenants, reg
		})
		ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
		search := policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/search"}
		for range 9 { // the 9th is over the class's burst of 8
			if _, err := l.Decide(ctx, search); err != nil {
				t.Fatal(err)
			}
		}
		parent.End()
		spans := exp.GetSpans()
		var decides, takes int
		var last tracetest.SpanStub
		for _, s := range spans {
			switch s.Name {
			case "fairgate.decide":
				decides++
				last = s
				if s.Parent.SpanID() != parent.SpanContext().SpanID() {
					t.Errorf("a decision span's parent is %v, want the request's", s.Parent.SpanID())
				}
			case "fairgate.store.take":
				takes++
			}
		}
		if decides != 9 || takes != 9 {
			t.Fatalf("%d decision and %d store spans, want 9 and 9", decides, takes)
		}
		attrs := map[string]string{}
		for _, a := range last.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		want := map[string]string{"fairgate.policy": "free.search.1m", "fairgate.outcome": "limited", "fairgate.allowed": "false", "fairgate.class": "search", "fairgate.layers": "3"}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("the 9th decision's %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
			}
		}
		if _, ok := attrs["fairgate.store.latency_ms"]; !ok {
			t.Errorf("no store latency on the decision span: %v", attrs)
		}
		if got, ok := attrs["fairgate.tenant"]; ok != tenants || ok && got != "newco" {
			t.Errorf("TraceTenants %v: tenant attribute %q (present %v)", tenants, got, ok)
		}
		for _, s := range spans {
			if s.Name == "fairgate.store.take" && s.Parent.SpanID() == parent.SpanContext().SpanID() {
				t.Error("a store span is not a child of its decision span")
			}
		}
		if !exemplarIs(t, reg, parent.SpanContext().TraceID().String()) {
			t.Error("the store call histogram has no exemplar with the trace ID")
		}
	}
}

// exemplarIs reports whether a bucket of fairgate_store_call_seconds has an
// exemplar whose trace_id is id.
func exemplarIs(t *testing.T, reg *prometheus.Registry, id string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fairgate_store_call_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, lp := range b.GetExemplar().GetLabel() {
					if lp.GetName() == "trace_id" && lp.GetValue() == id {
						return true
					}
				}
			}
		}
	}
	return false
}
