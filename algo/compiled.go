package algo

import "math/bits"

// Compiled is a valid [Limit] with the integers its algorithm needs worked
// out once: the parameters of [Limit.Params] and, for GCRA, a reciprocal
// that replaces the division by the emission interval with multiplications.
// A store that decides many keys under few limits (the limits of a policy)
// compiles each limit once instead of validating and dividing per decision.
// Its decisions are identical to [Limit.Eval]'s. The zero value is not
// valid; use [Limit.Compile].
type Compiled struct {
	lim        Limit
	p1, p2, p3 int64
	div        divisor // by p1, the emission interval (GCRA)
}

// Compile validates l and returns it compiled. The error is
// [Limit.Validate]'s.
func (l Limit) Compile() (Compiled, error) {
	if err := l.Validate(); err != nil {
		return Compiled{}, err
	}
	c := Compiled{lim: l}
	c.p1, c.p2, c.p3 = l.Params()
	if l.Algorithm == GCRA {
		c.div = newDivisor(c.p1)
	}
	return c, nil
}

// Limit returns the limit c was compiled from.
func (c *Compiled) Limit() Limit { return c.lim }

// Eval is [Limit.Eval] for the compiled limit, with the same contract:
// 0 <= cost <= burst is assumed, not checked.
func (c *Compiled) Eval(s State, now, cost int64) (Outcome, State) {
	switch c.lim.Algorithm {
	case GCRA:
		return gcraState(c.p1, c.p2, c.div, s, now, cost)
	case TokenBucket:
		return tokenBucket(c.p1, c.p2, s, now, cost)
	case SlidingLog:
		return slidingLog(c.p1, c.p2, s, now, cost)
	case SlidingWindow:
		return slidingWindow(c.p1, c.p2, s, now, cost)
	default:
		return fixedWindow(c.p1, c.p2, c.p3, s, now, cost)
	}
}

// Apply is Eval on the state at s, in place: *s becomes the state after
// the take, and is left as it is when the take is rejected or a peek. It
// spares copying the state in and out, which a hot loop notices.
func (c *Compiled) Apply(s *State, now, cost int64) Outcome {
	if c.lim.Algorithm == GCRA {
		o, tat := gcra(c.p1, c.p2, c.div, s.A, s.B, now, cost)
		if tat != s.A {
			s.A = tat
			if o.Allowed && cost > 0 {
				s.B = 0
			}
		}
		return o
	}
	o, next := c.Eval(*s, now, cost)
	if o.Allowed && cost > 0 {
		*s = next
	}
	return o
}

// divisor divides non-negative int64s by a fixed d >= 1 exactly, with a
// multiplication by the reciprocal m = floor((2^64-1)/d) and one
// correction step. For 0 <= n < 2^63 the estimate floor(n*m/2^64) is
// either floor(n/d) or one less: n*m/2^64 lies in (n/d - 1, n/d].
type divisor struct{ d, m uint64 }

func newDivisor(d int64) divisor { return divisor{uint64(d), ^uint64(0) / uint64(d)} }

// div returns floor(n/d) for 0 <= n.
func (v divisor) div(n int64) int64 {
	q, _ := bits.Mul64(uint64(n), v.m)
	if uint64(n)-q*v.d >= v.d {
		q++
	}
	return int64(q)
}
