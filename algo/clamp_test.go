package algo

import (
	"math/rand/v2"
	"testing"
	"time"
)

// maxRetry is the longest wait limit l can ask for a take of cost from a
// state written under l itself: the bound every state written under
// another limit is read within.
func maxRetry(l Limit, cost int64) int64 {
	p1, _, _ := l.Params()
	switch l.Algorithm {
	case GCRA, TokenBucket:
		return p1 * cost // cost emission intervals
	case SlidingWindow:
		return 2 * p1 // the rest of this window and the weight of the next
	default:
		return p1 // the period
	}
}

// TestStateFromAnotherLimit: state written under one limit and read under
// another (a plan downgraded or upgraded, an override set or lifted) never
// makes the limit in force ask for a wait longer than it can ask for by
// itself, and a take that waits the Retry-After it is given is admitted.
// Today's finding: a GCRA key charged under 1 per 366 days, read under 100
// per minute, answered a retry of 8759 h.
func TestStateFromAnotherLimit(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	periods := []time.Duration{time.Millisecond, time.Second, time.Minute, time.Hour, 366 * 24 * time.Hour}
	randLimit := func(a Algorithm) Limit {
		l := Limit{Algorithm: a, Limit: 1 + rng.Int64N(1000), Period: periods[rng.IntN(len(periods))]}
		if !a.Windowed() && rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(l.Limit)
		}
		if l.Validate() != nil {
			l.Period = time.Hour
		}
		return l
	}
	for _, a := range Algorithms {
		for run := range 400 {
			from, to := randLimit(a), randLimit(a)
			now := int64(1_700_000_000_000_000) + rng.Int64N(1e12)
			var st State
			for range 1 + rng.IntN(50) {
				cost := 1 + rng.Int64N(from.Capacity())
				o, next := from.Eval(st, now, cost)
				if o.Allowed {
					st = next
				}
				now += rng.Int64N(int64(from.Period/time.Microsecond) / 4)
			}
			cost := 1 + rng.Int64N(to.Capacity())
			o, next := to.Eval(st, now, cost)
			if o.Allowed {
				continue
			}
			if bound := maxRetry(to, cost); o.RetryUs > bound {
				t.Fatalf("%v run %d: state of %v read under %v: retry %v for cost %d, over the %v the limit allows",
					a, run, from, to, time.Duration(o.RetryUs)*time.Microsecond, cost, time.Duration(bound)*time.Microsecond)
			}
			if o.ResetUs > 2*int64(to.Period/time.Microsecond)*max(1, to.Capacity()) {
				t.Fatalf("%v run %d: reset %dµs under %v", a, run, o.ResetUs, to)
			}
			if a == GCRA {
				st = next // a clamped TAT is stored whatever the outcome
			}
			if o2, _ := to.Eval(st, now+o.RetryUs, cost); !o2.Allowed {
				t.Fatalf("%v run %d: state of %v read under %v: cost %d not admitted after its retry of %dµs (then %+v)", a, run, from, to, cost, o.RetryUs, o2)
			}
		}
	}
}

// TestHeldStateIsNotClamped: a hold (an upstream's Retry-After) outlasts
// the burst's refill and is kept whole.
func TestHeldStateIsNotClamped(t *testing.T) {
	l := Limit{Limit: 100, Period: time.Second, Burst: 5}
	const now = 1_000_000
	held, _, err := l.Hold(State{}, now, now+60_000_000)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := l.Eval(held, now, 1)
	if o.Allowed || o.RetryUs != 60_000_000 {
		t.Fatalf("held for 60 s: %+v, want a retry of 60 s", o)
	}
	c, _ := l.Compile()
	st := held
	if o := c.Apply(&st, now+59_000_000, 1); o.Allowed || o.RetryUs != 1_000_000 {
		t.Fatalf("compiled, 1 s before the hold ends: %+v", o)
	}
}
