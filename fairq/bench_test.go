package fairq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fairgate/fairgate/fairq"
)

// BenchmarkQueue: enqueue alone, and a whole job's cycle (enqueue, lease,
// ack), over 100 tenants, on memory and on Redis Streams, with 1 and 16
// concurrent callers per core.
//
//	go test -run '^$' -bench Queue -cpu 2 ./fairq
func BenchmarkQueue(b *testing.B) {
	for _, be := range backends()[:2] {
		for _, op := range []string{"enqueue", "cycle"} {
			for _, callers := range []int{1, 16} {
				b.Run(fmt.Sprintf("backend=%s/op=%s/callers=%d", be.name, op, callers), func(b *testing.B) {
					benchQueue(b, be, op, callers)
				})
			}
		}
	}
}

func benchQueue(b *testing.B, be backend, op string, callers int) {
	q := be.new(b, be.shared(b), nil)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(callers)
	b.RunParallel(func(pb *testing.PB) {
		n := rand.IntN(100)
		for pb.Next() {
			n++
			if _, err := q.Enqueue(ctx, fmt.Sprint("t", n%100), "import", []byte(`{"n":1}`)); err != nil {
				b.Error(err)
				return
			}
			if op == "enqueue" {
				continue
			}
			l, ok, err := q.Lease(ctx, "import")
			if err != nil || !ok {
				b.Errorf("lease: %v %v", ok, err)
				return
			}
			if err := q.Ack(ctx, "import", l.ID, l.Token); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

var _ fairq.Queue
