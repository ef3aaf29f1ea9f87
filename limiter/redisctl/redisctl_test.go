package redisctl_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
	"github.com/fairgate/fairgate/store/redisstore"
)

func TestMain(m *testing.M) {
	os.Exit(redistest.MainWithCluster(m))
}

func testPolicy() policy.Policy {
	return policy.Policy{
		DefaultPlan: "free", DefaultClass: "read",
		Plans:   map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 30}}}}},
		Classes: map[string]policy.Class{"read": {Share: 1}},
	}
}

// instance is one fairgate instance: its own store client and limiter on
// the shared Redis, following the control store.
func instance(t *testing.T, url, prefix string) *limiter.Limiter {
	t.Helper()
	st, err := redisstore.New(redisstore.Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	l, err := limiter.New(limiter.Config{Store: st, Policy: testPolicy(), Control: redisctl.New(st.Client(), prefix), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// burst is how many back-to-back requests a fresh tenant key admits on l.
func burst(t *testing.T, l *limiter.Limiter, tenant string) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		d, err := l.Decide(context.Background(), policy.Request{Tenant: tenant, Class: "read"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			return n
		}
	}
	return 100
}

// within polls cond every 50 ms until it holds or d passes, and returns how
// long it took.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func testAcrossInstances(t *testing.T, url string) {
	prefix := fmt.Sprintf("t%d:", rand.Uint32())
	a, b := instance(t, url, prefix), instance(t, url, prefix)
	ctx := context.Background()
	if err := a.PutOverride(ctx, "acme", policy.Tenant{Burst: 5}); err != nil {
		t.Fatal(err)
	}
	took := within(t, 2*time.Second, "override written on A enforced on B", func() bool {
		res, err := b.Snapshot().Resolve(policy.Request{Tenant: "acme", Class: "read"}, time.Now())
		return err == nil && res.Layers[0].Limit.Capacity() == 5
	})
	t.Logf("B applied the override after %v", took)
	if n := burst(t, b, "acme"); n != 5 {
		t.Errorf("B admitted a burst of %d for acme, want the override's 5", n)
	}
	// A plan change reaches B too.
	if err := a.PutPlan(ctx, policy.Plan{Name: "free", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 60, Period: time.Minute, Burst: 7}}}}); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "plan change on B", func() bool {
		res, _ := b.Snapshot().Resolve(policy.Request{Tenant: "newco", Class: "read"}, time.Now())
		return len(res.Layers) == 1 && res.Layers[0].Limit.Capacity() == 7
	})
	// An override with an expiry ends by itself on both instances.
	exp := time.Now().Add(1500 * time.Millisecond)
	if err := a.PutOverride(ctx, "globex", policy.Tenant{Burst: 3, Expires: exp}); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "expiring override on B", func() bool {
		res, _ := b.Snapshot().Resolve(policy.Request{Tenant: "globex", Class: "read"}, time.Now())
		return res.Layers[0].Limit.Capacity() == 3
	})
	within(t, 3*time.Second, "override expired on B", func() bool {
		res, _ := b.Snapshot().Resolve(policy.Request{Tenant: "globex", Class: "read"}, time.Now())
		return res.Layers[0].Limit.Capacity() == 7
	})
	if time.Now().Before(exp) {
		t.Error("override ended before its expiry")
	}
	// Deleting an override restores the plan.
	if err := a.DeleteOverride(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "delete reaches B", func() bool {
		res, _ := b.Snapshot().Resolve(policy.Request{Tenant: "acme", Class: "read"}, time.Now())
		return res.Layers[0].Limit.Capacity() == 7
	})
}

func TestOverrideAcrossInstancesStandalone(t *testing.T) {
	t.Parallel()
	testAcrossInstances(t, "redis://"+redistest.Shared(t).Addr)
}

func TestOverrideAcrossInstancesCluster(t *testing.T) {
	t.Parallel()
	testAcrossInstances(t, "redis-cluster://"+strings.Join(redistest.SharedCluster(t).Addrs(), ","))
}

func TestBadOverrideIsRefusedBeforeWriting(t *testing.T) {
	prefix := fmt.Sprintf("t%d:", rand.Uint32())
	a := instance(t, "redis://"+redistest.Shared(t).Addr, prefix)
	if err := a.PutOverride(context.Background(), "acme", policy.Tenant{Plan: "gold"}); err == nil {
		t.Fatal("override naming an unknown plan accepted")
	}
	st, _ := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr})
	defer st.Close()
	if v, err := redisctl.New(st.Client(), prefix).Version(context.Background()); err != nil || v != 0 {
		t.Errorf("control version = %d, %v after a refused write; want 0", v, err)
	}
}

// TestStoredPlanIsTheFilesPlan: a plan written to the control store and
// read back is the plan the policy file gives (every field of its rules:
// algorithm, calendar, shadow, sub-millisecond period, concurrency), so
// the stored form (policy.Plan's JSON) agrees with the YAML one.
func TestStoredPlanIsTheFilesPlan(t *testing.T) {
	p, err := policyfile.Parse("plans.yaml", []byte(`default_plan: free
default_class: read
classes: {read: {}}
plans:
  free:
    - {limit: 120, period: 1m, burst: 30}
    - {name: tb, limit: 10, period: 1500us, algorithm: token_bucket, shadow: true}
    - {name: sw, limit: 10, period: 1s, algorithm: sliding_window}
    - {name: daily, limit: 10000, period: day}
    - {concurrency: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := p.Plans["free"]
	want.Name = "free"
	srv := redistest.Shared(t)
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "storedplan:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redisctl.New(st.Client(), "storedplan:")
	ctx := context.Background()
	if err := c.PutPlan(ctx, want); err != nil {
		t.Fatal(err)
	}
	ov, err := c.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, ov.Plans["free"]); diff != "" {
		t.Errorf("the plan read back from the control store (-file +stored):\n%s", diff)
	}
}
