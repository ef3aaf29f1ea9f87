package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// tokenPolicy has plan "pro" at 10,000 tokens per 30 days (a period so
// long that nothing refills while a test runs: remaining is exact) under
// alg, and class "llm", half of it, measured in
// tokens: estimate default 500, cap 4000.
func tokenPolicy(alg algo.Algorithm) policy.Policy {
	return policy.Policy{
		Plans: map[string]policy.Plan{"pro": {Rules: []policy.Rule{{Name: "month",
			Limit: algo.Limit{Limit: 10_000, Period: 720 * time.Hour, Algorithm: alg}}}}},
		DefaultPlan: "pro",
		Classes: map[string]policy.Class{"read": {Share: 1}, "llm": {Share: 0.5, Cost: &policy.MeasuredCost{Unit: "tokens",
			Estimate: policy.Estimate{Default: 500, Cap: 4000}, Measure: policy.Measure{JSON: "usage.total_tokens"}}}},
		DefaultClass: "read",
	}
}

// settleStores are the stores the settle tests run on: memory and a real
// Redis, each with a key prefix of the test's own.
func settleStores(t *testing.T) map[string]func(prefix string) store.Store {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return map[string]func(string) store.Store{
		"memory": func(string) store.Store { return memstore.New(memstore.Config{}) },
		"redis": func(prefix string) store.Store {
			st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
}

func settleLimiter(t *testing.T, st store.Store, p policy.Policy) *Limiter {
	t.Helper()
	l, err := New(Config{Store: st, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// remaining is each layer's remaining after one more token is charged,
// plus that token: what the layers hold.
func remaining(t *testing.T, l *Limiter, tenant string) map[string]int64 {
	t.Helper()
	d, err := l.Decide(context.Background(), policy.Request{Tenant: tenant, Class: "llm", Cost: 1, HasCost: true})
	if err != nil || !d.Allowed {
		t.Fatalf("probe: %+v, %v", d, err)
	}
	out := map[string]int64{}
	for _, ld := range d.Layers {
		out[ld.Policy] = ld.Remaining + 1
	}
	return out
}

// TestSettleChargesTheTrueCost: requests admitted at their estimates and
// settled at their true costs leave each layer charged the sum of the
// true costs, exactly, under GCRA, the token bucket and the fixed window
// (whose refund needs the take's time), on memory and Redis; settling a
// decision again applies nothing; an upstream error's settlement at 0
// refunds the estimate.
func TestSettleChargesTheTrueCost(t *testing.T) {
	ctx := context.Background()
	for name, open := range settleStores(t) {
		for _, alg := range []algo.Algorithm{algo.GCRA, algo.TokenBucket, algo.FixedWindow} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				l := settleLimiter(t, open("settle-"+name+"-"+alg.String()+":"), tokenPolicy(alg))
				type req struct{ estimate, trueCost int64 }
				reqs := []req{{1000, 1500}, {2000, 300}, {500, 500}, {2500, 0}, {100, 2100}}
				var sum int64
				for i, r := range reqs {
					d, err := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Cost: r.estimate, HasCost: true})
					if err != nil || !d.Allowed || d.Settlement == nil {
						t.Fatalf("request %d: %+v, %v; want admitted with a settlement", i, d, err)
					}
					s := d.Settlement
					if s.Cost != r.estimate || len(s.Layers) != 2 || len(s.ID) != 31 || s.TakenAt.IsZero() {
						t.Fatalf("request %d: settlement %+v", i, s)
					}
					out, err := l.Settle(ctx, &d, r.trueCost)
					if err != nil || out.Repeated || out.Delta != r.trueCost-r.estimate {
						t.Fatalf("request %d: Settle = %+v, %v", i, out, err)
					}
					for _, x := range out.Layers {
						if x.Applied != out.Delta {
							t.Errorf("request %d: %s applied %d, want %d", i, x.Policy, x.Applied, out.Delta)
						}
					}
					again, err := l.Settle(ctx, &d, r.trueCost+999)
					if err != nil || !again.Repeated || again.Layers[0].Applied != 0 {
						t.Fatalf("request %d: second Settle = %+v, %v; want repeated, nothing applied", i, again, err)
					}
					sum += r.trueCost
				}
				got := remaining(t, l, "acme")
				want := map[string]int64{"pro.llm.month": 5000 - sum, "pro.tenant.month": 10_000 - sum}
				for p, w := range want {
					if got[p] != w {
						t.Errorf("%s remaining %d, want %d (burst − Σ true costs %d)", p, got[p], w, sum)
					}
				}
			})
		}
	}
}

// TestSettleDebt: a true cost over the estimate puts the class layer in
// debt (at most one burst), and the next request is refused until it is
// paid back.
func TestSettleDebt(t *testing.T) {
	ctx := context.Background()
	l := settleLimiter(t, memstore.New(memstore.Config{}), tokenPolicy(algo.GCRA))
	d, _ := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Cost: 4000, HasCost: true})
	out, err := l.Settle(ctx, &d, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	// The class layer (burst 5000) goes to −5000 at most: 6000 of the
	// 16,000 asked; the tenant layer (burst 10,000) to −10,000.
	want := map[string]struct{ applied, remaining int64 }{"pro.llm.month": {6000, -5000}, "pro.tenant.month": {16_000, -10_000}}
	for _, x := range out.Layers {
		if w := want[x.Policy]; x.Applied != w.applied || x.Remaining != w.remaining {
			t.Errorf("%s: applied %d, remaining %d; want %d, %d", x.Policy, x.Applied, x.Remaining, w.applied, w.remaining)
		}
	}
	next, err := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Cost: 1, HasCost: true})
	if err != nil || next.Allowed || next.RetryAfter <= 0 || next.Settlement != nil {
		t.Errorf("a request in debt: %+v, %v; want refused with a retry-after, nothing to settle", next, err)
	}
}

// TestSettleNothingOrBad: a decision with nothing to settle gives the
// zero outcome; a true cost out of range is refused before any store
// call.
func TestSettleNothingOrBad(t *testing.T) {
	ctx := context.Background()
	l := settleLimiter(t, memstore.New(memstore.Config{}), tokenPolicy(algo.GCRA))
	fixed, _ := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "read"})
	if out, err := l.Settle(ctx, &fixed, 10); err != nil || fixed.Settlement != nil || out.Layers != nil {
		t.Errorf("fixed-cost decision: %+v, %v; want nothing to settle", out, err)
	}
	d, _ := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Settles: true})
	if d.Settlement == nil || d.Settlement.Cost != 500 {
		t.Fatalf("default estimate: %+v", d.Settlement)
	}
	for _, c := range []int64{-1, algo.MaxCount + 1} {
		if _, err := l.Settle(ctx, &d, c); !errors.Is(err, ErrSettleCost) {
			t.Errorf("Settle(%d) = %v, want ErrSettleCost", c, err)
		}
	}
	if s := l.Guard().Stats(); s.SettlementsApplied != 0 {
		t.Errorf("bad costs reached the store: %+v", s)
	}
}

// TestSettleOnceAcrossInstances: one decision settled at once from two
// instances sharing a Redis, eight calls each, is applied exactly once.
func TestSettleOnceAcrossInstances(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	open := func() *Limiter {
		st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "settle-once:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return settleLimiter(t, st, tokenPolicy(algo.GCRA))
	}
	a, b := open(), open()
	ctx := context.Background()
	d, err := a.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Cost: 1000, HasCost: true})
	if err != nil || d.Settlement == nil {
		t.Fatal(d, err)
	}
	var applied atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			l := a
			if i%2 == 1 {
				l = b
			}
			out, err := l.Settle(ctx, &d, 3000)
			if err != nil {
				t.Error(err)
				return
			}
			if !out.Repeated {
				applied.Add(1)
			}
		})
	}
	wg.Wait()
	if applied.Load() != 1 {
		t.Errorf("applied %d times, want once", applied.Load())
	}
	if got := remaining(t, b, "acme")["pro.llm.month"]; got != 5000-3000 {
		t.Errorf("class remaining %d, want 2000", got)
	}
}

// TestInProcessSettlementsNeverFillTheIDTable: settlements of decisions
// held in process (the proxy's, the middleware's, the Go API's) apply on
// the memory store without an id record, so that a tenant settling
// thousands of requests cannot fill the store's bounded id table and have
// every other tenant's settlements refused as an outage; each still
// applies once per decision.
func TestInProcessSettlementsNeverFillTheIDTable(t *testing.T) {
	ctx := context.Background()
	l := settleLimiter(t, memstore.New(memstore.Config{MaxSettleIDs: 16}), tokenPolicy(algo.GCRA))
	for i := range 200 {
		d, err := l.Decide(ctx, policy.Request{Tenant: "noisy", Class: "llm", Cost: 1, HasCost: true})
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		if _, err := l.Settle(ctx, &d, 2); err != nil {
			t.Fatalf("settlement %d of a 16-id store: %v", i, err)
		}
		if again, err := l.Settle(ctx, &d, 9); err != nil || !again.Repeated {
			t.Fatalf("settlement %d again: %+v, %v; want repeated", i, again, err)
		}
	}
	if got := remaining(t, l, "noisy")["pro.llm.month"]; got != 5000-400 {
		t.Errorf("class remaining %d, want %d (200 requests of true cost 2)", got, 5000-400)
	}
	d, err := l.Decide(ctx, policy.Request{Tenant: "quiet", Class: "llm", Cost: 10, HasCost: true, Settles: true})
	if err != nil || d.Settlement == nil {
		t.Fatal(d, err)
	}
	if _, err := l.SettleTake(ctx, d.Settlement, 5); err != nil { // a handle's: recorded, and the table has room
		t.Fatalf("another tenant's handle settlement after the flood: %v", err)
	}
}

// TestReloadKeepsAMeasuredClass: a policy with a measured-cost class and
// its route reloads (SetPolicy, a SIGHUP's path) and takes run-time
// overrides (PutOverride, the admin API's), and decisions go on. Its
// defaults (Snapshot.Policy) gave the measured route a cost of 1, which
// the rebuild with the overlay refused, and the rebuild then stored a nil
// policy: every decision panicked until a restart.
func TestReloadKeepsAMeasuredClass(t *testing.T) {
	ctx := context.Background()
	p := tokenPolicy(algo.GCRA)
	p.Routes = []policy.Route{{Pattern: "POST /v1/completions", Class: "llm"}}
	l := settleLimiter(t, memstore.New(memstore.Config{}), p)
	if err := l.Policies.SetPolicy(p); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if err := l.Policies.PutOverride(ctx, "acme", policy.Tenant{Plan: "pro"}); err != nil {
		t.Fatalf("override: %v", err)
	}
	for _, route := range [][2]string{{"POST", "/v1/completions"}, {"GET", "/v1/other"}} {
		d, err := l.Decide(ctx, policy.Request{Tenant: "acme", Method: route[0], Path: route[1], Settles: true})
		if err != nil || !d.Allowed {
			t.Fatalf("%s after the reload and the override: %+v, %v", route, d, err)
		}
	}
	if got := l.Policies.Snapshot().Policy().Routes[0].Cost; got != 0 {
		t.Errorf("the measured route's cost with defaults = %d, want 0 (its estimate is its cost)", got)
	}
}
