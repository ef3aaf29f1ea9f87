package limiter

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// countingStore counts the calls that reach the store.
type countingStore struct {
	store.Store
	calls atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	c.calls.Add(1)
	return c.Store.Take(ctx, checks, res)
}

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
		st := &countingStore{Store: memstore.New(memstore.Config{Now: clock})}
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
		return allowed, st.calls.Load()
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

// TestNearCacheIsBounded: attacker-chosen keys cannot grow it past its
// bound.
func TestNearCacheIsBounded(t *testing.T) {
	c := newNearCache()
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 * nearShards * nearPerShard {
		c.put(LayerDecision{Layer: policy.Layer{Key: "k" + strconv.Itoa(i)}, RetryAfter: time.Hour}, 1, now)
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if n > nearShards*nearPerShard {
		t.Fatalf("%d entries, over the bound of %d", n, nearShards*nearPerShard)
	}
}

// TestNearCacheBytesAreBounded: long rejected keys cannot grow it past its
// byte bound (today: 8,000 rejected 60 KB keys held 1.02 GB), and what it
// counts matches what it holds.
func TestNearCacheBytesAreBounded(t *testing.T) {
	c := newNearCache()
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{100, 8 << 10, 60 << 10} {
		for i := range 8000 {
			c.put(LayerDecision{Layer: policy.Layer{Key: strconv.Itoa(i) + strings.Repeat("k", n)}, RetryAfter: time.Hour}, 1, now)
		}
		held := 0
		for i := range c.shards {
			for k := range c.shards[i].m {
				held += nearEntryBytes + len(k)
			}
		}
		if b := c.bytes(); b != held || b > nearShards*nearShardBytes {
			t.Fatalf("%d-byte keys: counted %d bytes, holds %d, bound %d", n, b, held, nearShards*nearShardBytes)
		}
	}
}

// TestNearCacheTakeChecks: a single check given directly (/v1/take, a
// one-descriptor Envoy request) is answered from the near cache like a
// policy request: the same decisions, about two store calls per retry
// interval. A batch of several checks always goes to the store.
func TestNearCacheTakeChecks(t *testing.T) {
	lim := algo.Limit{Limit: 10, Period: time.Second, Burst: 10}
	run := func(noNear bool, checks []store.Check) (allowed []bool, calls int64) {
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		st := &countingStore{Store: memstore.New(memstore.Config{Now: clock})}
		l, err := New(Config{Store: st, Policy: nearPolicy, Now: clock, Timeout: -1, NoNearCache: noNear})
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			var res store.Result
			if _, err := l.TakeChecks(context.Background(), checks, policy.FailClosed, &res); err != nil {
				t.Fatal(err)
			}
			allowed = append(allowed, res.Allowed)
			if d := res.Decisions[0]; !res.Allowed && len(checks) == 1 && (d.RetryAfter <= 0 || d.RetryAfter > 100*time.Millisecond || d.ResetAfter < d.RetryAfter) {
				t.Fatalf("a rejection with retry %v, reset %v", d.RetryAfter, d.ResetAfter)
			}
			now = now.Add(time.Millisecond)
		}
		return allowed, st.calls.Load()
	}
	one := []store.Check{{Key: "take:abuser", Limit: lim, Cost: 1}}
	with, callsWith := run(false, one)
	without, callsWithout := run(true, one)
	for i := range with {
		if with[i] != without[i] {
			t.Fatalf("request %d: allowed %v with the near cache, %v without", i, with[i], without[i])
		}
	}
	if limit := int64(10 + 2*20 + 2); callsWith > limit || callsWithout != 2000 {
		t.Fatalf("store calls: %d with the near cache (want at most %d), %d without (want 2000)", callsWith, limit, callsWithout)
	}
	two := append(one, store.Check{Key: "take:other", Limit: lim, Cost: 1})
	if _, calls := run(false, two); calls != 2000 {
		t.Fatalf("batches of two checks made %d store calls, want 2000 (no near cache)", calls)
	}
}

// TestNearCacheAgesTheAnswer: a remembered rejection is answered with the
// retry-after and reset-after left now, not those of the store's answer.
func TestNearCacheAgesTheAnswer(t *testing.T) {
	c := newNearCache()
	now := time.Unix(1_800_000_000, 0)
	ly := policy.Layer{Key: "k", Limit: algo.Limit{Limit: 10, Period: time.Second, Burst: 10}}
	c.put(LayerDecision{Layer: ly, RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second}, 1, now)
	ld, ok := c.lookup([]policy.Layer{ly}, 1, now.Add(40*time.Millisecond))
	if !ok || ld.RetryAfter != 60*time.Millisecond || ld.ResetAfter != 960*time.Millisecond {
		t.Fatalf("after 40 ms: found %v, retry %v, reset %v; want 60ms and 960ms", ok, ld.RetryAfter, ld.ResetAfter)
	}
	if _, ok := c.lookup([]policy.Layer{ly}, 1, now.Add(100*time.Millisecond)); ok {
		t.Fatal("answered at the retry-after: the store must decide then")
	}
}
