package main

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fairgate/fairgate/internal/redistest"
)

// otlpReceiver is a real OTLP/HTTP endpoint that keeps what it receives.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]bool // "name trace-ID"
	raw   []byte
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	req := &collectorpb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.raw = append(o.raw, b...)
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans[s.GetName()+" "+hex.EncodeToString(s.GetTraceId())] = true
			}
		}
	}
}

// TestServeKeysAndTraces runs the daemon as an operator of a mesh would,
// with an admin token, an upstream, an OTLP endpoint in the environment
// and the callers' trace context trusted (--trust-trace-context): a key
// made through the admin API is accepted by the proxy at once; the
// client's trace reaches the upstream and the collector (the decision and
// store spans included, the key nowhere); /metrics shows the trace ID as
// an exemplar.
func TestServeKeysAndTraces(t *testing.T) {
	rcv := &otlpReceiver{spans: map[string]bool{}}
	collector := httptest.NewServer(rcv)
	defer collector.Close()
	var upMu sync.Mutex
	var upTrace string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upMu.Lock()
		upTrace = r.Header.Get("Traceparent")
		upMu.Unlock()
	}))
	defer up.Close()
	const token = "admin-token-for-the-test-0001"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	adminAddr, internalAddr := freeAddr(t), freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--internal-listen", internalAddr, "--upstream", up.URL, "--trust-trace-context")

	req, _ := http.NewRequest("POST", "http://"+adminAddr+"/admin/keys", strings.NewReader(`{"tenant":"acme","label":"trace test"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var made struct{ Key string }
	json.NewDecoder(resp.Body).Decode(&made)
	resp.Body.Close()
	if resp.StatusCode != 201 || made.Key == "" {
		t.Fatalf("create key: %d", resp.StatusCode)
	}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ = http.NewRequest("GET", "http://"+sv.addr+"/v1/users/1", nil)
	req.Header.Set("Authorization", "Bearer "+made.Key)
	req.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("proxied with the new key: %d", resp.StatusCode)
	}
	upMu.Lock()
	if !strings.Contains(upTrace, trace) {
		t.Errorf("the upstream got traceparent %q, want trace %s", upTrace, trace)
	}
	upMu.Unlock()

	mreq, _ := http.NewRequest("GET", "http://"+internalAddr+"/metrics", nil)
	mreq.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	mresp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(metrics), `fairgate_store_call_seconds_bucket{le=`) || !strings.Contains(string(metrics), `# {trace_id="`+trace+`"}`) {
		t.Errorf("no exemplar with trace %s on fairgate_store_call_seconds", trace)
	}

	sv.stop() // flushes the spans still queued
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, name := range []string{"fairgate GET", "fairgate.decide", "fairgate.store.take"} {
		if !rcv.spans[name+" "+trace] {
			t.Errorf("the collector has no span %q in trace %s (all: %v)", name, trace, rcv.spans)
		}
	}
	if strings.Contains(string(rcv.raw), made.Key) || strings.Contains(string(rcv.raw), "acme") {
		t.Error("the exported spans hold the API key or the tenant ID")
	}
}

// TestServeKeysAcrossInstances: two daemons on one Redis, as two pods: a
// key made through A's admin API is accepted by B's proxy within 2 s, and
// refused there within 2 s of its revocation on A.
func TestServeKeysAcrossInstances(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	const token = "admin-token-for-the-test-0001"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	adminA := freeAddr(t)
	a := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminA, "--internal-listen", freeAddr(t), "--upstream", up.URL, "--store", "redis://"+srv.Addr)
	defer a.stop()
	b := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", freeAddr(t), "--internal-listen", freeAddr(t), "--upstream", up.URL, "--store", "redis://"+srv.Addr)
	defer b.stop()
	admin := func(method, path, body string) []byte {
		req, _ := http.NewRequest(method, "http://"+adminA+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return out
	}
	var made struct{ Key, ID string }
	json.Unmarshal(admin("POST", "/admin/keys", `{"tenant":"acme"}`), &made)
	if made.Key == "" {
		t.Fatal("no key made")
	}
	viaB := func() int {
		req, _ := http.NewRequest("GET", "http://"+b.addr+"/v1/users/1", nil)
		req.Header.Set("Authorization", "Bearer "+made.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	within := func(what string, want int) {
		t.Helper()
		start := time.Now()
		for viaB() != want {
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s: instance B did not answer %d within 2 s", what, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: B answered %d after %v", what, want, time.Since(start).Round(time.Millisecond))
	}
	within("made on A", 200)
	admin("DELETE", "/admin/keys/"+made.ID, "")
	within("revoked on A", 401)
}

// TestTraceExportErrorsAreLogged: with the collector refusing, the
// SDK's export errors come as JSON WARN lines of the log, not as plain
// text lines in the middle of it.
func TestTraceExportErrorsAreLogged(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no room", http.StatusBadRequest) // permanent: not retried
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	sv := startServe(t, "--listen", "127.0.0.1:0")
	defer sv.stop()
	if resp, err := http.Get("http://" + sv.addr + "/healthz"); err == nil {
		resp.Body.Close()
	}
	statusOf(t, "POST", "http://"+sv.addr+"/v1/check", `{"tenant":"acme","method":"GET","path":"/v1/search"}`, "")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(sv.logs.String(), "tracing: the OpenTelemetry SDK failed") {
		if time.Now().After(deadline) {
			t.Fatalf("no WARN line for the failed export:\n%s", sv.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(sv.logs.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a log line that is not JSON: %q", line)
		}
	}
}
