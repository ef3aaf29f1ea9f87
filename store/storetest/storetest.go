// Package storetest is the conformance suite every [store.Store] backend
// runs: exact admission under concurrency, the sustained-rate bounds of
// docs/algorithms.md, exact and sufficient retry-after, peeks, all-or-nothing
// batches (also across Redis Cluster slots), random batches decided as the
// [Reference] (the executable spec of a batch) decides them, key
// isolation, holds, and resets for stores that are a [store.Resetter].
//
// The suite asserts decisions, never commands: a backend passes by deciding
// like package algo, whatever it does inside.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Options tunes the suite. The zero value runs it in full.
type Options struct {
	// Trials is how many fresh keys the concurrency test tries per
	// algorithm. Zero means 100.
	Trials int
	// Sustained is how long the sustained-rate run of each algorithm
	// lasts. Zero means 5 s, or 1 s under -short (the runs take turns on a
	// small machine: go test runs as many parallel tests as it has CPUs).
	Sustained time.Duration
}

var prefixes atomic.Int64

// prefix returns a key prefix no other test in this process uses. It has no
// braces, so keys keep the hash tags the tests give them.
func prefix(t *testing.T) string {
	return fmt.Sprintf("st%d-%d:", time.Now().UnixNano()%1_000_000_007, prefixes.Add(1))
}

// Run runs the suite against the store s.
func Run(t *testing.T, s store.Store, o Options) {
	if o.Trials == 0 {
		o.Trials = 100
	}
	if o.Sustained == 0 {
		o.Sustained = 5 * time.Second
		if testing.Short() {
			o.Sustained = time.Second
		}
	}
	t.Run("ConcurrentExact", func(t *testing.T) { t.Parallel(); testConcurrentExact(t, s, o.Trials) })
	t.Run("SustainedBound", func(t *testing.T) { t.Parallel(); testSustained(t, s, o.Sustained) })
	t.Run("RetryAfter", func(t *testing.T) { t.Parallel(); testRetryAfter(t, s) })
	t.Run("CostRules", func(t *testing.T) { t.Parallel(); testCostRules(t, s) })
	t.Run("AllOrNothing", func(t *testing.T) { t.Parallel(); testAllOrNothing(t, s) })
	t.Run("Reference", func(t *testing.T) { t.Parallel(); testReference(t, s) })
	t.Run("KeyIsolation", func(t *testing.T) { t.Parallel(); testKeyIsolation(t, s) })
	t.Run("LimitChange", func(t *testing.T) { t.Parallel(); testLimitChange(t, s) })
	t.Run("Hold", func(t *testing.T) { t.Parallel(); testHold(t, s) })
	t.Run("SettleUpDown", func(t *testing.T) { t.Parallel(); testSettleUpDown(t, s) })
	t.Run("SettleDebt", func(t *testing.T) { t.Parallel(); testSettleDebt(t, s) })
	t.Run("SettleOnce", func(t *testing.T) { t.Parallel(); testSettleOnce(t, s) })
	t.Run("SettleConcurrent", func(t *testing.T) { t.Parallel(); testSettleConcurrent(t, s) })
	t.Run("SettleInvalid", func(t *testing.T) { t.Parallel(); testSettleInvalid(t, s) })
	t.Run("SettleReference", func(t *testing.T) { t.Parallel(); testSettleReference(t, s) })
	if r, ok := s.(store.Resetter); ok {
		t.Run("Reset", func(t *testing.T) { t.Parallel(); testReset(t, s, r) })
	}
}

// longLimit is a limit that does not refill within a test: 10 per 366 days.
func longLimit(a algo.Algorithm) algo.Limit {
	return algo.Limit{Limit: 10, Period: algo.MaxPeriod, Burst: 10, Algorithm: a}
}

func take(t *testing.T, s store.Store, checks ...store.Check) store.Result {
	t.Helper()
	var res store.Result
	if err := s.Take(context.Background(), checks, &res); err != nil {
		t.Fatalf("Take(%v): %v", checks, err)
	}
	return res
}

func testConcurrentExact(t *testing.T, s store.Store, trials int) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			for trial := range trials {
				key := fmt.Sprintf("%s{t%d}%v", p, trial, a)
				var admitted atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, 200)
				for range 200 {
					wg.Go(func() {
						var res store.Result
						if err := s.Take(context.Background(), []store.Check{{Key: key, Limit: l, Cost: 1}}, &res); err != nil {
							errs <- err
							return
						}
						if res.Allowed {
							admitted.Add(1)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("trial %d: %v", trial, err)
				}
				if got := admitted.Load(); got != 10 {
					t.Fatalf("trial %d: 200 concurrent takes on a fresh key with burst 10 admitted %d, want exactly 10", trial, got)
				}
			}
		})
	}
}

func testSustained(t *testing.T, s store.Store, d time.Duration) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			seed := rand.Uint64()
			r := rand.New(rand.NewPCG(seed, 1))
			l := algo.Limit{Limit: 20 + r.Int64N(30), Period: time.Duration(100+r.IntN(200)) * time.Millisecond, Algorithm: a}
			if !a.Windowed() {
				l.Burst = 1 + r.Int64N(20)
			}
			if a == algo.FixedWindow {
				l.Offset = time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
			}
			key := p + "sustained:" + a.String()
			var mu sync.Mutex
			var admitted []int64
			var attempts atomic.Int64
			deadline := time.Now().Add(d)
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, uint64(w)+2))
					var res store.Result
					for time.Now().Before(deadline) {
						if err := s.Take(context.Background(), []store.Check{{Key: key, Limit: l, Cost: 1}}, &res); err != nil {
							t.Error(err)
							return
						}
						attempts.Add(1)
						if res.Allowed {
							mu.Lock()
							admitted = append(admitted, res.Now.UnixMicro())
							mu.Unlock()
						}
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
					}
				})
			}
			wg.Wait()
			slices.Sort(admitted)
			if msg := CheckBound(l, admitted); msg != "" {
				t.Fatalf("seed %d: %s", seed, msg)
			}
			// It must also admit: at least half the sustained rate over the
			// run, or half of what was asked where a loaded machine asked
			// for less (how fast the callers ask is the machine's, not the
			// store's).
			if want := min(int64(d/l.Period)*l.Limit/2, attempts.Load()/2); int64(len(admitted)) < want {
				t.Fatalf("seed %d: %v admitted %d of %d in %v, want at least %d", seed, l, len(admitted), attempts.Load(), d, want)
			}
		})
	}
}

func testRetryAfter(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := algo.Limit{Limit: 4, Period: 200 * time.Millisecond, Algorithm: a}
			if !a.Windowed() {
				l.Burst = 2
			}
			key := p + "retry:" + a.String()
			c := store.Check{Key: key, Limit: l, Cost: l.Capacity()}
			window := func(t time.Time) int64 { return t.UnixMicro() / int64(l.Period/time.Microsecond) }
			for round, tries := 0, 0; round < 3; tries++ {
				if tries > 20 {
					t.Fatalf("no round completed in %d tries", tries)
				}
				res := take(t, s, c)
				if !res.Allowed {
					// A fresh window may still hold the previous round's weight; wait it out.
					time.Sleep(res.RetryAfter())
					res = take(t, s, c)
				}
				if !res.Allowed {
					t.Fatalf("round %d: full take rejected after waiting: %+v", round, res)
				}
				first := take(t, s, c)
				if first.Allowed {
					if a == algo.FixedWindow && window(first.Now) != window(res.Now) {
						continue // the two takes fell in two windows: rightly admitted, try again
					}
					t.Fatalf("round %d: second full take admitted: %+v after %+v", round, first, res)
				}
				target := first.Now.Add(first.RetryAfter())
				admitted := false
				for range 5 {
					again := take(t, s, c)
					if again.Allowed {
						// Time passed the target already (a slow machine): this
						// take was the admission, and it spent the capacity.
						if again.Now.Before(target) {
							t.Fatalf("round %d: admitted at %v, before the retry-after's %v", round, again.Now, target)
						}
						admitted = true
						break
					}
					if got := again.Now.Add(again.RetryAfter()); !got.Equal(target) {
						t.Fatalf("round %d: rejected take moved the admission time from %v to %v", round, target, got)
					}
				}
				if admitted {
					round++
					continue
				}
				time.Sleep(time.Until(target))
				if res := take(t, s, c); !res.Allowed {
					t.Fatalf("round %d: not admitted after waiting retry-after (%v): %+v", round, first.RetryAfter(), res)
				}
				round++
			}
		})
	}
}

func testCostRules(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			key := p + "cost:" + a.String()
			var res store.Result
			err := s.Take(context.Background(), []store.Check{{Key: key, Limit: l, Cost: 11}}, &res)
			if !errors.Is(err, algo.ErrCostExceedsBurst) {
				t.Fatalf("cost 11 over burst 10: err = %v, want ErrCostExceedsBurst", err)
			}
			take(t, s, store.Check{Key: key, Limit: l, Cost: 3})
			for range 3 {
				peek := take(t, s, store.Check{Key: key, Limit: l, Cost: 0})
				if !peek.Allowed || peek.Decisions[0].Remaining != 7 {
					t.Fatalf("peek = %+v, want allowed with remaining 7", peek.Decisions[0])
				}
			}
			if res := take(t, s, store.Check{Key: key, Limit: l, Cost: 7}); !res.Allowed || res.Decisions[0].Remaining != 0 {
				t.Fatalf("take 7 after peeks = %+v, want allowed with remaining 0", res.Decisions[0])
			}
			rej := take(t, s, store.Check{Key: key, Limit: l, Cost: 1})
			if rej.Allowed || rej.Decisions[0].Remaining != 0 || rej.Decisions[0].RetryAfter <= 0 {
				t.Fatalf("take on empty = %+v, want rejected, remaining 0, retry > 0", rej.Decisions[0])
			}
			if peek := take(t, s, store.Check{Key: key, Limit: l, Cost: 0}); !peek.Allowed || peek.Decisions[0].Remaining != 0 {
				t.Fatalf("peek on empty = %+v, want allowed with remaining 0", peek.Decisions[0])
			}
		})
	}
}

func testAllOrNothing(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			// Different hash tags: different cluster slots, so this is also
			// the cross-slot path on Redis Cluster. The same tag: one slot.
			for _, keys := range [][3]string{
				{p + "{aon-a}" + a.String(), p + "{aon-b}" + a.String(), p + "{aon-c}" + a.String()},
				{p + "{aon}1" + a.String(), p + "{aon}2" + a.String(), p + "{aon}3" + a.String()},
			} {
				wide, narrow, other := keys[0], keys[1], keys[2]
				take(t, s, store.Check{Key: narrow, Limit: l, Cost: 9})
				batch := []store.Check{{Key: wide, Limit: l, Cost: 2}, {Key: narrow, Limit: l, Cost: 2}, {Key: other, Limit: l, Cost: 1}}
				res := take(t, s, batch...)
				if res.Allowed {
					t.Fatalf("batch admitted though %q has 1 left of the 2 asked", narrow)
				}
				want := []bool{true, false, true}
				for i, d := range res.Decisions {
					if d.Allowed != want[i] {
						t.Errorf("decision %d allowed = %v, want %v", i, d.Allowed, want[i])
					}
				}
				if d := res.Decisions[0]; d.Remaining != 10 || d.RetryAfter != 0 {
					t.Errorf("uncharged check reports %+v, want a peek: remaining 10, no retry", d)
				}
				for _, k := range []string{wide, other} {
					peek := take(t, s, store.Check{Key: k, Limit: l})
					if r := peek.Decisions[0].Remaining; r != 10 {
						t.Fatalf("a rejected batch charged %q: remaining %d, want 10", k, r)
					}
				}
				res = take(t, s, store.Check{Key: wide, Limit: l, Cost: 2}, store.Check{Key: narrow, Limit: l, Cost: 1}, store.Check{Key: other, Limit: l, Cost: 1})
				if !res.Allowed {
					t.Fatalf("batch within every limit rejected: %+v", res)
				}
				for i, want := range []int64{8, 0, 9} {
					if r := res.Decisions[i].Remaining; r != want {
						t.Errorf("after admitted batch, remaining[%d] = %d, want %d", i, r, want)
					}
				}
			}
		})
	}
}

func testKeyIsolation(t *testing.T, s store.Store) {
	p := prefix(t)
	keys := []string{
		"a", "{a}", "a}", "{", "}", "{}", "}{", "{a}b", "a{b}", "a:b", "a:b:", ":a:b",
		"a b", " a", "a\x00b", "\xff\xfe\xfd", "\u00e9", "e\u0301",
		strings.Repeat("x", 1024), strings.Repeat("x", 1023) + "y",
	}
	for _, a := range algo.Algorithms {
		l := algo.Limit{Limit: 1, Period: algo.MaxPeriod, Algorithm: a}
		for i, k := range keys {
			res := take(t, s, store.Check{Key: p + k, Limit: l, Cost: 1})
			if !res.Allowed {
				t.Fatalf("%v: key %d (%q) was already used: it shares state with an earlier key", a, i, k)
			}
			if res := take(t, s, store.Check{Key: p + k, Limit: l, Cost: 1}); res.Allowed {
				t.Fatalf("%v: key %d (%q) admitted twice with limit 1", a, i, k)
			}
		}
	}
}

// testReset: a key spent under every algorithm is full again after Reset,
// a neighbouring key keeps its state, and resetting a key never seen is
// no error.
func testReset(t *testing.T, s store.Store, r store.Resetter) {
	p := prefix(t)
	ctx := context.Background()
	for _, a := range algo.Algorithms {
		c := store.Check{Key: p + "reset", Limit: longLimit(a), Cost: 10}
		other := store.Check{Key: p + "kept", Limit: longLimit(a), Cost: 10}
		take(t, s, c)
		take(t, s, other)
		if res := take(t, s, c); res.Allowed {
			t.Fatalf("%v: a spent key admitted %+v", a, res)
		}
	}
	if err := r.Reset(ctx, p+"reset"); err != nil {
		t.Fatal(err)
	}
	for _, a := range algo.Algorithms {
		if res := take(t, s, store.Check{Key: p + "reset", Limit: longLimit(a), Cost: 10}); !res.Allowed {
			t.Errorf("%v: not full after Reset: %+v", a, res.Decisions[0])
		}
		if res := take(t, s, store.Check{Key: p + "kept", Limit: longLimit(a), Cost: 1}); res.Allowed {
			t.Errorf("%v: Reset of another key refilled this one", a)
		}
	}
	if err := r.Reset(ctx, p+"never-seen"); err != nil {
		t.Errorf("Reset of an unseen key: %v", err)
	}
}

// testLimitChange: a key charged under one limit and read under another
// (a plan downgraded, an override lifted) answers within the limit in
// force: a GCRA key spent under 1 per 366 days, read under 10 per second
// (burst 2), asks for at most 100 ms, and a take that waits that long is
// admitted; each single- and multi-check path, in every algorithm, keeps
// its retry within what the new limit can ask for.
func testLimitChange(t *testing.T, s store.Store) {
	p := prefix(t)
	slow := algo.Limit{Limit: 1, Period: algo.MaxPeriod}
	fast := algo.Limit{Limit: 10, Period: time.Second, Burst: 2}
	for _, batch := range []int{1, 2} {
		key := fmt.Sprintf("%s{change}:%d", p, batch)
		checks := func(l algo.Limit) []store.Check {
			cs := []store.Check{{Key: key, Limit: l, Cost: 1}}
			if batch == 2 {
				cs = append(cs, store.Check{Key: key + ":other", Limit: fast, Cost: 0})
			}
			return cs
		}
		if res := take(t, s, checks(slow)...); !res.Allowed {
			t.Fatalf("batch %d: first take under %v: %+v", batch, slow, res)
		}
		take(t, s, checks(fast)...) // the rest of the new burst
		res := take(t, s, checks(fast)...)
		if res.Allowed || res.Decisions[0].RetryAfter > 100*time.Millisecond {
			t.Fatalf("batch %d: a key spent under %v, read under %v: %+v, want a rejection with retry at most 100ms", batch, slow, fast, res.Decisions[0])
		}
		time.Sleep(res.Decisions[0].RetryAfter + time.Millisecond)
		if res := take(t, s, checks(fast)...); !res.Allowed {
			t.Fatalf("batch %d: not admitted after waiting the retry: %+v", batch, res.Decisions[0])
		}
	}
	for _, a := range algo.Algorithms {
		key := p + "{change}:" + a.String()
		from := algo.Limit{Limit: 1000, Period: algo.MaxPeriod, Algorithm: a}
		to := algo.Limit{Limit: 5, Period: time.Second, Algorithm: a}
		take(t, s, store.Check{Key: key, Limit: from, Cost: 1000})
		res := take(t, s, store.Check{Key: key, Limit: to, Cost: 1})
		if !res.Allowed && res.Decisions[0].RetryAfter > 2*time.Second {
			t.Errorf("%v: a key spent under %v, read under %v: retry %v", a, from, to, res.Decisions[0].RetryAfter)
		}
		if d := res.Decisions[0]; d.Remaining > to.Capacity() {
			t.Errorf("%v: remaining %d over the new capacity %d", a, d.Remaining, to.Capacity())
		}
	}
}

// testHold checks that a held key admits nothing before the hold ends and
// a unit take when it does, that a shorter hold never shortens it, that
// holding an unseen key works, and that bad holds are refused.
func testHold(t *testing.T, s store.Store) {
	p := prefix(t)
	ctx := context.Background()
	l := algo.Limit{Limit: 10, Period: time.Second, Burst: 5}
	const d = 300 * time.Millisecond
	for _, seen := range []bool{true, false} {
		key := fmt.Sprintf("%shold:%v", p, seen)
		c := store.Check{Key: key, Limit: l, Cost: 1}
		if seen {
			take(t, s, c)
		}
		if err := s.Hold(ctx, key, l, d); err != nil {
			t.Fatalf("Hold: %v", err)
		}
		first := take(t, s, c)
		if first.Allowed || first.RetryAfter() > d || first.RetryAfter() < d-100*time.Millisecond {
			t.Fatalf("seen=%v: take right after a %v hold: %+v, want rejected with retry-after just under %v", seen, d, first, d)
		}
		target := first.Now.Add(first.RetryAfter())
		if err := s.Hold(ctx, key, l, 10*time.Millisecond); err != nil {
			t.Fatalf("short Hold: %v", err)
		}
		if err := s.Hold(ctx, key, l, 0); err != nil {
			t.Fatalf("zero Hold: %v", err)
		}
		again := take(t, s, c)
		if got := again.Now.Add(again.RetryAfter()); again.Allowed || got.Before(target) {
			t.Fatalf("seen=%v: a shorter hold moved the admission time from %v to %v (%+v)", seen, target, got, again)
		}
		time.Sleep(time.Until(target))
		if res := take(t, s, c); !res.Allowed {
			t.Fatalf("seen=%v: not admitted when the hold ended: %+v", seen, res)
		}
		if res := take(t, s, c); res.Allowed {
			t.Fatalf("seen=%v: two admitted right after the hold, want one: %+v", seen, res)
		}
	}
	bad := []struct {
		name string
		key  string
		lim  algo.Limit
		d    time.Duration
		want error
	}{
		{"empty key", "", l, d, store.ErrInvalidCheck},
		{"bad limit", p + "x", algo.Limit{}, d, algo.ErrInvalidLimit},
		{"token bucket", p + "x", algo.Limit{Limit: 10, Period: time.Second, Burst: 5, Algorithm: algo.TokenBucket}, d, algo.ErrHoldUnsupported},
		{"too long", p + "x", l, algo.MaxPeriod + time.Second, store.ErrInvalidCheck},
	}
	for _, b := range bad {
		if err := s.Hold(ctx, b.key, b.lim, b.d); !errors.Is(err, b.want) || !errors.Is(err, store.ErrInvalidCheck) {
			t.Errorf("Hold with %s: %v, want an error wrapping %v and %v", b.name, err, b.want, store.ErrInvalidCheck)
		}
	}
}
