package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// BenchmarkAcquire is one admitted acquire (a share and the budget, both
// too large to refuse) for one of 1,000 tenants, on each store.
func BenchmarkAcquire(b *testing.B) {
	huge := algo.Limit{Limit: 1_000_000, Period: time.Second, Burst: 1_000_000_000}
	for _, name := range []string{"memory", "redis"} {
		b.Run("store="+name, func(b *testing.B) {
			var st store.Store = memstore.New(memstore.Config{})
			if name == "redis" {
				rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(b).Addr, Prefix: fmt.Sprintf("obbench%d:", rand.Uint32())})
				if err != nil {
					b.Fatal(err)
				}
				st = rs
			}
			b.Cleanup(func() { st.Close() })
			q, err := New(Config{Store: st, Providers: map[string]Provider{"sms": {Limit: huge, Tenant: huge}}})
			if err != nil {
				b.Fatal(err)
			}
			tenants := make([]string, 1000)
			for i := range tenants {
				tenants[i] = fmt.Sprintf("tenant-%d", i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := q.AcquireWithin(ctx, "sms", tenants[i%len(tenants)], 0); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
