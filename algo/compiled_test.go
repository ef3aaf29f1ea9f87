package algo

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestDivisor(t *testing.T) {
	const max53 = 1<<53 - 1
	ds := []int64{1, 2, 3, 7, 10, 1000, 999_983, 1 << 20, 3_600_000_000, 1<<32 + 1, max53, 1<<62 + 3}
	ns := []int64{0, 1, 2, 3, 999, 1000, 1001, 1 << 32, max53 - 1, max53, 1<<62 - 1, 1<<63 - 1}
	for _, d := range ds {
		v := newDivisor(d)
		for _, n := range ns {
			for _, m := range []int64{n, n - n%d, n - n%d - 1, n - n%d + d - 1} {
				if m < 0 {
					continue
				}
				if got, want := v.div(m), m/d; got != want {
					t.Fatalf("%d / %d = %d, want %d", m, d, got, want)
				}
			}
		}
	}
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 0))
	for range 200_000 {
		d := r.Int64N(1<<r.IntN(62)) + 1
		n := r.Int64N(1 << r.IntN(63))
		if got, want := newDivisor(d).div(n), n/d; got != want {
			t.Fatalf("seed %d: %d / %d = %d, want %d", seed, n, d, got, want)
		}
	}
}

func TestCompiledMatchesEval(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range 2_000 {
		l := wideLimit(r)
		if i%2 == 0 {
			l = randomLimit(r, Algorithm(r.IntN(int(numAlgorithms))))
		}
		c, err := l.Compile()
		if err != nil {
			t.Fatalf("seed %d: Compile(%v): %v", seed, l, err)
		}
		if c.Limit() != l {
			t.Fatalf("Limit() = %v, want %v", c.Limit(), l)
		}
		var a, b, in State
		now := int64(1_700_000_000_000_000) + r.Int64N(1e12)
		for step := range 40 {
			now += r.Int64N(int64(l.Period/time.Microsecond)/max(1, l.Limit)*3 + 1)
			cost := r.Int64N(l.Capacity() + 1)
			oa, na := l.Eval(a, now, cost)
			ob, nb := c.Eval(b, now, cost)
			oc := c.Apply(&in, now, cost)
			if oa != ob || !equalState(na, nb) || oa != oc || !equalState(na, in) {
				t.Fatalf("seed %d, limit %d %v, step %d: Eval = %+v %+v, Compiled.Eval = %+v %+v, Apply = %+v %+v", seed, i, l, step, oa, na, ob, nb, oc, in)
			}
			a, b = na, nb
		}
	}
	if _, err := (Limit{Limit: 0, Period: time.Second}).Compile(); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("Compile of an invalid limit: %v, want ErrInvalidLimit", err)
	}
}

// wideLimit is a valid limit of any algorithm with numbers up to an hour
// and a thousand, for the divisions that small limits do not reach.
func wideLimit(r *rand.Rand) Limit {
	for {
		l := Limit{
			Limit:     r.Int64N(1000) + 1,
			Period:    time.Duration(r.Int64N(3_600_000_000)+1) * time.Microsecond,
			Algorithm: Algorithm(r.IntN(int(numAlgorithms))),
		}
		if !l.Algorithm.Windowed() && r.IntN(2) == 0 {
			l.Burst = r.Int64N(1000) + 1
		}
		if l.Validate() == nil {
			return l
		}
	}
}

func equalState(a, b State) bool {
	return a.A == b.A && a.B == b.B && a.C == b.C && slices.Equal(a.Log, b.Log)
}
