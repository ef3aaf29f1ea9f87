package limiter

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

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

// BenchmarkDecideTraced is BenchmarkDecide with every decision traced and
// sampled (spans made and dropped: no exporter), for the cost of tracing
// on; BenchmarkDecide is the cost with it off.
//
//	go test -run '^$' -bench 'Decide(Traced)?$' -benchmem ./limiter/
func BenchmarkDecideTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: testPolicy(), Timeout: -1, Tracer: tp.Tracer("bench")})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = l.Decide(context.Background(), policy.Request{Tenant: fmt.Sprintf("tenant-%d", i%10_000), Method: "GET", Path: "/v1/search"})
			i += 7919
		}
	})
}
