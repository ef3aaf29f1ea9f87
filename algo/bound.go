package algo

import (
	"fmt"
	"time"
)

// CheckBound checks the admission bound docs/algorithms.md states for l's
// algorithm against admitted, the ascending times (µs) of admitted unit-cost
// takes on one key. It returns "" when the bound holds, else what broke it.
// The stores' conformance tests use it on real runs.
//
//	GCRA, TokenBucket: in every window of length w, at most burst + w/emission.
//	SlidingLog:        at most limit in every window one period long.
//	FixedWindow:       at most limit in every aligned window.
//	SlidingWindow:     at most limit in every aligned window, and at most
//	                   2×limit in every window one period long.
func CheckBound(l Limit, admitted []int64) string {
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
	case GCRA, TokenBucket:
		em, burst := p1, p2
		for _, w := range []int64{1, em, 10 * em, period, 3 * period} {
			if n, at := maxIn(w); int64(n) > burst+w/em {
				return fmt.Sprintf("%v: %d admitted in %dµs from %d, bound %d", l, n, w, at, burst+w/em)
			}
		}
	case SlidingLog:
		if n, at := maxIn(period); int64(n) > l.Limit {
			return fmt.Sprintf("%v: %d admitted in one period from %d, bound %d", l, n, at, l.Limit)
		}
	case SlidingWindow, FixedWindow:
		counts := map[int64]int64{}
		for _, t := range admitted {
			counts[windowStart(t, period, p3)]++
		}
		for w, n := range counts {
			if n > l.Limit {
				return fmt.Sprintf("%v: %d admitted in the aligned window at %d, bound %d", l, n, w, l.Limit)
			}
		}
		if l.Algorithm == SlidingWindow {
			if n, at := maxIn(period); int64(n) > 2*l.Limit {
				return fmt.Sprintf("%v: %d admitted in one period from %d, bound %d", l, n, at, 2*l.Limit)
			}
		}
	}
	return ""
}

// windowStart is the start of the window [offset + k×period, +period) that
// holds t: floored, also for t < offset.
func windowStart(t, period, offset int64) int64 {
	r := (t - offset) % period
	if r < 0 {
		r += period
	}
	return t - r
}
