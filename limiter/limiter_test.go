package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	_ "time/tzdata" // calendar tests need zones whatever the machine has

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

var testPolicy, perMin = testpolicy.Policy, testpolicy.PerMin

var noon = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, st store.Store, mod func(*Config)) *Limiter {
	t.Helper()
	c := Config{Store: st, Policy: testPolicy(), Now: func() time.Time { return noon }}
	if mod != nil {
		mod(&c)
	}
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecideIsAllOrNothing(t *testing.T) {
	ms := memstore.New(memstore.Config{})
	l := newLimiter(t, ms, nil)
	ctx := context.Background()
	search := policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/search"}
	for i := range 8 { // the search class's burst
		if d, _ := l.Decide(ctx, search); !d.Allowed {
			t.Fatalf("search %d rejected: %+v", i, d)
		}
	}
	d, err := l.Decide(ctx, search)
	if err != nil || d.Allowed || d.Reason != ReasonLimited || d.Policy != "free.search.1m" || d.RetryAfter <= 0 {
		t.Fatalf("9th search = %+v, %v; want limited by free.search.1m", d, err)
	}
	// The tenant's overall layer was charged 8, not 9.
	tl, err := l.Effective(ctx, "newco", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, ly := range tl.Layers {
		if ly.Policy == "free.tenant.1m" && ly.Remaining != 30-8 {
			t.Errorf("overall remaining %d, want %d: a rejected batch charged the wide layer", ly.Remaining, 30-8)
		}
	}
	// Other classes still pass, and the overall limit binds them.
	if d, _ := l.Decide(ctx, policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}); !d.Allowed {
		t.Errorf("read after search limit rejected: %+v", d)
	}
}

func TestShadowCountsAndEnforcesNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	ms := memstore.New(memstore.Config{})
	l := newLimiter(t, ms, func(c *Config) { c.Registerer = reg })
	ctx := context.Background()
	export := policy.Request{Tenant: "newco", Method: "POST", Path: "/v1/reports"} // cost 3, class burst 3 (share 0.1 of 30)
	var shadowed int
	for range 5 {
		d, err := l.Decide(ctx, export)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("shadow class rejected: %+v", d)
		}
		if d.Reason == ReasonShadowLimited {
			shadowed++
		}
	}
	if shadowed != 4 {
		t.Errorf("%d shadow-limited decisions, want 4 (the class burst admits one cost-3 export)", shadowed)
	}
	if got := counter(t, reg, "fairgate_shadow_rejections_total", "policy", "free.export.1m"); got != 4 {
		t.Errorf("fairgate_shadow_rejections_total{policy=free.export.1m} = %v, want 4", got)
	}
	// The class is shadowed, not the tenant: the five exports (cost 15)
	// still count against the enforced overall limit (burst 30), which now
	// admits 15 reads and no more.
	for i := range 16 {
		d, _ := l.Decide(ctx, policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"})
		if want := i < 15; d.Allowed != want {
			t.Fatalf("read %d allowed=%v, want %v", i, d.Allowed, want)
		}
	}
}

func TestShadowRuleInEnforcedClass(t *testing.T) {
	p := testPolicy()
	p.Plans["free"] = policy.Plan{Rules: []policy.Rule{{Limit: perMin(120, 30)}, {Name: "trial", Limit: perMin(2, 2), Shadow: true}}}
	p.Routes = p.Routes[:4] // the export route costs more than the trial rule's share
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}
	for i := range 5 {
		d, _ := l.Decide(ctx, req)
		if !d.Allowed {
			t.Fatalf("request %d rejected by a shadow rule: %+v", i, d)
		}
		if wantShadow := i >= 2; (d.Reason == ReasonShadowLimited) != wantShadow {
			t.Errorf("request %d: reason %v", i, d.Reason)
		}
	}
	tl, _ := l.Effective(ctx, "newco", "")
	for _, ly := range tl.Layers {
		if ly.Policy == "free.tenant.1m" && ly.Remaining != 25 {
			t.Errorf("enforced layer remaining %d after 5 requests, want 25", ly.Remaining)
		}
	}
}

// downStore is a store that is out: every call fails as Redis would.
type downStore struct{ storetest.Down }

func TestFailModes(t *testing.T) {
	ctx := context.Background()
	fb := memstore.New(memstore.Config{})
	l := newLimiter(t, downStore{}, func(c *Config) { c.Fallback = fb })
	// read fails open: the fallback limits it per instance.
	read := policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}
	for i := range 31 {
		d, err := l.Decide(ctx, read)
		if err != nil || d.Reason != ReasonDegradedOpen {
			t.Fatalf("read %d: %+v, %v; want degraded_open", i, d, err)
		}
		if d.Allowed != (i < 30) {
			t.Fatalf("read %d allowed=%v: the fallback should admit the burst of 30, then limit", i, d.Allowed)
		}
	}
	// write fails closed.
	d, err := l.Decide(ctx, policy.Request{Tenant: "newco", Method: "POST", Path: "/v1/users"})
	if err != nil || d.Allowed || d.Reason != ReasonUnavailable || d.RetryAfter != UnavailableRetryAfter {
		t.Errorf("write with the store out = %+v, %v; want unavailable_closed, retry 5s", d, err)
	}
}

func TestOverrideExpiresByItself(t *testing.T) {
	now := noon
	l := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Now = func() time.Time { return now } })
	ctx := context.Background()
	if err := l.PutOverride(ctx, "newco", policy.Tenant{Plan: "team", Burst: 999, Expires: noon.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	burst := func() int64 {
		res, err := l.Snapshot().Resolve(policy.Request{Tenant: "newco", Class: "read"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return res.Layers[0].Limit.Capacity()
	}
	if b := burst(); b != 999 {
		t.Errorf("burst with override = %d, want 999", b)
	}
	now = noon.Add(time.Hour)
	if b := burst(); b != 30 {
		t.Errorf("burst after the override expired = %d, want the free plan's 30", b)
	}
	if err := l.PutOverride(ctx, "newco", policy.Tenant{Plan: "team", Expires: noon}); err == nil {
		t.Error("an override that has already expired was accepted")
	}
	// An override that does not fit the policy is refused and changes nothing.
	err := l.PutOverride(ctx, "newco", policy.Tenant{Plan: "gold"})
	var ps policy.Problems
	if !errors.As(err, &ps) {
		t.Errorf("PutOverride(unknown plan) = %v, want Problems", err)
	}
}

// counter reads one counter from reg by name and one label.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestSetPolicyKeepsRunningPolicyOnError(t *testing.T) {
	l := newLimiter(t, memstore.New(memstore.Config{}), nil)
	before := l.Snapshot()
	bad := testPolicy()
	bad.Classes["search"] = policy.Class{Share: 2}
	var ps policy.Problems
	if err := l.SetPolicy(bad); !errors.As(err, &ps) || ps[0].Path != "classes.search.share" {
		t.Fatalf("SetPolicy(bad) = %v, want a Problems naming classes.search.share", err)
	}
	if l.Snapshot() != before {
		t.Error("a policy that does not compile replaced the running one")
	}
	good := testPolicy()
	good.Plans["free"] = policy.Plan{Rules: []policy.Rule{{Limit: perMin(60, 40)}}}
	if err := l.SetPolicy(good); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Snapshot().Resolve(policy.Request{Tenant: "newco", Class: "read"}, noon); res.Layers[0].Limit.Capacity() != 40 {
		t.Errorf("good policy not applied: %+v", res.Layers)
	}
}

func TestFallbackIsSizedPerInstance(t *testing.T) {
	fb := memstore.New(memstore.Config{})
	l := newLimiter(t, downStore{}, func(c *Config) { c.Fallback = fb; c.Instances = 4 })
	// free: burst 30; each of 4 instances gets 30 × 1.2 / 4 = 9.
	var d Decision
	admitted := 0
	for range 20 {
		d, _ = l.Decide(context.Background(), policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"})
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 9 || d.Reason != ReasonDegradedOpen {
		t.Errorf("fallback admitted %d of 20 (reason %v), want 9: the burst of 30 × 1.2 / 4 instances", admitted, d.Reason)
	}
}

func TestLimitersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Registerer = reg })
	b := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Registerer = reg })
	for _, l := range []*Limiter{a, b} {
		if _, err := l.Decide(context.Background(), policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, reg, "fairgate_decisions_total", "policy", "free.tenant.1m"); got != 2 {
		t.Errorf("decisions counted %v, want 2: the second limiter's metrics were lost", got)
	}
}

// scriptedStore answers each call with the next error of errs (nil: a
// decision), then decides.
type scriptedStore struct {
	store.Store // decides
	mu          sync.Mutex
	errs        []error
}

func (s *scriptedStore) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	s.mu.Lock()
	var err error
	if len(s.errs) > 0 {
		err, s.errs = s.errs[0], s.errs[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Store.Take(ctx, checks, res)
}

// TestBreakerTripRule: timeouts in a row (a busy process, a healthy
// store) do not open the breaker; 5 refusals in a row do; and so do
// timeouts on half of at least 20 calls.
func TestBreakerTripRule(t *testing.T) {
	timeout := fmt.Errorf("%w: %w", store.ErrUnavailable, context.DeadlineExceeded)
	refused := fmt.Errorf("%w: dial tcp: connection refused", store.ErrUnavailable)
	rep := func(err error, n int) []error { return slices.Repeat([]error{err}, n) }
	cases := []struct {
		name string
		errs []error
		open bool
	}{
		{"8 timeouts in 40 calls", append(rep(timeout, 8), rep(nil, 32)...), false},
		{"5 refusals in a row", rep(refused, 5), true},
		{"4 refusals, a success, 4 refusals", append(append(rep(refused, 4), nil), rep(refused, 4)...), false},
		{"timeouts on half of 20 calls", append(rep(nil, 10), rep(timeout, 10)...), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &scriptedStore{errs: c.errs, Store: memstore.New(memstore.Config{})}
			l := newLimiter(t, st, func(cf *Config) { cf.Fallback = memstore.New(memstore.Config{}); cf.Timeout = time.Second })
			for i := range len(c.errs) {
				l.Decide(context.Background(), policy.Request{Tenant: fmt.Sprintf("t%d", i), Method: "GET", Path: "/v1/users/1"})
			}
			if open := !l.StoreUp(); open != c.open {
				t.Errorf("breaker open %v, want %v", open, c.open)
			}
		})
	}
}
