package algo

// fixedWindow counts units per window [w, w+period), w = offset plus a
// multiple of period since the epoch. State A is the window start, B its
// count.
//
// Mirror: store/redisstore/lua/fixed_window.lua. Change both or neither.
func fixedWindow(period, limit, offset int64, s State, now, cost int64) (Outcome, State) {
	w := windowStart(now, period, offset)
	n := s.B
	if s.A != w {
		n = 0
	}
	end := w + period - now
	if cost == 0 {
		return Outcome{Allowed: true, Remaining: clamp0(limit - n), ResetUs: fwReset(n, end)}, s
	}
	if n+cost > limit {
		return Outcome{Remaining: clamp0(limit - n), RetryUs: end, ResetUs: fwReset(n, end)}, s
	}
	n += cost
	return Outcome{Allowed: true, Remaining: limit - n, ResetUs: end}, State{A: w, B: n}
}

// fwReset is the time until the full limit is available: the end of the
// window when any of it is used, else zero.
func fwReset(n, end int64) int64 {
	if n == 0 {
		return 0
	}
	return end
}
