package algo

// slidingWindowGrid is log2 of the number of grid steps a window is cut into
// when weighting the previous window. Windows up to 2^21 µs (2.1 s) are
// weighted to the microsecond; longer ones on a grid of period/2^21, so
// that count × grid steps stays below 2^51.
const slidingWindowGrid = 21

// slidingWindow estimates the units in the sliding window (now-period, now]
// as the current aligned window's count plus the previous window's count
// weighted by the share of it the sliding window still overlaps (rounded
// up, so the estimate never undercounts uniform traffic). State A is the
// current window start, B its count, C the previous window's count.
//
// Mirror: store/redisstore/lua/sliding_window.lua. Change both or neither.
func slidingWindow(period, limit int64, s State, now, cost int64) (Outcome, State) {
	w := now - now%period
	cur, prev := s.B, s.C
	switch s.A {
	case w:
	case w - period:
		cur, prev = 0, s.B
	default:
		cur, prev = 0, 0
	}
	g := period>>slidingWindowGrid + 1 // µs per grid step
	pg := period / g                   // grid steps per window
	eg := (now - w) / g                // grid steps elapsed
	weighted := (prev*(pg-eg) + pg - 1) / pg
	if cost == 0 {
		return Outcome{Allowed: true, Remaining: clamp0(limit - cur - weighted), ResetUs: swReset(w, period, g, pg, cur, prev, now)}, s
	}
	if cur+weighted+cost > limit {
		return Outcome{
			Remaining: clamp0(limit - cur - weighted),
			RetryUs:   swRetry(w, period, limit, g, pg, cur, prev, cost, now),
			ResetUs:   swReset(w, period, g, pg, cur, prev, now),
		}, s
	}
	cur += cost
	return Outcome{Allowed: true, Remaining: clamp0(limit - cur - weighted), ResetUs: swReset(w, period, g, pg, cur, prev, now)},
		State{A: w, B: cur, C: prev}
}

// swRetry is the time from now until taking cost is admitted, given no other
// traffic: later in this window, once the previous window's weight has
// fallen far enough, or else in the next window, where this window's count
// is the one that must fade.
func swRetry(w, period, limit, g, pg, cur, prev, cost, now int64) int64 {
	if x := limit - cost - cur; x >= 0 && prev > 0 {
		// ceil(prev*(pg-e)/pg) <= x  <=>  e >= pg - floor(x*pg/prev)
		if at := (pg - x*pg/prev) * g; at < period {
			return w + at - now
		}
	}
	var need int64
	if cur > 0 {
		need = clamp0(pg - (limit-cost)*pg/cur)
	}
	return w + period + need*g - now
}

// swReset is the time from now until the estimate is zero.
func swReset(w, period, g, pg, cur, prev, now int64) int64 {
	switch {
	case cur > 0:
		return w + period + pg*g - now
	case prev > 0:
		return clamp0(w + pg*g - now)
	}
	return 0
}
