package quota_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store/memstore"
)

// An SMS provider allows the whole platform 10 messages a second; each
// tenant may use 2 of them. A tenant that sends more waits, and a tenant
// that would wait past its deadline gets the delay to re-queue with.
func Example() {
	q, err := quota.New(quota.Config{
		Store: memstore.New(memstore.Config{}),
		Providers: map[string]quota.Provider{
			"sms": {Limit: algo.PerSecond(10), Tenant: algo.PerSecond(2).WithBurst(2)},
		},
		MaxWait: time.Millisecond, // give up at once, for the example
	})
	if err != nil {
		panic(err)
	}
	for i := range 3 {
		err := q.Acquire(context.Background(), "sms", "acme")
		var de *quota.DeadlineError
		switch {
		case err == nil:
			fmt.Printf("message %d: send\n", i+1)
		case errors.As(err, &de):
			fmt.Printf("message %d: re-queue (over the tenant's share: %v)\n", i+1, de.Share)
		default:
			fmt.Println(err)
		}
	}
	// Output:
	// message 1: send
	// message 2: send
	// message 3: re-queue (over the tenant's share: true)
}
