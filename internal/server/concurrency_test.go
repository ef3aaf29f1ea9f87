package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// concurrencyProxy is a proxy to up whose tenants (key-acme is acme) may
// have 2 requests in flight.
func concurrencyProxy(t *testing.T, up *httptest.Server) (*httptest.Server, *limiter.Limiter) {
	t.Helper()
	cfg, err := config.Parse("conc.yaml", []byte(`default_plan: pro
default_class: read
classes: {read: {}}
plans:
  pro:
    - {limit: 1000, period: 1h}
    - {concurrency: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	s, err := New(Config{Limiter: lim, Auth: testAuth(t), Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, lim
}

func getAs(ctx context.Context, t *testing.T, base, path string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	req.Header.Set("X-API-Key", "key-acme")
	return http.DefaultClient.Do(req)
}

// TestProxyConcurrency: a tenant's third request while two are in flight
// is answered 429 with a Retry-After and the concurrency headers, without
// reaching the upstream; a slot comes back when a response ends, when the
// client goes away, and when the upstream fails.
func TestProxyConcurrency(t *testing.T) {
	var current atomic.Pointer[http.HandlerFunc]
	handle := func(h http.HandlerFunc) { current.Store(&h) }
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load())(w, r) }))
	defer up.Close()
	release := make(chan struct{})
	arrived := make(chan string, 10)
	handle(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		switch r.URL.Path {
		case "/fail":
			panic(http.ErrAbortHandler) // the upstream drops the connection
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	})
	ts, _ := concurrencyProxy(t, up)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := getAs(context.Background(), t, ts.URL, "/slow")
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("a slow request: %v %v", resp, err)
				return
			}
			resp.Body.Close()
		})
	}
	<-arrived
	<-arrived
	resp, err := getAs(context.Background(), t, ts.URL, "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit-Concurrency-Limit") != "2" || resp.Header.Get("RateLimit-Concurrency-Remaining") != "0" {
		t.Fatalf("a third request in flight: %d %v, want 429 with Retry-After and the concurrency headers", resp.StatusCode, resp.Header)
	}
	select {
	case p := <-arrived:
		t.Fatalf("the refused request reached the upstream (%s)", p)
	default:
	}
	close(release)
	wg.Wait()
	// Both slots are back; one goes to a client that gives up mid-request,
	// one to a request the upstream fails: each gives its slot back.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	slow := make(chan struct{})
	handle(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			close(slow)
			<-r.Context().Done()
			return
		}
		if r.URL.Path == "/fail" {
			panic(http.ErrAbortHandler)
		}
		w.Write([]byte("ok"))
	})
	go func() {
		defer close(done)
		if resp, err := getAs(ctx, t, ts.URL, "/hang"); err == nil {
			resp.Body.Close()
		}
	}()
	<-slow
	cancel()
	<-done
	if resp, err := getAs(context.Background(), t, ts.URL, "/fail"); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("an upstream failure: %v %v, want 502", resp, err)
	} else {
		resp.Body.Close()
	}
	// Two at once again, so no slot was kept by either. The client's
	// cancel reaches the proxy asynchronously: allow it a moment.
	deadline := time.Now().Add(2 * time.Second)
	for {
		block := make(chan struct{})
		handle(func(w http.ResponseWriter, r *http.Request) { <-block })
		codes := make(chan int, 2)
		for range 2 {
			go func() {
				resp, err := getAs(context.Background(), t, ts.URL, "/y")
				if err != nil {
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			}()
		}
		time.Sleep(50 * time.Millisecond)
		close(block)
		a, b := <-codes, <-codes
		if a == 200 && b == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("two requests after a cancel and a failure: %d and %d, want both 200 (a slot was kept)", a, b)
		}
	}
}
