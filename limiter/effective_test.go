package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestEffectiveUnits: each layer of a tenant's effective limits says what
// it counts, beside its remaining: a measured class's own layer its unit,
// the tenant's layer the unit of the measured class charged on it beside
// a plain one, and every layer of a policy without a measured cost
// requests.
func TestEffectiveUnits(t *testing.T) {
	ctx := context.Background()
	l := settleLimiter(t, memstore.New(memstore.Config{}), tokenPolicy(algo.GCRA))
	if _, err := l.Decide(ctx, policy.Request{Tenant: "acme", Class: "llm", Cost: 700, HasCost: true}); err != nil {
		t.Fatal(err)
	}
	tl, err := l.Effective(ctx, "acme", "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	left := map[string]int64{}
	for _, ly := range tl.Layers {
		got[ly.Policy], left[ly.Policy] = ly.Unit, ly.Remaining
	}
	if diff := cmp.Diff(map[string]string{"pro.llm.month": "tokens", "pro.tenant.month": "tokens"}, got); diff != "" {
		t.Errorf("units (-want +got):\n%s", diff)
	}
	if want := map[string]int64{"pro.llm.month": 5000 - 700, "pro.tenant.month": 10_000 - 700}; !cmp.Equal(want, left) {
		t.Errorf("remaining %v, want %v", left, want)
	}

	plain := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Now = func() time.Time { return noon } })
	tl, err = plain.Effective(ctx, "newco", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, ly := range tl.Layers {
		if ly.Unit != policy.RequestsUnit {
			t.Errorf("%s: unit %q, want %q", ly.Policy, ly.Unit, policy.RequestsUnit)
		}
	}
}
