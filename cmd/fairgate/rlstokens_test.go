package main

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/store/guard"
	"github.com/fairgate/fairgate/store/memstore"
)

// aiGatewayTokens is the hits_addend format of the stream-done entry: the
// total tokens Envoy AI Gateway's ext_proc filter writes.
const aiGatewayTokens = "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"

// dynamicMetadataFormat is a hits_addend format of one metadata value.
var dynamicMetadataFormat = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^:()]+):([^:()]+)\)%$`)

// envoyCall is the call Envoy's rate limit filter makes for these
// RateLimitPerRoute entries on request r: each entry's descriptor with its
// hits_addend, a number as it is, a format read from the stream's dynamic
// metadata (metadata["namespace:key"]); a format whose value is absent or
// not a count drops the descriptor, as Envoy does. The request's own
// hits_addend is 0 (no envoy.ratelimit.hits_addend filter state). nil
// when no descriptor is left: Envoy makes no call.
func envoyCall(t *testing.T, domain string, entries []*routepb.RateLimit, r exampleRequest, metadata map[string]string) *rlspb.RateLimitRequest {
	t.Helper()
	req := &rlspb.RateLimitRequest{Domain: domain}
	for _, e := range entries {
		ds := descriptorsOf(t, []*routepb.RateLimit{e}, r)
		if len(ds) == 0 {
			continue
		}
		d := ds[0]
		switch h := e.GetHitsAddend(); {
		case h == nil:
		case h.GetNumber() != nil:
			d.HitsAddend = wrapperspb.UInt64(h.GetNumber().GetValue())
		default:
			m := dynamicMetadataFormat.FindStringSubmatch(h.GetFormat())
			if m == nil {
				t.Fatalf("hits_addend format %q: the example's envoyCall reads %%DYNAMIC_METADATA(namespace:key)%% only: teach it", h.GetFormat())
			}
			n, err := strconv.ParseUint(metadata[m[1]+":"+m[2]], 10, 64)
			if err != nil || n > 1_000_000_000 {
				continue // not a count Envoy takes: the descriptor is left out
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	if len(req.Descriptors) == 0 {
		return nil
	}
	return req
}

// TestRLSTokenExample checks examples/rls's token budget, which cannot run
// here (no Envoy): envoy-tokens.yaml decodes strictly into Envoy's
// Bootstrap (go-control-plane's types, with Envoy's validation rules); its
// route's RateLimitPerRoute has the entry Envoy applies at the request
// (hits_addend number 0) and the one it applies when the stream ends
// (apply_on_stream_done, hits_addend from Envoy AI Gateway's token
// metadata), both making the same descriptor. fairgate, started from
// fairgate-tokens.yaml, answers those calls: the check admits, the
// stream's tokens past the budget are charged in full (the answer Envoy
// ignores), and the tenant's next check is refused until the debt is paid
// back, another tenant's not. A stream that ends without a count sends no
// call.
func TestRLSTokenExample(t *testing.T) {
	var boot bootstrappb.Bootstrap
	protoYAML(t, "examples/rls/envoy-tokens.yaml", mustRead(t, "../../examples/rls/envoy-tokens.yaml"), &boot, true)
	clusters := map[string]*clusterpb.Cluster{}
	for _, c := range boot.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	var hcm hcmpb.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("envoy-tokens.yaml: %v", err)
	}
	f := hcm.GetHttpFilters()[0]
	var rl ratelimitpb.RateLimit
	if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil || f.GetName() != "envoy.filters.http.ratelimit" {
		t.Fatalf("envoy-tokens.yaml: filter %q: %v", f.GetName(), err)
	}
	if rl.GetDomain() != "ai" || !rl.GetFailureModeDeny() {
		t.Fatalf("envoy-tokens.yaml: domain %q, failure_mode_deny %v", rl.GetDomain(), rl.GetFailureModeDeny())
	}
	c := clusters[rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if c == nil {
		t.Fatal("envoy-tokens.yaml: the filter calls a cluster that is not defined")
	}
	checkRLSCluster(t, "envoy-tokens.yaml", c)
	route := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0]
	var per ratelimitpb.RateLimitPerRoute
	if err := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"].UnmarshalTo(&per); err != nil {
		t.Fatalf("envoy-tokens.yaml: the route's envoy.filters.http.ratelimit is not a RateLimitPerRoute: %v", err)
	}
	if err := per.ValidateAll(); err != nil {
		t.Fatalf("envoy-tokens.yaml: %v", err)
	}
	var atRequest, onStreamDone []*routepb.RateLimit
	for _, e := range per.GetRateLimits() {
		if e.GetApplyOnStreamDone() {
			onStreamDone = append(onStreamDone, e)
		} else {
			atRequest = append(atRequest, e)
		}
	}
	if len(atRequest) != 1 || atRequest[0].GetHitsAddend().GetNumber() == nil || atRequest[0].GetHitsAddend().GetNumber().GetValue() != 0 {
		t.Fatalf("envoy-tokens.yaml: at the request %v, want one entry with hits_addend {number: 0} (a check)", atRequest)
	}
	if len(onStreamDone) != 1 || onStreamDone[0].GetHitsAddend().GetFormat() != aiGatewayTokens {
		t.Fatalf("envoy-tokens.yaml: on stream done %v, want one entry with hits_addend {format: %q}", onStreamDone, aiGatewayTokens)
	}

	cfg, err := config.Parse("../../examples/rls/fairgate-tokens.yaml", mustRead(t, "../../examples/rls/fairgate-tokens.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(guard.Config{Store: memstore.New(memstore.Config{}), Fallback: memstore.New(memstore.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(cfg.RLS, g, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	acme := exampleRequest{headers: map[string]string{"x-tenant-id": "acme"}}
	check := envoyCall(t, "ai", atRequest, acme, nil)
	if d := check.GetDescriptors()[0]; d.GetHitsAddend().GetValue() != 0 || len(d.GetEntries()) != 2 {
		t.Fatalf("the request's call: %v, want one descriptor of hits_addend 0", check)
	}
	if r := ask(check); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 200000 {
		t.Fatalf("the check: %v, want OK under 200,000 tokens a minute", r)
	}
	if envoyCall(t, "ai", onStreamDone, acme, nil) != nil {
		t.Fatal("a stream that ended without a token count: Envoy leaves the descriptor out and makes no call")
	}
	// A stream of 250,000 tokens, 50,000 past the budget: charged in full.
	done := envoyCall(t, "ai", onStreamDone, acme, map[string]string{"io.envoy.ai_gateway:llm_total_token": "250000"})
	if d := done.GetDescriptors()[0]; d.GetHitsAddend().GetValue() != 250000 || !slicesEqualEntries(d.GetEntries(), check.GetDescriptors()[0].GetEntries()) {
		t.Fatalf("the stream's call %v: want the check's descriptor with hits_addend 250000", done)
	}
	ask(done)
	r := ask(check)
	if d := r.GetStatuses()[0].GetDurationUntilReset().AsDuration(); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || d > 75*time.Second || d < 70*time.Second {
		t.Fatalf("the check after 250,000 tokens: %v, duration until reset %v, want OVER_LIMIT and the 75 s that 250,000 tokens take to refill", r.GetOverallCode(), d)
	}
	beta := envoyCall(t, "ai", atRequest, exampleRequest{headers: map[string]string{"x-tenant-id": "beta"}}, nil)
	if r := ask(beta); r.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Fatalf("another tenant's check: %v", r.GetOverallCode())
	}
}

// slicesEqualEntries reports whether two descriptors have the same
// entries.
func slicesEqualEntries(a, b []*commonpb.RateLimitDescriptor_Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetKey() != b[i].GetKey() || a[i].GetValue() != b[i].GetValue() {
			return false
		}
	}
	return true
}
