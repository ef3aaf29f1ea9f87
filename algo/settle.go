package algo

// Settlement is the answer to one [Limit.Settle], in the integer units of
// the arithmetic.
type Settlement struct {
	// Applied is the units the settlement moved: charged when positive,
	// refunded when negative. It is the delta asked, cut by the debt bound
	// (a charge) or by what makes the key full (a refund); see
	// [Limit.Settle].
	Applied int64
	// Remaining is the capacity after the settlement, signed: negative is
	// a debt, the units the key owes before a take can pass. Between
	// -burst and burst (a GCRA key held by [Limit.Hold] can be lower:
	// its hold is counted as units owed).
	Remaining int64
	// ResetUs is the time until the key is full again, µs.
	ResetUs int64
}

// Settle adjusts a charge already admitted on state s at now (µs): delta
// units more (the true cost was more than the take's) or, negative, fewer
// (a refund). takenAt (µs) is when the take being settled was decided;
// only the window algorithms read it. It returns what was applied and the
// state after; when nothing was applied, the state is s itself. Like
// [Limit.Eval]'s, the state returned should be stored for
// Settlement.ResetUs, after which it equals the zero State.
//
// A charge is applied whatever the key holds, and may put it in debt:
// below zero remaining, so that takes are refused until the limit has
// refilled the debt and the take's cost, with an exact retry-after. A debt
// is at most one burst (the key's remaining never goes below -burst); the
// part of a charge beyond that is not applied (Applied says how much was).
// A refund gives back at most what makes the key full.
//
// By algorithm:
//
//   - GCRA: a charge moves the TAT by emission × units, up to now +
//     2 × tolerance, and marks the state owed (B = 2) while the TAT is past
//     now + tolerance, so that reading it under the limit in force clamps it
//     to its debt bound instead of erasing the debt. A refund moves the TAT
//     back, to now at the earliest. A held key ([Limit.Hold]) is charged
//     up to the same bound (nothing when its hold reaches further) and
//     refunds nothing: a refund never shortens a provider's pause.
//   - TokenBucket: a charge takes tokens, down to -burst; a refund gives
//     them back, up to burst.
//   - FixedWindow: a charge is counted in the current window, up to twice
//     the limit; the debt ends with the window. A refund is taken off the
//     current window's count only when the take was decided in that window
//     (takenAt): a take of a window gone is forgotten already.
//   - SlidingWindow: a charge is counted in the current window, up to
//     cur + weighted previous = twice the limit; it fades out over the next
//     window as every count does. A refund is taken off the count of the
//     take's window, the current or the previous one; older, nothing.
//   - SlidingLog: a charge logs units at max(now, newest), up to twice the
//     limit live; each ages out one period after it was logged. A refund
//     removes up to -delta live entries, those logged nearest takenAt
//     first (at or after it on a tie): the take's own entries, or entries
//     as near as the clocks that decided the take and the settlement
//     agree (a cluster's slots). A take older than one period refunds
//     nothing: its entries have aged out.
//
// Settle assumes l is valid and |delta| <= MaxCount; it does not check.
//
// Mirror: the --@settle section of each store/redisstore/lua/<algorithm>.lua.
// Change both or neither.
func (l Limit) Settle(s State, now, takenAt, delta int64) (Settlement, State) {
	p1, p2, p3 := l.Params()
	switch l.Algorithm {
	case TokenBucket:
		return tbSettle(p1, p2, s, now, delta)
	case SlidingLog:
		return slSettle(p1, p2, s, now, takenAt, delta)
	case SlidingWindow:
		return swSettle(p1, p2, s, now, takenAt, delta)
	case FixedWindow:
		return fwSettle(p1, p2, p3, s, now, takenAt, delta)
	default:
		return gcraSettle(p1, p2, s, now, delta)
	}
}

// Settle is [Limit.Settle] for the compiled limit.
func (c *Compiled) Settle(s State, now, takenAt, delta int64) (Settlement, State) {
	return c.lim.Settle(s, now, takenAt, delta)
}

// gcraSettle is Settle for GCRA.
func gcraSettle(em, burst int64, s State, now, delta int64) (Settlement, State) {
	tat := max(s.A, now)
	tolerance := em * burst
	flag := s.B
	switch flag {
	case gcraHeld:
	case gcraOwed:
		tat = min(tat, now+2*tolerance)
	default:
		tat = min(tat, now+tolerance)
	}
	var applied int64
	switch {
	case delta > 0:
		applied = min(delta, clamp0(now+2*tolerance-tat)/em)
	case delta < 0 && flag != gcraHeld:
		applied = -min(-delta, (tat-now+em-1)/em) // at most what makes it full
	}
	tat = max(now, tat+em*applied)
	out := Settlement{Applied: applied, Remaining: gcraRemaining(em, burst, tolerance, tat, now), ResetUs: tat - now}
	switch {
	case applied == 0:
		return out, s
	case tat == now:
		return out, State{}
	case flag == gcraHeld:
		return out, State{A: tat, B: gcraHeld}
	case tat-now > tolerance:
		return out, State{A: tat, B: gcraOwed}
	}
	return out, State{A: tat}
}

// gcraRemaining is the signed capacity of a TAT at now: negative when the
// TAT is past now + tolerance (a debt of that many units, rounded up).
func gcraRemaining(em, burst, tolerance, tat, now int64) int64 {
	x := now + tolerance - tat
	if x < 0 {
		return -((-x + em - 1) / em)
	}
	return min(x/em, burst)
}

// tbSettle is Settle for the token bucket.
func tbSettle(em, burst int64, s State, now, delta int64) (Settlement, State) {
	tokens, last := tbRefill(em, burst, s, now)
	var applied int64
	switch {
	case delta > 0:
		applied = min(delta, tokens+burst)
	case delta < 0:
		applied = -min(-delta, burst-tokens)
	}
	tokens -= applied
	out := Settlement{Applied: applied, Remaining: tokens, ResetUs: tbReset(em, burst, tokens, last, now)}
	switch {
	case applied == 0:
		return out, s
	case tokens >= burst:
		return out, State{}
	}
	return out, State{A: tokens, B: last}
}

// fwSettle is Settle for the fixed window.
func fwSettle(period, limit, offset int64, s State, now, takenAt, delta int64) (Settlement, State) {
	w := windowStart(now, period, offset)
	n := s.B
	if s.A != w {
		n = 0
	}
	var applied int64
	switch {
	case delta > 0:
		applied = min(delta, clamp0(2*limit-n))
	case delta < 0 && windowStart(takenAt, period, offset) == w:
		applied = -min(-delta, n)
	}
	n += applied
	end := w + period - now
	out := Settlement{Applied: applied, Remaining: limit - n, ResetUs: fwReset(n, end)}
	switch {
	case applied == 0:
		return out, s
	case n == 0:
		return out, State{}
	}
	return out, State{A: w, B: n}
}

// swSettle is Settle for the sliding window counter.
func swSettle(period, limit int64, s State, now, takenAt, delta int64) (Settlement, State) {
	w := now - now%period
	cur, prev := s.B, s.C
	switch s.A {
	case w:
	case w - period:
		cur, prev = 0, s.B
	default:
		cur, prev = 0, 0
	}
	g := period>>slidingWindowGrid + 1
	pg := period / g
	eg := (now - w) / g
	weighted := func() int64 { return (prev*(pg-eg) + pg - 1) / pg }
	var applied int64
	switch tw := takenAt - takenAt%period; {
	case delta > 0:
		applied = min(delta, clamp0(2*limit-cur-weighted()))
		cur += applied
	case delta < 0 && tw == w:
		applied = -min(-delta, cur)
		cur += applied
	case delta < 0 && tw == w-period:
		applied = -min(-delta, prev)
		prev += applied
	}
	out := Settlement{Applied: applied, Remaining: limit - cur - weighted(), ResetUs: swReset(w, period, g, pg, cur, prev, now)}
	switch {
	case applied == 0:
		return out, s
	case cur == 0 && prev == 0:
		return out, State{}
	}
	return out, State{A: w, B: cur, C: prev}
}

// slSettle is Settle for the sliding log.
func slSettle(period, limit int64, s State, now, takenAt, delta int64) (Settlement, State) {
	log := s.Log
	drop := 0
	for drop < len(log) && log[drop] <= now-period {
		drop++
	}
	live := log[drop:]
	n := int64(len(live))
	var applied int64
	var next []int64
	switch {
	case delta > 0:
		applied = min(delta, clamp0(2*limit-n))
		ts := now
		if n > 0 && live[n-1] > ts {
			ts = live[n-1]
		}
		next = make([]int64, n, n+applied)
		copy(next, live)
		for range applied {
			next = append(next, ts)
		}
	case delta < 0 && takenAt > now-period:
		// The k live entries nearest takenAt: two cursors, lo down from
		// the newest before it, hi up from the oldest at or after it;
		// the nearer goes first, hi on a tie.
		hi := 0
		for hi < len(live) && live[hi] < takenAt {
			hi++
		}
		lo, from, to := hi-1, hi, hi
		for k := -delta; k > 0; k-- {
			switch {
			case to < len(live) && (lo < 0 || live[to]-takenAt <= takenAt-live[lo]):
				to++
			case lo >= 0:
				from, lo = lo, lo-1
			default:
				k = 1 // none left
				continue
			}
			applied--
		}
		next = make([]int64, 0, n+applied)
		next = append(append(next, live[:from]...), live[to:]...)
	}
	if applied == 0 {
		return Settlement{Remaining: limit - n, ResetUs: slReset(live, period, now)}, s
	}
	out := Settlement{Applied: applied, Remaining: limit - int64(len(next)), ResetUs: slReset(next, period, now)}
	if len(next) == 0 {
		return out, State{}
	}
	return out, State{Log: next}
}
