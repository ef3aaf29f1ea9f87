package rls_test

import (
	"context"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestOverrideKeySpace: a descriptor's own limit (Envoy's per-route
// override) is counted apart from the configured limit, so one caller's
// override of 1 per day cannot lock the configured limit's key, and two
// overrides of different numbers do not share a counter.
func TestOverrideKeySpace(t *testing.T) {
	cfg := rls.Config{TenantKey: "tenant", Domains: []rls.Domain{{Name: "api", Descriptors: []*rls.Descriptor{
		{Key: "tenant", Limit: &rls.RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
	}}}}
	withOverride := func(n uint32, unit typepb.RateLimitUnit) *rlspb.RateLimitRequest {
		d := desc("tenant=victim2")
		d.Limit = &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		return &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{d}, HitsAddend: 1}
	}
	askReq := func(t *testing.T, c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		r, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for name, c := range map[string]rlspb.RateLimitServiceClient{
		"memory": func() rlspb.RateLimitServiceClient { c, _ := serve(t, cfg, memstore.New(memstore.Config{})); return c }(),
		"redis":  serveOnRedis(t, cfg),
	} {
		t.Run(name, func(t *testing.T) {
			for i, want := range []rlspb.RateLimitResponse_Code{ok, over} {
				if r := askReq(t, c, withOverride(1, typepb.RateLimitUnit_DAY)); r.OverallCode != want {
					t.Fatalf("override call %d: %s, want %v", i, codesOf(r), want)
				}
			}
			r := ask(t, c, "api", 1, desc("tenant=victim2"))
			if r.OverallCode != ok || r.Statuses[0].LimitRemaining != 9 {
				t.Fatalf("the configured limit after an override of 1 per day: %s remaining %d, want OK with 9 left", codesOf(r), r.Statuses[0].LimitRemaining)
			}
			if r := askReq(t, c, withOverride(2, typepb.RateLimitUnit_DAY)); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 1 {
				t.Fatalf("another override's numbers: %s remaining %d, want a counter of its own", codesOf(r), r.Statuses[0].LimitRemaining)
			}
		})
	}
}

// TestNeverPassingHasNoRetryHint: in a domain decided by fairgate's way,
// more hits than the limit can ever hold is over the limit with no duration and no Retry-After, since waiting
// never helps (as the HTTP API answers cost > burst).
func TestNeverPassingHasNoRetryHint(t *testing.T) {
	c, _ := serve(t, fairgateWay(examplesConfig(t)), memstore.New(memstore.Config{}))
	r := ask(t, c, "internal", 101, desc("azure=y"))
	if r.OverallCode != over {
		t.Fatalf("101 hits on 100 per minute: %s", codesOf(r))
	}
	if r.Statuses[0].DurationUntilReset != nil {
		t.Errorf("duration until reset %v, want none", r.Statuses[0].DurationUntilReset.AsDuration())
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == "Retry-After" {
			t.Errorf("Retry-After %s, want none", h.Value)
		}
	}
}
