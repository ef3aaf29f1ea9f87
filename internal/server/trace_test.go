package server

import (
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
// (nil: tracing off), in front of an upstream that records the
// traceparent it receives.
func tracedProxy(t *testing.T, exp *tracetest.InMemoryExporter) (front string, got func() string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	lc := limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy}
	sc := Config{Auth: testAuth(t), Upstream: u}
	if exp != nil {
		tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
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
	return ts.URL, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 1 {
			t.Fatalf("the upstream saw %d requests, want 1", len(seen))
		}
		return seen[0]
	}
}

func send(t *testing.T, u string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u+"/v1/users/1", nil)
	req.Header.Set("X-API-Key", "key-acme")
	req.Header.Set("Traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxied: %d", resp.StatusCode)
	}
}

// TestTraceThroughProxy: with tracing on, the client's trace goes on
// through fairgate (a server span, its decision and store spans) to the
// upstream, whose traceparent names fairgate's span as the parent; no
// span holds the API key or the tenant ID.
func TestTraceThroughProxy(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	front, got := tracedProxy(t, exp)
	send(t, front)
	tp := got()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 || parts[1] != clientTrace || parts[2] == clientSpan {
		t.Fatalf("the upstream got traceparent %q: want trace %s with fairgate's span as the parent", tp, clientTrace)
	}
	// The server span ends after the response is written: the client can
	// have it first.
	for start := time.Now(); len(exp.GetSpans()) < 3 && time.Since(start) < 2*time.Second; time.Sleep(5 * time.Millisecond) {
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
		if s.SpanContext.TraceID().String() != clientTrace {
			t.Errorf("span %s is in trace %s, not the client's", s.Name, s.SpanContext.TraceID())
		}
		for _, a := range s.Attributes {
			if v := a.Value.String(); strings.Contains(v, "key-acme") || strings.Contains(v, "acme") {
				t.Errorf("span %s has %s=%q: neither keys nor tenant IDs go on spans by default", s.Name, a.Key, v)
			}
		}
	}
	server, decide, take := byName["fairgate GET"], byName["fairgate.decide"], byName["fairgate.store.take"]
	switch {
	case server.Parent.SpanID().String() != clientSpan:
		t.Errorf("fairgate's server span has parent %s, want the client's %s", server.Parent.SpanID(), clientSpan)
	case server.SpanContext.SpanID().String() != parts[2]:
		t.Errorf("the upstream's parent is %s, want fairgate's server span %s", parts[2], server.SpanContext.SpanID())
	case decide.Parent.SpanID() != server.SpanContext.SpanID():
		t.Errorf("the decision span's parent is %s, want the server span", decide.Parent.SpanID())
	case take.Parent.SpanID() != decide.SpanContext.SpanID():
		t.Errorf("the store span's parent is %s, want the decision span", take.Parent.SpanID())
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
