package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

func ExampleNew() {
	l, err := limiter.New(limiter.Config{
		// A stopped clock, so that the output is exact.
		Store: memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1e9, 0) }}),
		Policy: policy.Policy{
			DefaultPlan:  "free",
			DefaultClass: "read",
			Plans: map[string]policy.Plan{
				"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 4}}}},
			},
			Classes: map[string]policy.Class{"read": {Share: 1}, "search": {Share: 0.5}},
			Routes:  []policy.Route{{Pattern: "GET /v1/search", Class: "search", Cost: 1}},
		},
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		d, _ := l.Decide(context.Background(), policy.Request{Tenant: "acme", Method: "GET", Path: "/v1/search"})
		fmt.Println(d.Allowed, d.Reason, d.Policy, d.RetryAfter)
	}
	// Output:
	// true allowed free.search.1m 0s
	// true allowed free.search.1m 0s
	// false limited free.search.1m 1s
}
