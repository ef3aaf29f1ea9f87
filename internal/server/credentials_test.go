package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestOneCredentialPerRequest: a request whose credential could be read
// two ways (a credential header twice, a comma-joined list, a bearer
// token and a different X-API-Key, an underscore twin that CGI-style
// upstreams read as the header) is refused with 401 on the proxy,
// /v1/me/limits and /v1/authz, and never reaches the upstream: fairgate
// read the first copy while an upstream or gateway reading another
// would serve another tenant than the one charged. The same key in both
// headers is one credential; an Authorization of another scheme (Basic,
// "Token", a tab after Bearer) beside a different X-API-Key is refused
// too, since an upstream reading it would serve another tenant (the
// second attacker review passed "Bearer<TAB>k" beside another key).
func TestOneCredentialPerRequest(t *testing.T) {
	var reached atomic.Int64
	var seen atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		seen.Store(r.Header.Clone())
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	proxy, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: u,
		UpstreamHeaders: config.UpstreamHeaders{Tenant: "X-Tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	gw := authzServer(t, config.ForwardAuth{Gateway: "nginx", DenyStatus: 429})
	surfaces := []struct {
		name string
		h    http.Handler
		req  func() *http.Request
	}{
		{"proxy", proxy, func() *http.Request { return httptest.NewRequest("GET", "/v1/users/1", nil) }},
		{"/v1/me/limits", proxy, func() *http.Request { return httptest.NewRequest("GET", "/v1/me/limits", nil) }},
		{"/v1/authz", gw, func() *http.Request {
			r := httptest.NewRequest("GET", "/v1/authz", nil)
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("X-Original-URI", "/v1/users/1")
			r.Header.Set("X-Original-Method", "GET")
			return r
		}},
	}
	for _, tc := range []struct {
		name    string
		kv      []string // header name, value, …
		tenant  string   // "" for a 401 whose detail has refused
		refused string
	}{
		{"X-API-Key twice", []string{"X-API-Key", "key-acme", "X-API-Key", "key-newco"}, "", "X-API-Key came 2 times"},
		{"an empty X-API-Key before one", []string{"X-API-Key", "", "X-API-Key", "key-acme"}, "", "X-API-Key came 2 times"},
		{"X-API-Key comma-joined", []string{"X-API-Key", "key-acme, key-newco"}, "", "X-API-Key holds a comma-separated list"},
		{"Authorization twice", []string{"Authorization", "Bearer key-acme", "Authorization", "Bearer key-newco"}, "", "Authorization came 2 times"},
		{"Authorization comma-joined", []string{"Authorization", "Bearer key-acme, Bearer key-newco"}, "", "Authorization holds a comma-separated list"},
		{"bearer and another X-API-Key", []string{"Authorization", "Bearer key-acme", "X-API-Key", "key-newco"}, "", "Authorization and X-API-Key are both present and differ"},
		{"a tab after Bearer beside another X-API-Key", []string{"Authorization", "Bearer\tkey-newco", "X-API-Key", "key-acme"}, "", "control character"},
		{"Token beside another X-API-Key", []string{"Authorization", "Token key-newco", "X-API-Key", "key-acme"}, "", "both present and differ"},
		{"a dotted twin", []string{"X-API-Key", "key-acme", "X.API.KEY", "key-newco"}, "", "read as X-API-Key"},
		{"an underscore twin", []string{"X-API-Key", "key-acme", "X_Api_Key", "key-newco"}, "", "a header X_api_key, which some upstreams read as X-API-Key"},
		{"an underscore twin alone", []string{"X_API_KEY", "key-newco"}, "", "read as X-API-Key"},
		{"the same key in both", []string{"Authorization", "Bearer key-acme", "X-API-Key", "key-acme"}, "acme", ""},
		{"Basic beside X-API-Key", []string{"Authorization", "Basic dXNlcjpwYXNz", "X-API-Key", "key-newco"}, "", "both present and differ"},
	} {
		for _, s := range surfaces {
			t.Run(tc.name+"/"+s.name, func(t *testing.T) {
				r := s.req()
				for i := 0; i+1 < len(tc.kv); i += 2 {
					r.Header.Add(tc.kv[i], tc.kv[i+1])
				}
				before := reached.Load()
				w := httptest.NewRecorder()
				s.h.ServeHTTP(w, r)
				if tc.refused != "" {
					if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), tc.refused) {
						t.Fatalf("%d %s, want 401 saying %q", w.Code, w.Body, tc.refused)
					}
					if reached.Load() != before {
						t.Fatal("the refused request reached the upstream")
					}
					return
				}
				if w.Code != 200 {
					t.Fatalf("%d %s, want 200 as %s", w.Code, w.Body, tc.tenant)
				}
				switch s.name {
				case "proxy":
					h, _ := seen.Load().(http.Header)
					if h.Get("X-Tenant") != tc.tenant || h.Get("Authorization") != r.Header.Get("Authorization") {
						t.Fatalf("the upstream saw tenant %q, Authorization %q; want %q and the client's", h.Get("X-Tenant"), h.Get("Authorization"), tc.tenant)
					}
				case "/v1/me/limits":
					if !strings.Contains(w.Body.String(), `"tenant":"`+tc.tenant+`"`) {
						t.Fatalf("%s, want tenant %s", w.Body, tc.tenant)
					}
				case "/v1/authz":
					if got := w.Header().Get("X-Fairgate-Tenant"); got != tc.tenant {
						t.Fatalf("X-Fairgate-Tenant %q, want %q", got, tc.tenant)
					}
				}
			})
		}
	}
}
