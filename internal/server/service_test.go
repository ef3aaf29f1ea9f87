package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

var (
	jwtKey, _   = rsa.GenerateKey(rand.Reader, 2048)
	otherKey, _ = rsa.GenerateKey(rand.Reader, 2048)
)

func hexSum(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

func testAuth(t testing.TB) *auth.Authenticator {
	a, err := auth.New(context.Background(), auth.Config{
		APIKeys: []auth.APIKey{{SHA256: hexSum("key-acme"), Tenant: "acme"}, {SHA256: hexSum("key-newco"), Tenant: "newco"}},
		JWT:     &auth.JWTConfig{Audience: "api", Keys: []any{&jwtKey.PublicKey}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func token(t testing.TB, k *rsa.PrivateKey, mod func(jwt.MapClaims)) string {
	c := jwt.MapClaims{"tenant": "globex", "aud": "api", "exp": time.Now().Add(time.Hour).Unix()}
	if mod != nil {
		mod(c)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodRS256, c).SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// upstreamEcho is the proxied API: it answers with what it received.
func upstreamEcho(t testing.TB) *url.URL {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "xff": r.Header.Get("X-Forwarded-For"), "auth": r.Header.Get("Authorization")})
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	return u
}

// service is the server with the example policy, API keys and JWT, the
// proxy to an echoing upstream, and 10.0.0.0/8 and fd00::/8 as trusted
// proxies.
func service(t testing.TB, st store.Store) *Server {
	t.Helper()
	s, err := New(Config{
		Limiter:  testLimiter(t, st, time.Second),
		Auth:     testAuth(t),
		ClientIP: auth.ClientIP{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}},
		Upstream: upstreamEcho(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type call struct {
	method, path, body string
	peer               string
	headers            map[string]string
}

func (c call) do(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	r.RemoteAddr = c.peer
	if r.RemoteAddr == "" {
		r.RemoteAddr = "203.0.113.50:40000"
	}
	for k, v := range c.headers {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if !proxied(h, r) {
		apiCheck().Recorded(r, []byte(c.body), rec)
	}
	return rec
}

func decodeMap(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	return m
}

func check(t *testing.T, h http.Handler, body string) (int, map[string]any) {
	t.Helper()
	rec := call{method: "POST", path: "/v1/check", body: body}.do(h)
	return rec.Code, decodeMap(t, rec)
}

func policies(m map[string]any) []string {
	var out []string
	for _, d := range m["decisions"].([]any) {
		out = append(out, d.(map[string]any)["policy"].(string))
	}
	return out
}

func TestCheckLayers(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			h := service(t, st).Internal()
			for _, tc := range []struct {
				body     string
				policies string
			}{
				{`{"tenant":"acme","route":"GET /v1/users/7"}`, "enterprise.tenant.1m"},
				{`{"tenant":"acme","route":"GET /v1/search"}`, "enterprise.search.1m enterprise.tenant.1m"},
				{`{"tenant":"newco","route":"GET /v1/search"}`, "free.search.1m free.tenant.1m free.tenant.daily"},
				{`{"tenant":"globex","class":"write"}`, "team.write.1m team.tenant.1m team.tenant.monthly"},
				{`{"tenant":"acme","route":"DELETE /nowhere"}`, "enterprise.tenant.1m"}, // unknown route: the default class
				{`{"route":"POST /v1/login","ip":"198.51.100.7"}`, "anonymous.login.1m anonymous.login.per-user"},
				{`{"route":"POST /v1/login","ip":"2001:db8:1:2::9"}`, "anonymous.login.1m anonymous.login.per-user"},
			} {
				code, m := check(t, h, tc.body)
				if code != 200 || m["allowed"] != true || m["status"] != float64(200) {
					t.Errorf("%s: %d %v", tc.body, code, m)
					continue
				}
				if got := strings.Join(policies(m), " "); got != tc.policies {
					t.Errorf("%s: layers %q, want %q", tc.body, got, tc.policies)
				}
				hs := m["headers"].(map[string]any)
				if hs["RateLimit-Limit"] == nil || hs["RateLimit-Remaining"] == nil || hs["RateLimit-Reset"] == nil {
					t.Errorf("%s: headers %v", tc.body, hs)
				}
			}
			// Rejection: the search class of a free tenant has burst 8.
			var code int
			var m map[string]any
			for range 9 {
				code, m = check(t, h, `{"tenant":"limited","route":"GET /v1/search"}`)
			}
			hs, _ := m["headers"].(map[string]any)
			if code != 200 || m["allowed"] != false || m["status"] != float64(429) || m["policy"] != "free.search.1m" ||
				m["retry_after_ms"].(float64) <= 0 || hs["Retry-After"] == nil || hs["RateLimit-Remaining"] != "0" {
				t.Errorf("9th search: %d %v", code, m)
			}
			// The same IPv6 /64 shares anonymous limits; another /64 does not.
			for range 5 {
				check(t, h, `{"route":"POST /v1/login","ip":"2001:db8:aa:1::1"}`)
			}
			if _, m := check(t, h, `{"route":"POST /v1/login","ip":"2001:db8:aa:1:ffff::2"}`); m["allowed"] != false {
				t.Errorf("sixth login from the same /64 allowed: %v", m)
			}
			if _, m := check(t, h, `{"route":"POST /v1/login","ip":"2001:db8:aa:2::1"}`); m["allowed"] != true {
				t.Errorf("login from another /64 refused: %v", m)
			}
		})
	}
}

func TestCheckInvalidInput(t *testing.T) {
	h := service(t, memstore.New(memstore.Config{})).Internal()
	for body, want := range map[string]string{
		`{"tenant":"acme"}`:                                 "route or class: required",
		`{"tenant":"acme","route":"/v1/x"}`:                 "route: \"/v1/x\": want a method and a path",
		`{"tenant":"acme","route":"GET /x","class":"read"}`: "route, class: give one",
		`{"tenant":"acme","class":"bulk"}`:                  "class: unknown class \"bulk\"",
		`{"tenant":"acme","class":"read","cost":-1}`:        "cost: -1 is negative",
		`{"tenant":"acme","class":"search","cost":1000000}`: "cost: bad cost: cost 1000000 exceeds the burst",
		`{"tenant":"acme","class":"read","ip":"1.2.3"}`:     "ip: \"1.2.3\" is not an IP address",
		`{"route":"GET /v1/users/1"}`:                       "tenant: required for route GET /v1/users/1",
		`{"tenant":"acme","class":"read","colour":"blue"}`:  "unknown field \"colour\"",
		`{"tenant":7,"class":"read"}`:                       "field tenant: want a string",
		`[1]`:                                               "body must be a JSON object",
	} {
		rec := call{method: "POST", path: "/v1/check", body: body}.do(h)
		detail, _ := decodeMap(t, rec)["detail"].(string)
		if rec.Code != 400 || !strings.Contains(detail, want) || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s; want 400 naming %q", body, rec.Code, rec.Body.String(), want)
		}
	}
}

func TestProxy(t *testing.T) {
	h := service(t, memstore.New(memstore.Config{}))
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	for _, tc := range []struct {
		name    string
		c       call
		status  int
		errText string
	}{
		{"API key", call{method: "GET", path: "/v1/users/1", headers: bearer("key-acme")}, 200, ""},
		{"API key header", call{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-API-Key": "key-acme"}}, 200, ""},
		{"unknown API key", call{method: "GET", path: "/v1/users/1", headers: bearer("key-nobody")}, 401, "unknown API key"},
		{"no credential", call{method: "GET", path: "/v1/users/1"}, 401, "needs a credential"},
		{"a tenant header is no credential", call{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-Tenant": "acme"}}, 401, ""},
		{"JWT", call{method: "GET", path: "/v1/users/1", headers: bearer(token(t, jwtKey, nil))}, 200, ""},
		{"expired JWT", call{method: "GET", path: "/v1/users/1", headers: bearer(token(t, jwtKey, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }))}, 401, "token expired"},
		{"JWT for another audience", call{method: "GET", path: "/v1/users/1", headers: bearer(token(t, jwtKey, func(c jwt.MapClaims) { c["aud"] = "billing" }))}, 401, "another audience"},
		{"JWT signed by another key", call{method: "GET", path: "/v1/users/1", headers: bearer(token(t, otherKey, nil))}, 401, "signature does not verify"},
		{"anonymous route without credential", call{method: "POST", path: "/v1/login"}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.c.do(h)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.errText) {
				t.Fatalf("%d %s; want %d with %q", rec.Code, rec.Body.String(), tc.status, tc.errText)
			}
			if tc.status == 200 && (rec.Header().Get("RateLimit-Remaining") == "" || !strings.Contains(rec.Body.String(), `"path":"`+tc.c.path+`"`)) {
				t.Errorf("allowed request: headers %v body %s", rec.Header(), rec.Body.String())
			}
			if tc.status == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
}

func TestProxyClientAddress(t *testing.T) {
	h := service(t, memstore.New(memstore.Config{}))
	login := func(peer, xff string) (int, string) {
		c := call{method: "POST", path: "/v1/login", peer: peer}
		if xff != "" {
			c.headers = map[string]string{"X-Forwarded-For": xff}
		}
		rec := c.do(h)
		var m map[string]string
		json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m["xff"]
	}
	// An untrusted client cannot escape its limit by sending
	// X-Forwarded-For; the upstream sees only its real address.
	for i := range 5 {
		code, seen := login("203.0.113.7:1000", "198.51.100."+string(rune('1'+i)))
		if code != 200 || seen != "203.0.113.7" {
			t.Fatalf("login %d from an untrusted peer: %d, upstream saw X-Forwarded-For %q", i, code, seen)
		}
	}
	if code, _ := login("203.0.113.7:1000", "198.51.100.99"); code != 429 {
		t.Errorf("sixth login with a forged X-Forwarded-For: %d, want 429", code)
	}
	// Behind a trusted proxy, X-Forwarded-For names the client.
	for i := range 5 {
		if code, seen := login("10.0.0.5:1000", "198.51.100.20"); code != 200 || seen != "198.51.100.20, 10.0.0.5" {
			t.Fatalf("login %d via a trusted proxy: %d, upstream saw %q", i, code, seen)
		}
	}
	if code, _ := login("10.0.0.5:1000", "198.51.100.20"); code != 429 {
		t.Errorf("sixth login of one client via a trusted proxy: %d, want 429", code)
	}
	if code, _ := login("10.0.0.5:1000", "198.51.100.21"); code != 200 {
		t.Errorf("another client via the same proxy: %d, want 200", code)
	}
	// IPv6 clients count per /64.
	for range 5 {
		login("[2001:db8:5:5::1]:1000", "")
	}
	if code, _ := login("[2001:db8:5:5:abcd::2]:1000", ""); code != 429 {
		t.Errorf("sixth login from the same /64: %d, want 429", code)
	}
}

func TestProxyRejectionIsProblem(t *testing.T) {
	h := service(t, memstore.New(memstore.Config{}))
	var rec *httptest.ResponseRecorder
	for range 9 {
		rec = call{method: "GET", path: "/v1/search", headers: map[string]string{"X-API-Key": "key-newco"}}.do(h)
	}
	m := decodeMap(t, rec)
	if rec.Code != 429 || rec.Header().Get("Retry-After") == "" || m["policy"] != "free.search.1m" || m["retry_after_seconds"] == nil ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("9th search: %d %v %v", rec.Code, rec.Header(), m)
	}
}

func TestMyLimits(t *testing.T) {
	h := service(t, memstore.New(memstore.Config{}))
	call{method: "GET", path: "/v1/search", headers: map[string]string{"X-API-Key": "key-newco"}}.do(h)
	rec := call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"X-API-Key": "key-newco"}}.do(h)
	m := decodeMap(t, rec)
	if rec.Code != 200 || m["tenant"] != "newco" || m["plan"] != "free" {
		t.Fatalf("%d %v", rec.Code, m)
	}
	var search map[string]any
	for _, l := range m["layers"].([]any) {
		if l.(map[string]any)["policy"] == "free.search.1m" {
			search = l.(map[string]any)
		}
	}
	if search == nil || search["remaining"] != float64(7) || search["burst"] != float64(8) || search["class"] != "search" {
		t.Errorf("search layer %v, want burst 8 with 7 remaining", search)
	}
	if rec := (call{method: "GET", path: "/v1/me/limits"}).do(h); rec.Code != 401 {
		t.Errorf("without a credential: %d", rec.Code)
	}
}

func TestUpstreamDown(t *testing.T) {
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), -1), Auth: testAuth(t), Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := call{method: "GET", path: "/v1/users/1", headers: map[string]string{"X-API-Key": "key-acme"}}.do(s)
	if rec.Code != 502 {
		t.Errorf("upstream down: %d, want 502", rec.Code)
	}
	io.Copy(io.Discard, rec.Body)
}

// TestProxyStreams: the proxy passes the upstream's bytes on as they come,
// not when the response ends.
func TestProxyStreams(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte("second\n"))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), -1), Auth: testAuth(t), Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	req, _ := http.NewRequest("GET", ts.URL+"/v1/stream", nil)
	req.Header.Set("X-API-Key", "key-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("first chunk %q, %v: not streamed before the upstream finished", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second\n" || resp.Header.Get("RateLimit-Remaining") == "" {
		t.Errorf("rest %q, headers %v", rest, resp.Header)
	}
}

// TestCredentialWithoutAuthIsRefused: with no credentials configured, a
// request that carries one (an API key, a bearer token) is refused with
// 401 saying so, never read as some tenant nor passed as anonymous.
func TestCredentialWithoutAuthIsRefused(t *testing.T) {
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), -1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []map[string]string{{"X-API-Key": "demo-acme-key"}, {"Authorization": "Bearer x.y.z"}} {
		rec := call{method: "GET", path: "/v1/me/limits", headers: h}.do(s)
		if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "no credentials are configured") {
			t.Errorf("%v: %d %s, want 401 saying no credentials are configured", h, rec.Code, rec.Body)
		}
	}
}
