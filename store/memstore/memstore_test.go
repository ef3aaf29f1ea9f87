package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/storetest"
	"github.com/google/go-cmp/cmp"
)

func TestSlots(t *testing.T) {
	s := New(Config{})
	storetest.RunSlots(t, s, s, storetest.SlotOptions{})
}

// TestSlotKeysBounded: an attacker's endless new keys cannot grow the slot
// keys past MaxKeys; keys whose leases ran out make room again.
func TestSlotKeysBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{Shards: 1, MaxKeys: 100, Now: func() time.Time { return now }})
	ctx := context.Background()
	for i := range 100 {
		if _, err := store.AcquireSlot(ctx, s, fmt.Sprint("k", i), "id", 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.AcquireSlot(ctx, s, "one-more", "id", 1, time.Second); !errors.Is(err, ErrSlotsFull) {
		t.Fatalf("key 101 with 100 live: %v, want ErrSlotsFull", err)
	}
	now = now.Add(2 * time.Second)
	if r, err := store.AcquireSlot(ctx, s, "one-more", "id", 1, time.Second); err != nil || !r.Acquired {
		t.Fatalf("once the leases ran out: %+v, %v", r, err)
	}
}

// TestSlotKeysFullKeepsHeldLeases: a call refused because the slot keys
// are at their bound takes nothing, and a slot the lease held before the
// call (a renewal) stays held, with its old expiry.
func TestSlotKeysFullKeepsHeldLeases(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{Shards: 1, MaxKeys: 2, Now: func() time.Time { return now }})
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := store.AcquireSlot(ctx, s, k, "r", 3, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	res := make([]store.SlotResult, 3)
	err := s.AcquireSlots(ctx, "r", time.Minute, []store.SlotAcquire{{Key: "a", Limit: 3}, {Key: "b", Limit: 3}, {Key: "c", Limit: 3}}, res)
	if !errors.Is(err, ErrSlotsFull) {
		t.Fatalf("a third key with two live: %v, want ErrSlotsFull", err)
	}
	now = now.Add(500 * time.Millisecond)
	for _, k := range []string{"a", "b"} {
		r, err := store.AcquireSlot(ctx, s, k, "probe", 3, time.Minute)
		if err != nil || r.InUse != 2 || r.NextExpiry != 500*time.Millisecond {
			t.Fatalf("key %s after the refused renewal: %+v %v; want the lease still held, expiring as before (in 500ms)", k, r, err)
		}
	}
}

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

// TestCompiledLimitMemo: more limits than a shard's memo holds, in turn on
// one shard, singly and in batches, decide exactly as the reference does;
// an invalid limit is refused with the batch path's error whether or not
// a valid one sits beside it, and leaves the shard unlocked.
func TestCompiledLimitMemo(t *testing.T) {
	s := New(Config{Shards: 1})
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 0)
	var lims []algo.Limit
	for i := range 2*memoSize + 1 {
		lims = append(lims, algo.Limit{Limit: int64(3 + i), Period: time.Duration(1+i) * time.Second, Algorithm: algo.Algorithms[i%len(algo.Algorithms)]})
	}
	ref := storetest.NewReference()
	var res, want store.Result
	rejected := 0
	for step := range 200 {
		now := at.Add(time.Duration(step) * 23 * time.Millisecond)
		i := step % len(lims)
		j := (i + 3) % len(lims)
		checks := []store.Check{{Key: fmt.Sprint("k", i), Limit: lims[i], Cost: 1}}
		if step%2 == 1 {
			checks = append(checks, store.Check{Key: fmt.Sprint("k", j), Limit: lims[j], Cost: 1})
		}
		if err := s.TakeAt(ctx, now, checks, &res); err != nil {
			t.Fatal(err)
		}
		ref.Take(now.UnixMicro(), checks, &want)
		if !cmp.Equal(res, want) {
			t.Fatalf("step %d, %+v: got %+v, want %+v", step, checks, res, want)
		}
		if !res.Allowed {
			rejected++
		}
	}
	if rejected == 0 {
		t.Fatal("no batch was rejected: the run tests too little")
	}
	bad := algo.Limit{Limit: 10, Period: time.Nanosecond}
	for _, checks := range [][]store.Check{
		{{Key: "x", Limit: bad, Cost: 1}},
		{{Key: "y", Limit: lims[0], Cost: 1}, {Key: "x", Limit: bad, Cost: 1}},
	} {
		err := s.Take(ctx, checks, &res)
		if !errors.Is(err, store.ErrInvalidCheck) || !strings.Contains(err.Error(), "period") {
			t.Errorf("%d checks with an invalid limit: %v, want ErrInvalidCheck naming the period", len(checks), err)
		}
	}
	if err := s.Take(ctx, []store.Check{{Key: "z", Limit: lims[0], Cost: 1}}, &res); err != nil || !res.Allowed {
		t.Fatalf("after refused batches: %v %+v", err, res)
	}
}

// TestSettleIDsNeverForgottenEarly: with the settlement ids table full, a
// new settlement is refused (ErrSettleIDsFull, an outage the guard retries)
// rather than an id forgotten before its 2 minutes, which let a settled
// handle be settled again (the attacker review refunded one handle twice
// after 110,000 other settlements); once ids expire there is room again.
func TestSettleIDsNeverForgottenEarly(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{MaxSettleIDs: idShards, Now: func() time.Time { return now }}) // one id a shard
	ctx := context.Background()
	lim := algo.PerMinute(100)
	adj := func(key string) []store.Adjustment {
		return []store.Adjustment{{Key: key, Limit: lim, Delta: -1, TakenAt: now}}
	}
	var res store.SettleResult
	if err := s.Settle(ctx, "first", adj("k0"), &res); err != nil {
		t.Fatal(err)
	}
	full := 0
	for i := range 200 {
		err := s.Settle(ctx, fmt.Sprint("other-", i), adj(fmt.Sprint("k", i)), &res)
		switch {
		case errors.Is(err, ErrSettleIDsFull) && errors.Is(err, store.ErrUnavailable):
			full++
		case err != nil:
			t.Fatal(err)
		}
	}
	if full == 0 {
		t.Fatal("200 settlements into a 16-id table: none refused")
	}
	if err := s.Settle(ctx, "first", adj("k0"), &res); err != nil || !res.Settled[0].Repeated {
		t.Fatalf("the first settlement again, within its lifetime: %v %+v, want repeated", err, res.Settled)
	}
	now = now.Add(store.SettleIDLifetime + time.Second)
	if err := s.Settle(ctx, "later", adj("k1"), &res); err != nil {
		t.Fatalf("after the ids expired: %v, want room", err)
	}
}

// TestSettleUnrecordedLeavesTheIDTable: a settlement its caller makes once
// (SettleUnrecorded) applies on each call and takes no room in the id
// table, so that in-process settlements, however many, never refuse a
// handle's; the table still refuses past its bound.
func TestSettleUnrecordedLeavesTheIDTable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{MaxSettleIDs: idShards, Now: func() time.Time { return now }}) // one id a shard
	ctx := context.Background()
	lim := algo.Limit{Limit: 1000, Period: time.Hour}
	var res store.SettleResult
	for i := range 500 {
		if err := s.SettleUnrecorded(ctx, []store.Adjustment{{Key: "k", Limit: lim, Delta: 1}}, &res); err != nil {
			t.Fatalf("unrecorded settlement %d: %v", i, err)
		}
		if res.Settled[0].Repeated || res.Settled[0].Applied != 1 {
			t.Fatalf("unrecorded settlement %d: %+v, want 1 applied", i, res.Settled[0])
		}
	}
	if got := res.Settled[0].Remaining; got != 500 {
		t.Errorf("remaining %d after 500 unrecorded charges of 1, want 500", got)
	}
	refused := 0
	for i := range 200 { // the table has its whole room for recorded ones
		err := s.Settle(ctx, fmt.Sprint("handle-", i), []store.Adjustment{{Key: fmt.Sprint("h", i), Limit: lim, Delta: 1}}, &res)
		if errors.Is(err, ErrSettleIDsFull) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if held := 200 - refused; held < idShards/2 || refused == 0 {
		t.Errorf("recorded settlements into a %d-id table: %d held, %d refused", idShards, held, refused)
	}
	if err := s.SettleUnrecorded(ctx, nil, &res); !errors.Is(err, store.ErrInvalidCheck) {
		t.Errorf("no adjustments: %v, want ErrInvalidCheck", err)
	}
}

// TestSettleIDsScopeHoldsHalfATable: one scope's ids (one tenant's, the
// limiter's "<tag>.<random>") share a table and hold at most half of it:
// a tenant settling handles faster than the table's bound has its own
// settlements refused, and another tenant's, in its table or any other,
// still find room (the attacker review filled the whole table from one
// tenant with refunded check and settle pairs, and every tenant's
// settlements were refused for 2 minutes).
func TestSettleIDsScopeHoldsHalfATable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(Config{MaxSettleIDs: 64 * idShards, Now: func() time.Time { return now }}) // 64 ids a table
	ctx := context.Background()
	lim := algo.Limit{Limit: 1000, Period: time.Hour}
	var res store.SettleResult
	settle := func(id string) error {
		return s.Settle(ctx, id, []store.Adjustment{{Key: "k-" + id, Limit: lim, Delta: 1}}, &res)
	}
	held := 0
	for i := range 200 {
		err := settle(fmt.Sprint("noisy.", i))
		switch {
		case err == nil:
			held++
		case !errors.Is(err, ErrSettleIDsFull):
			t.Fatal(err)
		}
	}
	if held != 32 {
		t.Errorf("one scope held %d ids of a 64-id table, want 32 (half)", held)
	}
	for i := range 200 { // other tenants, in every table, the noisy one's included
		if err := settle(fmt.Sprintf("quiet%d.%d", i, i)); err != nil {
			t.Fatalf("another tenant's settlement %d after the flood: %v", i, err)
		}
	}
	now = now.Add(store.SettleIDLifetime + time.Second)
	if err := settle("noisy.later"); err != nil {
		t.Fatalf("the noisy scope once its ids expired: %v", err)
	}
}
