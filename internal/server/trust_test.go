package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/redisq"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// allStores is memory, standalone Redis and a real Redis Cluster, each
// with a key prefix of its own; under -short, memory alone (see stores).
func allStores(t *testing.T) map[string]store.Store {
	t.Helper()
	out := stores(t)
	if testenv.Short() {
		return out
	}
	cs, err := redisstore.New(redisstore.Config{URL: "redis-cluster://" + strings.Join(redistest.SharedCluster(t).Addrs(), ","), Prefix: fmt.Sprintf("srv%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	out["cluster"] = cs
	return out
}

// proxyServer is the service of service(), with the sms provider, the jobs
// API and a dashboard and metrics handler, in proxy mode.
func proxyServer(t *testing.T, st store.Store) *Server {
	t.Helper()
	q, err := quota.New(quota.Config{Store: st, Providers: map[string]quota.Provider{"sms": smsProvider}})
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := fairq.NewMemory(fairq.MemoryConfig{Kinds: jobKinds})
	ok := standIn(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("internal " + r.URL.Path)) })
	s, err := New(Config{Limiter: testLimiter(t, st, time.Second), Auth: testAuth(t), Upstream: upstreamEcho(t),
		Quotas: q, Jobs: jobs, JobKinds: jobKinds, Metrics: ok, Dashboard: ok})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPublicListenerCannotCharge: in proxy mode nothing on the public
// surface decides, charges or reads limits for a caller that names them:
// /v1/take, /v1/check, the outbound and worker endpoints, /metrics,
// /readyz and the dashboard are the upstream's paths there (so an
// unauthenticated caller gets 401 from the proxy), and served only by the
// internal handler.
func TestPublicListenerCannotCharge(t *testing.T) {
	s := proxyServer(t, memstore.New(memstore.Config{}))
	attacks := []call{
		{method: "POST", path: "/v1/take", body: `{"key":"rl:{t:globex}:all:1m","limit":1,"period_ms":31622400000}`},
		{method: "POST", path: "/v1/take", body: `{"key":"ob:{p:sms}:all","limit":1,"period_ms":31622400000}`},
		{method: "POST", path: "/v1/check", body: `{"tenant":"acme","class":"read","cost":300}`},
		{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme"}`},
		{method: "POST", path: "/v1/outbound/pause", body: `{"provider":"sms","retry_after_ms":60000}`},
		{method: "POST", path: "/v1/jobs/report/lease"},
		{method: "GET", path: "/metrics"},
		{method: "GET", path: "/readyz"},
		{method: "GET", path: "/dashboard"},
		{method: "GET", path: "/dashboard/data"},
	}
	for _, a := range attacks {
		rec := a.do(s)
		if rec.Code != http.StatusUnauthorized || strings.Contains(rec.Body.String(), "allowed") || strings.HasPrefix(rec.Body.String(), "internal") {
			t.Errorf("public %s %s: %d %s, want the proxy's 401 for a caller without a credential", a.method, a.path, rec.Code, rec.Body)
		}
	}
	in := s.Internal()
	for _, p := range []string{"/metrics", "/dashboard", "/readyz", "/healthz"} {
		if rec := (call{method: "GET", path: p}).do(in); rec.Code != 200 {
			t.Errorf("internal %s: %d %s", p, rec.Code, rec.Body)
		}
	}
	// Nothing the attacker sent reached a limit: acme's read class is whole,
	// and the sms provider and globex answer.
	if code, m := check(t, in, `{"tenant":"acme","class":"read","cost":0}`); code != 200 || m["allowed"] != true {
		t.Fatalf("acme after the attacks: %d %v", code, m)
	}
	for _, l := range decodeMap(t, call{method: "GET", path: "/v1/me/limits", headers: asTenant("key-acme")}.do(s))["layers"].([]any) {
		if l := l.(map[string]any); l["remaining"] != l["burst"] {
			t.Errorf("acme's layer %v was charged by the attacks", l)
		}
	}
	// With a credential the path is the upstream's, not fairgate's.
	rec := call{method: "POST", path: "/v1/take", body: `{"key":"x","limit":1,"period_ms":1000}`, headers: asTenant("key-acme")}.do(s)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"path":"/v1/take"`) {
		t.Errorf("public /v1/take with a credential: %d %s, want the upstream's answer", rec.Code, rec.Body)
	}
	if rec := (call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":0}`}).do(in); rec.Code != 200 {
		t.Errorf("sms after the attacks: %d %s", rec.Code, rec.Body)
	}
}

// TestInternalToken: with an internal token every internal endpoint but
// the probes answers 401 without it.
func TestInternalToken(t *testing.T) {
	const tok = "internal-token-for-tests"
	ok := standIn(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("{}")) })
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), 0), Upstream: upstreamEcho(t), InternalToken: tok, Metrics: ok, Dashboard: ok, RLSJSON: ok})
	if err != nil {
		t.Fatal(err)
	}
	in := s.Internal()
	for _, c := range []call{
		{method: "POST", path: "/v1/take", body: `{"key":"k","limit":1,"period_ms":1000}`},
		{method: "POST", path: "/v1/check", body: `{"tenant":"acme","class":"read"}`},
		{method: "GET", path: "/metrics"},
		{method: "POST", path: "/json", body: `{"domain":"d"}`},
	} {
		if rec := c.do(in); rec.Code != 401 {
			t.Errorf("%s without the token: %d", c.path, rec.Code)
		}
		c.headers = map[string]string{"Authorization": "Bearer " + tok}
		if rec := c.do(in); rec.Code != 200 {
			t.Errorf("%s with the token: %d %s", c.path, rec.Code, rec.Body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/healthcheck"} {
		if rec := (call{method: "GET", path: p}).do(in); rec.Code != 200 {
			t.Errorf("probe %s without the token: %d", p, rec.Code)
		}
	}
	if _, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), 0), InternalToken: "short"}); err == nil {
		t.Error("a 5-character internal token was accepted")
	}
}

// TestTakeKeysOwnNamespace: no /v1/take key, whatever it spells, names a
// tenant, class, anonymous, outbound, queue, Envoy or control key: after
// each is taken to its limit of 1 per 366 days, tenants, the provider and
// a take of a plain key still pass, on memory, Redis and Redis Cluster.
func TestTakeKeysOwnNamespace(t *testing.T) {
	keys := []string{
		"rl:{t:globex}:all:1m", "rl:{t:globex}:c:read:1m", "rl:{ip:198.51.100.7}:a:login:1m",
		"ob:{p:sms}:all", "ob:{p:sms}:t:acme", "fg:probe", "fg:rl:{t:globex}:all:1m",
		"tk:{plain}", "plain", "rls:{t:globex}:x", "q:{report}", "fg:ctl:overrides",
	}
	for name, st := range allStores(t) {
		t.Run(name, func(t *testing.T) {
			s := proxyServer(t, st)
			in := s.Internal()
			for _, k := range keys {
				body := fmt.Sprintf(`{"key":%q,"limit":1,"period_ms":31622400000}`, k)
				call{method: "POST", path: "/v1/take", body: body}.do(in)
				rec := call{method: "POST", path: "/v1/take", body: body}.do(in)
				if m := decodeMap(t, rec); m["allowed"] != false {
					t.Fatalf("second take of %q: %d %v, want a rejection (its own key)", k, rec.Code, m)
				}
			}
			for _, tenant := range []string{"globex", "acme"} {
				if code, m := check(t, in, fmt.Sprintf(`{"tenant":%q,"class":"read"}`, tenant)); m["allowed"] != true {
					t.Errorf("%s after the takes: %d %v", tenant, code, m)
				}
			}
			if code, m := check(t, in, `{"route":"POST /v1/login","ip":"198.51.100.7"}`); m["allowed"] != true {
				t.Errorf("anonymous login after the takes: %d %v", code, m)
			}
			if rec := (call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":0}`}).do(in); rec.Code != 200 {
				t.Errorf("sms after the takes: %d %s", rec.Code, rec.Body)
			}
		})
	}
}

// TestClientBodyFaultIsTheClients: requests with a malformed chunked body
// get 400 and never open the upstream's breaker for other tenants.
func TestClientBodyFaultIsTheClients(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	b, err := breaker.New(map[string]breaker.Settings{UpstreamDependency: {ConsecutiveFailures: 3, Cooldown: time.Minute}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u, Breakers: b})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	for i := range 4 { // the route allows 5 per address
		code := rawChunked(t, ts.Listener.Addr().String(), "POST /v1/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
		if code != 400 {
			t.Fatalf("malformed chunk %d: status %d, want 400", i, code)
		}
	}
	if st := b.States()[UpstreamDependency]; st != "closed" {
		t.Fatalf("breaker %s after clients' malformed bodies, want closed", st)
	}
	resp, err := http.Get(ts.URL + "/v1/users/1?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("GET", ts.URL+"/v1/users/1", nil)
	req.Header.Set("X-API-Key", "key-acme")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("another tenant after the malformed bodies: %d, want 200", resp.StatusCode)
	}
}

// rawChunked sends raw on a new connection and returns the status code.
func rawChunked(t *testing.T, addr, raw string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestEnqueueIsChargedAndCapped: an enqueue is charged to the tenant's
// limits like any request (newco's free plan admits a burst of 30, then
// 429 with Retry-After and RateLimit headers), a payload over fairq.MaxPayload is 413, and a tenant at its
// share of a kind's depth gets 429 tenant_queue_full while others enqueue.
func TestEnqueueIsChargedAndCapped(t *testing.T) {
	kinds := fairq.Kinds{"report": {Refuse: 1000}, "small": {Refuse: 4}}
	q, err := fairq.NewMemory(fairq.MemoryConfig{Kinds: kinds, Share: func(string) float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Jobs: q, JobKinds: kinds, Upstream: upstreamEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(kind, key, body string) *httptest.ResponseRecorder {
		return call{method: "POST", path: "/v1/jobs/" + kind, body: body, headers: asTenant(key)}.do(s)
	}
	admitted := 0
	var last *httptest.ResponseRecorder
	for range 40 {
		if last = enqueue("report", "key-newco", `{}`); last.Code != 202 {
			break
		}
		admitted++
	}
	if admitted != 30 || last.Code != 429 || last.Header().Get("Retry-After") == "" || last.Header().Get("RateLimit-Limit") == "" {
		t.Fatalf("newco enqueued %d, then %d %v %s; want 30 (its burst), then 429 with Retry-After and RateLimit headers", admitted, last.Code, last.Header(), last.Body)
	}
	if rec := enqueue("report", "key-acme", `{"pad":"`+strings.Repeat("x", fairq.MaxPayload)+`"}`); rec.Code != 413 {
		t.Errorf("payload over %d bytes: %d %s, want 413", fairq.MaxPayload, rec.Code, rec.Body)
	}
	for i := range 3 {
		rec := enqueue("small", "key-acme", `{}`)
		switch {
		case i < 2 && rec.Code != 202:
			t.Fatalf("acme's small job %d: %d %s", i, rec.Code, rec.Body)
		case i == 2 && (rec.Code != 429 || decodeMap(t, rec)["code"] != "tenant_queue_full"):
			t.Fatalf("acme's third small job (share 2 of 4): %d %s, want 429 tenant_queue_full", rec.Code, rec.Body)
		}
	}
	if rec := enqueue("small", "key-newco", `{}`); rec.Code != 202 && rec.Code != 429 {
		t.Fatalf("another tenant beside acme's full share: %d %s", rec.Code, rec.Body)
	} else if rec.Code == 429 && decodeMap(t, rec)["code"] == "tenant_queue_full" {
		t.Fatalf("newco refused for acme's share: %s", rec.Body)
	}
}

// TestPausedRedisBoundsEveryWait: with Redis paused (SIGSTOP), every store
// call on every path ends at its deadline: an admin write fails with 503
// and, once Redis resumes, has not happened (no write is applied later
// without its audit line); an enqueue, a job lease and /v1/me/limits
// answer 503 in time.
func TestPausedRedisBoundsEveryWait(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "pause:"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	lg := slog.New(slog.NewJSONHandler(&logs, nil))
	l, err := limiter.New(limiter.Config{Store: rs, Policy: cfg.Policy, Control: redisctl.New(rs.Client(), "pause:"), Timeout: 100 * time.Millisecond, Fallback: memstore.New(memstore.Config{}), Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	q, err := redisq.New(redisq.Config{Client: rs.Client(), Prefix: "pause:", Kinds: jobKinds})
	if err != nil {
		t.Fatal(err)
	}
	const wait = 300 * time.Millisecond
	s, err := New(Config{Limiter: l, Auth: testAuth(t), Jobs: q, JobKinds: jobKinds, WorkerToken: workerTok, ControlTimeout: wait, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken, Logger: lg, Timeout: wait})
	if err != nil {
		t.Fatal(err)
	}
	asAdmin := map[string]string{"Authorization": "Bearer " + adminToken}
	// Warm up: the scripts are loaded, so a paused Redis holds the very
	// calls that would run when it resumes.
	if rec := (call{method: "PUT", path: "/admin/tenants/warm", body: `{"plan":"team"}`, headers: asAdmin}).do(adm); rec.Code != 200 {
		t.Fatalf("admin write: %d %s", rec.Code, rec.Body)
	}
	call{method: "POST", path: "/v1/jobs/report", body: `{}`, headers: asTenant("key-acme")}.do(s)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for _, c := range []struct {
		h    http.Handler
		call call
	}{
		{adm, call{method: "PUT", path: "/admin/tenants/zz", body: `{"plan":"team"}`, headers: asAdmin}},
		{s, call{method: "POST", path: "/v1/jobs/report", body: `{}`, headers: asTenant("key-acme")}},
		{s, call{method: "POST", path: "/v1/jobs/report/lease", headers: map[string]string{"Authorization": "Bearer " + workerTok}}},
		{s, call{method: "GET", path: "/v1/me/limits", headers: asTenant("key-acme")}},
	} {
		start := time.Now()
		rec := c.call.do(c.h)
		if took := time.Since(start); took > wait+2*time.Second || rec.Code != 503 && rec.Code != 429 {
			t.Errorf("%s %s with Redis paused: %d after %v (%s), want 503 within about %v", c.call.method, c.call.path, rec.Code, took, rec.Body, wait)
		}
	}
	if !strings.Contains(logs.String(), "admin: tenant override NOT set") {
		t.Errorf("no log line for the failed admin write:\n%s", logs.String())
	}
	srv.Resume()
	resumed = true
	time.Sleep(200 * time.Millisecond) // the queued write runs now, and must refuse itself
	if err := l.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Overlay().Tenants["zz"]; ok {
		t.Fatal("the admin write that failed was applied once Redis resumed")
	}
	if rec := (call{method: "PUT", path: "/admin/tenants/zz", body: `{"plan":"team"}`, headers: asAdmin}).do(adm); rec.Code != 200 {
		t.Fatalf("admin write after Redis resumed: %d %s", rec.Code, rec.Body)
	}
	if l.Overlay().Tenants["zz"].Plan != "team" {
		t.Fatal("the admin write after Redis resumed did not apply")
	}
}

// TestRoutesAreClassifiedAsTheUpstreamSeesThem: spellings of a path that
// the upstream reads alike (a trailing slash, ";" parameters, another
// case, dot segments, doubled slashes, a lower-case method) fall in the
// same class, never the default one.
func TestRoutesAreClassifiedAsTheUpstreamSeesThem(t *testing.T) {
	in := service(t, memstore.New(memstore.Config{})).Internal()
	for _, route := range []string{"GET /v1/search", "GET /v1/search/", "GET /v1/search;x", "GET /v1/Search", "get /v1/search", "GET /v1/x/../search", "GET /v1//search", "GET /v1/SEARCH;a=b/"} {
		code, m := check(t, in, fmt.Sprintf(`{"tenant":"acme","route":%q}`, route))
		if got := strings.Join(policies(m), " "); code != 200 || got != "enterprise.search.1m enterprise.tenant.1m" {
			t.Errorf("%s: %d %s, want the search class", route, code, got)
		}
	}
	// An anonymous route without the client's address is refused, not
	// put in one shared bucket.
	if code, m := check(t, in, `{"route":"POST /v1/login"}`); code != 400 || !strings.Contains(fmt.Sprint(m["detail"]), "ip: required") {
		t.Errorf("anonymous check without ip: %d %v", code, m)
	}
}

// TestUpstreamLearnsTheVerifiedIdentity: the proxy tells the upstream the
// verified tenant and plan in its identity headers and removes the copies
// a client sent (a client's X-Tenant: globex never reaches the upstream
// when fairgate decided the caller is acme).
func TestUpstreamLearnsTheVerifiedIdentity(t *testing.T) {
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Store(r.Header.Clone()) }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u,
		UpstreamHeaders: config.UpstreamHeaders{Tenant: "X-Tenant", Plan: "X-Plan"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := call{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-API-Key": "key-acme", "X-Tenant": "globex", "X-Plan": "enterprise"}}.do(s)
	h, _ := got.Load().(http.Header)
	if rec.Code != 200 || h.Get("X-Tenant") != "acme" || h.Get("X-Plan") != "enterprise" || len(h.Values("X-Tenant")) != 1 {
		t.Fatalf("upstream saw %v (status %d), want X-Tenant acme and X-Plan enterprise only", h, rec.Code)
	}
	got.Store(http.Header{})
	call{method: "POST", path: "/v1/login", headers: map[string]string{"X-Tenant": "globex"}}.do(s)
	if h, _ := got.Load().(http.Header); h.Get("X-Tenant") != "" {
		t.Fatalf("an anonymous request reached the upstream with X-Tenant %q", h.Get("X-Tenant"))
	}
	// Look-alikes with '_' for '-': CGI, WSGI and Rack read X_Tenant as
	// HTTP_X_TENANT, the same as X-Tenant. They once passed through.
	for _, c := range []call{
		{method: "POST", path: "/v1/login", headers: map[string]string{"X_Tenant": "globex", "x_plan": "enterprise"}},
		{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-API-Key": "key-acme", "X_TENANT": "globex"}},
		{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-API-Key": "key-acme", "X.Tenant": "globex", "x.plan": "enterprise"}},
	} {
		got.Store(http.Header{})
		c.do(s)
		h, _ := got.Load().(http.Header)
		for k := range h {
			if d := strings.NewReplacer("_", "-", ".", "-").Replace(k); d != k && (strings.EqualFold(d, "X-Tenant") || strings.EqualFold(d, "X-Plan")) {
				t.Fatalf("%s %s: the upstream saw the client's %s: %v", c.method, c.path, k, h)
			}
		}
	}
}

// TestMyLimitsHonoursThePlanClaim: /v1/me/limits shows the plan the proxy
// enforces for a JWT's plan claim, and an unknown plan claim is logged
// once.
func TestMyLimitsHonoursThePlanClaim(t *testing.T) {
	var logs testenv.SyncBuffer
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: upstreamEcho(t), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for plan, want := range map[string]string{"team": "team", "platinum": "free"} {
		tok := token(t, jwtKey, func(c jwt.MapClaims) { c["tenant"] = "newcorp-" + plan; c["plan"] = plan })
		for range 2 {
			rec := call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"Authorization": "bearer " + tok}}.do(s)
			if m := decodeMap(t, rec); rec.Code != 200 || m["plan"] != want {
				t.Fatalf("plan claim %q: %d %v, want plan %s", plan, rec.Code, m, want)
			}
		}
	}
	if n := strings.Count(logs.String(), `"plan":"platinum"`); n != 1 {
		t.Errorf("the unknown plan claim was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestUnknownPlanClaimsBounded: a flood of made-up plan claims (an
// identity provider's tokens carry whatever it mints) is logged at most
// 1,000 times, one name each, and the names remembered stay as few, so
// that claims cannot grow the server's memory or its log without bound.
func TestUnknownPlanClaimsBounded(t *testing.T) {
	var logs testenv.SyncBuffer
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: upstreamEcho(t), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1200 {
		tok := token(t, jwtKey, func(c jwt.MapClaims) { c["tenant"] = "flood"; c["plan"] = fmt.Sprint("made-up-", i) })
		rec := call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"Authorization": "bearer " + tok}}.do(s)
		if m := decodeMap(t, rec); rec.Code != 200 || m["plan"] != "free" {
			t.Fatalf("made-up plan %d: %d %v, want the default plan", i, rec.Code, m)
		}
	}
	if n := strings.Count(logs.String(), "names an unknown plan"); n != 1000 {
		t.Errorf("%d unknown plan claims logged of 1,200, want 1,000", n)
	}
	names := 0
	s.id.Load().unknownLog.Range(func(any, any) bool { names++; return true })
	if names > 1000 {
		t.Errorf("%d plan names remembered, want at most 1,000", names)
	}
}

// TestCORSPreflightPasses: a browser's preflight (OPTIONS with Origin and
// Access-Control-Request-Method, never a credential) is decided as an
// anonymous request under the default preflight limits and reaches the
// upstream; it was once answered 401.
func TestCORSPreflightPasses(t *testing.T) {
	s := service(t, memstore.New(memstore.Config{}))
	rec := call{method: "OPTIONS", path: "/v1/users/1", headers: map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "PUT"}}.do(s)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"path":"/v1/users/1"`) || rec.Header().Get("RateLimit-Limit") != "60" {
		t.Fatalf("preflight: %d %v %s, want the upstream's answer under the preflight limit (burst 60)", rec.Code, rec.Header(), rec.Body)
	}
	if rec := (call{method: "OPTIONS", path: "/v1/users/1"}).do(s); rec.Code != 401 {
		t.Fatalf("a plain OPTIONS without a credential: %d, want 401 like any request", rec.Code)
	}
}

// TestAdminSpeaksTheAPIsVocabulary: admin answers use snake_case and
// milliseconds, never Go field names or nanoseconds; unknown paths and
// methods are problem+json; plans can be read and written (the docs
// promised it; PUT /admin/plans/free was 404); tenants with run-time
// entries are listed; bad times and TTLs are refused by field name.
func TestAdminSpeaksTheAPIsVocabulary(t *testing.T) {
	l, _ := redisInstance(t, fmt.Sprintf("vocab%d:", time.Now().UnixNano()))
	ah, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	admin := func(method, path, body string) *httptest.ResponseRecorder {
		return call{method: method, path: path, body: body, headers: map[string]string{"Authorization": "Bearer " + adminToken}}.do(ah)
	}
	goNames := []string{`"Period"`, `"Algorithm"`, `"Limit":`, `"Tenant"`, `"Layers"`, `"0001-01-01`, `000000000`}
	for _, p := range []string{"/admin/config", "/admin/tenants/acme", "/admin/plans/free"} {
		rec := admin("GET", p, "")
		for _, bad := range goNames {
			if rec.Code != 200 || strings.Contains(rec.Body.String(), bad) {
				t.Errorf("GET %s: %d, holds %s: %s", p, rec.Code, bad, rec.Body)
			}
		}
	}
	if rec := admin("GET", "/admin/plans/free", ""); !strings.Contains(rec.Body.String(), `"period_ms":60000`) {
		t.Errorf("plan free: %s", rec.Body)
	}
	rec := admin("PUT", "/admin/plans/free", `{"rules":[{"limit":60,"period_ms":60000,"burst":40},{"name":"daily","limit":5000,"calendar":"day"}]}`)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"runtime":true`) || !strings.Contains(rec.Body.String(), `"burst":40`) {
		t.Fatalf("PUT plan: %d %s", rec.Code, rec.Body)
	}
	if res, err := l.Snapshot().Resolve(policy.Request{Tenant: "nobody", Class: "read"}, time.Now()); err != nil || res.Layers[0].Limit.Capacity() != 40 {
		t.Fatalf("the plan written at run time is not in force: %+v %v", res, err)
	}
	if rec := admin("PUT", "/admin/plans/free", `{"rules":[{"limit":60}]}`); rec.Code != 400 || !strings.Contains(rec.Body.String(), "rules[0].period_ms: required") {
		t.Errorf("plan without a period: %d %s", rec.Code, rec.Body)
	}
	if rec := admin("PUT", "/admin/tenants/zz", `{"plan":"team","ttl_seconds":600}`); rec.Code != 200 {
		t.Fatalf("override: %d %s", rec.Code, rec.Body)
	}
	if rec := admin("GET", "/admin/tenants", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"tenant":"zz"`) || !strings.Contains(rec.Body.String(), `"expires_at":"`) {
		t.Errorf("tenant list: %d %s", rec.Code, rec.Body)
	}
	for body, want := range map[string]string{
		`{"expires_at":"tomorrow"}`:                  `expires_at: "tomorrow" is not an RFC 3339 time`,
		`{"ttl_seconds":18446744083}`:                "ttl_seconds: 18446744083 is outside 1..31622400",
		`{"plan":"team","plan":"free"}`:              "field plan: given twice",
		`{"Plan":"team"}`:                            `field Plan: unknown field; names are case-sensitive: did you mean "plan"?`,
		`{"limits":{"1m":{"limit":5,"Limit":6}}}`:    `field limits.1m.Limit: unknown field`,
		"{\"plan\":\"te\xffam\"}":                    "not valid UTF-8",
		"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03{}": "gzip-compressed",
	} {
		rec := admin("PUT", "/admin/tenants/zz", body)
		if detail, _ := decodeMap(t, rec)["detail"].(string); rec.Code/100 != 4 || !strings.Contains(detail, want) {
			t.Errorf("%q: %d %s, want a 4xx naming %q", body, rec.Code, rec.Body, want)
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/admin/nope"}, {"DELETE", "/admin/config"}} {
		if rec := admin(c.method, c.path, ""); rec.Header().Get("Content-Type") != "application/problem+json" || rec.Code/100 != 4 {
			t.Errorf("%s %s: %d %q, want a problem+json 4xx", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}

// TestRetryAfterSecondsIsOneNumber: every problem body's
// retry_after_seconds is a number equal to its Retry-After header (the
// open breaker's 503 and the full queue's 503 among them).
func TestRetryAfterSecondsIsOneNumber(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	b, err := breaker.New(map[string]breaker.Settings{UpstreamDependency: {ConsecutiveFailures: 1, Cooldown: 1500 * time.Millisecond}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := fairq.NewMemory(fairq.MemoryConfig{Kinds: fairq.Kinds{"small": {Refuse: 1}}})
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u, Breakers: b, Jobs: q, JobKinds: fairq.Kinds{"small": {Refuse: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	get := call{method: "GET", path: "/v1/users/1", headers: asTenant("key-acme")}
	get.do(s) // the upstream's 503 opens acme's own breaker
	enq := call{method: "POST", path: "/v1/jobs/small", body: `{}`, headers: asTenant("key-acme")}
	enq.do(s) // fills the kind
	for _, c := range []call{get, enq} {
		rec := c.do(s)
		n, ok := decodeMap(t, rec)["retry_after_seconds"].(float64)
		if rec.Code != 503 || !ok || fmt.Sprint(n) != rec.Header().Get("Retry-After") {
			t.Errorf("%s %s: %d retry_after_seconds %v (a number: %v), Retry-After %q; want one number", c.method, c.path, rec.Code, n, ok, rec.Header().Get("Retry-After"))
		}
	}
}

// standIn stands in for the metrics, dashboard and Envoy JSON handlers in
// tests of who may reach them: f's answer, in the content type the real
// handler's has (what docs/openapi.json describes).
func standIn(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		case "/dashboard":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("{}"))
			return
		}
		f(w, r)
	}
}

// TestPathsUpstreamsReadDifferentlyAreRefused: a request target that
// upstreams split or resolve differently is refused with 400 on every
// path (the proxy, /v1/authz, /v1/check) and never reaches the upstream.
// Today "/v1/search#/../../healthz" was charged as the free /healthz
// while a Node upstream served /v1/search.
func TestPathsUpstreamsReadDifferentlyAreRefused(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u,
		ForwardAuth: config.ForwardAuth{Gateway: "nginx"}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s)
	defer front.Close()
	for _, target := range []string{
		"/v1/search#/../../healthz", "/v1/search%2F..%2F..%2Fhealthz", "/v1/search/%2e%2e/%2e%2e/healthz",
		`/v1/search\..\..\healthz`, "/v1/search//..", "/v1/search/..;/x", "/v1/sea%0arch", "//x/v1/search",
	} {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: api\r\nX-API-Key: key-acme\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != problem.ContentType {
			t.Errorf("proxy, %s: %d, want 400 problem+json", target, resp.StatusCode)
		}
		if w := authz(s.Internal(), "GET", map[string]string{"X-API-Key": "key-acme", "X-Original-URI": target, "X-Original-Method": "GET"}); w.Code != 400 || !strings.Contains(w.Body.String(), "request target") {
			t.Errorf("/v1/authz, %s: %d %s, want 400", target, w.Code, w.Body)
		}
		if code, m := check(t, s.Internal(), fmt.Sprintf(`{"tenant":"acme","route":%q}`, "GET "+target)); code != 400 || !strings.Contains(fmt.Sprint(m["detail"]), "route: request target") {
			t.Errorf("/v1/check, %s: %d %v, want 400 naming the route", target, code, m)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream was reached %d times", n)
	}
	// The query is not the path: a /v1/check route with one is the route.
	if code, m := check(t, s.Internal(), `{"tenant":"acme","route":"GET /v1/search?q=a/../../healthz"}`); code != 200 || strings.Join(policies(m), " ") != "enterprise.search.1m enterprise.tenant.1m" {
		t.Errorf("a route with a query: %d %v, want the search class", code, m)
	}
}

// TestOneTenantCannotOpenTheUpstream: one tenant's requests that the
// upstream fails (a bad input that raises a 500, or a run of 503s), and
// anonymous CORS preflights the upstream answers 501, move no breaker but
// the tenant's own. Today five such requests from one tenant, or five
// preflights without any credential, gave every other tenant 503
// dependency_unavailable for 30 s.
func TestOneTenantCannotOpenTheUpstream(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch {
		case r.Method == http.MethodOptions:
			w.WriteHeader(http.StatusNotImplemented)
		case r.URL.Query().Get("boom") == "500":
			w.WriteHeader(http.StatusInternalServerError)
		case r.URL.Query().Get("boom") == "503":
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	b, err := breaker.New(map[string]breaker.Settings{UpstreamDependency: {ConsecutiveFailures: 5, FailureStatuses: []int{500, 501, 502, 503, 504}, Cooldown: time.Minute}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u, Breakers: b})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key, query string) *httptest.ResponseRecorder {
		return call{method: "GET", path: "/v1/users/1" + query, headers: asTenant(key)}.do(s)
	}
	for range 6 {
		call{method: "OPTIONS", path: "/v1/users/1", headers: map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "DELETE"}}.do(s)
	}
	for range 5 {
		get("key-acme", "?boom=500")
	}
	for range 5 {
		get("key-acme", "?boom=503")
	}
	if st := b.States()[UpstreamDependency]; st != "closed" {
		t.Fatalf("shared breaker %s after one tenant's failures and anonymous preflights, want closed", st)
	}
	if rec := get("key-newco", ""); rec.Code != 200 {
		t.Fatalf("another tenant: %d %s, want 200", rec.Code, rec.Body)
	}
	// The failing tenant is refused by its own breaker, without a call.
	n := hits.Load()
	rec := get("key-acme", "")
	if m := decodeMap(t, rec); rec.Code != 503 || m["scope"] != "caller" || rec.Header().Get("Retry-After") == "" || hits.Load() != n {
		t.Fatalf("the failing tenant: %d %s (upstream hit %d more), want 503 from its own breaker", rec.Code, rec.Body, hits.Load()-n)
	}
}

// TestMethodOverrideIsRefused: a request that overrides its method is
// refused on every path, since upstreams differ on whether they honour
// it. A POST /v1/search with X-HTTP-Method-Override: GET was charged as a
// POST (the default class) while Express's method-override served the
// search (300 searches passed a search burst of 200).
func TestMethodOverrideIsRefused(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u,
		ForwardAuth: config.ForwardAuth{Gateway: "caddy"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []call{
		{method: "POST", path: "/v1/search", headers: map[string]string{"X-API-Key": "key-acme", "X-HTTP-Method-Override": "GET"}},
		{method: "POST", path: "/v1/search", headers: map[string]string{"X-API-Key": "key-acme", "X_HTTP_Method_Override": "GET"}},
		{method: "POST", path: "/v1/search?_method=GET", headers: map[string]string{"X-API-Key": "key-acme"}},
	} {
		if rec := c.do(s); rec.Code != 400 || !strings.Contains(rec.Body.String(), "override") {
			t.Errorf("proxy %s %s %v: %d %s, want 400", c.method, c.path, c.headers, rec.Code, rec.Body)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the upstream was reached %d times", n)
	}
	if rec := (call{method: "POST", path: "/v1/users", headers: map[string]string{"X-API-Key": "key-acme", "X-HTTP-Method-Override": "POST"}}).do(s); rec.Code != 200 {
		t.Errorf("an override naming the method itself: %d, want 200", rec.Code)
	}
	w := authzAs(s.Internal(), "GET", "/v1/authz", "X-Forwarded-Uri", "/v1/search", "X-Forwarded-Method", "POST", "X-API-Key", "key-acme", "X-Http-Method-Override", "GET")
	if w.Code != 400 || !strings.Contains(w.Body.String(), "override") {
		t.Errorf("/v1/authz with an override: %d %s, want 400", w.Code, w.Body)
	}
	if code, m := check(t, s.Internal(), `{"tenant":"acme","route":"POST /v1/search?_method=GET"}`); code != 400 || !strings.Contains(fmt.Sprint(m["detail"]), "override") {
		t.Errorf("/v1/check with _method: %d %v, want 400", code, m)
	}
}

// TestEmptyBearerIsNamed: "Authorization: Bearer " (curl's rendering of
// "Bearer $TOKEN" with the variable unset; Go trims it to "Bearer") gets
// a 401 that says the token is empty and names the variable, for the
// admin, internal and worker tokens alike; a wrong token gets the plain
// 401.
func TestEmptyBearerIsNamed(t *testing.T) {
	l := testLimiter(t, memstore.New(memstore.Config{}), 0)
	in, err := New(Config{Limiter: l, Upstream: upstreamEcho(t), InternalToken: "internal-token-for-tests"})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	workers := outboundServer(t, memstore.New(memstore.Config{}), "worker-token-for-tests")
	for _, tc := range []struct {
		name string
		h    http.Handler
		c    call
		env  string
	}{
		{"internal", in.Internal(), call{method: "POST", path: "/v1/check", body: `{"tenant":"acme","class":"read"}`}, "FAIRGATE_INTERNAL_TOKEN"},
		{"admin", adm, call{method: "GET", path: "/admin/tenants"}, "FAIRGATE_ADMIN_TOKEN"},
		{"worker", workers, call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme"}`}, "FAIRGATE_WORKER_TOKEN"},
	} {
		for _, v := range []string{"Bearer ", "Bearer", "bearer  "} {
			tc.c.headers = map[string]string{"Authorization": v}
			rec := tc.c.do(tc.h)
			if b := rec.Body.String(); rec.Code != 401 || !strings.Contains(b, "the bearer token is empty") || !strings.Contains(b, "$"+tc.env) {
				t.Errorf("%s, Authorization %q: %d %s, want 401 saying the token is empty and naming $%s", tc.name, v, rec.Code, b, tc.env)
			}
		}
		tc.c.headers = map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}
		if rec := tc.c.do(tc.h); rec.Code != 401 || strings.Contains(rec.Body.String(), "empty") {
			t.Errorf("%s, a wrong token: %d %s, want 401 without 'empty'", tc.name, rec.Code, rec.Body)
		}
	}
}
