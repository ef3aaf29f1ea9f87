package rls_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// The token budget of the charge tests: 1,000 tokens a day per tenant
// (one token refills every 86.4 s, so none refills while a test runs and
// every count below is exact).
const (
	budget   = 1000
	emission = 86400 * time.Second / budget
)

// tokenConfig is domain "ai" charging the hits Envoy is told to add, on
// alg: descriptor (budget=tokens, tenant=<id>), budget a day, with the
// rate limit headers on (for Retry-After).
func tokenConfig(alg algo.Algorithm, fail policy.FailMode) rls.Config {
	c := rls.Config{TenantKey: "tenant", Domains: []rls.Domain{{Name: "ai", Algorithm: alg, Charge: true, Fail: fail, Descriptors: []*rls.Descriptor{
		{Key: "budget", Value: "tokens", Children: []*rls.Descriptor{
			{Key: "tenant", Limit: &rls.RateLimit{RequestsPerUnit: budget, Unit: rlspb.RateLimitResponse_RateLimit_DAY}},
		}},
	}}}}
	c.Settings.Headers.Enabled = true
	return c
}

// envoyCall is the call Envoy's rate limit filter makes for a route whose
// RateLimitPerRoute has the entry (generic_key budget=tokens,
// request_headers x-tenant-id → tenant) twice, as Envoy Gateway and the
// AI gateway generate it: at the request with hits_addend {number: 0},
// and with apply_on_stream_done and hits_addend {format:
// "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%"} when the
// stream ends, the format's value being the tokens. The descriptor
// carries its hits_addend; the request's own is 0 (no
// envoy.ratelimit.hits_addend filter state), as Envoy's client sends it.
func envoyCall(tenant string, hits *uint64) *rlspb.RateLimitRequest {
	d := desc("budget=tokens", "tenant="+tenant)
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	return &rlspb.RateLimitRequest{Domain: "ai", Descriptors: []*commonpb.RateLimitDescriptor{d}}
}

func check(tenant string) *rlspb.RateLimitRequest { return envoyCall(tenant, new(uint64)) }

func done(tenant string, tokens int64) *rlspb.RateLimitRequest {
	n := uint64(tokens)
	return envoyCall(tenant, &n)
}

func shouldRL(t *testing.T, c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	r, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return r
}

// signedRemaining reads a tenant's budget left, signed (negative: a
// debt), in the store itself: a settlement of 0, which moves nothing.
func signedRemaining(t *testing.T, st store.Store, alg algo.Algorithm, tenant string) int64 {
	t.Helper()
	key := rls.StoreKey("ai", "tenant", rls.Entry{Key: "budget", Value: "tokens"}, rls.Entry{Key: "tenant", Value: tenant})
	var res store.SettleResult
	lim := algo.Limit{Limit: budget, Period: 24 * time.Hour, Algorithm: alg}
	if err := st.Settle(context.Background(), fmt.Sprintf("read%d", time.Now().UnixNano()), []store.Adjustment{{Key: key, Limit: lim}}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Settled[0].Remaining
}

// chargeStores are the stores the charge tests run on: memory, Redis and
// Redis Cluster (under -short, memory alone).
func chargeStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	stores := map[string]func(t *testing.T) store.Store{"memory": func(*testing.T) store.Store { return memstore.New(memstore.Config{}) }}
	if testenv.Short() {
		return stores
	}
	redis := func(url string) func(t *testing.T) store.Store {
		return func(t *testing.T) store.Store {
			st, err := redisstore.New(redisstore.Config{URL: url, Prefix: fmt.Sprintf("charge%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}
	stores["redis"] = redis("redis://" + redistest.Shared(t).Addr)
	stores["cluster"] = redis("redis-cluster://" + strings.Join(redistest.SharedCluster(t).Addrs(), ","))
	return stores
}

// TestEnvoyStreamDoneCharges plays the calls Envoy makes for a token
// budget charged when each stream ends: a check (hits_addend 0) before
// each request, then the stream's tokens (hits_addend N, the answer
// ignored). Tokens past the budget are charged in full, into debt: the
// charged total is the sum of the tokens exactly, read in the store; the
// check admits until the tenant is in debt, then refuses with the time
// the debt takes to pay back. In debt, a request of the default one hit
// is refused and charged nothing, one with hits Envoy was told to add is
// charged and refused (a call shaped as a charge admits nothing), a
// stream admitted earlier that ends now is charged in full, and a charge past one burst of debt stops at the
// bound. Another tenant is not touched. On memory, Redis and Redis
// Cluster; GCRA and the token bucket.
func TestEnvoyStreamDoneCharges(t *testing.T) {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	for name, newStore := range chargeStores(t) {
		for _, alg := range []algo.Algorithm{algo.GCRA, algo.TokenBucket} {
			t.Run(name+"/"+alg.String(), func(t *testing.T) {
				st := newStore(t)
				c, _ := serve(t, tokenConfig(alg, policy.FailOpen), st)
				var total int64 // the tokens of the streams that ended
				var refused *rlspb.RateLimitResponse
				for req := 1; refused == nil; req++ {
					r := shouldRL(t, c, check("acme"))
					if inDebt := total > budget; (r.OverallCode == over) != inDebt {
						t.Fatalf("seed %d: request %d, %d tokens charged: check %s, want OVER_LIMIT only in debt", seed, req, total, codesOf(r))
					}
					if r.OverallCode == over {
						refused = r
						break
					}
					n := 1 + rng.Int64N(150)
					total += n
					if r := shouldRL(t, c, done("acme", n)); (r.OverallCode == over) != (total > budget) {
						t.Fatalf("seed %d: stream %d of %d tokens, %d in all: %s, want OVER_LIMIT once past the budget", seed, req, n, total, codesOf(r))
					}
					if got := signedRemaining(t, st, alg, "acme"); got != budget-total {
						t.Fatalf("seed %d: after %d streams of %d tokens in all, the budget left is %d, want %d: not every token was charged once", seed, req, total, got, budget-total)
					}
				}
				// Refused in debt, until the debt is paid back at the
				// budget's rate; the budget is whole again after all the
				// tokens are.
				debt := time.Duration(total-budget) * emission
				h := map[string]string{}
				for _, hv := range refused.ResponseHeadersToAdd {
					h[hv.Key] = hv.Value
				}
				retry, _ := strconv.ParseInt(h["Retry-After"], 10, 64)
				if s := time.Duration(retry) * time.Second; s > debt+time.Second || s < debt-time.Minute {
					t.Fatalf("seed %d: %d tokens charged, Retry-After %q, want the %v the debt of %d takes to pay back", seed, total, h["Retry-After"], debt, total-budget)
				}
				if d := refused.Statuses[0].DurationUntilReset.AsDuration(); d > time.Duration(total)*emission || d < time.Duration(total)*emission-time.Minute {
					t.Fatalf("seed %d: %d tokens charged, duration until reset %v, want %v", seed, total, d, time.Duration(total)*emission)
				}
				if r := shouldRL(t, c, check("beta")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != budget {
					t.Fatalf("another tenant: %s, remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
				}
				// A request of the default one hit is refused, charged
				// nothing.
				plain := &rlspb.RateLimitRequest{Domain: "ai", Descriptors: []*commonpb.RateLimitDescriptor{desc("budget=tokens", "tenant=acme")}}
				if r := shouldRL(t, c, plain); r.OverallCode != over || signedRemaining(t, st, alg, "acme") != budget-total {
					t.Fatalf("in debt, a request of one hit: %s, remaining %d, want OVER_LIMIT and %d", codesOf(r), signedRemaining(t, st, alg, "acme"), budget-total)
				}
				// A call that is not a check carrying hits Envoy was told
				// to add is charged, and refused: in debt, nothing passes.
				total += 5
				if r := shouldRL(t, c, done("acme", 5)); r.OverallCode != over || signedRemaining(t, st, alg, "acme") != budget-total {
					t.Fatalf("in debt, hits_addend 5: %s, remaining %d, want OVER_LIMIT and %d", codesOf(r), signedRemaining(t, st, alg, "acme"), budget-total)
				}
				// A stream admitted before the debt ends now: charged.
				n := 1 + rng.Int64N(150)
				total += n
				shouldRL(t, c, done("acme", n))
				if got := signedRemaining(t, st, alg, "acme"); got != budget-total {
					t.Fatalf("seed %d: a stream of %d tokens ending in debt left %d, want %d", seed, n, got, budget-total)
				}
				// Past one burst of debt, a charge stops at the bound.
				shouldRL(t, c, done("acme", 5*budget))
				if got := signedRemaining(t, st, alg, "acme"); got != -budget {
					t.Fatalf("a charge past the debt bound left %d, want -%d (one burst)", got, budget)
				}
			})
		}
	}
}

// flakySettle is a store whose settlements fail: the next failAfter ones
// after they were applied (a call that timed out after its script ran),
// or every one without applying it while down.
type flakySettle struct {
	store.Store
	failAfter atomic.Int32
	down      atomic.Bool
}

func (f *flakySettle) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if f.down.Load() {
		return fmt.Errorf("%w: connection refused", store.ErrUnavailable)
	}
	err := f.Store.Settle(ctx, id, adjs, res)
	if f.failAfter.Add(-1) >= 0 {
		return fmt.Errorf("%w: timed out", store.ErrUnavailable)
	}
	return err
}

// TestChargeOncePerCall: a charge whose store call timed out after it ran
// is retried with the call's settlement id and applied once; two calls of
// the same tokens are two charges (each call is one stream's end). With
// the store out, a fail-open domain answers OK and a fail-closed one
// UNAVAILABLE; the charge is not applied (the guard counts it failed).
func TestChargeOncePerCall(t *testing.T) {
	for _, fail := range []policy.FailMode{policy.FailOpen, policy.FailClosed} {
		t.Run(fail.String(), func(t *testing.T) {
			st := &flakySettle{Store: memstore.New(memstore.Config{})}
			c, _ := serve(t, tokenConfig(algo.GCRA, fail), st)
			st.failAfter.Store(1)
			shouldRL(t, c, done("acme", 300))
			if got := signedRemaining(t, st, algo.GCRA, "acme"); got != budget-300 {
				t.Fatalf("a charge retried after a timeout left %d, want %d", got, budget-300)
			}
			shouldRL(t, c, done("acme", 300))
			if got := signedRemaining(t, st, algo.GCRA, "acme"); got != budget-600 {
				t.Fatalf("a second call left %d, want %d", got, budget-600)
			}
			st.down.Store(true)
			_, err := c.ShouldRateLimit(context.Background(), done("acme", 300))
			if want := map[policy.FailMode]codes.Code{policy.FailOpen: codes.OK, policy.FailClosed: codes.Unavailable}[fail]; status.Code(err) != want {
				t.Fatalf("store out, fail %v: %v, want %v", fail, err, want)
			}
			st.down.Store(false)
			if got := signedRemaining(t, st, algo.GCRA, "acme"); got != budget-600 {
				t.Fatalf("a charge the store never took left %d, want %d", got, budget-600)
			}
		})
	}
}
