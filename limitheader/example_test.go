package limitheader_test

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// A rejection of a tenant's layer of 120 per minute with a burst of 30, in
// each form.
func ExampleMap() {
	d := limiter.Decision{
		Policy: "free.tenant.1m", RetryAfter: 1500 * time.Millisecond, Now: time.Unix(1_800_000_000, 0),
		Layers: []limiter.LayerDecision{{
			Layer:      policy.Layer{Policy: "free.tenant.1m", Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 30}},
			RetryAfter: 1500 * time.Millisecond, ResetAfter: 14500 * time.Millisecond,
		}},
	}
	for _, f := range []limitheader.Form{limitheader.Draft, limitheader.Structured, limitheader.X} {
		h := limitheader.Map(f, d)
		for _, name := range slices.Sorted(maps.Keys(h)) {
			fmt.Printf("%s: %s\n", name, h[name])
		}
		fmt.Println()
	}
	// Output:
	// RateLimit-Limit: 30
	// RateLimit-Remaining: 0
	// RateLimit-Reset: 15
	// Retry-After: 2
	//
	// RateLimit: "free.tenant.1m";r=0;t=15
	// RateLimit-Policy: "free.tenant.1m";q=30;w=15
	// Retry-After: 2
	//
	// Retry-After: 2
	// X-RateLimit-Limit: 30
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1800000015
}
