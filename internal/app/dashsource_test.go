package app

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestDashSource: the dashboard reads the daemon's numbers as values from
// the counters the metrics export: the limiter's decisions and store
// breaker, the dependencies' breakers, the queue depths (NaN when
// unreadable); no upstream card without a server's gate.
func TestDashSource(t *testing.T) {
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: testpolicy.Policy()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		lim.Decide(context.Background(), policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"})
	}
	breakers, err := breaker.New(map[string]breaker.Settings{"billing": {}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok, down := &depthQueue{}, &depthQueue{}
	ok.depth.Store(4)
	down.fail.Store(true)
	d := &daemon{lim: lim, breakers: breakers, depths: map[string]*queueDepth{
		"email":  {q: ok, kind: "email", now: time.Now},
		"report": {q: down, kind: "report", now: time.Now},
	}}
	r := dashSource{d}.Read()
	if got := r.Limiter.Decisions[limiter.PolicyOutcome{Policy: "free.tenant.1m", Outcome: limiter.ReasonAllowed}]; got != 3 || r.Limiter.Breaker != "closed" {
		t.Errorf("limiter %+v, want 3 allowed by free.tenant.1m and the breaker closed", r.Limiter)
	}
	if r.Breakers["billing"] != "closed" || r.Queues["email"] != 4 || !math.IsNaN(r.Queues["report"]) || r.Upstream != nil {
		t.Errorf("breakers %v, queues %v, upstream %v; want billing closed, email 4, report NaN, no upstream", r.Breakers, r.Queues, r.Upstream)
	}
}
