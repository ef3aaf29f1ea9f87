package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
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
	ts, _, lim := proxyWith(t, up, cfg, Config{})
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
	if resp, err := getAs(context.Background(), t, ts.URL, "/v1/me/limits"); err != nil {
		t.Fatal(err)
	} else {
		var m struct{ Concurrency []map[string]any }
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if len(m.Concurrency) != 1 || m.Concurrency[0]["policy"] != "pro.tenant.concurrency" || m.Concurrency[0]["limit"] != float64(2) {
			t.Errorf("/v1/me/limits: concurrency %v, want pro.tenant.concurrency of 2", m.Concurrency)
		}
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
	testwait.EventuallyNil(t, 30*time.Second, "two requests after a cancel and a failure both 200 (else a slot was kept)", func() error {
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
		if a, b := <-codes, <-codes; a != 200 || b != 200 {
			return fmt.Errorf("%d and %d", a, b)
		}
		return nil
	})
}

// TestConcurrencyAPI: a worker's acquire and release, the limit, and bad
// bodies refused by field.
func TestConcurrencyAPI(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	_, lim := concurrencyProxy(t, up)
	s, err := New(Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) (*httptest.ResponseRecorder, map[string]any) {
		rec := call{method: "POST", path: path, body: body}.do(s)
		var m map[string]any
		json.Unmarshal(rec.Body.Bytes(), &m)
		return rec, m
	}
	var leases []string
	for i := range 2 {
		rec, m := post("/v1/concurrency/acquire", `{"tenant":"w1","class":"read"}`)
		if rec.Code != 200 || m["lease_id"] == "" || m["lease_ms"] != float64(40000) {
			t.Fatalf("acquire %d: %d %s", i, rec.Code, rec.Body)
		}
		leases = append(leases, m["lease_id"].(string))
	}
	rec, m := post("/v1/concurrency/acquire", `{"tenant":"w1","route":"GET /v1/anything","lease_ms":1000}`)
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || m["policy"] != "pro.tenant.concurrency" {
		t.Fatalf("a third acquire: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	for _, id := range []string{leases[0], leases[0], "never-held"} {
		if rec, _ := post("/v1/concurrency/release", `{"tenant":"w1","class":"read","lease_id":"`+id+`"}`); rec.Code != 200 {
			t.Fatalf("release %s: %d %s", id, rec.Code, rec.Body)
		}
	}
	if rec, m := post("/v1/concurrency/acquire", `{"tenant":"w1","class":"read","lease_ms":1000}`); rec.Code != 200 || m["lease_ms"] != float64(1000) {
		t.Fatalf("acquire after a release: %d %s", rec.Code, rec.Body)
	}
	for _, c := range []struct{ path, body, field string }{
		{"/v1/concurrency/acquire", `{"class":"read"}`, "tenant"},
		{"/v1/concurrency/acquire", `{"tenant":"w1"}`, "route or class"},
		{"/v1/concurrency/acquire", `{"tenant":"w1","class":"read","lease_ms":10}`, "lease_ms"},
		{"/v1/concurrency/acquire", `{"tenant":"w1","class":"read","lease_id":"x"}`, "lease_id"},
		{"/v1/concurrency/acquire", `{"tenant":"w1","class":"nope"}`, "class"},
		{"/v1/concurrency/release", `{"tenant":"w1","class":"read"}`, "lease_id"},
		{"/v1/concurrency/release", `{"tenant":"w1","class":"read","lease_id":"x","lease_ms":1000}`, "lease_ms"},
	} {
		if rec, m := post(c.path, c.body); rec.Code != 400 || !strings.Contains(fmt.Sprint(m["detail"]), c.field) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, rec.Code, rec.Body, c.field)
		}
	}
}

// TestAuthzLease: an allowed forward-auth answer carries the lease ID of
// the request's slots, which the upstream gives back by the release call.
func TestAuthzLease(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	_, lim := concurrencyProxy(t, up)
	s, err := New(Config{Limiter: lim, Auth: testAuth(t), ForwardAuth: config.ForwardAuth{Gateway: "nginx", DenyStatus: 429}})
	if err != nil {
		t.Fatal(err)
	}
	authz := func() *httptest.ResponseRecorder {
		return call{method: "GET", path: "/v1/authz", headers: map[string]string{"X-API-Key": "key-acme", "X-Original-Method": "GET", "X-Original-URI": "/v1/items"}}.do(s)
	}
	a, b := authz(), authz()
	if a.Code != 200 || b.Code != 200 || a.Header().Get(LeaseHeader) == "" {
		t.Fatalf("two forward-auth checks: %d %d, lease %q", a.Code, b.Code, a.Header().Get(LeaseHeader))
	}
	if c := authz(); c.Code != 429 {
		t.Fatalf("a third while two hold their slots: %d, want 429", c.Code)
	}
	rel := call{method: "POST", path: "/v1/concurrency/release", body: `{"tenant":"acme","route":"GET /v1/items","lease_id":"` + a.Header().Get(LeaseHeader) + `"}`}.do(s)
	if rel.Code != 200 {
		t.Fatalf("release: %d %s", rel.Code, rel.Body)
	}
	if c := authz(); c.Code != 200 {
		t.Fatalf("after the upstream released one: %d, want 200", c.Code)
	}
}

// TestCheckTakesNoSlots: /v1/check decides a tenant on a concurrency plan
// by its rate layers alone: a check has no end to give a slot back at.
// Today two checks took both of acme's slots, the third was refused, and
// every request of acme's was locked out until the leases ran out (40 s).
func TestCheckTakesNoSlots(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	_, lim := concurrencyProxy(t, up)
	s, err := New(Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if code, m := check(t, s, `{"tenant":"acme","route":"GET /v1/items"}`); code != 200 || m["allowed"] != true {
			t.Fatalf("check %d: %d %v, want allowed: a check takes no slot", i, code, m)
		}
	}
	if d, err := lim.Decide(context.Background(), policy.Request{Tenant: "acme", Method: "GET", Path: "/v1/items"}); err != nil || !d.Allowed || d.Slots == nil {
		t.Fatalf("a proxied request after the checks: %+v %v, want a slot of its own", d, err)
	}
}
