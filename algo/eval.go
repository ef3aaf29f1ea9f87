package algo

import "time"

// State is the stored state of one key under one algorithm. The zero value
// is a key never seen (or expired): full capacity. Its fields mean, by
// algorithm:
//
//	GCRA:           A = theoretical arrival time (µs), B = 1 when held ([Limit.Hold]),
//	                2 when in debt ([Limit.Settle])
//	TokenBucket:    A = whole tokens (negative: a debt), B = time accrued up to (µs)
//	SlidingLog:     Log = timestamps of admitted units, ascending (µs)
//	SlidingWindow:  A = current window start (µs), B = its count, C = the previous window's count
//	FixedWindow:    A = window start (µs), B = its count
//
// A State returned by [Limit.Eval] may share Log's backing array with the
// State passed in, beyond the input's length; the input itself is never
// modified.
type State struct {
	A, B, C int64
	Log     []int64
}

// Decision is the answer to one take. It is a value, never an error.
type Decision struct {
	// Allowed reports whether the cost was (or, for a peek, can be) taken.
	Allowed bool
	// Limit is the limit's configured Limit.
	Limit int64
	// Remaining is the capacity left: after the take when allowed, now when
	// rejected. Between 0 and the burst.
	Remaining int64
	// RetryAfter is zero when allowed; otherwise the exact time after which
	// the same take is admitted, given no other traffic.
	RetryAfter time.Duration
	// ResetAfter is the time until the full capacity is available again.
	ResetAfter time.Duration
}

// Outcome is a [Decision] in the integer units of the arithmetic: what the
// Redis scripts return. It exists so that stores can compare and convert
// without rounding.
type Outcome struct {
	Allowed   bool
	Remaining int64
	RetryUs   int64 // retry after, µs
	ResetUs   int64 // reset after, µs
}

// Decision converts o to a Decision for limit l.
func (o Outcome) Decision(l Limit) Decision {
	return Decision{
		Allowed:    o.Allowed,
		Limit:      l.Limit,
		Remaining:  o.Remaining,
		RetryAfter: time.Duration(o.RetryUs) * time.Microsecond,
		ResetAfter: time.Duration(o.ResetUs) * time.Microsecond,
	}
}

// Eval decides taking cost units from state s at time now (µs since the
// epoch) under l. It returns the outcome and the state after the take. When
// the outcome is rejected, or cost is zero (a peek), the returned state is s
// itself: nothing changes; except for a GCRA state written under a slower
// limit, which comes back clamped to this one's and should be stored. When allowed with cost > 0, the returned state
// should be stored for Outcome.ResetUs microseconds, after which it carries
// no information (it equals the zero State).
//
// Eval assumes l is valid and 0 <= cost <= burst ([Limit.Validate],
// [Limit.CheckCost]); it does not check.
func (l Limit) Eval(s State, now, cost int64) (Outcome, State) {
	p1, p2, p3 := l.Params()
	switch l.Algorithm {
	case TokenBucket:
		return tokenBucket(p1, p2, s, now, cost)
	case SlidingLog:
		return slidingLog(p1, p2, s, now, cost)
	case SlidingWindow:
		return slidingWindow(p1, p2, s, now, cost)
	case FixedWindow:
		return fixedWindow(p1, p2, p3, s, now, cost)
	default:
		return gcraState(p1, p2, newDivisor(p1), s, now, cost)
	}
}

// gcraState is gcra on a State: the state itself when nothing changes. An
// admitted take clears the state's flag (a hold or a debt is over); a
// clamp keeps it.
func gcraState(em, burst int64, div divisor, s State, now, cost int64) (Outcome, State) {
	o, tat := gcra(em, burst, div, s.A, s.B, now, cost)
	if tat == s.A {
		return o, s
	}
	if o.Allowed && cost > 0 {
		return o, State{A: tat}
	}
	return o, State{A: tat, B: s.B}
}

// clamp0 returns x, or 0 when x is negative.
func clamp0(x int64) int64 {
	if x < 0 {
		return 0
	}
	return x
}
