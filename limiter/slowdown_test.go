package limiter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// slowPolicy: one request a minute, in classes with a slow-down of 40 ms,
// the default, and none.
var slowPolicy = policy.Policy{
	DefaultPlan: "p", DefaultClass: "api",
	Plans: map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 1, Period: time.Minute, Burst: 1}}}}},
	Classes: map[string]policy.Class{
		"api":  {Name: "api", Share: 1, SlowDown: 40 * time.Millisecond},
		"dflt": {Name: "dflt", Share: 1},
		"off":  {Name: "off", Share: 1, SlowDown: -1},
	},
}

func slowLimiter(t *testing.T, p policy.Policy) *Limiter {
	t.Helper()
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: p, Timeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// slowed is how many requests l has held.
func slowed(l *Limiter) float64 { return testutil.ToFloat64(l.m.slowed) }

// decideTimed decides req and says how long it took.
func decideTimed(t *testing.T, l *Limiter, ctx context.Context, req policy.Request) (Decision, time.Duration) {
	t.Helper()
	start := time.Now()
	d, err := l.Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return d, time.Since(start)
}

// The slow-down tests run in synctest bubbles: holds wait on the bubble's
// clock, so they take no wall time and their lengths are exact.

// TestSlowDown: the store's own rejection is answered at once; a request
// the near cache rejects is held for the class's slow_down when the caller
// allows holding, and its Retry-After is then the time left after the
// hold; without Hold, or with slow_down off, nothing is held.
func TestSlowDown(t *testing.T) {
	tests := []struct {
		class string
		hold  bool
		want  time.Duration // 0: not held
	}{
		{"api", true, 40 * time.Millisecond},
		{"dflt", true, policy.DefaultSlowDown},
		{"off", true, 0},
		{"api", false, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("class=%s/hold=%v", tt.class, tt.hold), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := slowLimiter(t, slowPolicy)
				ctx := context.Background()
				req := policy.Request{Tenant: "t", Class: tt.class, Hold: tt.hold}
				if d, _ := decideTimed(t, l, ctx, req); !d.Allowed {
					t.Fatal("the first request was limited")
				}
				first, _ := decideTimed(t, l, ctx, req)
				if first.Allowed || slowed(l) != 0 {
					t.Fatalf("the store's rejection: allowed %v, %v held; want a rejection at once", first.Allowed, slowed(l))
				}
				held, took := decideTimed(t, l, ctx, req)
				if held.Allowed || held.Reason != ReasonLimited {
					t.Fatalf("a near-cache hit was answered %+v", held)
				}
				if tt.want == 0 {
					if slowed(l) != 0 {
						t.Fatalf("held (%v) with nothing to hold", took)
					}
					return
				}
				if slowed(l) != 1 {
					t.Fatalf("%v held, want 1", slowed(l))
				}
				if took != tt.want {
					t.Fatalf("held %v, want %v", took, tt.want)
				}
				if held.RetryAfter > first.RetryAfter-tt.want {
					t.Fatalf("Retry-After %v after a hold of %v; the store said %v before it", held.RetryAfter, tt.want, first.RetryAfter)
				}
			})
		})
	}
}

// TestSlowDownAdmitsAtRetryAfter: a hold never goes past the retry-after,
// and a request held until then is decided afresh and passes.
func TestSlowDownAdmitsAtRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := slowPolicy
		p.Plans = map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 20, Period: time.Second, Burst: 1}}}}}
		p.Classes = map[string]policy.Class{"api": {Name: "api", Share: 1, SlowDown: 5 * time.Second}}
		l := slowLimiter(t, p)
		ctx := context.Background()
		req := policy.Request{Tenant: "t", Hold: true}
		decideTimed(t, l, ctx, req)
		if d, _ := decideTimed(t, l, ctx, req); d.Allowed {
			t.Fatal("the second request of a burst of 1 passed")
		}
		d, took := decideTimed(t, l, ctx, req)
		if !d.Allowed {
			t.Fatalf("held %v, then limited with Retry-After %v: want admitted once its 50 ms retry-after passed", took, d.RetryAfter)
		}
		if took != 50*time.Millisecond {
			t.Fatalf("held %v, want exactly the 50 ms retry-after", took)
		}
	})
}

// rejectedFor returns a limiter whose one class holds for 10 s, and a
// request the store has just rejected (so the near cache knows its key).
func rejectedFor(t *testing.T) (*Limiter, policy.Request) {
	t.Helper()
	p := slowPolicy
	p.Classes = map[string]policy.Class{"api": {Name: "api", Share: 1, SlowDown: 10 * time.Second}}
	l := slowLimiter(t, p)
	req := policy.Request{Tenant: "t", Hold: true}
	decideTimed(t, l, context.Background(), req)
	if d, _ := decideTimed(t, l, context.Background(), req); d.Allowed {
		t.Fatal("the second request of a burst of 1 passed")
	}
	return l, req
}

// TestSlowDownEndsWithTheCaller: a caller that goes away is not held on.
func TestSlowDownEndsWithTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, req := rejectedFor(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if d, took := decideTimed(t, l, ctx, req); d.Allowed || took != 20*time.Millisecond {
			t.Fatalf("allowed %v after %v: want a rejection once the caller left", d.Allowed, took)
		}
	})
}

// TestSlowDownIsBounded: past maxHeld requests held at once, rejections
// are answered at once, so clients cannot pile up held requests without
// bound; a hammering client is paced to about one request per connection
// per slow_down.
func TestSlowDownIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, req := rejectedFor(t)
		l.held.Store(maxHeld)
		if d, took := decideTimed(t, l, context.Background(), req); d.Allowed || slowed(l) != 0 {
			t.Fatalf("allowed %v after %v with maxHeld requests held: want a rejection at once", d.Allowed, took)
		}
		if n := l.held.Load(); n != maxHeld {
			t.Fatalf("%d held after a refused hold, want %d", n, maxHeld)
		}
	})
}

// TestSlowDownPacesAHammeringClient: 8 connections sending as fast as they
// are answered for 400 ms make about 8 × 400/40 requests, not thousands.
func TestSlowDownPacesAHammeringClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := slowLimiter(t, slowPolicy)
		req := policy.Request{Tenant: "t", Hold: true}
		decideTimed(t, l, context.Background(), req)
		decideTimed(t, l, context.Background(), req)
		var mu sync.Mutex
		sent := 0
		stop := time.Now().Add(400 * time.Millisecond)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if d, err := l.Decide(context.Background(), req); err != nil || d.Allowed {
						t.Errorf("allowed %v, err %v: want limited", d.Allowed, err)
						return
					}
					mu.Lock()
					sent++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if sent != 8*400/40 {
			t.Fatalf("%d requests in 400 ms from 8 connections held 40 ms each", sent)
		}
		t.Logf("%d requests in 400 ms from 8 hammering connections", sent)
	})
}
