package rls_test

import (
	"fmt"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/store/memstore"
)

func oneRule(rpu uint32, d rls.Domain) rls.Config {
	d.Name = "api"
	d.Descriptors = []*rls.Descriptor{{Key: "k", Limit: &rls.RateLimit{RequestsPerUnit: rpu, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}}}
	return rls.Config{Domains: []rls.Domain{d}}
}

// TestGlobalShadowAndQuota: SHADOW_MODE answers OK while the statuses say
// OVER_LIMIT; QUOTA_MODE puts every descriptor in quota mode (over only
// when all are).
func TestGlobalShadowAndQuota(t *testing.T) {
	cfg := oneRule(1, rls.Domain{Algorithm: algo.FixedWindow})
	cfg.Settings.Shadow = true
	c, _ := serve(t, cfg, memstore.New(memstore.Config{}))
	ask(t, c, "api", 1, desc("k=a"))
	if r := ask(t, c, "api", 1, desc("k=a")); codesOf(r) != "OK: OVER_LIMIT" {
		t.Fatalf("global shadow mode: %s, want OK: OVER_LIMIT", codesOf(r))
	}
	cfg = oneRule(1, rls.Domain{Algorithm: algo.FixedWindow})
	cfg.Settings.Quota = true
	c, _ = serve(t, cfg, memstore.New(memstore.Config{}))
	ask(t, c, "api", 1, desc("k=a"))
	if r := ask(t, c, "api", 1, desc("k=a"), desc("k=b")); codesOf(r) != "OK: OVER_LIMIT OK" {
		t.Fatalf("global quota mode, one of two over: %s", codesOf(r))
	}
	if r := ask(t, c, "api", 1, desc("k=a"), desc("k=b")); codesOf(r) != "OVER_LIMIT: OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("global quota mode, both over: %s", codesOf(r))
	}
}

// TestAlgorithmWithoutAtomic: a domain on GCRA without atomic charges the
// descriptors that pass even when another is over its limit (each decided
// on its own, as envoyproxy/ratelimit does); with atomic, none.
func TestAlgorithmWithoutAtomic(t *testing.T) {
	for _, atomic := range []bool{false, true} {
		cfg := rls.Config{Domains: []rls.Domain{{Name: "api", Algorithm: algo.GCRA, Atomic: atomic, Descriptors: []*rls.Descriptor{
			{Key: "small", Limit: &rls.RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
			{Key: "big", Limit: &rls.RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
		}}}}
		c, _ := serve(t, cfg, memstore.New(memstore.Config{}))
		for range 3 {
			ask(t, c, "api", 1, desc("small=x"), desc("big=x"))
		}
		want := uint32(6) // 10 less 3 calls and this one
		if atomic {
			want = 8 // only the first call and this one
		}
		if r := ask(t, c, "api", 1, desc("big=x")); r.Statuses[0].LimitRemaining != want {
			t.Errorf("atomic %v: big's remaining %d, want %d", atomic, r.Statuses[0].LimitRemaining, want)
		}
	}
}

// TestAttackerBounds: values a client chooses cannot grow the local cache
// or the statistics without bound.
func TestAttackerBounds(t *testing.T) {
	cfg := rls.Config{Domains: []rls.Domain{{Name: "api", Algorithm: algo.FixedWindow, Descriptors: []*rls.Descriptor{
		{Key: "k", DetailedMetric: true, Limit: &rls.RateLimit{RequestsPerUnit: 0, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
	}}}}
	cfg.Settings.LocalCacheEntries = 100
	reg := prometheus.NewRegistry()
	svc, err := rls.New(cfg, testGuard(t, memstore.New(memstore.Config{})), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	c := serveService(t, svc)
	n := rls.MaxStatKeys + 500
	for i := range n {
		if r := ask(t, c, "api", 1, desc(fmt.Sprint("k=v", i))); r.OverallCode != over {
			t.Fatal(codesOf(r))
		}
	}
	if got := rls.LocalCacheLen(svc); got > 100 {
		t.Errorf("local cache holds %d entries, bound 100", got)
	}
	mfs, _ := reg.Gather()
	series := 0
	for _, mf := range mfs {
		if mf.GetName() == "fairgate_rls_rate_limit_hits_total" {
			series = len(mf.Metric)
		}
	}
	// Two stats per key (total_hits, over_limit).
	if series > 2*(rls.MaxStatKeys+1) {
		t.Errorf("%d series for %d values, bound %d", series, n, 2*(rls.MaxStatKeys+1))
	}
	if hitsOf(t, reg, "overflow", "total_hits") != 500 {
		t.Errorf("overflow total_hits %v, want 500", hitsOf(t, reg, "overflow", "total_hits"))
	}
}
