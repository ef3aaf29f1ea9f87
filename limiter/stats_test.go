package limiter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestStats: Stats reads the counters the metrics export: decisions by
// policy and outcome, the decisions made without the store by fail mode,
// the store calls' histogram and the store breaker.
func TestStats(t *testing.T) {
	refused := fmt.Errorf("%w: dial tcp: connection refused", store.ErrUnavailable)
	st := &scriptedStore{errs: slices.Repeat([]error{refused}, 5), Store: memstore.New(memstore.Config{})}
	l := newLimiter(t, st, func(c *Config) { c.Fallback = memstore.New(memstore.Config{}); c.Timeout = time.Second })
	if s := l.Stats(); len(s.Decisions) != 0 || s.StoreCalls.Count != 0 || s.Breaker != "closed" {
		t.Fatalf("before any decision: %+v", s)
	}
	for i := range 5 { // refused: decided open by the fallback, then the breaker opens
		l.Decide(context.Background(), policy.Request{Tenant: fmt.Sprintf("t%d", i), Method: "GET", Path: "/v1/users/1"})
	}
	s := l.Stats()
	if got := s.Decisions[PolicyOutcome{"free.tenant.1m", ReasonDegradedOpen}]; got != 5 || s.FailOpen != 5 || s.FailClosed != 0 {
		t.Errorf("decisions %v, fail open %d closed %d; want 5 degraded_open of free.tenant.1m, 5 open", s.Decisions, s.FailOpen, s.FailClosed)
	}
	if s.StoreCalls.Count != 5 || len(s.StoreCalls.Bounds) == 0 || len(s.StoreCalls.Bounds) != len(s.StoreCalls.Cumulative) || s.StoreCalls.Bounds[0] != 100*time.Microsecond {
		t.Errorf("store calls %+v, want 5 in buckets from 100µs", s.StoreCalls)
	}
	if s.Breaker != "open" {
		t.Errorf("breaker %q after 5 refusals, want open", s.Breaker)
	}
}
