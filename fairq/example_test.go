package fairq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/fairq"
)

// A tenant that enqueues a burst of reports does not hold back another
// tenant's: workers are handed jobs in turn, tenant by tenant.
func Example() {
	q, err := fairq.NewMemory(fairq.MemoryConfig{Kinds: fairq.Kinds{"report": {Visibility: time.Minute}}})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	ctx := context.Background()
	for i := range 3 {
		q.Enqueue(ctx, "bigco", "report", []byte(fmt.Sprintf("bigco #%d", i+1)))
	}
	q.Enqueue(ctx, "smallco", "report", []byte("smallco #1"))
	for {
		l, ok, err := q.Lease(ctx, "report")
		if err != nil || !ok {
			break
		}
		fmt.Println(string(l.Payload))
		q.Ack(ctx, "report", l.ID, l.Token)
	}
	// Output:
	// bigco #1
	// smallco #1
	// bigco #2
	// bigco #3
}
