package dash

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/internal/limitview"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

func TestTopKIsBoundedAndHoldsHeavyHitters(t *testing.T) {
	// 110,000 adds over 64 counters: every key with more than 110,000/64
	// (1,719) is guaranteed held; "heavy" has 10,000.
	k := NewTopK(64)
	for i := range 100_000 {
		k.Add(fmt.Sprint("noise-", i)) // attacker-chosen, all distinct
		if i%10 == 0 {
			k.Add("heavy")
		}
	}
	if len(k.keys) != 64 || len(k.index) != 64 {
		t.Fatalf("the sketch holds %d keys (%d indexed), want 64", len(k.keys), len(k.index))
	}
	top := k.Top(3)
	if top[0].Key != "heavy" || top[0].Count < 10_000 {
		t.Fatalf("top %v, want heavy first with at least its 10,000", top)
	}
	k.Add(strings.Repeat("x", 10_000))
	for _, key := range k.keys {
		if len(key) > maxKeyLen+len("…") {
			t.Fatalf("a key of %d bytes is held", len(key))
		}
	}
	k.Decay(0)
	if len(k.Top(10)) != 0 {
		t.Fatal("decay to 0 kept keys")
	}
}

// source is a Source whose Reading the test sets.
type source struct{ r Reading }

// Read returns a copy of the reading, as the daemon's makes a new one each
// time.
func (s *source) Read() Reading {
	r := s.r
	r.Limiter.Decisions = maps.Clone(r.Limiter.Decisions)
	if u := r.Upstream; u != nil {
		c := *u
		c.InFlight = maps.Clone(u.InFlight)
		r.Upstream = &c
	}
	return r
}

func TestSampleRates(t *testing.T) {
	src := &source{}
	d := New(src, "")
	t0 := time.Unix(1_800_000_000, 0)
	d.Sample(t0)
	// 30 allowed and 10 limited; of 100 store calls, 98 within 1 ms and 2
	// within 100 ms; the store's breaker open.
	src.r.Limiter = limiter.Stats{
		Decisions: map[limiter.PolicyOutcome]int64{{Policy: "free.tenant.1m", Outcome: limiter.ReasonAllowed}: 30, {Policy: "free.tenant.1m", Outcome: limiter.ReasonLimited}: 10},
		StoreCalls: limiter.Histogram{Bounds: []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond},
			Cumulative: []uint64{98, 98, 100}, Count: 100},
		Breaker: "open",
	}
	d.Limited("acme")
	d.Sample(t0.Add(2 * time.Second))
	got := d.data
	if got.Rate != 20 || got.ShareLimited != 0.25 {
		t.Fatalf("rate %v share %v, want 20/s and 0.25", got.Rate, got.ShareLimited)
	}
	if got.StoreP50ms != 1 || got.StoreP99ms != 100 {
		t.Fatalf("p50 %v p99 %v, want 1 and 100 (bucket bounds)", got.StoreP50ms, got.StoreP99ms)
	}
	if got.Breakers["store"] != "open" || len(got.History) != 2 || got.History[1].Limited != 5 {
		t.Fatalf("data %+v", got)
	}
	if len(got.TopLimited) != 1 || got.TopLimited[0].Key != "acme" {
		t.Fatalf("top limited %v", got.TopLimited)
	}
}

// TestSampleUpstream: the gate's numbers become the upstream card's, its
// sheds a rate; without a gate there is no card.
func TestSampleUpstream(t *testing.T) {
	src := &source{}
	d := New(src, "")
	t0 := time.Unix(1_800_000_000, 0)
	d.Sample(t0)
	if d.data.Upstream != nil {
		t.Fatalf("without a gate: %+v, want no upstream", d.data.Upstream)
	}
	src.r.Upstream = &Upstream{Limit: 16, Waiting: 3, InFlight: map[string]float64{"read": 10, "export": 6}, ShedTotal: 4}
	d.Sample(t0.Add(time.Second))
	src.r.Upstream.ShedTotal += 6
	d.Sample(t0.Add(3 * time.Second))
	u := d.data.Upstream
	if u == nil || u.Limit != 16 || u.Waiting != 3 || u.InFlight["read"] != 10 || u.InFlight["export"] != 6 || u.ShedTotal != 10 || u.ShedPerSecond != 3 {
		t.Fatalf("upstream %+v, want limit 16, 3 waiting, 10 + 6 in flight, 10 shed at 3/s", u)
	}
}

// TestDataNeedsTheToken: with the admin and the internal token set, the
// data needs one of them; the page does not (it asks for one).
func TestDataNeedsTheToken(t *testing.T) {
	d := New(&source{}, "admin-token-0123456789", "", "internal-token-0123456789")
	for _, c := range []struct {
		path, auth string
		code       int
	}{
		{"/dashboard", "", 200}, // the page asks for the token itself
		{"/dashboard/data", "", 401},
		{"/dashboard/data", "Bearer wrong", 401},
		{"/dashboard/data", "Bearer admin-token-0123456789", 200},
		{"/dashboard/data", "Bearer internal-token-0123456789", 200},
		{"/dashboard/nope", "", 404},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		if w.Code != c.code {
			t.Errorf("%s (%q): %d, want %d", c.path, c.auth, w.Code, c.code)
		}
	}
	w := httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest("POST", "/dashboard", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", w.Code)
	}
}

// TestDataDuringAnOutage: a queue depth the store cannot give (NaN during
// a Redis outage) is shown as unavailable, and the data is
// JSON; today /dashboard/data was 200 with an empty body exactly then.
// Errors are problem+json.
func TestDataDuringAnOutage(t *testing.T) {
	d := New(&source{Reading{Queues: map[string]float64{"report": math.NaN()}, Limiter: limiter.Stats{Breaker: "open"}}}, "")
	d.Sample(time.Unix(1_800_000_000, 0))
	w := httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest("GET", "/dashboard/data", nil))
	var got Data
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil {
		t.Fatalf("data during an outage: %d %q %v", w.Code, w.Body, err)
	}
	if got.Queues["report"] != "unavailable" || got.Breakers["store"] != "open" {
		t.Fatalf("queues %v breakers %v, want the queue unavailable and the store's breaker open", got.Queues, got.Breakers)
	}
	for _, r := range []*http.Request{httptest.NewRequest("GET", "/dashboard/nope", nil), httptest.NewRequest("POST", "/dashboard", nil)} {
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		if w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %q, want problem+json", r.Method, r.URL.Path, w.Code, w.Header().Get("Content-Type"))
		}
	}
}

// TestDataHidesTenantsWithoutToken: with no token to ask for, the data
// is served without a tenant ID (tenants_hidden); with a token, the caller
// that sends it sees the limited tenants.
func TestDataHidesTenantsWithoutToken(t *testing.T) {
	for _, tok := range []string{"", "internal-token-0123456789"} {
		d := New(&source{}, "", tok)
		d.Limited("acme-secret-customer")
		d.Sample(time.Unix(1_800_000_000, 0))
		r := httptest.NewRequest("GET", "/dashboard/data", nil)
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		var got Data
		if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil {
			t.Fatalf("token %q: %d %s", tok, w.Code, w.Body)
		}
		shown := strings.Contains(w.Body.String(), "acme-secret-customer")
		if tok == "" && (shown || !got.TenantsHidden || got.TopLimited == nil) {
			t.Errorf("without a token: %s, want no tenant ID, tenants_hidden and an empty top_limited", w.Body)
		}
		if tok != "" && (!shown || got.TenantsHidden) {
			t.Errorf("with the token: %s, want the limited tenant", w.Body)
		}
	}
}

// budgetSource is a Source with one tenant's budgets: acme's, read from
// tl, or err.
type budgetSource struct {
	source
	tl  limiter.TenantLimits
	err error
}

func (s *budgetSource) Effective(_ context.Context, tenant string) (limiter.TenantLimits, error) {
	if s.err != nil {
		return limiter.TenantLimits{}, s.err
	}
	if len(tenant) > policy.MaxTenantID {
		return limiter.TenantLimits{}, fmt.Errorf("%w: too long", policy.ErrBadTenant)
	}
	tl := s.tl
	tl.Tenant = tenant
	return tl, nil
}

// tokenBudget is a plan of 200,000 tokens a minute with 14,000 of its
// 20,000 burst left, full again in 1.8 s.
var tokenBudget = limiter.TenantLimits{Plan: "pro", Layers: []limiter.LayerState{{
	Policy: "pro.tenant.1m", Limit: 200_000, Burst: 20_000, Period: time.Minute,
	Remaining: 14_000, ResetAfter: 1800 * time.Millisecond, Unit: "tokens",
}}}

// TestBudget: GET /dashboard/tenant shows a tenant's layers, each in its
// unit with remaining and reset, only to a caller with a token; and says
// what is wrong otherwise.
func TestBudget(t *testing.T) {
	const tok = "a-dashboard-token-0123456789"
	get := func(d *Dashboard, path, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	d := New(&budgetSource{tl: tokenBudget}, tok)
	w := get(d, "/dashboard/tenant?id=acme", tok)
	var b Budget
	if err := json.Unmarshal(w.Body.Bytes(), &b); w.Code != 200 || err != nil {
		t.Fatalf("GET /dashboard/tenant: %d %s (%v)", w.Code, w.Body, err)
	}
	want := Budget{Tenant: "acme", Plan: "pro", Layers: []limitview.Layer{{Policy: "pro.tenant.1m", Unit: "tokens",
		Limit: 200_000, Burst: 20_000, PeriodMs: 60_000, Remaining: 14_000, ResetAfterMs: 1800}}}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("budget (-want +got):\n%s", diff)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	for _, tc := range []struct {
		name   string
		d      *Dashboard
		path   string
		token  string
		status int
		detail string
	}{
		{"no token sent", d, "/dashboard/tenant?id=acme", "", 401, "needs Authorization"},
		{"the wrong token", d, "/dashboard/tenant?id=acme", "not-the-token-at-all-0123", 401, "needs Authorization"},
		{"no token set", New(&budgetSource{tl: tokenBudget}), "/dashboard/tenant?id=acme", "", 403, "shown only with a token"},
		{"no id", d, "/dashboard/tenant", tok, 400, "id: required"},
		{"a bad id", d, "/dashboard/tenant?id=" + strings.Repeat("x", policy.MaxTenantID+1), tok, 400, "id: policy: tenant ID too long"},
		{"no budgets", New(&source{}, tok), "/dashboard/tenant?id=acme", tok, 404, "no tenant budgets"},
		{"the store out", New(&budgetSource{err: errors.New("store: unavailable")}, tok), "/dashboard/tenant?id=acme", tok, 503, "cannot be read right now: store: unavailable"},
	} {
		w := get(tc.d, tc.path, tc.token)
		if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.detail) || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s; want %d, a problem saying %q", tc.name, w.Code, w.Header().Get("Content-Type"), w.Body, tc.status, tc.detail)
		}
	}
}
