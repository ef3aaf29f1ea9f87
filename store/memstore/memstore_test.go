package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, New(Config{}), storetest.Options{})
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestMaxKeysEvictsExpiredFirstThenLRU(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := New(Config{Shards: 1, MaxKeys: 3, Now: clk.now})
	ctx := context.Background()
	var res store.Result
	takeKey := func(key string, l algo.Limit) bool {
		t.Helper()
		if err := s.Take(ctx, []store.Check{{Key: key, Limit: l, Cost: 1}}, &res); err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	short := algo.Limit{Limit: 1, Period: time.Second}
	long := algo.Limit{Limit: 1, Period: time.Hour}
	takeKey("short", short)
	takeKey("a", long)
	takeKey("b", long)
	clk.advance(2 * time.Second) // "short" expires; it is also the LRU
	takeKey("a", long)           // a becomes most recent; order now: a, b, short
	takeKey("c", long)           // full: evicts expired "short"
	if _, ok := s.State(algo.GCRA, "short"); ok {
		t.Error("expired key survived eviction")
	}
	if _, ok := s.State(algo.GCRA, "b"); !ok {
		t.Error("live key evicted while an expired one was held")
	}
	takeKey("d", long) // full, nothing expired: evicts LRU "b"
	if _, ok := s.State(algo.GCRA, "b"); ok {
		t.Error("LRU key b not evicted")
	}
	if s.Len() != 3 {
		t.Errorf("Len() = %d, want 3", s.Len())
	}
	if takeKey("a", long) {
		t.Error("recently used key a lost its state")
	}
}

func TestBoundHoldsUnderKeyFlood(t *testing.T) {
	s := New(Config{MaxKeys: 1000})
	var res store.Result
	for i := range 100_000 {
		c := []store.Check{{Key: fmt.Sprintf("attacker-%d", i), Limit: algo.PerMinute(10), Cost: 1}}
		if err := s.Take(context.Background(), c, &res); err != nil {
			t.Fatal(err)
		}
	}
	// The bound is per shard, rounded up: at most shards × ceil(max/shards).
	if n := s.Len(); n > 1024 {
		t.Fatalf("Len() = %d after 100,000 distinct keys with MaxKeys 1000", n)
	}
}

func TestIdleKeysAreReaped(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := New(Config{Shards: 1, Now: clk.now})
	var res store.Result
	for i := range 100 {
		_ = s.Take(context.Background(), []store.Check{{Key: fmt.Sprint(i), Limit: algo.PerSecond(10), Cost: 1}}, &res)
	}
	clk.advance(time.Second)
	if n := s.Sweep(); n != 100 || s.Len() != 0 {
		t.Fatalf("Sweep() = %d, Len() = %d; want 100, 0", n, s.Len())
	}
	// Reaping as traffic passes: each call removes expired keys at the LRU end.
	for i := range 100 {
		_ = s.Take(context.Background(), []store.Check{{Key: fmt.Sprint(i), Limit: algo.PerSecond(10), Cost: 1}}, &res)
	}
	clk.advance(time.Second) // expired, but not idle for IdleAfter: kept
	for range 5 * reapEvery {
		_ = s.Take(context.Background(), []store.Check{{Key: "busy", Limit: algo.PerSecond(10), Cost: 0}}, &res)
	}
	if n := s.Len(); n < 100 {
		t.Fatalf("Len() = %d, keys reaped before IdleAfter", n)
	}
	clk.advance(time.Minute)
	for range 5 * reapEvery {
		_ = s.Take(context.Background(), []store.Check{{Key: "busy", Limit: algo.PerSecond(10), Cost: 0}}, &res)
	}
	if n := s.Len(); n > 1 {
		t.Fatalf("Len() = %d after %d calls, want the 100 idle keys reaped", n, 5*reapEvery)
	}
}

func TestTakeDoesNotAllocate(t *testing.T) {
	s := New(Config{})
	checks := []store.Check{
		{Key: "rl:{acme}:class:read", Limit: algo.PerMinute(600).WithBurst(100), Cost: 1},
		{Key: "rl:{acme}:all", Limit: algo.PerMinute(1200).WithBurst(200), Cost: 1},
	}
	var res store.Result
	ctx := context.Background()
	_ = s.Take(ctx, checks, &res)
	if n := testing.AllocsPerRun(1000, func() { _ = s.Take(ctx, checks, &res) }); n != 0 {
		t.Errorf("Take allocates %v times per call, want 0", n)
	}
}
