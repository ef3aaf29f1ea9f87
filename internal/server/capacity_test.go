package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// capacityProxy is a proxy to up with the given upstream_capacity
// section; key-acme is acme's, key-newco newco's. Routes under
// /checkout are the checkout class.
func capacityProxy(t *testing.T, up *httptest.Server, section string) (*httptest.Server, *Server, *prometheus.Registry) {
	t.Helper()
	cfg, err := config.Parse("cap.yaml", []byte(`default_plan: pro
default_class: read
classes: {read: {}, checkout: {}}
routes:
  - {route: "GET /checkout/{id}", class: checkout}
plans:
  pro:
    - {limit: 100000, period: 1h}
tenants:
  newco: {plan: pro}
anonymous:
  - name: public
    route: "GET /public/{x...}"
    limits: [{limit: 100000, period: 1h, by: ip}]
`+section+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ts, s, _ := proxyWith(t, up, cfg, Config{Registerer: reg, Capacity: cfg.UpstreamCapacity})
	return ts, s, reg
}

// proxyWith is a server with c's settings, cfg's policy on a memory store
// and the test credentials, proxying to up.
func proxyWith(t *testing.T, up *httptest.Server, cfg *config.Config, c Config) (*httptest.Server, *Server, *limiter.Limiter) {
	t.Helper()
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	c.Limiter, c.Auth, c.Upstream = lim, testAuth(t), u
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, s, lim
}

// heldUpstream answers /slow/{id} (and /public/slow/{id}) when that id is released, and anything
// else at once; it reports each request's path as it arrives.
type heldUpstream struct {
	*httptest.Server
	arrived chan string
	mu      sync.Mutex
	held    map[string]chan struct{}
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	h := &heldUpstream{arrived: make(chan string, 64), held: map[string]chan struct{}{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.arrived <- r.URL.Path
		if id, ok := strings.CutPrefix(strings.TrimPrefix(r.URL.Path, "/public"), "/slow/"); ok {
			select {
			case <-h.hold(id):
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *heldUpstream) hold(id string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[id] == nil {
		h.held[id] = make(chan struct{})
	}
	return h.held[id]
}

func (h *heldUpstream) release(id string) { close(h.hold(id)) }

// getKey GETs path as the holder of key in the background.
func getKey(base, key, path string) chan *http.Response {
	return getWith(base, path, "X-API-Key", key)
}

// getWith GETs path with one header in the background.
func getWith(base, path, header, value string) chan *http.Response {
	out := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set(header, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- &http.Response{StatusCode: -1, Status: err.Error()}
			return
		}
		resp.Body.Close()
		out <- resp
	}()
	return out
}

// wantShed checks a 503 the gate answered.
func wantShed(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %v, want 503 problem+json with Retry-After", what, resp.StatusCode, resp.Header)
	}
}

// TestProxyCapacityFairOrder: a tenant may borrow the whole idle limit;
// when it is full, a freed slot goes to a waiting tenant under its share
// before the borrower's queued request; a full queue is answered 503 at
// once, and none of the shed requests reaches the upstream.
func TestProxyCapacityFairOrder(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, reg := capacityProxy(t, up.Server, "upstream_capacity: {limit: 2, max_queue: 1, max_wait: 10s}")
	gate := s.capacity.cur.Load().gate
	a1, a2 := getKey(ts.URL, "key-acme", "/slow/a1"), getKey(ts.URL, "key-acme", "/slow/a2")
	<-up.arrived
	<-up.arrived
	a3 := getKey(ts.URL, "key-acme", "/fast/a3")
	testwait.Eventually(t, 30*time.Second, "acme's third request to wait", func() bool { return gate.Stats().Waiting == 1 })
	wantShed(t, <-getKey(ts.URL, "key-acme", "/fast/a4"), "acme's fourth, over its queue of 1")
	n1 := getKey(ts.URL, "key-newco", "/fast/n1")
	testwait.Eventually(t, 30*time.Second, "newco's request to wait", func() bool { return gate.Stats().Waiting == 2 })
	if got := testutil.ToFloat64(s.metrics.capInFlight.WithLabelValues("read")); got != 2 {
		t.Errorf("in flight %v, want 2", got)
	}
	up.release("a1")
	if p := <-up.arrived; p != "/fast/n1" {
		t.Fatalf("the freed slot went to %s, want newco's request, under its share", p)
	}
	// acme, over its share while newco wants room, leaves headroom; once
	// its own requests end, its queued one is within its share.
	up.release("a2")
	if p := <-up.arrived; p != "/fast/a3" {
		t.Fatalf("then %s, want acme's queued request", p)
	}
	for _, r := range []chan *http.Response{a1, a2, a3, n1} {
		if resp := <-r; resp.StatusCode != 200 {
			t.Fatalf("an admitted request: %d %s", resp.StatusCode, resp.Status)
		}
	}
	select {
	case p := <-up.arrived:
		t.Fatalf("a shed request reached the upstream: %s", p)
	default:
	}
	if got := testutil.ToFloat64(s.metrics.capShed.WithLabelValues("read", "queue_full")); got != 1 {
		t.Errorf("shed queue_full %v, want 1", got)
	}
	if st := gate.Stats(); st.InFlight != 0 || st.Waiting != 0 || st.Tenants != 0 {
		t.Errorf("after all ended: %+v, want nothing held or remembered", st)
	}
	if n, err := testutil.GatherAndCount(reg, "fairgate_upstream_capacity_limit", "fairgate_upstream_capacity_waiting", "fairgate_upstream_capacity_wait_seconds"); err != nil || n != 3 {
		t.Errorf("the gate's metrics: %d series, %v; want the limit, the waiting and a class's waits", n, err)
	}
}

// TestProxyCapacityReserve: the reserve admits a critical class's request
// when the rest of the limit is full, and a non-critical one waits at
// most max_wait before its 503.
func TestProxyCapacityReserve(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "upstream_capacity: {limit: 2, reserve: 0.5, critical: [checkout], max_wait: 50ms}")
	held := getKey(ts.URL, "key-acme", "/slow/r1")
	<-up.arrived
	start := time.Now()
	wantShed(t, <-getKey(ts.URL, "key-acme", "/fast/r2"), "a read over the unreserved half")
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("shed after %v, before max_wait", waited)
	}
	if resp := <-getKey(ts.URL, "key-acme", "/checkout/1"); resp.StatusCode != 200 {
		t.Fatalf("a checkout with the reserve free: %d, want 200", resp.StatusCode)
	}
	up.release("r1")
	<-held
	if got := testutil.ToFloat64(s.metrics.capShed.WithLabelValues("read", "wait")); got != 1 {
		t.Errorf("shed after the wait %v, want 1", got)
	}
}

// TestProxyCapacityLearns: an upstream answering 503 shrinks the learned
// limit; a reload keeps what was learned, moved into the new bounds, and
// a file without the section turns the gate off.
func TestProxyCapacityLearns(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer up.Close()
	ts, s, _ := capacityProxy(t, up, "upstream_capacity: {floor: 2, ceiling: 40, initial: 20}")
	gate := s.capacity.cur.Load().gate
	for range 20 {
		<-getKey(ts.URL, "key-acme", "/x")
	}
	if got := gate.Limit(); got >= 20 {
		t.Fatalf("limit %d after 20 answers of 503, want it shrunk from 20", got)
	}
	learned := gate.Limit()
	s.SetCapacity(&config.UpstreamCapacity{Gate: gateConfig(2, 40)})
	if got := s.capacity.cur.Load().gate; got != gate || got.Limit() != learned {
		t.Fatalf("a reload lost the learned limit %d: now %d", learned, got.Limit())
	}
	s.SetCapacity(&config.UpstreamCapacity{Gate: gateConfig(2, 5)})
	if got := gate.Limit(); got != min(learned, 5) {
		t.Fatalf("under a ceiling of 5: limit %d", got)
	}
	s.SetCapacity(nil)
	if resp := <-getKey(ts.URL, "key-acme", "/x"); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "" {
		t.Fatalf("without the gate: %d %v, want the upstream's own 503", resp.StatusCode, resp.Header)
	}
}

// TestProxyCapacityClientGone: a client that gives up while it waits
// leaves the queue at once, and its request never reaches the upstream.
func TestProxyCapacityClientGone(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "upstream_capacity: {limit: 1, max_wait: 10s}")
	gate := s.capacity.cur.Load().gate
	held := getKey(ts.URL, "key-acme", "/slow/c1")
	<-up.arrived
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := getAs(ctx, t, ts.URL, "/fast/c2"); done <- err }()
	testwait.Eventually(t, 30*time.Second, "the second request to wait", func() bool { return gate.Stats().Waiting == 1 })
	cancel()
	<-done
	testwait.Eventually(t, 30*time.Second, "the queue to empty", func() bool { return gate.Stats().Waiting == 0 })
	up.release("c1")
	<-held
	select {
	case p := <-up.arrived:
		t.Fatalf("the abandoned request reached the upstream: %s", p)
	default:
	}
}

func gateConfig(floor, ceiling int) (c fairshare.Config) {
	c.Floor, c.Ceiling = floor, ceiling
	return c
}

// TestProblemOfShed: the 503's body says what happened and when to retry.
func TestProblemOfShed(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "upstream_capacity: {limit: 1, max_queue: 1, max_wait: 10s}")
	held := getKey(ts.URL, "key-acme", "/slow/p1")
	<-up.arrived
	waiting := getKey(ts.URL, "key-newco", "/fast/p2")
	testwait.Eventually(t, 30*time.Second, "newco's first request to wait", func() bool { return s.capacity.cur.Load().gate.Stats().Waiting == 1 })
	req, _ := http.NewRequest("GET", ts.URL+"/fast/p3", nil)
	req.Header.Set("X-API-Key", "key-newco")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 503 || body["code"] != "upstream_busy" || body["retry_after_seconds"] == nil {
		t.Fatalf("%d %v, want 503 upstream_busy with retry_after_seconds", resp.StatusCode, body)
	}
	up.release("p1")
	<-held
	<-waiting
}

// TestProxyCapacityAnonymousIsOneParty: requests without a credential
// share one queue, whatever address they come from, so spreading them
// over addresses or inventing tenant headers gains nothing.
func TestProxyCapacityAnonymousIsOneParty(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "upstream_capacity: {limit: 1, max_queue: 1, max_wait: 10s}")
	gate := s.capacity.cur.Load().gate
	// A tenant header is a client's claim, not a credential.
	get := func(path, tenant string) chan *http.Response {
		return getWith(ts.URL, path, "X-Fairgate-Tenant", tenant)
	}
	held := get("/public/slow/p1", "a")
	if p := <-up.arrived; p != "/public/slow/p1" {
		t.Fatalf("arrived %s", p)
	}
	waiting := get("/public/w", "b")
	testwait.Eventually(t, 30*time.Second, "the second anonymous request to wait", func() bool { return gate.Stats().Waiting == 1 })
	wantShed(t, <-get("/public/x", "c"), "a third anonymous request, over the one queue of 1")
	if st := gate.Stats(); st.Tenants != 1 {
		t.Errorf("%+v, want the anonymous requests as one party", st)
	}
	up.release("p1")
	for _, r := range []chan *http.Response{held, waiting} {
		if resp := <-r; resp.StatusCode != 200 {
			t.Fatalf("an admitted anonymous request: %d %s", resp.StatusCode, resp.Status)
		}
	}
}

// preflight sends a CORS preflight (OPTIONS with Origin and
// Access-Control-Request-Method, no credential) in the background.
func preflight(base, path string) chan *http.Response {
	out := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("OPTIONS", base+path, nil)
		req.Header.Set("Origin", "https://app.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- &http.Response{StatusCode: -1, Status: err.Error()}
			return
		}
		resp.Body.Close()
		out <- resp
	}()
	return out
}

// TestPreflightsAreRequests: CORS preflights pass the capacity gate as
// the anonymous party and the per-address preflight limit, answered 429
// with Retry-After beyond it. Today they went straight to the upstream,
// past both: 48 anonymous loops of slow preflights held every worker of
// an upstream that does real work for OPTIONS.
func TestPreflightsAreRequests(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "preflight: {limits: [{limit: 4, period: 1h}]}\nupstream_capacity: {limit: 2, max_queue: 1, max_wait: 10s}")
	gate := s.capacity.cur.Load().gate
	p1, p2 := preflight(ts.URL, "/slow/p1"), preflight(ts.URL, "/slow/p2")
	<-up.arrived
	<-up.arrived
	if st := gate.Stats(); st.InFlight != 2 {
		t.Fatalf("two slow preflights upstream, the gate holds %d: they must pass it", st.InFlight)
	}
	p3 := preflight(ts.URL, "/slow/p3")
	testwait.Eventually(t, 30*time.Second, "the third preflight to wait in the gate", func() bool { return gate.Stats().Waiting == 1 })
	wantShed(t, <-preflight(ts.URL, "/slow/p4"), "a fourth preflight, over the anonymous party's queue of 1")
	// A tenant within its share still gets the next free slot.
	n1 := getKey(ts.URL, "key-newco", "/fast/n1")
	testwait.Eventually(t, 30*time.Second, "the tenant's request to wait", func() bool { return gate.Stats().Waiting == 2 })
	up.release("p1")
	if p := <-up.arrived; p != "/fast/n1" {
		t.Fatalf("the freed slot went to %s, want the tenant's request", p)
	}
	up.release("p2")
	up.release("p3")
	<-up.arrived
	for _, r := range []chan *http.Response{p1, p2, p3, n1} {
		if resp := <-r; resp.StatusCode != 200 {
			t.Fatalf("an admitted request: %d %s", resp.StatusCode, resp.Status)
		}
	}
	// Four preflights a hour per address (the shed one took its token):
	// the fifth is 429 with Retry-After and never reaches the upstream.
	resp := <-preflight(ts.URL, "/fast/p5")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a preflight over the per-address limit: %d %v, want 429 with Retry-After", resp.StatusCode, resp.Header)
	}
	select {
	case p := <-up.arrived:
		t.Fatalf("a refused preflight reached the upstream: %s", p)
	default:
	}
}

// workerUpstream is an upstream of 16 workers: a request holds one while
// it reads its body and for its service time, 50 ms (or ?sleep=N ms);
// beyond 16 they queue. /fail answers 503 at once.
func workerUpstream(t *testing.T) *httptest.Server {
	workers := make(chan struct{}, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		select {
		case workers <- struct{}{}:
		case <-r.Context().Done():
			return
		}
		defer func() { <-workers }()
		io.Copy(io.Discard, r.Body)
		d := 50 * time.Millisecond
		if ms, err := strconv.Atoi(r.URL.Query().Get("sleep")); err == nil {
			d = time.Duration(ms) * time.Millisecond
		}
		time.Sleep(d)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(up.Close)
	return up
}

// trickled is a body of ten bytes sent one every 30 ms.
func trickled() io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for range 10 {
			time.Sleep(30 * time.Millisecond)
			if _, err := pw.Write([]byte("x")); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// TestProxyCapacityNoSingleParty: before an upstream of 16 workers, with
// the learned limit starting at 16, a tenant inside its limits cannot
// talk the limit down for another that keeps the upstream busy: not with
// six slow requests at a time, nor with bodies trickled over 300 ms, nor
// with a stream of fast 503s. The limit stays near the 16 workers (it
// falls to the floor of 4 when one tenant's answers teach it alone).
func TestProxyCapacityNoSingleParty(t *testing.T) {
	testenv.Slow(t, "a 3 s attack per case on a live upstream")
	for _, tc := range []struct {
		name    string
		clients int
		request func(base string) *http.Request
	}{
		{"six slow requests", 6, func(base string) *http.Request {
			req, _ := http.NewRequest("GET", base+"/work?sleep=300", nil)
			return req
		}},
		{"six bodies trickled over 300 ms", 6, func(base string) *http.Request {
			req, _ := http.NewRequest("POST", base+"/work", trickled())
			return req
		}},
		{"fast 503s, 200 a second", 2, func(base string) *http.Request {
			time.Sleep(10 * time.Millisecond)
			req, _ := http.NewRequest("GET", base+"/fail", nil)
			return req
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, s, _ := capacityProxy(t, workerUpstream(t), "upstream_capacity: {floor: 4, ceiling: 64, initial: 16}")
			gate := s.capacity.cur.Load().gate
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			loop := func(key string, clients int, request func(string) *http.Request) {
				for range clients {
					wg.Go(func() {
						for ctx.Err() == nil {
							req := request(ts.URL).WithContext(ctx)
							req.Header.Set("X-API-Key", key)
							if resp, err := http.DefaultClient.Do(req); err == nil {
								io.Copy(io.Discard, resp.Body)
								resp.Body.Close()
							}
						}
					})
				}
			}
			loop("key-newco", 16, func(base string) *http.Request { // the victim keeps the upstream busy
				req, _ := http.NewRequest("GET", base+"/work", nil)
				return req
			})
			time.Sleep(300 * time.Millisecond)
			loop("key-acme", tc.clients, tc.request)
			var limits []int
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				limits = append(limits, gate.Limit())
			}
			t.Logf("the limit every 10 ms under the attack: %v", limits)
			slices.Sort(limits)
			if med := limits[len(limits)/2]; med < 12 {
				t.Fatalf("the learned limit's median under one tenant's attack: %d, want it near the upstream's 16 workers (12 at least)", med)
			}
		})
	}
}
