package httplimit

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

func decision(allowed bool, remaining int64, retry, reset time.Duration) limiter.Decision {
	return limiter.Decision{
		Allowed: allowed, Policy: "free.tenant.1m", RetryAfter: retry, Tightest: 0,
		Layers: []limiter.LayerDecision{{
			Layer:   policy.Layer{Policy: "free.tenant.1m", Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 30}},
			Allowed: allowed, Remaining: remaining, RetryAfter: retry, ResetAfter: reset,
		}},
	}
}

func TestRetryAfterRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "1", time.Nanosecond: "1", time.Second: "1", time.Second + time.Microsecond: "2", 1500 * time.Millisecond: "2", time.Minute: "60",
	} {
		if got := RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestHeaderForms(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	d := decision(false, 0, 499*time.Millisecond, 14_500*time.Millisecond)

	h := http.Header{}
	d.Now = now
	SetHeaders(h, Draft, d)
	for k, want := range map[string]string{"RateLimit-Limit": "30", "RateLimit-Remaining": "0", "RateLimit-Reset": "15", "Retry-After": "1"} {
		if got := h.Get(k); got != want {
			t.Errorf("draft %s = %q, want %q", k, got, want)
		}
	}

	h = http.Header{}
	d.Now = now
	SetHeaders(h, X, d)
	for k, want := range map[string]string{"X-RateLimit-Limit": "30", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000015"} {
		if got := h.Get(k); got != want {
			t.Errorf("x %s = %q, want %q", k, got, want)
		}
	}

	h = http.Header{}
	d.Now = now
	SetHeaders(h, Structured, d)
	pol, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q does not parse: %v", h.Get("RateLimit-Policy"), err)
	}
	item := pol[0].(httpsfv.Item)
	q, _ := item.Params.Get("q")
	w, _ := item.Params.Get("w")
	if item.Value != "free.tenant.1m" || q != int64(30) || w != int64(15) {
		t.Errorf("RateLimit-Policy = %q: want \"free.tenant.1m\";q=30;w=15", h.Get("RateLimit-Policy"))
	}
	cur, err := httpsfv.UnmarshalList(h.Values("RateLimit"))
	if err != nil {
		t.Fatalf("RateLimit %q does not parse: %v", h.Get("RateLimit"), err)
	}
	ci := cur[0].(httpsfv.Item)
	r, _ := ci.Params.Get("r")
	tt, _ := ci.Params.Get("t")
	if ci.Value != "free.tenant.1m" || r != int64(0) || tt != int64(15) {
		t.Errorf("RateLimit = %q: want \"free.tenant.1m\";r=0;t=15", h.Get("RateLimit"))
	}
	if h.Get("RateLimit-Limit") != "" {
		t.Error("structured form also wrote the draft fields")
	}
}

func TestRejectionBodies(t *testing.T) {
	for _, tc := range []struct {
		form   Form
		d      limiter.Decision
		status int
		typ    string
		retry  string
	}{
		{Draft, decision(false, 0, 2100*time.Millisecond, 5*time.Second), 429, TypeRateLimited, "3"},
		{Structured, decision(false, 0, 2100*time.Millisecond, 5*time.Second), 429, TypeQuotaExceeded, "3"},
		{Draft, limiter.Decision{Reason: limiter.ReasonUnavailable, RetryAfter: limiter.UnavailableRetryAfter, Tightest: -1}, 503, TypeUnavailable, "5"},
	} {
		rec := httptest.NewRecorder()
		WriteRejection(rec, tc.form, tc.d)
		var body map[string]any
		json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != tc.status || rec.Header().Get("Retry-After") != tc.retry || body["type"] != tc.typ ||
			rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %d: got %d, Retry-After %q, body %v", tc.form, tc.status, rec.Code, rec.Header().Get("Retry-After"), body)
		}
		if tc.status == 429 && (body["policy"] != "free.tenant.1m" || body["retry_after_seconds"] != float64(3)) {
			t.Errorf("429 body %v: want policy and retry_after_seconds", body)
		}
		if tc.status == 503 && body["code"] != "rate_limiter_unavailable" {
			t.Errorf("503 body %v", body)
		}
	}
}

func TestMiddleware(t *testing.T) {
	l, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{}),
		Policy: policy.Policy{
			DefaultPlan: "free", DefaultClass: "read",
			Plans:   map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 60, Period: time.Minute, Burst: 2}}}}},
			Classes: map[string]policy.Class{"read": {Share: 1}},
			Anonymous: []policy.AnonRoute{{Name: "login", Pattern: "POST /login", Cost: 1, Fail: policy.FailClosed,
				Rules: []policy.AnonRule{{Rule: policy.Rule{Limit: algo.Limit{Limit: 1, Period: time.Minute}}}}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant comes from a (pretend-verified) key; the X-Tenant header a
	// client might send is ignored.
	keys := map[string]string{"k-acme": "acme"}
	mw, err := Middleware(Config{Limiter: l, SlowDown: true, Identify: func(r *http.Request) (policy.Identity, error) {
		k := r.Header.Get("Authorization")
		if k == "" {
			return policy.Identity{}, nil
		}
		if t, ok := keys[strings.TrimPrefix(k, "Bearer ")]; ok {
			return policy.Identity{Tenant: t}, nil
		}
		return policy.Identity{}, errors.New("unknown API key")
	}})
	if err != nil {
		t.Fatal(err)
	}
	var reached int
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }))
	do := func(method, path, auth, peer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Tenant", "someone-else")
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	for i, want := range []int{200, 200, 429} {
		if rec := do("GET", "/v1/x", "Bearer k-acme", "192.0.2.1:5000"); rec.Code != want {
			t.Errorf("request %d: %d, want %d", i, rec.Code, want)
		} else if want == 200 && rec.Header().Get("RateLimit-Remaining") != []string{"1", "0"}[i] {
			t.Errorf("request %d: RateLimit-Remaining %q", i, rec.Header().Get("RateLimit-Remaining"))
		}
	}
	if rec := do("GET", "/v1/x", "Bearer wrong", "192.0.2.1:5000"); rec.Code != 401 {
		t.Errorf("unknown key: %d, want 401", rec.Code)
	}
	if rec := do("GET", "/v1/x", "", "192.0.2.1:5000"); rec.Code != 401 {
		t.Errorf("no credential on a tenant route: %d, want 401", rec.Code)
	}
	// Anonymous login: per client IP.
	if rec := do("POST", "/login", "", "192.0.2.1:5000"); rec.Code != 200 {
		t.Errorf("first login: %d", rec.Code)
	}
	if rec := do("POST", "/login", "", "192.0.2.1:6000"); rec.Code != 429 {
		t.Errorf("second login from the same IP: %d, want 429", rec.Code)
	}
	if rec := do("POST", "/login", "", "192.0.2.2:5000"); rec.Code != 200 {
		t.Errorf("login from another IP: %d, want 200", rec.Code)
	}
	if reached != 4 {
		t.Errorf("handler reached %d times, want 4", reached)
	}
	// With SlowDown, a request whose key the near cache knows rejected is held for the
	// class's slow_down (the default, 100 ms) before its 429, with the
	// Retry-After left after the hold.
	start := time.Now()
	rec := do("GET", "/v1/x", "Bearer k-acme", "192.0.2.1:5000")
	if took := time.Since(start); rec.Code != 429 || took < policy.DefaultSlowDown {
		t.Errorf("a request ignoring Retry-After: %d after %v, want 429 after at least %v", rec.Code, took, policy.DefaultSlowDown)
	}
}

// TestNoHoldByDefault: without SlowDown, a request the near cache rejects
// is answered at once; with it, after the class's slow_down. Timed on the
// bubble's clock, exactly.
func TestNoHoldByDefault(t *testing.T) {
	for _, slow := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: policy.Policy{
				DefaultPlan: "p", DefaultClass: "c",
				Plans:   map[string]policy.Plan{"p": {Rules: []policy.Rule{{Limit: algo.PerMinute(1)}}}},
				Classes: map[string]policy.Class{"c": {}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			mw, _ := Middleware(Config{Limiter: lim, SlowDown: slow, Identify: func(r *http.Request) (policy.Identity, error) {
				return policy.Identity{Tenant: "acme"}, nil
			}})
			h := mw(http.NotFoundHandler())
			for i := range 3 { // allowed, rejected by the store, rejected by the near cache
				start := time.Now()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
				want := time.Duration(0)
				if i == 2 && slow {
					want = policy.DefaultSlowDown
				}
				if took := time.Since(start); took != want {
					t.Errorf("SlowDown %v, request %d: answered %d after %v, want after %v", slow, i, w.Code, took, want)
				}
			}
		})
	}
}

// TestAppendHeadersNamesOnce: a decision's headers name each header once,
// Retry-After included, in every form and for every kind of decision
// (callers such as /v1/check encode them as one JSON object).
func TestAppendHeadersNamesOnce(t *testing.T) {
	slots := []limiter.SlotDecision{{SlotLayer: policy.SlotLayer{Policy: "free.tenant.concurrency", Limit: 4}, Allowed: false, InUse: 4}}
	limited := decision(false, 0, 2*time.Second, time.Minute)
	limited.Concurrency = slots
	for name, d := range map[string]limiter.Decision{
		"allowed":              decision(true, 10, 0, time.Minute),
		"limited":              limited,
		"unavailable":          {Reason: limiter.ReasonUnavailable, RetryAfter: limiter.UnavailableRetryAfter, Tightest: -1},
		"unavailable, no wait": {Reason: limiter.ReasonUnavailable, Tightest: -1},
		"no slot":              {Reason: limiter.ReasonLimited, RetryAfter: time.Second, Tightest: -1, Concurrency: slots},
	} {
		for _, f := range []Form{Draft, Structured, X} {
			hs := AppendHeaders(nil, f, d)
			seen := map[string]bool{}
			for i := 0; i < len(hs); i += 2 {
				if seen[hs[i]] {
					t.Errorf("%s, form %s: %s twice in %q", name, f, hs[i], hs)
				}
				seen[hs[i]] = true
			}
			if !d.Allowed && !seen["Retry-After"] {
				t.Errorf("%s, form %s: a rejection without Retry-After: %q", name, f, hs)
			}
		}
	}
}

// TestMethodOverride: a method override that differs from the request's
// method is refused, by any header frameworks read or a look-alike of
// one, or by _method in the query; one that names the method itself
// passes.
func TestMethodOverride(t *testing.T) {
	for _, tc := range []struct {
		method string
		h      http.Header
		query  string
		bad    bool
	}{
		{"POST", nil, "", false},
		{"POST", http.Header{"X-Http-Method-Override": {"GET"}}, "", true},
		{"POST", http.Header{"X-Http-Method": {"DELETE"}}, "", true},
		{"POST", http.Header{"X-Method-Override": {"put"}}, "", true},
		{"POST", http.Header{"X_http_method_override": {"GET"}}, "", true},
		{"POST", http.Header{"X.Http.Method.Override": {"GET"}}, "", true},
		{"POST", http.Header{"X-Http-Method-Override": {"post"}}, "", false},
		{"POST", nil, "q=1&_method=GET", true},
		{"POST", nil, "_METHOD=get", true},
		{"POST", nil, "_method=POST", false},
		{"GET", nil, "method=x&q=_method", false},
		{"POST", nil, "_method=%zz", true},
	} {
		err := MethodOverride(tc.method, tc.h, tc.query)
		if (err != nil) != tc.bad {
			t.Errorf("%s %v ?%s: %v, want refused %v", tc.method, tc.h, tc.query, err, tc.bad)
		}
	}
}
