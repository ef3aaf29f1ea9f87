package limiter

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
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

// BenchmarkDecideSlots is a request with two concurrency layers (the
// tenant's and its class's) and a rate layer on a real Redis: its slots
// taken, its rate decided, its slots given back, over 1,000 tenants; the
// store round trips per request are what it measures.
//
//	go test -run '^$' -bench DecideSlots -benchtime 5000x -count 5 ./limiter/
func BenchmarkDecideSlots(b *testing.B) {
	srv, err := redistest.Start()
	if err != nil {
		b.Skip(err)
	}
	defer srv.Close()
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "bench:"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	p := slotPolicy()
	p.Plans["pro"] = policy.Plan{Name: "pro", Rules: []policy.Rule{{Name: "1s", Limit: algo.Limit{Limit: 1_000_000, Period: time.Second}}}, Concurrency: 100}
	l, err := New(Config{Store: st, Policy: p, NoNearCache: true})
	if err != nil {
		b.Fatal(err)
	}
	calls0, _ := redistest.ScriptCalls(srv.Addr)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d, err := l.Decide(context.Background(), policy.Request{Tenant: fmt.Sprintf("tenant-%d", i%1000), Method: "GET", Path: "/export"})
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
		d.Slots.Release(context.Background())
	}
	b.StopTimer()
	calls, _ := redistest.ScriptCalls(srv.Addr)
	b.ReportMetric(float64(calls-calls0)/float64(b.N), "scripts/op")
}
