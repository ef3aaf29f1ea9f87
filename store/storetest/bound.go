package storetest

import (
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// CheckBound checks the admission bound docs/algorithms.md states for l's
// algorithm against admitted, the ascending times (µs) of admitted unit-cost
// takes on one key. It returns "" when the bound holds, else what broke it.
// The stores' conformance tests use it on real runs.
//
//	algo.GCRA, algo.TokenBucket: in every window of length w, at most burst + w/emission.
//	algo.SlidingLog:        at most limit in every window one period long.
//	algo.FixedWindow:       at most limit in every aligned window.
//	algo.SlidingWindow:     at most limit in every aligned window, and at most
//	                   2×limit in every window one period long.
func CheckBound(l algo.Limit, admitted []int64) string {
	p1, p2, p3 := l.Params()
	period := int64(l.Period / time.Microsecond)
	// countIn returns the most admissions in any window [t, t+w) that opens at an admission.
	maxIn := func(w int64) (int, int64) {
		best, at, j := 0, int64(0), 0
		for i := range admitted {
			for j < len(admitted) && admitted[j] < admitted[i]+w {
				j++
			}
			if j-i > best {
				best, at = j-i, admitted[i]
			}
		}
		return best, at
	}
	switch l.Algorithm {
	case algo.GCRA, algo.TokenBucket:
		em, burst := p1, p2
		for _, w := range []int64{1, em, 10 * em, period, 3 * period} {
			if n, at := maxIn(w); int64(n) > burst+w/em {
				return fmt.Sprintf("%v: %d admitted in %dµs from %d, bound %d", l, n, w, at, burst+w/em)
			}
		}
	case algo.SlidingLog:
		if n, at := maxIn(period); int64(n) > l.Limit {
			return fmt.Sprintf("%v: %d admitted in one period from %d, bound %d", l, n, at, l.Limit)
		}
	case algo.SlidingWindow, algo.FixedWindow:
		counts := map[int64]int64{}
		for _, t := range admitted {
			counts[t-((t-p3)%period+period)%period]++ // the aligned window that holds t
		}
		for w, n := range counts {
			if n > l.Limit {
				return fmt.Sprintf("%v: %d admitted in the aligned window at %d, bound %d", l, n, w, l.Limit)
			}
		}
		if l.Algorithm == algo.SlidingWindow {
			if n, at := maxIn(period); int64(n) > 2*l.Limit {
				return fmt.Sprintf("%v: %d admitted in one period from %d, bound %d", l, n, at, 2*l.Limit)
			}
		}
	}
	return ""
}
