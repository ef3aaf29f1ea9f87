package algo

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const t0 = int64(1_000_000_000) // 1000 s after the epoch, aligned to every period used below

const ms = int64(1000)

type step struct {
	at   int64 // µs after t0
	cost int64
	want Outcome
}

// runSteps applies steps in order, carrying state, and compares each outcome.
func runSteps(t *testing.T, l Limit, steps []step) State {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	var s State
	for i, st := range steps {
		got, next := l.Eval(s, t0+st.at, st.cost)
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Errorf("step %d: Eval(+%v, cost=%d) -want +got:\n%s", i, time.Duration(st.at)*time.Microsecond, st.cost, diff)
		}
		s = next
	}
	return s
}

func TestGCRASteps(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Burst: 3} // emission 100 ms
	runSteps(t, l, []step{
		{0, 1, Outcome{Allowed: true, Remaining: 2, ResetUs: 100 * ms}},
		{0, 2, Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
		{0, 1, Outcome{Remaining: 0, RetryUs: 100 * ms, ResetUs: 300 * ms}},
		{100 * ms, 1, Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
		{250 * ms, 0, Outcome{Allowed: true, Remaining: 1, ResetUs: 150 * ms}},
		{250 * ms, 2, Outcome{Remaining: 1, RetryUs: 50 * ms, ResetUs: 150 * ms}},
		{300 * ms, 2, Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
	})
}

func TestTokenBucketSteps(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Burst: 3, Algorithm: TokenBucket}
	s := runSteps(t, l, []step{
		{0, 1, Outcome{Allowed: true, Remaining: 2, ResetUs: 100 * ms}},
		{0, 2, Outcome{Allowed: true, Remaining: 0, ResetUs: 300 * ms}},
		{0, 1, Outcome{Remaining: 0, RetryUs: 100 * ms, ResetUs: 300 * ms}},
		{150 * ms, 1, Outcome{Allowed: true, Remaining: 0, ResetUs: 250 * ms}},
		{250 * ms, 0, Outcome{Allowed: true, Remaining: 1, ResetUs: 150 * ms}},
		{250 * ms, 2, Outcome{Remaining: 1, RetryUs: 50 * ms, ResetUs: 150 * ms}},
	})
	// The partial token is kept as time: 1 token, credited up to +100 ms.
	if want := (State{A: 0, B: t0 + 100*ms}); !cmp.Equal(want, s) {
		t.Errorf("state = %+v, want %+v", s, want)
	}
}

// With an offset of 300 ms the windows are [t0+300ms, t0+1300ms), …
func TestFixedWindowOffsetSteps(t *testing.T) {
	l := Limit{Limit: 2, Period: time.Second, Algorithm: FixedWindow, Offset: 300 * time.Millisecond}
	runSteps(t, l, []step{
		{200 * ms, 2, Outcome{Allowed: true, Remaining: 0, ResetUs: 100 * ms}}, // window from t0-700ms
		{250 * ms, 1, Outcome{Remaining: 0, RetryUs: 50 * ms, ResetUs: 50 * ms}},
		{300 * ms, 1, Outcome{Allowed: true, Remaining: 1, ResetUs: 1000 * ms}},
		{1299 * ms, 1, Outcome{Allowed: true, Remaining: 0, ResetUs: 1 * ms}},
		{1300 * ms, 0, Outcome{Allowed: true, Remaining: 2, ResetUs: 0}},
	})
}

func TestFixedWindowSteps(t *testing.T) {
	l := Limit{Limit: 3, Period: time.Second, Algorithm: FixedWindow}
	runSteps(t, l, []step{
		{400 * ms, 1, Outcome{Allowed: true, Remaining: 2, ResetUs: 600 * ms}},
		{500 * ms, 2, Outcome{Allowed: true, Remaining: 0, ResetUs: 500 * ms}},
		{900 * ms, 1, Outcome{Remaining: 0, RetryUs: 100 * ms, ResetUs: 100 * ms}},
		{1000 * ms, 1, Outcome{Allowed: true, Remaining: 2, ResetUs: 1000 * ms}},
		{1500 * ms, 0, Outcome{Allowed: true, Remaining: 2, ResetUs: 500 * ms}},
		{2100 * ms, 0, Outcome{Allowed: true, Remaining: 3, ResetUs: 0}},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Algorithm: SlidingWindow}
	runSteps(t, l, []step{
		{500 * ms, 4, Outcome{Allowed: true, Remaining: 6, ResetUs: 1500 * ms}},
		// Next window: the previous 4 weigh ceil(4 × 0.75) = 3.
		{1250 * ms, 7, Outcome{Allowed: true, Remaining: 0, ResetUs: 1750 * ms}},
		// Weight ceil(4 × 0.5) = 2: 7+2+2 > 10. Admitted once the weight is 1, at +1.75 s.
		{1500 * ms, 2, Outcome{Remaining: 1, RetryUs: 250 * ms, ResetUs: 1500 * ms}},
		// 7+2+4 > 10 even at weight 0: wait until the 7 weigh ceil(7 × w) <= 6 in the next window.
		{1500 * ms, 4, Outcome{Remaining: 1, RetryUs: 642858, ResetUs: 1500 * ms}},
		{2142857, 4, Outcome{Remaining: 3, RetryUs: 1, ResetUs: 857143}},
		{2142858, 4, Outcome{Allowed: true, Remaining: 0, ResetUs: 1857142}},
	})
}

func TestSlidingLogSteps(t *testing.T) {
	l := Limit{Limit: 3, Period: time.Second, Algorithm: SlidingLog}
	s := runSteps(t, l, []step{
		{0, 1, Outcome{Allowed: true, Remaining: 2, ResetUs: 1000 * ms}},
		{200 * ms, 1, Outcome{Allowed: true, Remaining: 1, ResetUs: 1000 * ms}},
		{500 * ms, 2, Outcome{Remaining: 1, RetryUs: 500 * ms, ResetUs: 700 * ms}},
		{600 * ms, 1, Outcome{Allowed: true, Remaining: 0, ResetUs: 1000 * ms}},
		{1000 * ms, 1, Outcome{Allowed: true, Remaining: 0, ResetUs: 1000 * ms}},
	})
	if want := []int64{t0 + 200*ms, t0 + 600*ms, t0 + 1000*ms}; !cmp.Equal(want, s.Log) {
		t.Errorf("log = %v, want %v", s.Log, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l    Limit
		want string // substring of the error, "" for valid
	}{
		{PerSecond(10), ""},
		{PerMinute(120).WithBurst(30), ""},
		{Limit{Limit: 0, Period: time.Second}, "limit 0 is outside"},
		{Limit{Limit: MaxCount + 1, Period: MaxPeriod}, "limit 1000000001 is outside"},
		{Limit{Limit: 1, Period: 0}, "period 0s is outside"},
		{Limit{Limit: 1, Period: MaxPeriod + time.Microsecond}, "period"},
		{Limit{Limit: 1, Period: 1500 * time.Nanosecond}, "whole number of microseconds"},
		{Limit{Limit: 1001, Period: time.Millisecond}, "below 1µs"},
		{Limit{Limit: 1, Period: time.Second, Burst: -1}, "burst -1"},
		{Limit{Limit: 5, Period: time.Second, Burst: 6, Algorithm: FixedWindow}, "must equal limit"},
		{Limit{Limit: 5, Period: time.Second, Burst: 5, Algorithm: SlidingWindow}, ""},
		{Limit{Limit: MaxLogLimit + 1, Period: time.Hour, Algorithm: SlidingLog}, "use sliding_window"},
		{Limit{Limit: 1, Period: MaxPeriod, Burst: MaxCount}, "lower the burst"},
		{Limit{Limit: 1, Period: time.Second, Algorithm: Algorithm(9)}, "unknown algorithm"},
		{Limit{Limit: 1, Period: time.Second, Offset: time.Millisecond}, "only for fixed_window"},
		{Limit{Limit: 1, Period: time.Second, Algorithm: FixedWindow, Offset: time.Second}, "in [0, period"},
		{Limit{Limit: 1, Period: time.Second, Algorithm: FixedWindow, Offset: -time.Millisecond}, "in [0, period"},
		{Limit{Limit: 1, Period: time.Second, Algorithm: FixedWindow, Offset: 999 * time.Millisecond}, ""},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%v: Validate() = %v, want nil", tt.l, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%v: Validate() = %v, want error containing %q", tt.l, err, tt.want)
		}
	}
}

func TestCheckCost(t *testing.T) {
	l := PerSecond(10).WithBurst(5)
	for cost, wantErr := range map[int64]bool{-1: true, 0: false, 5: false, 6: true} {
		if err := l.CheckCost(cost); (err != nil) != wantErr {
			t.Errorf("CheckCost(%d) = %v, want error %v", cost, err, wantErr)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range Algorithms {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("leaky"); err == nil {
		t.Error(`ParseAlgorithm("leaky") succeeded`)
	}
}

// randomLimit returns a valid limit of algorithm a with small numbers, so
// that random runs cross many refills and windows.
func randomLimit(r *rand.Rand, a Algorithm) Limit {
	l := Limit{Limit: 1 + r.Int64N(20), Algorithm: a}
	l.Period = time.Duration(l.Limit*(1+r.Int64N(5000))) * time.Microsecond
	if r.IntN(4) == 0 { // long periods: the sliding window weights on a coarser grid
		l.Period *= time.Duration(1 + r.Int64N(5000))
	}
	if !a.Windowed() && r.IntN(2) == 0 {
		l.Burst = 1 + r.Int64N(30)
	}
	return l
}

// TestProperties checks, on seeded random runs, the rules every algorithm
// keeps: bounds, peeks and rejections change nothing, retry-after is exact
// and sufficient, reset-after is when capacity is full again.
func TestProperties(t *testing.T) {
	for _, a := range Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			seed := rand.Uint64()
			r := rand.New(rand.NewPCG(seed, 0))
			for run := 0; run < 200; run++ {
				l := randomLimit(r, a)
				var s State
				now := t0 + r.Int64N(1_000_000)
				for i := 0; i < 100; i++ {
					now += r.Int64N(int64(l.Period/time.Microsecond)/4 + 1) // +1: periods under 4µs
					cost := r.Int64N(l.Capacity() + 1)
					if msg := checkOne(l, s, now, cost); msg != "" {
						t.Fatalf("seed %d, %v, state %+v, now %d, cost %d: %s", seed, l, s, now, cost, msg)
					}
					_, s = l.Eval(s, now, cost)
				}
			}
		})
	}
}

// checkOne returns what is wrong with one Eval, or "".
func checkOne(l Limit, s State, now, cost int64) string {
	o, next := l.Eval(s, now, cost)
	switch {
	case o.Remaining < 0 || o.Remaining > l.Capacity():
		return fmt.Sprintf("remaining %d outside 0..%d", o.Remaining, l.Capacity())
	case o.RetryUs < 0 || o.ResetUs < 0:
		return fmt.Sprintf("negative retry %d or reset %d", o.RetryUs, o.ResetUs)
	case o.Allowed != (o.RetryUs == 0):
		return fmt.Sprintf("allowed %v with retry %d", o.Allowed, o.RetryUs)
	case cost == 0 && !o.Allowed:
		return "a peek was rejected"
	}
	if !o.Allowed || cost == 0 {
		if !sameState(s, next) {
			return fmt.Sprintf("state moved from %+v to %+v", s, next)
		}
	}
	if !o.Allowed {
		if r, _ := l.Eval(s, now+o.RetryUs, cost); !r.Allowed {
			return fmt.Sprintf("not admitted after waiting retry %d: %+v", o.RetryUs, r)
		}
		if r, _ := l.Eval(s, now+o.RetryUs-1, cost); r.Allowed {
			return fmt.Sprintf("admitted 1µs before retry %d: retry is not exact", o.RetryUs)
		}
		if r, _ := l.Eval(s, now+o.RetryUs/2, cost); !r.Allowed && r.RetryUs > o.RetryUs {
			return fmt.Sprintf("retry rose from %d to %d", o.RetryUs, r.RetryUs)
		}
	}
	after := s
	if o.Allowed {
		after = next
	}
	if p, _ := l.Eval(after, now+o.ResetUs, 0); p.Remaining != l.Capacity() {
		return fmt.Sprintf("remaining %d, not full, after reset %d", p.Remaining, o.ResetUs)
	}
	if o.ResetUs > 0 {
		if p, _ := l.Eval(after, now+o.ResetUs-1, 0); p.Remaining == l.Capacity() {
			return fmt.Sprintf("full 1µs before reset %d: reset is not exact", o.ResetUs)
		}
	}
	// Past reset, the stored state must carry no information: it decides
	// like a fresh key (the stores let it expire then).
	for _, c := range []int64{0, 1, l.Capacity()} {
		x, _ := l.Eval(after, now+o.ResetUs, c)
		y, _ := l.Eval(State{}, now+o.ResetUs, c)
		if x != y {
			return fmt.Sprintf("after reset the state decides %+v, a fresh key %+v", x, y)
		}
	}
	return ""
}

func sameState(a, b State) bool {
	return a.A == b.A && a.B == b.B && a.C == b.C && len(a.Log) == len(b.Log) &&
		(len(a.Log) == 0 || &a.Log[0] == &b.Log[0])
}

// TestValidFastPathAgrees: the fast path and the explaining path agree on
// random limits near every bound.
func TestValidFastPathAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	for range 20000 {
		l := Limit{
			Limit:     pick(-1, 0, 1, 2, 7, MaxLogLimit, MaxLogLimit+1, MaxCount, MaxCount+1),
			Period:    time.Duration(pick(0, 1, 1000, 1500, 1e6, 3.6e12, int64(MaxPeriod), int64(MaxPeriod)+1000)),
			Burst:     pick(-1, 0, 1, 7, MaxLogLimit, MaxCount, MaxCount+1),
			Algorithm: Algorithm(r.IntN(6)),
		}
		// The slow path names a reason exactly when the fast path refuses.
		reason := !strings.HasSuffix(l.invalid().Error(), ": "+l.String())
		if l.valid() == reason {
			t.Fatalf("%+v: valid() = %v, slow path says %v", l, l.valid(), l.invalid())
		}
	}
}
