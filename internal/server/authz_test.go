package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// authzServer is a decision service (no upstream) with the example policy,
// API keys, 127.0.0.1 as the trusted gateway, and fa.
func authzServer(t *testing.T, fa ForwardAuth) *Server {
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
// the original method and path from every header the gateways use.
func TestAuthz(t *testing.T) {
	s := authzServer(t, ForwardAuth{})
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
		with(key, "X-Forwarded-Uri", "/v1/search?page=2", "X-Forwarded-Method", "get"),
		with(key, "X-Original-URL", "https://api.example.com/v1/search?q=2", "X-Forwarded-Method", "GET"),
		with(key, "X-Original-URI", "/v1/search"), // the gateway's own GET
		with(key, "X-Original-URI", "/v1/search", "X-Original-Method", "HEAD"),
	} {
		if w := authz(s, "GET", h); w.Code != 200 {
			t.Fatalf("variant %d: %d, want 200", i, w.Code)
		}
	}
	w = authz(s, "GET", with(key, "X-Original-URI", "/V1/SEARCH"))
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
	if w := authz(s, "GET", map[string]string{"X-Original-URI": "/v1/search"}); w.Code != 401 {
		t.Errorf("no credential: %d, want 401", w.Code)
	}
	if w := authz(s, "GET", map[string]string{"X-Original-URI": "/v1/search", "X-API-Key": "stolen"}); w.Code != 401 {
		t.Errorf("bad credential: %d, want 401", w.Code)
	}
	// No original path: 400 naming the headers.
	if w := authz(s, "GET", key); w.Code != 400 || !strings.Contains(w.Body.String(), "X-Original-URI") {
		t.Errorf("no path: %d %s", w.Code, w.Body)
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
	s := authzServer(t, ForwardAuth{DenyStatus: 403})
	h := map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/search"}
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
	s := authzServer(t, ForwardAuth{TenantHeader: "x-tenant"})
	h := map[string]string{"X-Tenant": "acme", "X-Original-URI": "/v1/search"}
	if w := authz(s, "GET", h); w.Code != 200 || w.Header().Get("X-Fairgate-Plan") != "enterprise" {
		t.Fatalf("from the trusted gateway: %d %v", w.Code, w.Header())
	}
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
type downStore struct{}

func (downStore) Take(context.Context, []store.Check, *store.Result) error {
	return store.ErrUnavailable
}
func (downStore) Close() error { return nil }

// TestAuthzFailClosed: with the store out, a fail-closed class is 503, or
// 403 with X-Fairgate-Status 503 when rejections are answered 403; a
// fail-open class passes.
func TestAuthzFailClosed(t *testing.T) {
	for _, fa := range []ForwardAuth{{}, {DenyStatus: 403}} {
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
		if w := authz(s, "GET", map[string]string{"X-API-Key": "key-newco", "X-Original-URI": "/v1/search"}); w.Code != 200 {
			t.Errorf("fail-open class: %d, want 200", w.Code)
		}
	}
}
