package algo

import (
	"testing"
	"time"
)

// fuzzAlgorithm drives one algorithm from fuzzed inputs: a limit and a short
// sequence of (time step, cost) pairs, checking checkOne's rules at each.
func fuzzAlgorithm(f *testing.F, a Algorithm) {
	f.Add(int64(10), int64(1_000_000), int64(3), []byte{0, 1, 0, 2, 0, 1, 100, 1, 250, 0})
	f.Add(int64(1), int64(1), int64(1), []byte{1, 1, 1, 1, 0, 1})
	f.Add(int64(1000), int64(60_000_000), int64(1000), []byte{255, 255, 7, 3, 0, 0})
	f.Fuzz(func(t *testing.T, limit, periodUs, burst int64, ops []byte) {
		l := Limit{Limit: limit, Period: time.Duration(periodUs) * time.Microsecond, Burst: burst, Algorithm: a}
		if a.Windowed() {
			l.Burst = 0
		}
		if l.Validate() != nil {
			return
		}
		var s State
		now := t0
		for i := 0; i+1 < len(ops); i += 2 {
			now += int64(ops[i]) * (periodUs/64 + 1)
			cost := int64(ops[i+1]) % (l.Capacity() + 1)
			if msg := checkOne(l, s, now, cost); msg != "" {
				t.Fatalf("%v, state %+v, now %d, cost %d: %s", l, s, now, cost, msg)
			}
			_, s = l.Eval(s, now, cost)
		}
	})
}

func FuzzGCRA(f *testing.F)          { fuzzAlgorithm(f, GCRA) }
func FuzzTokenBucket(f *testing.F)   { fuzzAlgorithm(f, TokenBucket) }
func FuzzSlidingLog(f *testing.F)    { fuzzAlgorithm(f, SlidingLog) }
func FuzzSlidingWindow(f *testing.F) { fuzzAlgorithm(f, SlidingWindow) }
func FuzzFixedWindow(f *testing.F)   { fuzzAlgorithm(f, FixedWindow) }
