package guard

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// TestNearCacheIsBounded: attacker-chosen keys cannot grow it past its
// bound.
func TestNearCacheIsBounded(t *testing.T) {
	c := newNearCache(prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}))
	now := time.Unix(1_800_000_000, 0)
	for i := range 3 * nearShards * nearPerShard {
		c.Put("k"+strconv.Itoa(i), algo.Limit{}, 1, algo.Decision{RetryAfter: time.Hour}, now)
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
	c := newNearCache(prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}))
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{100, 8 << 10, 60 << 10} {
		for i := range 8000 {
			c.Put(strconv.Itoa(i)+strings.Repeat("k", n), algo.Limit{}, 1, algo.Decision{RetryAfter: time.Hour}, now)
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

// TestNearCacheTake: a single check given directly (/v1/take, a
// one-descriptor Envoy request) is answered from the near cache like a
// policy request: the same decisions, about two store calls per retry
// interval. A batch of several checks always goes to the store.
func TestNearCacheTake(t *testing.T) {
	lim := algo.Limit{Limit: 10, Period: time.Second, Burst: 10}
	run := func(noNear bool, checks []store.Check) (allowed []bool, calls int64) {
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		st := &storetest.Counting{Store: memstore.New(memstore.Config{Now: clock})}
		g, err := New(Config{Store: st, Now: clock, Timeout: -1, NoNearCache: noNear})
		if err != nil {
			t.Fatal(err)
		}
		for range 2000 {
			var res store.Result
			if _, err := g.Take(context.Background(), checks, policy.FailClosed, &res); err != nil {
				t.Fatal(err)
			}
			allowed = append(allowed, res.Allowed)
			if d := res.Decisions[0]; !res.Allowed && len(checks) == 1 && (d.RetryAfter <= 0 || d.RetryAfter > 100*time.Millisecond || d.ResetAfter < d.RetryAfter) {
				t.Fatalf("a rejection with retry %v, reset %v", d.RetryAfter, d.ResetAfter)
			}
			now = now.Add(time.Millisecond)
		}
		return allowed, st.Calls.Load()
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
	c := newNearCache(prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}))
	now := time.Unix(1_800_000_000, 0)
	lim := algo.Limit{Limit: 10, Period: time.Second, Burst: 10}
	c.Put("k", lim, 1, algo.Decision{RetryAfter: 100 * time.Millisecond, ResetAfter: time.Second}, now)
	ld, ok := c.Lookup("k", lim, 1, now.Add(40*time.Millisecond))
	if !ok || ld.RetryAfter != 60*time.Millisecond || ld.ResetAfter != 960*time.Millisecond {
		t.Fatalf("after 40 ms: found %v, retry %v, reset %v; want 60ms and 960ms", ok, ld.RetryAfter, ld.ResetAfter)
	}
	if _, ok := c.Lookup("k", lim, 1, now.Add(100*time.Millisecond)); ok {
		t.Fatal("answered at the retry-after: the store must decide then")
	}
}
