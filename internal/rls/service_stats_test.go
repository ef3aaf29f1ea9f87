package rls_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/internal/statsdtest"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/redisstore"
)

// statsdServer is a fake statsd server on a loopback port, over proto:
// the lines it receives, without their '\n'.
func statsdServer(t *testing.T, proto string) (addr string, lines <-chan string) {
	t.Helper()
	srv := statsdtest.Listen(t, proto)
	ch, done := make(chan string, cap(srv.Lines)), make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case l := <-srv.Lines:
				ch <- strings.TrimSuffix(l, "\n")
			case <-done:
				return
			}
		}
	}()
	return srv.Addr, ch
}

// expectLines reads lines until each of want has come; other lines may
// come too.
func expectLines(t *testing.T, lines <-chan string, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w] = true
	}
	var got []string
	deadline := time.After(10 * time.Second)
	for len(missing) > 0 {
		select {
		case l := <-lines:
			got = append(got, l)
			delete(missing, l)
		case <-deadline:
			t.Fatalf("statsd did not receive %q; it received %q", slices.Sorted(maps.Keys(missing)), got)
		}
	}
}

// TestServiceStats: envoyproxy/ratelimit's service-level statistics and
// its local cache's gauges, under its names, over TCP (its default) and
// UDP: config_load_success and _error, call.should_rate_limit.service_error
// (an invalid request) and .redis_error (Redis killed), global_shadow_mode,
// <domain>.domain_not_found (one per descriptor), the gRPC server's
// total_requests, and ratelimit.localcache.* with the local cache on.
func TestServiceStats(t *testing.T) {
	redistest.Need(t)
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			srv, err := redistest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: fmt.Sprintf("svcstats%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			addr, lines := statsdServer(t, proto)
			sink, err := statsd.New(statsd.Config{Address: addr, Protocol: proto, Interval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			c := rls.Config{
				Settings: rls.Settings{Shadow: true, LocalCacheEntries: rls.LocalCacheEntries(1000)},
				Domains: []rls.Domain{{Name: "d", Fail: policy.FailOpen, Algorithm: algo.FixedWindow, Descriptors: []*rls.Descriptor{
					{Key: "k", Limit: &rls.RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
				}}},
			}
			svc, err := rls.New(c, testGuard(t, st), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			svc.SetStatsSink(sink)
			client := serveService(t, svc)
			svc.CountConfigLoad(true)
			svc.CountConfigLoad(true)
			svc.CountConfigLoad(false)
			// Within the limit (a local cache miss), over it (a miss; the
			// global shadow mode answers OK), then from the local cache (a hit).
			for range 3 {
				if r := ask(t, client, "d", 1, desc("k=v")); r.OverallCode != rlspb.RateLimitResponse_OK {
					t.Fatalf("global shadow mode: %v", r.OverallCode)
				}
			}
			ask(t, client, "nosuch.domain", 1, desc("a=1"), desc("b=2"))
			if _, err := client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d"}); err == nil {
				t.Fatal("a request without descriptors was answered")
			}
			sink.Flush()
			expectLines(t, lines,
				"ratelimit.service.config_load_success:2|c",
				"ratelimit.service.config_load_error:1|c",
				"ratelimit.service.global_shadow_mode:2|c",
				"ratelimit.service.rate_limit.nosuch.domain.domain_not_found:2|c",
				"ratelimit.service.call.should_rate_limit.service_error:1|c",
				"ratelimit_server.ShouldRateLimit.total_requests:5|c",
				"ratelimit.service.rate_limit.d.k.over_limit_with_local_cache:1|c",
				"ratelimit.localcache.hitCount:1|g",
				"ratelimit.localcache.missCount:2|g",
				"ratelimit.localcache.lookupCount:3|g",
				"ratelimit.localcache.entryCount:1|g",
				"ratelimit.localcache.expiredCount:0|g",
				"ratelimit.localcache.evacuateCount:0|g",
				"ratelimit.localcache.overwriteCount:0|g",
			)
			srv.Kill()
			ask(t, client, "d", 1, desc("k=other")) // fails open
			sink.Flush()
			expectLines(t, lines, "ratelimit.service.call.should_rate_limit.redis_error:1|c")
		})
	}
}
