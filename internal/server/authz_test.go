package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// authzServer is a decision service (no upstream) with the example policy,
// API keys, 127.0.0.1 as the trusted gateway, and fa.
func authzServer(t *testing.T, fa config.ForwardAuth) *Server {
	t.Helper()
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t),
		ClientIP: auth.ClientIP{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, ForwardAuth: fa})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// authz asks s about a request the gateway received, with hdr as the
// gateway forwards it (from the trusted peer 127.0.0.1).
func authz(s http.Handler, method string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/v1/authz", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// TestAuthz: the decision a gateway gets for each kind of request, with
// the original method and path from the headers nginx sets.
func TestAuthz(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{Gateway: "nginx", DenyStatus: 429})
	key := map[string]string{"X-API-Key": "key-newco"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	// Allowed: 200, the RateLimit headers, the verified tenant and plan.
	w := authz(s, "GET", with(key, "X-Original-URI", "/v1/search?q=1", "X-Original-Method", "GET"))
	if w.Code != 200 || w.Header().Get("RateLimit-Limit") != "8" || w.Header().Get("X-Fairgate-Tenant") != "newco" || w.Header().Get("X-Fairgate-Plan") != "free" {
		t.Fatalf("allowed: %d %v", w.Code, w.Header())
	}
	// Every spelling of the search route is the search class (burst 8):
	// 7 more pass, the 9th is rejected with 429, Retry-After and headers.
	for i, h := range []map[string]string{
		with(key, "X-Original-URI", "/v1/%73earch", "X-Original-Method", "GET"),
		with(key, "X-Original-URI", "/v1//search/", "X-Original-Method", "GET"),
		with(key, "X-Original-URI", "/v1/x/../Search;v=1", "X-Original-Method", "get"),
		with(key, "X-Original-URI", "/v1/search?page=2", "X-Original-Method", "get"),
		with(key, "X-Original-URI", "http://api.example.com/v1/search?q=2", "X-Original-Method", "GET"),
		with(key, "X-Original-URI", "/v1/./search", "X-Original-Method", "GET"),
		with(key, "X-Original-URI", "/v1/search", "X-Original-Method", "HEAD"),
	} {
		if w := authz(s, "GET", h); w.Code != 200 {
			t.Fatalf("variant %d: %d, want 200", i, w.Code)
		}
	}
	w = authz(s, "GET", with(key, "X-Original-URI", "/V1/SEARCH", "X-Original-Method", "GET"))
	var body map[string]any
	json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit-Remaining") != "0" || body["policy"] != "free.search.1m" {
		t.Fatalf("over the burst: %d %v %s", w.Code, w.Header(), w.Body)
	}
	// A free route is free whatever the method: never charged.
	for range 50 {
		if w := authz(s, "GET", with(key, "X-Original-URI", "/healthz", "X-Original-Method", "HEAD")); w.Code != 200 {
			t.Fatalf("free route: %d", w.Code)
		}
	}
	// Credentials: none on a tenant route, or a bad one, is 401.
	if w := authz(s, "GET", map[string]string{"X-Original-URI": "/v1/search", "X-Original-Method": "GET"}); w.Code != 401 {
		t.Errorf("no credential: %d, want 401", w.Code)
	}
	if w := authz(s, "GET", map[string]string{"X-Original-URI": "/v1/search", "X-Original-Method": "GET", "X-API-Key": "stolen"}); w.Code != 401 {
		t.Errorf("bad credential: %d, want 401", w.Code)
	}
	// No original path or method: 400 naming the header nginx sets.
	if w := authz(s, "GET", with(key, "X-Original-Method", "GET")); w.Code != 400 || !strings.Contains(w.Body.String(), "no X-Original-URI") {
		t.Errorf("no path: %d %s", w.Code, w.Body)
	}
	if w := authz(s, "GET", with(key, "X-Original-URI", "/v1/search")); w.Code != 400 || !strings.Contains(w.Body.String(), "no X-Original-Method") {
		t.Errorf("no method: %d %s", w.Code, w.Body)
	}
	// Anonymous routes are limited per client address, as the gateway
	// forwards it: 5 logins a quarter-hour from one address (the per-user
	// rule falls back to the address without a credential), others
	// unaffected.
	login := func(ip string) int {
		return authz(s, "GET", map[string]string{"X-Original-URI": "/v1/login", "X-Original-Method": "POST", "X-Forwarded-For": ip}).Code
	}
	for i := range 5 {
		if c := login("198.51.100.7"); c != 200 {
			t.Fatalf("login %d: %d", i, c)
		}
	}
	if c := login("198.51.100.7"); c != 429 {
		t.Errorf("6th login from one address: %d, want 429", c)
	}
	if c := login("198.51.100.8"); c != 200 {
		t.Errorf("login from another address: %d, want 200", c)
	}
}

// TestAuthzDenyAs403: with deny_status 403, a rejection is 403 with the
// real status in X-Fairgate-Status, Retry-After and the RateLimit headers,
// for nginx's error_page to answer the true 429.
func TestAuthzDenyAs403(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{Gateway: "nginx"}) // 403 is nginx's default
	h := map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/search", "X-Original-Method": "GET"}
	for range 8 {
		authz(s, "GET", h)
	}
	w := authz(s, "GET", h)
	if w.Code != 403 || w.Header().Get(StatusHeader) != "429" || w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit-Limit") != "8" {
		t.Fatalf("denied: %d %v", w.Code, w.Header())
	}
}

// TestAuthzTenantHeader: the configured tenant header names the tenant
// only from a trusted proxy; from anyone else it is ignored.
func TestAuthzTenantHeader(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{Gateway: "nginx", TenantHeader: "x-tenant"})
	h := map[string]string{"X-Tenant": "acme", "X-Original-URI": "/v1/search", "X-Original-Method": "GET"}
	if w := authz(s, "GET", h); w.Code != 200 || w.Header().Get("X-Fairgate-Plan") != "enterprise" {
		t.Fatalf("from the trusted gateway: %d %v", w.Code, w.Header())
	}
	// The gateway's tenant header is one more source of tenant IDs: the
	// same rule (policy.CheckTenantID) as credentials and entries.
	h["X-Tenant"] = "ac\u200bme"
	if w := authz(s, "GET", h); w.Code != 400 || !strings.Contains(w.Body.String(), "X-Tenant: tenant ID:") {
		t.Errorf("a zero-width space in the gateway's tenant header: %d %s, want 400 naming the header", w.Code, w.Body)
	}
	h["X-Tenant"] = "acme"
	r := httptest.NewRequest("GET", "/v1/authz", nil)
	r.RemoteAddr = "192.0.2.9:40000"
	for k, v := range h {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != 401 {
		t.Fatalf("tenant header from an untrusted peer: %d, want 401 (ignored: no credential)", w.Code)
	}
}

// downStore answers every call unavailable.
type downStore struct{ storetest.Down }

// TestAuthzFailClosed: with the store out, a fail-closed class is 503, or
// 403 with X-Fairgate-Status 503 when rejections are answered 403; a
// fail-open class passes.
func TestAuthzFailClosed(t *testing.T) {
	for _, fa := range []config.ForwardAuth{{Gateway: "nginx", DenyStatus: 429}, {Gateway: "nginx", DenyStatus: 403}} {
		s, err := New(Config{Limiter: testLimiter(t, downStore{}, time.Second), Auth: testAuth(t), ForwardAuth: fa})
		if err != nil {
			t.Fatal(err)
		}
		w := authz(s, "GET", map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/users", "X-Original-Method": "POST"})
		want, real := 503, ""
		if fa.DenyStatus == 403 {
			want, real = 403, "503"
		}
		if w.Code != want || w.Header().Get(StatusHeader) != real || w.Header().Get("Retry-After") != "5" {
			t.Errorf("deny %d, fail-closed class: %d %v, want %d with %q", fa.DenyStatus, w.Code, w.Header(), want, real)
		}
		if w := authz(s, "GET", map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/search", "X-Original-Method": "GET"}); w.Code != 200 {
			t.Errorf("fail-open class: %d, want 200", w.Code)
		}
	}
}

// authzAs asks s as a gateway would, with the auth request's own method
// and target, and headers that may repeat (name, value, name, value…).
func authzAs(s http.Handler, method, target string, kv ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "127.0.0.1:40000"
	for i := 0; i+1 < len(kv); i += 2 {
		r.Header.Add(kv[i], kv[i+1])
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// TestAuthzBelievesOnlyItsGateway: /v1/authz reads the original request
// only from the headers the named gateway sets. Today it read
// X-Original-URI before X-Forwarded-Uri whatever the gateway, so behind
// Caddy (which passes the client's X-Original-* on) a tenant over its
// search budget passed with X-Original-URI: /healthz, and a request
// without a credential reached a tenant route as an anonymous login.
func TestAuthzBelievesOnlyItsGateway(t *testing.T) {
	spend := func(t *testing.T, s http.Handler, ask func(path, method string, extra ...string) *httptest.ResponseRecorder) {
		t.Helper()
		for i := range 8 {
			if w := ask("/v1/search", "GET"); w.Code != 200 {
				t.Fatalf("search %d: %d %s", i, w.Code, w.Body)
			}
		}
		if w := ask("/v1/search", "GET"); w.Code == 200 {
			t.Fatalf("the 9th search passed: the budget is 8")
		}
	}
	key := []string{"X-API-Key", "key-newco"}
	for _, tc := range []struct {
		fa  config.ForwardAuth
		ask func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder
		// spoof are headers a client adds that this gateway passes on.
		spoof []string
	}{
		{fa: config.ForwardAuth{Gateway: "caddy"}, spoof: []string{"X-Original-URI", "/healthz", "X-Original-Method", "GET", "X-Original-URL", "http://x/healthz"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, "GET", "/v1/authz", append([]string{"X-Forwarded-Uri", path, "X-Forwarded-Method", method}, extra...)...)
			}},
		{fa: config.ForwardAuth{Gateway: "traefik"}, spoof: []string{"X-Original-URI", "/healthz", "X-Original-Method", "HEAD"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, "GET", "/v1/authz", append([]string{"X-Forwarded-Uri", path, "X-Forwarded-Method", method}, extra...)...)
			}},
		{fa: config.ForwardAuth{Gateway: "nginx"}, spoof: []string{"X-Forwarded-Uri", "/healthz", "X-Forwarded-Method", "GET", "X-Original-URL", "http://x/healthz"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, "GET", "/v1/authz", append([]string{"X-Original-URI", path, "X-Original-Method", method}, extra...)...)
			}},
		{fa: config.ForwardAuth{Gateway: "ingress-nginx"}, spoof: []string{"X-Original-URI", "/healthz", "X-Forwarded-Uri", "/healthz"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, "GET", "/v1/authz", append([]string{"X-Original-URL", "https://api.example.com" + path, "X-Original-Method", method}, extra...)...)
			}},
		{fa: config.ForwardAuth{Gateway: "envoy"}, spoof: []string{"X-Original-URI", "/healthz", "X-Forwarded-Uri", "/healthz", "X-Forwarded-Method", "GET"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, method, "/v1/authz"+path, extra...)
			}},
		{fa: config.ForwardAuth{Gateway: "custom", MethodHeader: "X-Gw-Method", URIHeader: "X-Gw-Uri"}, spoof: []string{"X-Original-URI", "/healthz", "X-Forwarded-Uri", "/healthz"},
			ask: func(s http.Handler, path, method string, extra ...string) *httptest.ResponseRecorder {
				return authzAs(s, "GET", "/v1/authz", append([]string{"X-Gw-Uri", path, "X-Gw-Method", method}, extra...)...)
			}},
	} {
		t.Run(tc.fa.Gateway, func(t *testing.T) {
			s := authzServer(t, tc.fa)
			ask := func(path, method string, extra ...string) *httptest.ResponseRecorder {
				return tc.ask(s, path, method, append(append([]string{}, key...), extra...)...)
			}
			spend(t, s, ask)
			// The client's own copies of other gateways' headers change
			// nothing: still over the budget.
			if w := ask("/v1/search", "GET", tc.spoof...); w.Code == 200 {
				t.Fatalf("over the budget with %v: %d, want a rejection", tc.spoof, w.Code)
			}
			// A request without a credential to a tenant route cannot pass
			// as an anonymous login.
			login := slices.Clone(tc.spoof)
			for i := 1; i < len(login); i += 2 {
				login[i] = strings.NewReplacer("/healthz", "/v1/login", "GET", "POST", "HEAD", "POST").Replace(login[i])
			}
			if w := tc.ask(s, "/v1/search", "GET", login...); w.Code != 401 {
				t.Fatalf("no credential, spoofed as a login with %v: %d, want 401", login, w.Code)
			}
			// The gateway's header twice (appended to a client's copy, not
			// replacing it) is refused, never guessed between.
			if reads := (func() []string { g, _ := tc.fa.Resolve(); return g.Reads() })(); len(reads) > 0 {
				w := tc.ask(s, "/healthz", "GET", reads[len(reads)-1], "/healthz")
				if w.Code != 400 || !strings.Contains(w.Body.String(), "came 2 times") {
					t.Fatalf("%s twice: %d %s, want 400", reads[len(reads)-1], w.Code, w.Body)
				}
			}
		})
	}
}

// TestAuthzNeedsAGateway: without forward_auth.gateway /v1/authz refuses
// every request, saying what to set, instead of guessing which of the
// headers a client could have written to believe.
func TestAuthzNeedsAGateway(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{})
	w := authz(s, "GET", map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/healthz", "X-Original-Method": "GET"})
	if w.Code != 500 || !strings.Contains(w.Body.String(), "forward_auth.gateway") {
		t.Fatalf("no gateway named: %d %s, want 500 naming forward_auth.gateway", w.Code, w.Body)
	}
	for _, fa := range []config.ForwardAuth{
		{TenantHeader: "X-Tenant"},
		{Gateway: "haproxy"},
		{Gateway: "custom", URIHeader: "X-Uri"},
		{Gateway: "nginx", URIHeader: "X-Uri"},
		{Gateway: "nginx", TenantHeader: "X-Original-URI"},
		{Gateway: "caddy", TenantHeader: "authorization"},
		{Gateway: "caddy", TenantHeader: "X-Forwarded-For"},
	} {
		if _, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), ForwardAuth: fa}); err == nil {
			t.Errorf("%+v: accepted, want an error", fa)
		}
	}
}

// TestAuthzTenantHeaderOnce: a tenant header the gateway appended to a
// client's copy (two values) is refused: believing either would let the
// client choose.
func TestAuthzTenantHeaderOnce(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{Gateway: "caddy", TenantHeader: "X-Tenant"})
	w := authzAs(s, "GET", "/v1/authz", "X-Forwarded-Uri", "/v1/search", "X-Forwarded-Method", "GET", "X-Tenant", "victim", "X-Tenant", "acme")
	if w.Code != 400 || !strings.Contains(w.Body.String(), "X-Tenant came 2 times") {
		t.Fatalf("two tenant headers: %d %s, want 400", w.Code, w.Body)
	}
}

// TestAuthzPreflight: a CORS preflight a gateway asks about carries no
// credential; it is decided per client address under the preflight
// limits (burst 60 by default), never answered 401.
func TestAuthzPreflight(t *testing.T) {
	s := authzServer(t, config.ForwardAuth{Gateway: "nginx", DenyStatus: 429})
	ask := func(ip string) *httptest.ResponseRecorder {
		return authz(s, "GET", map[string]string{"X-Original-URI": "/v1/users/1", "X-Original-Method": "OPTIONS",
			"Origin": "https://app.example", "Access-Control-Request-Method": "PUT", "X-Forwarded-For": ip})
	}
	for i := range 60 {
		if w := ask("198.51.100.7"); w.Code != 200 || w.Header().Get("X-Fairgate-Tenant") != "" {
			t.Fatalf("preflight %d: %d %v", i, w.Code, w.Header())
		}
	}
	if w := ask("198.51.100.7"); w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("the 61st preflight from one address: %d %v, want 429 with Retry-After", w.Code, w.Header())
	}
	if w := ask("198.51.100.8"); w.Code != 200 {
		t.Fatalf("a preflight from another address: %d, want 200", w.Code)
	}
}

// authzTokenServer is a decision service with tokenConfig, the test API
// keys, nginx as the gateway, and settles as forward_auth.settles.
func authzTokenServer(t *testing.T, settles bool) *Server {
	t.Helper()
	l, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: mustPolicy(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: l, Auth: testAuth(t), SettleKey: settleTestKey,
		ForwardAuth: config.ForwardAuth{Gateway: "nginx", DenyStatus: 429, Settles: settles}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAuthzSettlementHandle: an admitted request of a measured-cost class
// gets a settlement handle in X-Fairgate-Settlement, charged its estimate
// (the class's estimate header, else its default) where the config says
// the upstream settles, else its cap; the handle settles through
// /v1/settle. Any other allowed answer carries the header empty, and a
// rejection none: never a copy of the client's own.
func TestAuthzSettlementHandle(t *testing.T) {
	const forged = "fg1.the-clients-own.handle"
	chat := func(kv ...string) map[string]string {
		h := map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/chat", "X-Original-Method": "POST", SettlementHeader: forged}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		settles bool
		hdr     map[string]string
		charged int64
	}{
		{"settled, the estimate header", true, chat("X-Max-Tokens", "1200"), 1200},
		{"settled, no estimate: the default", true, chat(), 500},
		{"settled, an estimate over the cap: the cap", true, chat("X-Max-Tokens", "90000"), 4000},
		{"settled, an estimate that is no count: the default", true, chat("X-Max-Tokens", "-3"), 500},
		{"not settled: the cap, whatever the estimate", false, chat("X-Max-Tokens", "1200"), 4000},
	} {
		s := authzTokenServer(t, tc.settles)
		w := authz(s, "GET", tc.hdr)
		h := w.Header().Get(SettlementHeader)
		if w.Code != 200 || h == "" || h == forged || len(w.Header().Values(SettlementHeader)) != 1 {
			t.Fatalf("%s: %d, %s %q", tc.name, w.Code, SettlementHeader, w.Header().Values(SettlementHeader))
		}
		st, err := openHandle(settleTestKey, h, time.Now())
		if err != nil {
			t.Fatalf("%s: the handle does not open: %v", tc.name, err)
		}
		var layers []string
		for _, l := range st.Layers {
			layers = append(layers, l.Policy)
		}
		if st.Cost != tc.charged || !slices.Equal(layers, []string{"pro.llm.30d", "pro.tenant.30d"}) {
			t.Errorf("%s: the handle charged %d on %v; want %d on pro.llm.30d and pro.tenant.30d", tc.name, st.Cost, layers, tc.charged)
		}
		// It settles: the true cost 3000 moves 3000 − the charge.
		r := httptest.NewRequest("POST", "/v1/settle", strings.NewReader(`{"handle": "`+h+`", "cost": 3000}`))
		r.Header.Set("Content-Type", "application/json")
		sw := httptest.NewRecorder()
		s.ServeHTTP(sw, r)
		var out struct{ Delta int64 }
		json.Unmarshal(sw.Body.Bytes(), &out)
		if sw.Code != 200 || out.Delta != 3000-tc.charged {
			t.Errorf("%s: settle: %d %s; want delta %d", tc.name, sw.Code, sw.Body, 3000-tc.charged)
		}
	}

	// Not a measured class, or free: the header is there, empty, so that
	// a gateway copying it copies fairgate's nothing over the client's.
	s := authzTokenServer(t, true)
	for _, target := range []string{"/v1/users/7", "/healthz"} {
		w := authz(s, "GET", map[string]string{"X-API-Key": "key-newco", "X-Original-URI": target, "X-Original-Method": "GET", SettlementHeader: forged})
		if vs, ok := w.Header()[SettlementHeader]; w.Code != 200 || !ok || !slices.Equal(vs, []string{""}) {
			t.Errorf("GET %s: %d, %s %q; want 200 with it empty", target, w.Code, SettlementHeader, vs)
		}
	}
	// Rejected: no handle. Not settled, each request is charged the cap
	// 4000 of the class's 5000.
	s = authzTokenServer(t, false)
	if w := authz(s, "GET", chat()); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := authz(s, "GET", chat())
	if vs := w.Header().Values(SettlementHeader); w.Code != 429 || len(vs) != 0 {
		t.Errorf("rejected: %d, %s %q; want 429 without it", w.Code, SettlementHeader, vs)
	}
}
