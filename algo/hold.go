package algo

import (
	"errors"
	"fmt"
)

// ErrHoldUnsupported means [Limit.Hold] was asked of an algorithm other
// than GCRA.
var ErrHoldUnsupported = errors.New("algo: hold needs the gcra algorithm")

// Hold returns the state s moved forward so that, from now, the key admits
// nothing before until (µs) and admits a unit cost at until, given no other
// traffic: the pause an upstream provider asks for with Retry-After. A hold
// never shortens a longer one: when s already admits nothing before until,
// or until is not after now, s comes back unchanged. resetUs is how long the returned state carries
// information (its expiry). Only GCRA supports it; other algorithms give
// [ErrHoldUnsupported].
func (l Limit) Hold(s State, now, until int64) (next State, resetUs int64, err error) {
	if err := l.Validate(); err != nil {
		return s, 0, err
	}
	if l.Algorithm != GCRA {
		return s, 0, fmt.Errorf("%w, not %v", ErrHoldUnsupported, l.Algorithm)
	}
	if until <= now {
		return s, max(0, s.A-now), nil
	}
	em, burst, _ := l.Params()
	// A unit take at t is admitted when TAT+em-em·burst <= t; at t = until
	// that is TAT = until + em·(burst-1).
	want := until + em*(burst-1)
	if s.A >= want {
		return s, max(0, s.A-now), nil
	}
	return State{A: want, B: 1}, want - now, nil
}
