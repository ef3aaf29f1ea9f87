package algo_test

import (
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// ExampleLimit_Eval drives GCRA by hand: the pure core takes the state and
// the time and returns the decision and the next state.
func ExampleLimit_Eval() {
	l := algo.Limit{Limit: 10, Period: time.Second, Burst: 3} // one unit per 100 ms
	now := int64(1_000_000_000)                               // µs since the epoch
	var s algo.State
	for _, cost := range []int64{1, 2, 1} {
		o, next := l.Eval(s, now, cost)
		if o.Allowed {
			s = next
		}
		fmt.Println(l.String(), "take", cost, "->", o.Decision(l).Allowed, o.Remaining, o.Decision(l).RetryAfter)
	}
	// Output:
	// 10 per 1s (burst 3, gcra) take 1 -> true 2 0s
	// 10 per 1s (burst 3, gcra) take 2 -> true 0 0s
	// 10 per 1s (burst 3, gcra) take 1 -> false 0 100ms
}
