package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

var settleIDs atomic.Int64

// settleID returns a settlement id no other call in this process uses.
func settleID() string {
	return fmt.Sprintf("st%d-%d", time.Now().UnixNano(), settleIDs.Add(1))
}

func settle(t *testing.T, s store.Store, id string, adjs ...store.Adjustment) store.SettleResult {
	t.Helper()
	var res store.SettleResult
	if err := s.Settle(context.Background(), id, adjs, &res); err != nil {
		t.Fatalf("Settle(%q, %+v): %v", id, adjs, err)
	}
	return res
}

// testSettleUpDown: a charge and refunds after a take, under every
// algorithm: the remaining capacity moves by what was applied, a peek
// agrees, and a refund stops at full.
func testSettleUpDown(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			key := p + "updown:" + a.String()
			taken := take(t, s, store.Check{Key: key, Limit: l, Cost: 3})
			adj := func(d int64) store.Adjustment {
				return store.Adjustment{Key: key, Limit: l, Delta: d, TakenAt: taken.Now}
			}
			for i, step := range []struct{ delta, applied, remaining int64 }{
				{2, 2, 5},     // the true cost was 5
				{-4, -4, 9},   // then 1
				{-5, -1, 10},  // a refund stops at full
				{0, 0, 10},    // nothing
				{-1, 0, 10},   // full already
				{4, 4, 6},     // charged on a full key
				{-10, -4, 10}, // refunded to full again
			} {
				res := settle(t, s, settleID(), adj(step.delta))
				got := res.Settled[0]
				if got.Applied != step.applied || got.Remaining != step.remaining || got.Repeated {
					t.Fatalf("step %d: settle %+d = %+v, want applied %d, remaining %d", i, step.delta, got, step.applied, step.remaining)
				}
				if got.Remaining == l.Capacity() && got.ResetAfter != 0 {
					t.Fatalf("step %d: full, but reset after %v", i, got.ResetAfter)
				}
				peek := take(t, s, store.Check{Key: key, Limit: l})
				if r := peek.Decisions[0].Remaining; r != step.remaining {
					t.Fatalf("step %d: settled to remaining %d, a peek says %d", i, step.remaining, r)
				}
			}
		})
	}
}

// testSettleDebt: a charge past empty puts a GCRA or token bucket key in
// debt; a take is refused with the exact retry-after (the debt and the
// take's cost refilled at the limit's rate), is admitted once it has
// waited it, and the next unit waits one emission interval more. Every
// algorithm's debt stops at one burst.
func testSettleDebt(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket} {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := algo.Limit{Limit: 20, Period: time.Second, Burst: 10, Algorithm: a} // emission 50 ms
			em := 50 * time.Millisecond
			c := store.Check{Key: p + "debt:" + a.String(), Limit: l, Cost: 1}
			for round, tries := 0, 0; round < 2; tries++ {
				if tries > 10 {
					t.Fatalf("no round completed in %d tries", tries)
				}
				time.Sleep(l.Period) // full again
				full := take(t, s, store.Check{Key: c.Key, Limit: l, Cost: 10})
				if !full.Allowed {
					t.Fatalf("a full take after a full refill rejected: %+v", full.Decisions[0])
				}
				res := settle(t, s, settleID(), store.Adjustment{Key: c.Key, Limit: l, Delta: 5})
				if got := res.Settled[0]; got.Applied != 5 || got.Remaining > -4 {
					t.Fatalf("settle +5 on an empty key = %+v, want 5 applied and a debt", got)
				}
				// The debt and the unit refill at the limit's rate: admission
				// at 6 emission intervals after the take.
				target := full.Now.Add(6 * em)
				first := take(t, s, c)
				if first.Allowed {
					t.Fatalf("a take on a key in debt admitted: %+v", first.Decisions[0])
				}
				if got := first.Now.Add(first.RetryAfter()); !got.Equal(target) {
					t.Fatalf("take on a key in debt: admission at %v, want exactly %v (retry %v)", got, target, first.RetryAfter())
				}
				time.Sleep(time.Until(target))
				again := take(t, s, c)
				if !again.Allowed {
					t.Fatalf("not admitted at the retry-after: %+v (now %v, target %v)", again.Decisions[0], again.Now, target)
				}
				if again.Now.Before(target) {
					t.Fatalf("admitted at %v, before the retry-after's %v", again.Now, target)
				}
				next := take(t, s, c)
				if next.Now.Sub(target) >= em {
					continue // a slow machine: a second unit refilled already; try again
				}
				if next.Allowed || !next.Now.Add(next.RetryAfter()).Equal(target.Add(em)) {
					t.Fatalf("the unit after the debt: %+v at %v, want refused until %v", next.Decisions[0], next.Now, target.Add(em))
				}
				round++
			}
		})
	}
	for _, a := range algo.Algorithms {
		t.Run("bound/"+a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			key := p + "bound:" + a.String()
			taken := take(t, s, store.Check{Key: key, Limit: l, Cost: 10})
			res := settle(t, s, settleID(), store.Adjustment{Key: key, Limit: l, Delta: 1000})
			if got := res.Settled[0]; got.Applied != 10 || got.Remaining != -10 {
				t.Fatalf("settle +1000 on an empty key with burst 10 = %+v, want 10 applied (one burst of debt), remaining -10", got)
			}
			if got := settle(t, s, settleID(), store.Adjustment{Key: key, Limit: l, Delta: 1}).Settled[0]; got.Applied != 0 || got.Remaining != -10 {
				t.Fatalf("settle +1 at the debt bound = %+v, want nothing applied", got)
			}
			rej := take(t, s, store.Check{Key: key, Limit: l, Cost: 1})
			if rej.Allowed {
				t.Fatalf("a take at the debt bound admitted: %+v", rej.Decisions[0])
			}
			if !a.Windowed() {
				em := l.Period / time.Duration(l.Limit)
				if want := taken.Now.Add(11 * em); !rej.Now.Add(rej.RetryAfter()).Equal(want) {
					t.Fatalf("retry at the debt bound: admission at %v, want %v (10 units owed, then 1)", rej.Now.Add(rej.RetryAfter()), want)
				}
			}
			got := settle(t, s, settleID(), store.Adjustment{Key: key, Limit: l, Delta: -15, TakenAt: taken.Now}).Settled[0]
			if got.Applied != -15 || got.Remaining != 5 {
				t.Fatalf("refund of 15 from the debt bound = %+v, want -15 applied, remaining 5", got)
			}
		})
	}
}

// testSettleOnce: a settlement retried with the same id (a timeout, then
// a retry) applies once; across cluster slots, once in each.
func testSettleOnce(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := longLimit(a)
			for _, keys := range [][2]string{
				{p + "{once}1" + a.String(), p + "{once}2" + a.String()},   // one slot
				{p + "{once-a}" + a.String(), p + "{once-b}" + a.String()}, // two slots on a cluster
			} {
				taken := take(t, s, store.Check{Key: keys[0], Limit: l, Cost: 4}, store.Check{Key: keys[1], Limit: l, Cost: 4})
				adjs := []store.Adjustment{
					{Key: keys[0], Limit: l, Delta: 3, TakenAt: taken.Now},
					{Key: keys[1], Limit: l, Delta: -2, TakenAt: taken.Now},
				}
				id := settleID()
				first := settle(t, s, id, adjs...)
				for i, want := range []int64{3, 8} {
					if got := first.Settled[i]; got.Applied != adjs[i].Delta || got.Remaining != want || got.Repeated {
						t.Fatalf("%v: first settle, adjustment %d = %+v, want applied %d, remaining %d", keys, i, got, adjs[i].Delta, want)
					}
				}
				for range 2 {
					again := settle(t, s, id, adjs...)
					for i, want := range []int64{3, 8} {
						if got := again.Settled[i]; got.Applied != 0 || got.Remaining != want || !got.Repeated {
							t.Fatalf("%v: the same settlement again, adjustment %d = %+v, want repeated: nothing applied, remaining %d", keys, i, got, want)
						}
					}
				}
				peek := take(t, s, store.Check{Key: keys[0], Limit: l}, store.Check{Key: keys[1], Limit: l})
				if peek.Decisions[0].Remaining != 3 || peek.Decisions[1].Remaining != 8 {
					t.Fatalf("%v: after a settlement retried twice, remaining %d and %d, want 3 and 8", keys, peek.Decisions[0].Remaining, peek.Decisions[1].Remaining)
				}
			}
		})
	}
}

// testSettleConcurrent: goroutines take an estimate and settle the true
// cost on the same two keys (two slots on a cluster) at once, each
// settlement sent twice; at the end each key has been charged the sum of
// the true costs, exactly: its remaining is the burst less that sum, and,
// for GCRA and token bucket, its reset is that sum's emission intervals
// after the key's first take (a unit, taken alone so that its time is
// the key's own on a cluster).
func testSettleConcurrent(t *testing.T, s store.Store) {
	p := prefix(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			t.Parallel()
			l := algo.Limit{Limit: 1_000_000, Period: algo.MaxPeriod, Algorithm: a}
			if a == algo.SlidingLog {
				l.Limit = algo.MaxLogLimit
			}
			keys := []string{p + "{conc-a}" + a.String(), p + "{conc-b}" + a.String()}
			seed := rand.Uint64()
			var sum atomic.Int64
			var first [2]int64
			for i, k := range keys {
				first[i] = take(t, s, store.Check{Key: k, Limit: l, Cost: 1}).Now.UnixMicro()
			}
			sum.Add(1)
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seed, uint64(g)))
					var res store.Result
					var sres store.SettleResult
					for range 20 {
						est, cost := 1+r.Int64N(10), r.Int64N(31)
						checks := []store.Check{{Key: keys[0], Limit: l, Cost: est}, {Key: keys[1], Limit: l, Cost: est}}
						if err := s.Take(context.Background(), checks, &res); err != nil || !res.Allowed {
							t.Errorf("seed %d: take %d: %v %+v", seed, est, err, res)
							return
						}
						adjs := []store.Adjustment{
							{Key: keys[0], Limit: l, Delta: cost - est, TakenAt: res.Now},
							{Key: keys[1], Limit: l, Delta: cost - est, TakenAt: res.Now},
						}
						id := settleID()
						for try := range 2 {
							if err := s.Settle(context.Background(), id, adjs, &sres); err != nil {
								t.Errorf("seed %d: settle: %v", seed, err)
								return
							}
							for _, got := range sres.Settled {
								if want := cost - est; try == 0 && got.Applied != want || try == 1 && (got.Applied != 0 || !got.Repeated) {
									t.Errorf("seed %d: settle %+d, try %d: %+v", seed, want, try, got)
									return
								}
							}
						}
						sum.Add(cost)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			for i, k := range keys {
				// One key a peek: a peek of both across cluster slots has
				// the later slot's time.
				peek := take(t, s, store.Check{Key: k, Limit: l})
				d := peek.Decisions[0]
				if want := l.Capacity() - sum.Load(); d.Remaining != want {
					t.Errorf("seed %d: key %d: remaining %d after true costs summing to %d, want exactly %d", seed, i, d.Remaining, sum.Load(), want)
				}
				if a.Windowed() {
					continue
				}
				em, _, _ := l.Params()
				want := time.UnixMicro(first[i] + em*sum.Load())
				if got := peek.Now.Add(d.ResetAfter); !got.Equal(want) {
					t.Errorf("seed %d: key %d: full again at %v, want the first take's time + %d emission intervals, %v", seed, i, got, sum.Load(), want)
				}
			}
		})
	}
}

// testSettleInvalid: calls that cannot be settled are refused before any
// I/O with an error wrapping store.ErrInvalidCheck.
func testSettleInvalid(t *testing.T, s store.Store) {
	p := prefix(t)
	ok := store.Adjustment{Key: p + "x", Limit: longLimit(algo.GCRA), Delta: 1}
	long := make([]store.Adjustment, store.MaxBatch+1)
	for i := range long {
		long[i] = ok
		long[i].Key = fmt.Sprint(p, i)
	}
	for _, b := range []struct {
		name string
		id   string
		adjs []store.Adjustment
	}{
		{"empty id", "", []store.Adjustment{ok}},
		{"long id", string(make([]byte, store.MaxSettleID+1)), []store.Adjustment{ok}},
		{"no adjustment", "x", nil},
		{"too many", "x", long},
		{"empty key", "x", []store.Adjustment{{Limit: ok.Limit, Delta: 1}}},
		{"bad limit", "x", []store.Adjustment{{Key: ok.Key, Delta: 1}}},
		{"huge delta", "x", []store.Adjustment{{Key: ok.Key, Limit: ok.Limit, Delta: algo.MaxCount + 1}}},
		{"window refund without the take's time", "x", []store.Adjustment{{Key: ok.Key, Limit: longLimit(algo.FixedWindow), Delta: -1}}},
		{"duplicate", "x", []store.Adjustment{ok, ok}},
	} {
		var res store.SettleResult
		if err := s.Settle(context.Background(), b.id, b.adjs, &res); !errors.Is(err, store.ErrInvalidCheck) {
			t.Errorf("Settle with %s: %v, want an error wrapping %v", b.name, err, store.ErrInvalidCheck)
		}
	}
}
