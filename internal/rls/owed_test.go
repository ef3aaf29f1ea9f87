package rls

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// TestOwedIsTheWaitOutOfDebt: for GCRA and the token bucket, owed of a
// peek's reset is the time until the counter's signed remaining (what a
// settlement of 0 reads) is no longer negative: found here by searching
// the time, over seeded random charges, takes and waits.
func TestOwedIsTheWaitOutOfDebt(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	for _, a := range []algo.Algorithm{algo.GCRA, algo.TokenBucket} {
		for range 20 {
			l := algo.Limit{Limit: 1 + rng.Int64N(1000), Period: time.Duration(1+rng.Int64N(3600)) * time.Second, Algorithm: a}
			if l.Validate() != nil {
				continue
			}
			burst := l.Capacity()
			var s algo.State
			now := int64(1_700_000_000_000_000)
			for step := range 200 {
				now += rng.Int64N(int64(l.Period/time.Microsecond) / burst * 3)
				switch rng.IntN(3) {
				case 0:
					_, s = l.Settle(s, now, now, 1+rng.Int64N(2*burst))
				case 1:
					_, s = l.Eval(s, now, 1+rng.Int64N(burst))
				}
				peek, _ := l.Eval(s, now, 0)
				got := owed(l, time.Duration(peek.ResetUs)*time.Microsecond)
				remaining := func(at int64) int64 { x, _ := l.Settle(s, at, at, 0); return x.Remaining }
				var want int64 // the first µs at which the counter is out of debt
				if remaining(now) < 0 {
					lo, hi := int64(0), 4*int64(l.Period/time.Microsecond)
					for lo < hi {
						mid := (lo + hi) / 2
						if remaining(now+mid) >= 0 {
							hi = mid
						} else {
							lo = mid + 1
						}
					}
					want = lo
				}
				if got != time.Duration(want)*time.Microsecond {
					t.Fatalf("seed %d, %v, step %d: owed %v, want %v (remaining %d)", seed, l, step, got, time.Duration(want)*time.Microsecond, remaining(now))
				}
			}
		}
	}
}
