package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// nearPolicy: 10 a second with a burst of 10, in one class that uses the
// near cache and one that does not.
var nearPolicy = policy.Policy{
	DefaultPlan: "p", DefaultClass: "api",
	Plans: map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 10, Period: time.Second, Burst: 10}}}}},
	Classes: map[string]policy.Class{
		"api":    {Name: "api", Share: 1},
		"nocach": {Name: "nocach", Share: 1, NoNearCache: true},
	},
}

// TestNearCache: an abusive tenant sending a request every millisecond for
// two seconds gets exactly the decisions it would get without the near
// cache, while the store sees about two calls per retry interval (one
// admitted, one rejected) instead of 2,000.
func TestNearCache(t *testing.T) {
	run := func(class string) (allowed []bool, calls int64) {
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		st := &storetest.Counting{Store: memstore.New(memstore.Config{Now: clock})}
		l, err := New(Config{Store: st, Policy: nearPolicy, Now: clock, Timeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			d, err := l.Decide(context.Background(), policy.Request{Tenant: "abuser", Class: class})
			if err != nil {
				t.Fatal(err)
			}
			allowed = append(allowed, d.Allowed)
			if !d.Allowed && (d.RetryAfter <= 0 || d.RetryAfter > 100*time.Millisecond || d.Policy != "p.tenant.1s") {
				t.Fatalf("a rejection with retry %v, policy %q", d.RetryAfter, d.Policy)
			}
			now = now.Add(time.Millisecond)
		}
		return allowed, st.Calls.Load()
	}
	with, callsWith := run("api")
	without, callsWithout := run("nocach")
	for i := range with {
		if with[i] != without[i] {
			t.Fatalf("request %d: allowed %v with the near cache, %v without", i, with[i], without[i])
		}
	}
	admitted := 0
	for _, a := range with {
		if a {
			admitted++
		}
	}
	// 10 from the burst, then one every 100 ms: 10 + 20 in 2 s.
	if admitted < 29 || admitted > 31 {
		t.Fatalf("%d admitted, want about 30", admitted)
	}
	if callsWithout != 2000 {
		t.Fatalf("without the near cache the store saw %d calls, want 2000", callsWithout)
	}
	// At most one admitted and one rejected call per retry interval.
	if limit := int64(10 + 2*20 + 2); callsWith > limit {
		t.Fatalf("with the near cache the store saw %d calls, want at most %d", callsWith, limit)
	}
	t.Logf("store calls for 2,000 abusive requests: %d with the near cache, %d without", callsWith, callsWithout)
}
