package algo_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store/storetest"
)

// t0 is the start time of the package's own tests.
const t0 = int64(1_000_000_000)

// TestSustainedBound runs each algorithm at full pressure on a virtual clock
// and checks the bound docs/algorithms.md states for it.
func TestSustainedBound(t *testing.T) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			l := algo.Limit{Limit: 50, Period: 100 * time.Millisecond, Algorithm: a}
			if !a.Windowed() {
				l.Burst = 20
			}
			var s algo.State
			var admitted []int64
			r := rand.New(rand.NewPCG(1, 2))
			now := t0 + 12345
			for now < t0+5_000_000 {
				now += r.Int64N(3000)
				o, next := l.Eval(s, now, 1)
				if o.Allowed {
					s = next
					admitted = append(admitted, now)
				}
			}
			if msg := storetest.CheckBound(l, admitted); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}
