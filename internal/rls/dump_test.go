package rls

import (
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestDump: one line per descriptor with a limit, full keys as
// envoyproxy/ratelimit's statistics name them (key_value, joined by dots
// under the domain), unlimited ones as UNKNOWN 0, in the config's order.
func TestDump(t *testing.T) {
	c := Config{Domains: []Domain{
		{Name: "edge", Descriptors: []*Descriptor{
			{Key: "remote_address", Limit: &RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_SECOND}},
			{Key: "path", Value: "/login", QuotaMode: true, Children: []*Descriptor{
				{Key: "user", Shadow: true, Limit: &RateLimit{RequestsPerUnit: 3, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}},
				{Key: "admin", Value: "yes", Limit: &RateLimit{Unlimited: true}},
			}},
		}},
		{Name: "empty"},
		{Name: "b", Descriptors: []*Descriptor{{Key: "k", Limit: &RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_DAY}}}},
	}}
	s, err := New(c, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := s.Dump(&b); err != nil {
		t.Fatal(err)
	}
	want := `edge.remote_address: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false
edge.path_/login.user: unit=MINUTE requests_per_unit=3, shadow_mode: true, quota_mode: false
edge.path_/login.admin_yes: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
b.k: unit=DAY requests_per_unit=1, shadow_mode: false, quota_mode: false
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	s.SetConfig(Config{})
	b.Reset()
	if err := s.Dump(&b); err != nil || b.Len() != 0 {
		t.Errorf("no domain: %q %v, want nothing", b.String(), err)
	}
}
