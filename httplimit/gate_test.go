package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// gatedHandler is Middleware around Gated around h, with a fixed gate of
// limit requests in flight; X-Key names the (pretend-verified) tenant.
func gatedHandler(t *testing.T, g *fairshare.Gate, h http.Handler) http.Handler {
	t.Helper()
	l, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: policy.Policy{
		DefaultPlan: "p", DefaultClass: "c",
		Plans:   map[string]policy.Plan{"p": {Rules: []policy.Rule{{Limit: algo.PerMinute(100_000)}}}},
		Classes: map[string]policy.Class{"c": {}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := Middleware(Config{Limiter: l, Identify: func(r *http.Request) (policy.Identity, error) {
		return policy.Identity{Tenant: r.Header.Get("X-Key")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	gated, err := Gated(GateConfig{Gate: func(*http.Request, limiter.Decision) (*fairshare.Gate, float64, bool) { return g, 1, false }})
	if err != nil {
		t.Fatal(err)
	}
	return mw(gated(h))
}

// TestGated: a Go service's handler behind the gate: a request without
// room within the wait is answered 503 upstream_busy with Retry-After and
// never reaches the handler, and an admitted one's room is freed when the
// handler returns.
func TestGated(t *testing.T) {
	g := fairshare.New(fairshare.Config{Initial: 1, Fixed: true, MaxWait: 50 * time.Millisecond})
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	h := gatedHandler(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		order = append(order, r.Header.Get("X-Key")+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/hold" {
			<-release
		}
	}))
	serve := func(key, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-Key", key)
		h.ServeHTTP(rec, req)
		return rec
	}
	done := make(chan int)
	go func() { done <- serve("acme", "/hold").Code }()
	for g.Stats().InFlight != 1 {
		time.Sleep(time.Millisecond)
	}
	rec := serve("newco", "/x")
	var body map[string]any
	json.NewDecoder(rec.Body).Decode(&body)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || body["code"] != "upstream_busy" || body["type"] != TypeUpstreamBusy {
		t.Fatalf("no room within the wait: %d %v %v", rec.Code, rec.Header(), body)
	}
	close(release)
	if c := <-done; c != 200 {
		t.Fatalf("the held request: %d", c)
	}
	if st := g.Stats(); st.InFlight != 0 || st.Tenants != 0 {
		t.Fatalf("%+v, want nothing held", st)
	}
	if len(order) != 1 {
		t.Fatalf("handled %v, want only the held request", order)
	}
}

// TestGatedClientGone: a client that gives up while it waits is left
// unanswered and never reaches the handler.
func TestGatedClientGone(t *testing.T) {
	g := fairshare.New(fairshare.Config{Initial: 1, Fixed: true, MaxWait: time.Hour})
	tk, err := g.Acquire(context.Background(), fairshare.Request{Tenant: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done(false)
	reached := false
	h := gatedHandler(t, g, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for g.Stats().Waiting != 1 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/x", nil).WithContext(ctx)
	req.Header.Set("X-Key", "acme")
	h.ServeHTTP(rec, req)
	if reached || rec.Body.Len() != 0 || g.Stats().Waiting != 0 {
		t.Fatalf("reached %v, body %q, %+v: want the request dropped", reached, rec.Body, g.Stats())
	}
}

// TestAnswerWriter: what each status teaches the gate's limit, read
// through a gate of limit 10 whose window is 10 answers: ten failures
// shrink it, ten 404s teach nothing. (What a success teaches depends on
// its latency: fairshare's own tests hold it.)
func TestAnswerWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		shrink bool
	}{
		{"503 is a failure", 503, true},
		{"504 is a failure", 504, true},
		{"404 teaches nothing", 404, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := fairshare.New(fairshare.Config{Initial: 10, Floor: 1})
			h := gatedHandler(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tc.status) }))
			for range 10 {
				req := httptest.NewRequest("GET", "/x", nil)
				req.Header.Set("X-Key", "acme")
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			if shrunk := g.Limit() < 10; shrunk != tc.shrink {
				t.Fatalf("limit %d after ten %ds, want shrunk %v", g.Limit(), tc.status, tc.shrink)
			}
		})
	}
}

// slowBody is a request body whose client takes a second to send it.
type slowBody struct{ sent bool }

func (b *slowBody) Read(p []byte) (int, error) {
	if b.sent {
		return 0, io.EOF
	}
	time.Sleep(time.Second)
	b.sent = true
	return copy(p, "{}"), nil
}

func (b *slowBody) Close() error { return nil }

// slowReader is a client that takes a second to read each write of the
// answer.
type slowReader struct{ *httptest.ResponseRecorder }

func (w slowReader) Write(p []byte) (int, error) {
	time.Sleep(time.Second)
	return w.ResponseRecorder.Write(p)
}

// TestGatedClientTime: the time a request waits for its own client, a
// slow upload or a slow reading of the answer, is not the upstream's: a
// learned limit whose answers come at once does not shrink for it. In
// virtual time (testing/synctest).
func TestGatedClientTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(h http.Handler, req *http.Request)
	}{
		{"a body trickled over a second", func(h http.Handler, req *http.Request) {
			req.Method, req.Body, req.ContentLength = "POST", &slowBody{}, -1
			h.ServeHTTP(httptest.NewRecorder(), req)
		}},
		{"an answer read over a second", func(h http.Handler, req *http.Request) {
			h.ServeHTTP(slowReader{httptest.NewRecorder()}, req)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := fairshare.New(fairshare.Config{Initial: 10, Floor: 1})
				h := gatedHandler(t, g, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body) // the upstream reads the body, then answers at once
					w.WriteHeader(200)
					w.Write([]byte("ok"))
				}))
				for i := range 30 {
					req := httptest.NewRequest("GET", "/x", nil)
					req.Header.Set("X-Key", "acme")
					if i == 0 { // a quick one first: the least latency
						h.ServeHTTP(httptest.NewRecorder(), req)
						continue
					}
					tc.serve(h, req)
				}
				if l := g.Limit(); l < 10 {
					t.Fatalf("limit %d, want 10: the upstream answered every request at once", l)
				}
			})
		})
	}
}
