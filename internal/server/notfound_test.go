package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/store/memstore"
)

// TestNotFoundSaysWhere: a path a listener does not serve, but another of
// fairgate's does, is answered 404 naming that listener's flag (never its
// address) or the setting that turned it off; any other path a plain 404.
func TestNotFoundSaysWhere(t *testing.T) {
	lim := testLimiter(t, memstore.New(memstore.Config{}), time.Second)
	board := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("board")) })
	decision, err := New(Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	withBoard, err := New(Config{Limiter: lim, Dashboard: board})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := New(Config{Limiter: lim, Auth: testAuth(t), Upstream: upstreamEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := NewAdmin(AdminConfig{Limiter: lim, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		h          http.Handler
		method     string
		path       string
		want, deny []string // in the 404's detail, and not in it
	}{
		{"admin path on the decision listener", decision, "GET", "/admin/tenants/acme", []string{"no such endpoint: GET /admin/tenants/acme", "not on this listener", "--admin-listen", "FAIRGATE_ADMIN_TOKEN"}, []string{adminToken}},
		{"admin root on the decision listener", decision, "POST", "/admin", []string{"--admin-listen"}, nil},
		{"admin path on the internal listener", proxy.Internal(), "POST", "/admin/reload", []string{"--admin-listen"}, nil},
		{"dashboard off", decision, "GET", "/dashboard", []string{"dashboard: off in the config"}, nil},
		{"dashboard data off", decision, "GET", "/dashboard/data", []string{"dashboard: off in the config"}, nil},
		{"dashboard off, internal listener", proxy.Internal(), "GET", "/dashboard", []string{"dashboard: off in the config"}, nil},
		{"public path on the internal listener", proxy.Internal(), "GET", "/v1/me/limits", []string{"main listener (--listen)"}, nil},
		{"decision path on the admin listener", admin, "POST", "/v1/check", []string{"--listen", "--internal-listen"}, nil},
		{"metrics on the admin listener", admin, "GET", "/metrics", []string{"--internal-listen"}, nil},
		{"unknown admin path", admin, "GET", "/admin/nope", []string{"GET /admin/nope: Not Found"}, []string{";"}},
		{"unknown path", decision, "GET", "/nope", []string{"no such endpoint: GET /nope"}, []string{";"}},
		{"unknown path with a dashboard", withBoard, "GET", "/dashboards", []string{"no such endpoint"}, []string{";"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			r.Header.Set("Authorization", "Bearer "+adminToken)
			w := httptest.NewRecorder()
			tc.h.ServeHTTP(w, r)
			var body struct{ Detail string }
			json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != http.StatusNotFound {
				t.Fatalf("%s %s = %d %s, want 404", tc.method, tc.path, w.Code, w.Body)
			}
			for _, s := range tc.want {
				if !strings.Contains(body.Detail, s) {
					t.Errorf("detail %q does not say %q", body.Detail, s)
				}
			}
			for _, s := range tc.deny {
				if strings.Contains(body.Detail, s) {
					t.Errorf("detail %q says %q", body.Detail, s)
				}
			}
		})
	}
	// The dashboard, when on, is served; in proxy mode the public
	// listener's unknown paths, /admin/... among them, are the upstream's.
	w := httptest.NewRecorder()
	withBoard.ServeHTTP(w, httptest.NewRequest("GET", "/dashboard", nil))
	if w.Code != 200 || w.Body.String() != "board" {
		t.Errorf("GET /dashboard with a dashboard = %d %q", w.Code, w.Body)
	}
	w = httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/admin/tenants/acme", nil)
	r.Header.Set("X-API-Key", "key-acme")
	proxy.ServeHTTP(w, r)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"path":"/admin/tenants/acme"`) {
		t.Errorf("GET /admin/tenants/acme on the proxy = %d %s, want the upstream's answer", w.Code, w.Body)
	}
}
