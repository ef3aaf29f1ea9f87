package limiter

import (
	"context"
	"fmt"
	"testing"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// BenchmarkDecide is one request through resolution and a two-layer batch
// (tenant × search class, tenant overall) on the memory store, over 10,000
// tenants. Run: go test -run '^$' -bench Decide -cpu 1,2 ./limiter
func BenchmarkDecide(b *testing.B) {
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: testPolicy(), Timeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	tenants := make([]string, 10_000)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%d", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = l.Decide(context.Background(), policy.Request{Tenant: tenants[i%len(tenants)], Method: "GET", Path: "/v1/search"})
			i += 7919
		}
	})
}
