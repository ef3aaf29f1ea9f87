package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// The client's trace: its trace ID and the span that sent the request.
const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// tracedProxy is fairgate as a proxy over real sockets, tracing into exp
// (nil: tracing off) with the SDK's default sampler, in front of an
// upstream that records the traceparent it receives; the client's trace
// context is not trusted.
func tracedProxy(t *testing.T, exp *tracetest.InMemoryExporter) (front string, got func() string) {
	front, both := tracedProxyWith(t, exp, false, nil)
	return front, func() string { tp, _ := both(); return tp }
}

// tracedProxyWith is tracedProxy with the client's trace context trusted
// or not, and a sampler (nil: the SDK's default, parentbased_always_on);
// got returns the upstream's traceparent and tracestate.
func tracedProxyWith(t *testing.T, exp *tracetest.InMemoryExporter, trusted bool, sampler sdktrace.Sampler) (front string, got func() (traceparent, tracestate string)) {
	t.Helper()
	var mu sync.Mutex
	var seen, states []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		states = append(states, strings.Join(r.Header.Values("Tracestate"), ","))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	lc := limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy}
	sc := Config{Auth: testAuth(t), Upstream: u, TrustTraceContext: trusted}
	if exp != nil {
		opts := []sdktrace.TracerProviderOption{sdktrace.WithSyncer(exp)}
		if sampler != nil {
			opts = append(opts, sdktrace.WithSampler(sampler))
		}
		tr := sdktrace.NewTracerProvider(opts...).Tracer("test")
		lc.Tracer, sc.Tracer = tr, tr
	}
	if sc.Limiter, err = limiter.New(lc); err != nil {
		t.Fatal(err)
	}
	s, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL, func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 1 {
			t.Fatalf("the upstream saw %d requests, want 1", len(seen))
		}
		return seen[0], states[0]
	}
}

func send(t *testing.T, u string) { sendTrace(t, u, traceparent, "") }

// sendTrace sends a proxied request with a traceparent and, unless
// empty, a tracestate.
func sendTrace(t *testing.T, u, traceparent, tracestate string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u+"/v1/users/1", nil)
	req.Header.Set("X-API-Key", "key-acme")
	req.Header.Set("Traceparent", traceparent)
	if tracestate != "" {
		req.Header.Set("Tracestate", tracestate)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxied: %d", resp.StatusCode)
	}
}

// TestTraceThroughProxy: with tracing on and the client's trace context
// trusted, the client's trace goes on through fairgate (a server span,
// its decision and store spans) to the upstream, whose traceparent names
// fairgate's span as the parent; untrusted (the default), fairgate's
// spans are a trace of their own, its server span linked to the client's
// span, and the upstream continues fairgate's trace. No span holds the
// API key or the tenant ID.
func TestTraceThroughProxy(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		exp := tracetest.NewInMemoryExporter()
		front, got := tracedProxyWith(t, exp, trusted, nil)
		send(t, front)
		tp, _ := got()
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[2] == clientSpan || (parts[1] == clientTrace) != trusted {
			t.Fatalf("trusted %v: the upstream got traceparent %q: want fairgate's span as the parent, in trace %s only when trusted", trusted, tp, clientTrace)
		}
		// The server span ends after the response is written: the client
		// can have it first.
		testwait.Eventually(t, 30*time.Second, "3 spans exported", func() bool { return len(exp.GetSpans()) >= 3 })
		byName := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			byName[s.Name] = s
			if s.SpanContext.TraceID().String() != parts[1] {
				t.Errorf("trusted %v: span %s is in trace %s, not the upstream's %s", trusted, s.Name, s.SpanContext.TraceID(), parts[1])
			}
			for _, a := range s.Attributes {
				if v := a.Value.String(); strings.Contains(v, "key-acme") || strings.Contains(v, "acme") {
					t.Errorf("span %s has %s=%q: neither keys nor tenant IDs go on spans by default", s.Name, a.Key, v)
				}
			}
		}
		server, decide, take := byName["fairgate GET"], byName["fairgate.decide"], byName["fairgate.store.take"]
		linked := len(server.Links) == 1 && server.Links[0].SpanContext.SpanID().String() == clientSpan && server.Links[0].SpanContext.TraceID().String() == clientTrace
		switch {
		case trusted && server.Parent.SpanID().String() != clientSpan:
			t.Errorf("trusted: fairgate's server span has parent %s, want the client's %s", server.Parent.SpanID(), clientSpan)
		case !trusted && (server.Parent.IsValid() || !linked):
			t.Errorf("untrusted: fairgate's server span has parent %s and links %v, want none and a link to the client's span", server.Parent.SpanID(), server.Links)
		case server.SpanContext.SpanID().String() != parts[2]:
			t.Errorf("the upstream's parent is %s, want fairgate's server span %s", parts[2], server.SpanContext.SpanID())
		case decide.Parent.SpanID() != server.SpanContext.SpanID():
			t.Errorf("the decision span's parent is %s, want the server span", decide.Parent.SpanID())
		case take.Parent.SpanID() != decide.SpanContext.SpanID():
			t.Errorf("the store span's parent is %s, want the decision span", take.Parent.SpanID())
		}
	}
}

// TestClientCannotForceSampling: under parentbased_traceidratio with a
// ratio of 0, a client's traceparent with the sampled flag samples nothing
// unless its trace context is trusted; a 6 KB tracestate is never
// exported as it came, nor passed to the upstream.
func TestClientCannotForceSampling(t *testing.T) {
	var members []string
	for i := range 24 {
		members = append(members, fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 246)))
	}
	state := strings.Join(members, ",")
	for _, trusted := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		front, got := tracedProxyWith(t, exp, trusted, sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0)))
		sendTrace(t, front, traceparent, state)
		if tp, ts := got(); len(ts) > 512 || ts != "" && !trusted || strings.Contains(tp, clientTrace) != trusted {
			t.Errorf("trusted %v: the upstream got traceparent %q and a tracestate of %d bytes", trusted, tp, len(ts))
		}
		if trusted {
			testwait.Eventually(t, 30*time.Second, "3 spans exported", func() bool { return len(exp.GetSpans()) >= 3 })
		}
		spans := exp.GetSpans()
		if sampled := len(spans) > 0; sampled != trusted {
			t.Errorf("trusted %v: %d spans exported from a client's sampled flag, want some only when trusted", trusted, len(spans))
		}
		for _, s := range spans {
			if n := len(s.SpanContext.TraceState().String()); n > 512 {
				t.Errorf("trusted %v: span %s exported with a tracestate of %d bytes", trusted, s.Name, n)
			}
		}
	}
}

// TestTraceOffPassesThrough: with tracing off, the client's traceparent
// reaches the upstream as it was sent.
func TestTraceOffPassesThrough(t *testing.T) {
	front, got := tracedProxy(t, nil)
	send(t, front)
	if tp := got(); tp != traceparent {
		t.Errorf("the upstream got traceparent %q, want the client's %q", tp, traceparent)
	}
}
