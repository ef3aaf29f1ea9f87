package sim

import (
	"math"
	"time"
)

// maxTicks bounds the labelled ticks of an axis; an axis has at least
// three where its range allows.
const maxTicks = 7

// niceStep is the least step of 1, 2 or 5 times a power of ten that
// divides span into at most maxTicks-1 intervals.
func niceStep(span float64) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / (maxTicks - 1)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// countTicks are the ticks of a count axis from 0 to top: multiples of a
// 1-2-5 step (0, 20, 40, 60; 0, 5, 10 … 25), and top itself, the full
// capacity, when it is not one of them (the multiple below it left out
// when the two would crowd, under half a step apart).
func countTicks(top int64) []int64 {
	if top <= 0 {
		return []int64{0}
	}
	step := int64(math.Max(1, niceStep(float64(top))))
	var ticks []int64
	for v := int64(0); v <= top; v += step {
		ticks = append(ticks, v)
	}
	if last := ticks[len(ticks)-1]; last != top {
		if 2*(top-last) < step && len(ticks) > 1 {
			ticks = ticks[:len(ticks)-1]
		}
		ticks = append(ticks, top)
	}
	return ticks
}

// signedTicks are the ticks of a count axis from lo (0 or below: a debt)
// to top: countTicks(top) when lo is 0, else multiples of a 1-2-5 step
// over the whole range (-20000, -10000, 0, 10000, 20000), with lo and top
// themselves when they are not multiples, by countTicks' rule of
// crowding.
func signedTicks(lo, top int64) []int64 {
	if lo >= 0 {
		return countTicks(top)
	}
	step := int64(math.Max(1, niceStep(float64(top-lo))))
	first := lo / step * step // the first multiple at or above lo
	var ticks []int64
	for v := first; v <= top; v += step {
		ticks = append(ticks, v)
	}
	if first != lo {
		if 2*(first-lo) < step && len(ticks) > 1 && first != 0 {
			ticks = ticks[1:]
		}
		ticks = append([]int64{lo}, ticks...)
	}
	if last := ticks[len(ticks)-1]; last != top {
		if 2*(top-last) < step && len(ticks) > 1 && last != 0 {
			ticks = ticks[:len(ticks)-1]
		}
		ticks = append(ticks, top)
	}
	return ticks
}

// timeSteps are the time axis's steps: 1-2-5 up to 20 s, then steps a
// clock reads at a glance.
var timeSteps = func() []time.Duration {
	var s []time.Duration
	for p := time.Millisecond; p <= 10*time.Second; p *= 10 {
		s = append(s, p, 2*p, 5*p)
	}
	s = append(s[:len(s)-1], // 50 s: not a clock's
		30*time.Second, time.Minute, 2*time.Minute, 5*time.Minute, 10*time.Minute, 15*time.Minute, 30*time.Minute,
		time.Hour, 2*time.Hour, 6*time.Hour, 12*time.Hour, 24*time.Hour)
	return s
}()

// timeTicks are the ticks of a time axis from 0 to end, at multiples of
// the least round step that makes at most maxTicks of them: 0, 10s, 20s,
// 30s for 35 s.
func timeTicks(end time.Duration) []time.Duration {
	step := timeSteps[len(timeSteps)-1]
	for _, s := range timeSteps {
		if end/s <= maxTicks-1 {
			step = s
			break
		}
	}
	var ticks []time.Duration
	for t := time.Duration(0); t <= end; t += step {
		ticks = append(ticks, t)
	}
	return ticks
}

// timeLabel is a time tick's label: "0", "500ms", "10s", "1m30s", "2h".
func timeLabel(t time.Duration) string {
	if t == 0 {
		return "0"
	}
	s := t.String()
	// time.Duration writes 2m0s and 1h0m0s: the zero parts go.
	for _, z := range []string{"m0s", "h0m"} {
		if len(s) > len(z) && s[len(s)-len(z):] == z {
			s = s[:len(s)-len(z)+1]
		}
	}
	return s
}
