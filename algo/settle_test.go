package algo

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// op is one step of a settle step list: a take of cost (delta 0), or a
// settlement of delta for a take decided at takenAt (µs after t0).
type op struct {
	at      int64 // µs after t0
	cost    int64
	delta   int64
	takenAt int64
	want    any // Outcome for a take, Settlement for a settlement
}

func runOps(t *testing.T, l Limit, ops []op) State {
	t.Helper()
	var s State
	for i, o := range ops {
		var got any
		if o.delta == 0 {
			got, s = evalState(l, s, t0+o.at, o.cost)
		} else {
			got, s = l.Settle(s, t0+o.at, t0+o.takenAt, o.delta)
		}
		if diff := cmp.Diff(o.want, got); diff != "" {
			t.Errorf("step %d at +%v (cost %d, delta %d): -want +got:\n%s", i, time.Duration(o.at)*time.Microsecond, o.cost, o.delta, diff)
		}
	}
	return s
}

// evalState is Eval, keeping the state of a rejected take.
func evalState(l Limit, s State, now, cost int64) (Outcome, State) {
	o, next := l.Eval(s, now, cost)
	return o, next
}

// The worked examples of docs/algorithms.md ("Settling a charge").
func TestSettleSteps(t *testing.T) {
	counter := []Algorithm{GCRA, TokenBucket}
	for _, a := range counter {
		t.Run(a.String(), func(t *testing.T) {
			l := Limit{Limit: 10, Period: time.Second, Burst: 3, Algorithm: a} // emission 100 ms
			runOps(t, l, []op{
				{at: 0, cost: 3, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
				// The true cost was 5: 2 more, charged into debt.
				{at: 0, delta: 2, want: Settlement{Applied: 2, Remaining: -2, ResetUs: 500 * ms}},
				{at: 0, cost: 1, want: Outcome{Remaining: 0, RetryUs: 300 * ms, ResetUs: 500 * ms}},
				{at: 299 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 1 * ms, ResetUs: 201 * ms}},
				// The debt paid back at the limit's rate: one unit at +300 ms.
				{at: 300 * ms, cost: 1, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
				{at: 300 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 100 * ms, ResetUs: 300 * ms}},
				// At most one burst of debt: 10 asked, 3 applied.
				{at: 300 * ms, delta: 10, takenAt: 300 * ms, want: Settlement{Applied: 3, Remaining: -3, ResetUs: 600 * ms}},
				{at: 300 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 400 * ms, ResetUs: 600 * ms}},
				// A refund gives back at most what makes the key full.
				{at: 400 * ms, delta: -100, takenAt: 300 * ms, want: Settlement{Applied: -5, Remaining: 3, ResetUs: 0}},
				{at: 400 * ms, cost: 3, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
				{at: 400 * ms, delta: -1, takenAt: 400 * ms, want: Settlement{Applied: -1, Remaining: 1, ResetUs: 200 * ms}},
			})
		})
	}
	t.Run("fixed_window", func(t *testing.T) {
		l := Limit{Limit: 3, Period: time.Second, Algorithm: FixedWindow}
		s := runOps(t, l, []op{
			{at: 0, cost: 1, want: Outcome{Allowed: true, Remaining: 2, ResetUs: 1000 * ms}},
			// Charged to the current window, up to twice the limit.
			{at: 100 * ms, delta: 10, want: Settlement{Applied: 5, Remaining: -3, ResetUs: 900 * ms}},
			{at: 200 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 800 * ms, ResetUs: 800 * ms}},
			{at: 200 * ms, cost: 0, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 800 * ms}},
			{at: 300 * ms, delta: -4, want: Settlement{Applied: -4, Remaining: 1, ResetUs: 700 * ms}},
			// The debt does not carry past the window.
			{at: 1000 * ms, cost: 3, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 1000 * ms}},
			// A refund of the previous window's take gives nothing back.
			{at: 1100 * ms, delta: -1, takenAt: 900 * ms, want: Settlement{Applied: 0, Remaining: 0, ResetUs: 900 * ms}},
			{at: 1100 * ms, delta: -2, takenAt: 1000 * ms, want: Settlement{Applied: -2, Remaining: 2, ResetUs: 900 * ms}},
		})
		if want := (State{A: t0 + 1000*ms, B: 1}); !cmp.Equal(want, s) {
			t.Errorf("state = %+v, want %+v", s, want)
		}
	})
	t.Run("sliding_window", func(t *testing.T) {
		l := Limit{Limit: 4, Period: time.Second, Algorithm: SlidingWindow}
		runOps(t, l, []op{
			{at: 0, cost: 2, want: Outcome{Allowed: true, Remaining: 2, ResetUs: 2000 * ms}},
			{at: 0, delta: 9, want: Settlement{Applied: 6, Remaining: -4, ResetUs: 2000 * ms}},
			// In the next window the 8 weigh 8 × 3/4 = 6 at +250 ms: still 2 over.
			{at: 1250 * ms, cost: 0, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 750 * ms}},
			{at: 1250 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 375 * ms, ResetUs: 750 * ms}},
			// A refund of the previous window's take lowers its count.
			{at: 1250 * ms, delta: -4, takenAt: 0, want: Settlement{Applied: -4, Remaining: 1, ResetUs: 750 * ms}},
			{at: 1250 * ms, cost: 1, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 1750 * ms}},
		})
	})
	t.Run("sliding_log", func(t *testing.T) {
		l := Limit{Limit: 3, Period: time.Second, Algorithm: SlidingLog}
		s := runOps(t, l, []op{
			{at: 0, cost: 1, want: Outcome{Allowed: true, Remaining: 2, ResetUs: 1000 * ms}},
			{at: 100 * ms, cost: 2, want: Outcome{Allowed: true, Remaining: 0, ResetUs: 1000 * ms}},
			{at: 200 * ms, delta: 2, takenAt: 100 * ms, want: Settlement{Applied: 2, Remaining: -2, ResetUs: 1000 * ms}},
			{at: 200 * ms, cost: 1, want: Outcome{Remaining: 0, RetryUs: 900 * ms, ResetUs: 1000 * ms}},
			// A refund removes the entries logged nearest the take: its own.
			{at: 300 * ms, delta: -2, takenAt: 100 * ms, want: Settlement{Applied: -2, Remaining: 0, ResetUs: 900 * ms}},
			// Told a time 30 ms late (another clock), the nearest are still the ones meant.
			{at: 300 * ms, delta: -1, takenAt: 230 * ms, want: Settlement{Applied: -1, Remaining: 1, ResetUs: 900 * ms}},
			// A take older than one period refunds nothing.
			{at: 1000 * ms, delta: -1, takenAt: 0, want: Settlement{Applied: 0, Remaining: 2, ResetUs: 200 * ms}},
		})
		if len(s.Log) != 2 || s.Log[0] != t0 || s.Log[1] != t0+200*ms {
			t.Errorf("log = %v, want the first take's entry and one of the settlement's", s.Log)
		}
	})
}

// TestSettleDebtSurvivesTheClamp: a GCRA key in debt keeps its debt when
// read under its limit (the downgrade clamp would erase it), and a debt
// read under a faster limit is cut to one burst of that one.
func TestSettleDebtSurvivesTheClamp(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Burst: 3}
	_, s := l.Eval(State{}, t0, 3)
	got, s := l.Settle(s, t0, t0, 3)
	if got.Remaining != -3 || s.B != gcraOwed {
		t.Fatalf("settle +3 on an empty key = %+v, state %+v; want remaining -3, owed", got, s)
	}
	for range 3 {
		o, next := l.Eval(s, t0+50*ms, 1)
		if o.Allowed || o.RetryUs != 350*ms || !sameState(s, next) {
			t.Fatalf("take on a key in debt = %+v, state %+v -> %+v; want refused with retry 350ms, state kept", o, s, next)
		}
	}
	fast := Limit{Limit: 100, Period: time.Second, Burst: 2} // tolerance 20 ms
	o, next := fast.Eval(s, t0, 1)
	if o.Allowed || o.RetryUs != 30*ms || next.A != t0+40*ms || next.B != gcraOwed {
		t.Fatalf("under %v: %+v, state %+v; want refused with retry 30ms, TAT clamped to now+40ms, still owed", fast, o, next)
	}
	// An admitted take clears the mark.
	o, next = l.Eval(s, t0+700*ms, 1)
	if !o.Allowed || next.B != 0 {
		t.Fatalf("take after the debt: %+v, state %+v; want admitted and unmarked", o, next)
	}
	// An unmarked TAT as far ahead is a slower limit's, and clamped to one tolerance.
	if o, _ := l.Eval(State{A: s.A}, t0, 1); o.RetryUs != 100*ms {
		t.Fatalf("unmarked TAT 600ms ahead: retry %d, want the clamp's 100ms", o.RetryUs)
	}
}

// TestSettleHeld: a held key refunds nothing and is charged only up to
// the debt bound.
func TestSettleHeld(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Burst: 3}
	held, _, _ := l.Hold(State{}, t0, t0+400*ms) // TAT t0+600ms
	got, s := l.Settle(held, t0, t0, -2)
	if got.Applied != 0 || !sameState(s, held) {
		t.Fatalf("refund on a held key = %+v, %+v; want nothing", got, s)
	}
	got, s = l.Settle(held, t0, t0, 2)
	if got.Applied != 0 || got.Remaining != -3 || !sameState(s, held) {
		t.Fatalf("charge on a key held to the debt bound = %+v, %+v; want nothing applied, remaining -3", got, s)
	}
	got, s = l.Settle(held, t0+200*ms, t0, 5)
	if got.Applied != 2 || s.A != t0+800*ms || s.B != gcraHeld {
		t.Fatalf("charge on a held key 200ms later = %+v, %+v; want 2 applied, TAT +800ms, still held", got, s)
	}
}

// checkSettle checks one settlement's rules and returns what is wrong.
func checkSettle(l Limit, s State, now, takenAt, delta int64) string {
	before, same := l.Settle(s, now, takenAt, 0)
	if before.Applied != 0 || !sameState(s, same) {
		return fmt.Sprintf("a settlement of 0 applied %d or moved the state", before.Applied)
	}
	got, next := l.Settle(s, now, takenAt, delta)
	c := l.Capacity()
	held := l.Algorithm == GCRA && s.B == gcraHeld
	switch {
	case delta >= 0 && (got.Applied < 0 || got.Applied > delta):
		return fmt.Sprintf("applied %d of a charge of %d", got.Applied, delta)
	case delta < 0 && (got.Applied > 0 || got.Applied < delta):
		return fmt.Sprintf("applied %d of a refund of %d", got.Applied, delta)
	case got.Remaining > c || got.Remaining < -c && !held:
		return fmt.Sprintf("remaining %d outside -%d..%d", got.Remaining, c, c)
	case got.Applied == 0 && !sameState(s, next):
		return fmt.Sprintf("nothing applied, yet the state moved from %+v to %+v", s, next)
	case got.Applied > 0 && got.Remaining != before.Remaining-got.Applied:
		return fmt.Sprintf("a charge of %d moved remaining from %d to %d", got.Applied, before.Remaining, got.Remaining)
	case got.Applied < 0 && got.Remaining < before.Remaining:
		return fmt.Sprintf("a refund of %d lowered remaining from %d to %d", got.Applied, before.Remaining, got.Remaining)
	case got.Applied < 0 && l.Algorithm != SlidingWindow && got.Remaining != min(c, before.Remaining-got.Applied):
		return fmt.Sprintf("a refund of %d moved remaining from %d to %d", got.Applied, before.Remaining, got.Remaining)
	case delta > 0 && got.Applied < delta && got.Remaining != -c && !held:
		return fmt.Sprintf("a charge cut to %d of %d short of the debt bound: remaining %d", got.Applied, delta, got.Remaining)
	case delta < 0 && got.Applied > delta && got.Remaining != c && !held && !l.Algorithm.Windowed():
		return fmt.Sprintf("a refund cut to %d of %d short of full: remaining %d", got.Applied, delta, got.Remaining)
	}
	// The state after decides as the settlement says: its peek agrees, and
	// every take on it keeps the rules of Eval (exact retry, exact reset,
	// a fresh key's state once reset).
	if p, _ := l.Eval(next, now, 0); p.Remaining != clamp0(got.Remaining) || p.ResetUs != got.ResetUs {
		return fmt.Sprintf("settled %+v, but a peek of the state after says %+v", got, p)
	}
	for _, cost := range []int64{1, c} {
		if msg := checkOne(l, next, now, cost); msg != "" {
			return fmt.Sprintf("after the settlement (%+v, state %+v), a take of %d: %s", got, next, cost, msg)
		}
	}
	return ""
}

// TestSettleRandom drives every algorithm with random takes and
// settlements, checking checkSettle's rules at each.
func TestSettleRandom(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 36))
	for _, a := range Algorithms {
		for range 200 {
			l := Limit{Limit: 1 + r.Int64N(20), Period: time.Duration(1+r.Int64N(5000)) * time.Millisecond, Algorithm: a}
			if !a.Windowed() && r.IntN(2) == 0 {
				l.Burst = 1 + r.Int64N(20)
			}
			if a == FixedWindow && r.IntN(2) == 0 {
				l.Offset = time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
			}
			var s State
			now := t0
			var taken []int64
			for i := range 60 {
				now += r.Int64N(int64(l.Period/time.Microsecond)/4 + 1)
				if r.IntN(2) == 0 {
					var o Outcome
					o, s = l.Eval(s, now, r.Int64N(l.Capacity()+1))
					if o.Allowed {
						taken = append(taken, now)
					}
					continue
				}
				at := now
				if len(taken) > 0 {
					at = taken[r.IntN(len(taken))]
				}
				delta := r.Int64N(3*l.Capacity()+1) - int64(3*l.Capacity()/2)
				if msg := checkSettle(l, s, now, at, delta); msg != "" {
					t.Fatalf("seed %d, %v, step %d, state %+v, now %d, taken %d, delta %d: %s", seed, l, i, s, now, at, delta, msg)
				}
				_, s = l.Settle(s, now, at, delta)
			}
		}
	}
}

// TestSettleExtremeLimits: a debt on the limits at the bounds keeps every
// value below 2^53, where the scripts' doubles are exact.
func TestSettleExtremeLimits(t *testing.T) {
	const now = 1_800_000_000_000_000 // µs: early 2027
	for _, l := range []Limit{
		{Limit: 1, Period: MaxPeriod, Burst: int64(MaxRefill / MaxPeriod)},
		{Limit: 1, Period: time.Microsecond, Burst: MaxCount},
		{Limit: MaxCount, Period: MaxPeriod},
	} {
		for _, a := range []Algorithm{GCRA, TokenBucket} {
			l := l.With(a)
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			_, s := l.Eval(State{}, now, l.Capacity())
			got, s := l.Settle(s, now, now, MaxCount)
			o, _ := l.Eval(s, now, l.Capacity())
			for _, v := range []int64{s.A, s.B, got.ResetUs, o.RetryUs, now + o.RetryUs, now + got.ResetUs} {
				if v <= -1<<53 || v >= 1<<53 {
					t.Fatalf("%v: a value %d outside ±2^53 (state %+v, %+v, %+v)", l, v, s, got, o)
				}
			}
		}
	}
}

// fuzzSettle drives one algorithm with fuzzed takes and settlements.
func fuzzSettle(f *testing.F, a Algorithm) {
	f.Add(int64(10), int64(1_000_000), int64(3), []byte{0, 3, 1, 2, 0, 1, 100, 1, 250, 0})
	f.Add(int64(1), int64(1), int64(1), []byte{1, 1, 1, 255, 0, 1})
	f.Add(int64(1000), int64(60_000_000), int64(1000), []byte{255, 255, 7, 3, 0, 0, 9, 200})
	f.Fuzz(func(t *testing.T, limit, periodUs, burst int64, ops []byte) {
		l := Limit{Limit: limit, Period: time.Duration(periodUs) * time.Microsecond, Burst: burst, Algorithm: a}
		if a.Windowed() {
			l.Burst = 0
		}
		if l.Validate() != nil {
			return
		}
		var s State
		now, taken := t0, t0
		for i := 0; i+2 < len(ops); i += 3 {
			now += int64(ops[i]) * (periodUs/64 + 1)
			if ops[i+1]%2 == 0 {
				var o Outcome
				o, s = l.Eval(s, now, int64(ops[i+2])%(l.Capacity()+1))
				if o.Allowed {
					taken = now
				}
				continue
			}
			delta := (int64(ops[i+2]) - 128) * (l.Capacity()/64 + 1)
			if msg := checkSettle(l, s, now, taken, delta); msg != "" {
				t.Fatalf("%v, state %+v, now %d, taken %d, delta %d: %s", l, s, now, taken, delta, msg)
			}
			_, s = l.Settle(s, now, taken, delta)
		}
	})
}

func FuzzSettleGCRA(f *testing.F)          { fuzzSettle(f, GCRA) }
func FuzzSettleTokenBucket(f *testing.F)   { fuzzSettle(f, TokenBucket) }
func FuzzSettleSlidingLog(f *testing.F)    { fuzzSettle(f, SlidingLog) }
func FuzzSettleSlidingWindow(f *testing.F) { fuzzSettle(f, SlidingWindow) }
func FuzzSettleFixedWindow(f *testing.F)   { fuzzSettle(f, FixedWindow) }
