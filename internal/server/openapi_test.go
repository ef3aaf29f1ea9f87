package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/docs"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/internal/openapitest"
	"github.com/fairgate/fairgate/store/memstore"
)

// apiCheck checks every exchange the package's tests make through call.do
// and apiServer against docs/openapi.json; TestMain fails the run on any
// problem, and on an operation no test reached (on a full run).
// It is made on first use: fuzz workers, which make no such exchange,
// never parse the description.
var apiCheck = sync.OnceValue(func() *openapitest.Checker {
	c, err := openapitest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	apiChecked.Store(true)
	return c
})

// apiChecked says whether apiCheck was made.
var apiChecked atomic.Bool

// proxied reports whether h, a proxy's public surface, forwards r to the
// upstream: the upstream's answers are not fairgate's API.
func proxied(h http.Handler, r *http.Request) bool {
	s, ok := h.(*Server)
	if !ok || s.proxy == nil {
		return false
	}
	_, pattern := s.mux.Handler(r)
	return pattern == "/"
}

// checkedAPI wraps h for an httptest server: its exchanges are checked.
func checkedAPI(h http.Handler) http.Handler {
	return apiCheck().Handler(h, func(r *http.Request) bool { return proxied(h, r) })
}

// apiWarm makes the checker before the tests run (parsing and compiling
// the description takes a few hundred milliseconds under the race
// detector, which must not land inside a timed test's first request);
// fuzzing, which checks no exchange, skips it.
func apiWarm() {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" {
		apiCheck()
	}
}

// apiReport is what TestMain adds to the run's verdict: 0, or 1 after
// printing the problems.
func apiReport(code int) int {
	if !apiChecked.Load() {
		return code
	}
	problems := apiCheck().Problems()
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" && !testing.Short() {
		for _, op := range apiCheck().Unexercised() {
			problems = append(problems, op+": no test exercised it with a 2xx answer: add one (TestOpenAPI)")
		}
	}
	if testing.Verbose() {
		n, ops, sts := apiCheck().Checked()
		fmt.Fprintf(os.Stderr, "docs/openapi.json: %d exchanges checked, reaching %d operations and %d operation-status pairs\n", n, ops, sts)
	}
	if len(problems) == 0 {
		return code
	}
	fmt.Fprintf(os.Stderr, "docs/openapi.json and the handlers disagree (%d):\n  %s\n", len(problems), strings.Join(problems, "\n  "))
	return 1
}

// TestOpenAPI serves the description and exercises the operations the
// other tests do not reach with a 2xx answer; every exchange is checked
// against the description like all the package's.
func TestOpenAPI(t *testing.T) {
	board := dash.New(nil, adminToken)
	board.Sample(time.Now())
	l := testLimiter(t, memstore.New(memstore.Config{}), time.Second)
	s, err := New(Config{Limiter: l, Auth: testAuth(t), Dashboard: board, ForwardAuth: config.ForwardAuth{Gateway: "traefik"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := call{method: "GET", path: "/openapi.json"}.do(s)
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), docs.OpenAPI()) || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET /openapi.json: %d %s, not docs/openapi.json", rec.Code, rec.Header().Get("Content-Type"))
	}
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"} {
		rec := call{method: m, path: "/v1/authz", peer: "127.0.0.1:5000", headers: map[string]string{"X-API-Key": "key-acme", "X-Forwarded-Method": m, "X-Forwarded-Uri": "/v1/users/1"}}.do(s)
		if rec.Code != 200 {
			t.Errorf("%s /v1/authz: %d %s", m, rec.Code, rec.Body)
		}
	}
	if rec := (call{method: "GET", path: "/dashboard/data", headers: map[string]string{"Authorization": "Bearer " + adminToken}}).do(s); rec.Code != 200 {
		t.Errorf("GET /dashboard/data: %d %s", rec.Code, rec.Body)
	}
	ah, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken, Reload: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if rec := (call{method: "POST", path: "/admin/reload", headers: map[string]string{"Authorization": "Bearer " + adminToken}}).do(ah); rec.Code != 200 {
		t.Errorf("POST /admin/reload: %d %s", rec.Code, rec.Body)
	}
}

// TestOpenAPIDrift: the checker catches a handler that answers what the
// description does not say: a field it does not list, a status it does
// not list, a path it does not have; and a request the server accepts
// that the description forbids.
func TestOpenAPIDrift(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(docs.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	delete(schemas["TakeResponse"].(map[string]any)["properties"].(map[string]any), "remaining")
	take := doc["paths"].(map[string]any)["/v1/take"].(map[string]any)["post"].(map[string]any)
	delete(take["responses"].(map[string]any), "413")
	schemas["TakeRequest"].(map[string]any)["properties"].(map[string]any)["cost"] = map[string]any{"type": "integer", "maximum": 5}
	delete(doc["paths"].(map[string]any), "/readyz")
	raw, _ := json.Marshal(doc)
	c, err := openapitest.NewFrom(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Handler(s, nil)
	for _, x := range []call{
		{method: "POST", path: "/v1/take", body: `{"key":"k","limit":10,"period_ms":1000,"cost":7}`},
		{method: "POST", path: "/v1/take", body: `{"key":"` + strings.Repeat("k", 70<<10) + `"}`},
		{method: "GET", path: "/readyz"},
	} {
		x.do(h)
	}
	got := strings.Join(c.Problems(), "\n")
	for _, want := range []string{
		"additional properties 'remaining' not allowed",   // an undocumented field in a 2xx body
		"answered 413, which POST /v1/take does not list", // an undocumented status
		"$.cost: maximum", // a request the server took that the description forbids
		"GET /readyz: answered 200, but the description has no such operation",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the checker did not report %q; it reported:\n%s", want, got)
		}
	}
}
