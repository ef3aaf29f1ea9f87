package debugsrv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHandler: each path answers what it shows; unknown paths 404; with a
// token every path needs it; a short token is refused.
func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "debugsrv_test_total", Help: "A test counter."}))
	rl := func(w io.Writer) error {
		_, err := io.WriteString(w, "d.k: unit=HOUR requests_per_unit=1, shadow_mode: false, quota_mode: false\n")
		return err
	}
	const tok = "0123456789abcdef"
	open, err := New(Config{RLConfig: rl, Stats: reg})
	if err != nil {
		t.Fatal(err)
	}
	locked, err := New(Config{RLConfig: rl, Stats: reg, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Token: "short"}); err == nil || !strings.Contains(err.Error(), "16 characters") {
		t.Errorf("a short token: %v, want refused", err)
	}
	for _, tc := range []struct {
		h            http.Handler
		method, path string
		auth         string
		code         int
		body         string
	}{
		{open, "GET", "/", "", 200, "/rlconfig: "},
		{open, "GET", "/rlconfig", "", 200, "d.k: unit=HOUR"},
		{open, "GET", "/stats", "", 200, "debugsrv_test_total 0"},
		{open, "GET", "/debug/pprof/", "", 200, "goroutine"},
		{open, "GET", "/debug/pprof/cmdline", "", 200, ""},
		{open, "GET", "/metrics", "", 404, ""},
		{open, "GET", "/rlconfig/x", "", 404, ""},
		{open, "POST", "/rlconfig", "", 405, ""},
		{locked, "GET", "/", "", 401, "Bearer <the internal token>"},
		{locked, "GET", "/debug/pprof/", "Bearer wrong-wrong-wrong-wrong", 401, ""},
		{locked, "GET", "/debug/pprof/", "Basic " + tok, 401, ""},
		{locked, "GET", "/missing", "", 401, ""},
		{locked, "GET", "/rlconfig", "Bearer " + tok, 200, "d.k: "},
		{locked, "GET", "/debug/pprof/", "Bearer " + tok, 200, "goroutine"},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		tc.h.ServeHTTP(w, r)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s %s (%q): %d %.200q, want %d with %q", tc.method, tc.path, tc.auth, w.Code, w.Body.String(), tc.code, tc.body)
		}
		if tc.code == 401 && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.path)
		}
	}
}
