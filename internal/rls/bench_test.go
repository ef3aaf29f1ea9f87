package rls_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/internal/rls"
)

// BenchmarkShouldRateLimit: calls with two descriptors of one tenant (the
// tenant's limit and a route's under it: one atomic batch, one script call)
// over 10,000 tenants, through a real gRPC connection to the service on
// one local Redis, at 16 and 64 concurrent streams. Reports calls/s and the
// p50 and p99 latency.
//
//	go test -run '^$' -bench ShouldRateLimit -benchtime 20000x ./internal/rls
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg := rls.Config{TenantKey: "tenant", Domains: []rls.Domain{{Name: "api", Descriptors: []*rls.Descriptor{
		{Key: "tenant", Limit: &rls.RateLimit{RequestsPerUnit: 1_000_000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}, Children: []*rls.Descriptor{
			{Key: "path", Limit: &rls.RateLimit{RequestsPerUnit: 1_000_000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
		}},
	}}}}
	c := serveOnRedis(b, cfg)
	for _, streams := range []int{16, 64} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			lat := make([][]time.Duration, streams)
			var wg sync.WaitGroup
			per := b.N / streams
			b.ResetTimer()
			start := time.Now()
			for w := range streams {
				wg.Go(func() {
					for i := range per {
						tenant := fmt.Sprint("t", (w*per+i)%10_000)
						req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{
							desc("tenant=" + tenant), desc("tenant="+tenant, "path=/v1/search"),
						}}
						t0 := time.Now()
						r, err := c.ShouldRateLimit(context.Background(), req)
						lat[w] = append(lat[w], time.Since(t0))
						if err != nil || r.OverallCode != ok {
							b.Errorf("call: %v %v", r, err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50_µs")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99_µs")
		})
	}
}
