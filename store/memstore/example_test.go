package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// Example checks a tenant's search class and its overall plan limit as one
// atomic batch, on a virtual clock.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	st := memstore.New(memstore.Config{Now: func() time.Time { return now }})
	checks := []store.Check{
		{Key: "rl:{acme}:class:search", Limit: algo.PerMinute(30).WithBurst(2), Cost: 1},
		{Key: "rl:{acme}:all", Limit: algo.PerMinute(120).WithBurst(30), Cost: 1},
	}
	var res store.Result
	for i := range 3 {
		if err := st.Take(context.Background(), checks, &res); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: allowed %v, search left %d, plan left %d, retry after %v\n",
			i+1, res.Allowed, res.Decisions[0].Remaining, res.Decisions[1].Remaining, res.RetryAfter())
	}
	now = now.Add(2 * time.Second) // one search token per 2 s
	_ = st.Take(context.Background(), checks, &res)
	fmt.Printf("after 2s: allowed %v\n", res.Allowed)
	// Output:
	// request 1: allowed true, search left 1, plan left 29, retry after 0s
	// request 2: allowed true, search left 0, plan left 28, retry after 0s
	// request 3: allowed false, search left 0, plan left 28, retry after 2s
	// after 2s: allowed true
}
