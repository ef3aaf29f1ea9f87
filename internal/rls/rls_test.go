package rls_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

func TestMain(m *testing.M) {
	os.Exit(redistest.MainWithCluster(m))
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

// examplesConfig is every testdata/example*.yaml: envoyproxy/ratelimit's
// documented examples, as they are.
func examplesConfig(t testing.TB) rls.Config {
	t.Helper()
	files, _ := filepath.Glob("testdata/example*.yaml")
	var c rls.Config
	for _, f := range files {
		ds, err := config.ParseRLSFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c.Domains = append(c.Domains, ds...)
	}
	return c
}

// testGuard is a guard of st (its timeout short, for outage tests).
func testGuard(t testing.TB, st store.Store) *guard.Guard {
	t.Helper()
	return testGuardTimeout(t, st, 50*time.Millisecond)
}

// testGuardTimeout is testGuard with a store call deadline of its own.
func testGuardTimeout(t testing.TB, st store.Store, timeout time.Duration) *guard.Guard {
	t.Helper()
	g, err := guard.New(guard.Config{Store: st, Timeout: timeout, Fallback: memstore.New(memstore.Config{}), BreakerCooldown: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// serveOnRedis serves c on the test Redis, under a key prefix of its own.
func serveOnRedis(t testing.TB, c rls.Config) rlspb.RateLimitServiceClient {
	t.Helper()
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: fmt.Sprintf("rls%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// A healthy Redis: a deadline no loaded test machine passes, so that
	// no call is decided by the fail mode and the counts stay exact
	// (TestTenantBatch failed open at 50 ms under a cold make test).
	svc, err := rls.New(c, testGuardTimeout(t, st, 2*time.Second), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, _ := serveServiceConn(t, svc)
	return client
}

// serve runs the service on a loopback port and returns a real gRPC client.
func serve(t testing.TB, c rls.Config, st store.Store) (rlspb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	svc, err := rls.New(c, testGuard(t, st), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return serveServiceConn(t, svc)
}

// serveService serves svc and returns a client.
func serveService(t testing.TB, svc *rls.Service) rlspb.RateLimitServiceClient {
	c, _ := serveServiceConn(t, svc)
	return c
}

func serveServiceConn(t testing.TB, svc *rls.Service) (rlspb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := rls.NewServer(svc, nil)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn), conn
}

// desc builds a descriptor from "key=value" entries.
func desc(entries ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func ask(t testing.TB, c rlspb.RateLimitServiceClient, domain string, hits uint32, ds ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return r
}

func codesOf(r *rlspb.RateLimitResponse) string {
	s := r.OverallCode.String() + ":"
	for _, st := range r.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

// TestDocumentedExamples runs envoyproxy/ratelimit's documented examples
// (its README's) and expects the answers it gives: fixed windows, and
// every hit counted, those of refused requests too.
func TestDocumentedExamples(t *testing.T) {
	c, _ := serve(t, examplesConfig(t), memstore.New(memstore.Config{}))
	expect := func(t *testing.T, r *rlspb.RateLimitResponse, want string) {
		t.Helper()
		if got := codesOf(r); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	t.Run("1 key and value", func(t *testing.T) {
		expect(t, ask(t, c, "mongo_cps", 500, desc("database=users")), "OK: OK")
		expect(t, ask(t, c, "mongo_cps", 50, desc("database=users")), "OVER_LIMIT: OVER_LIMIT")
		expect(t, ask(t, c, "mongo_cps", 1, desc("database=default")), "OK: OK") // its own counter
		expect(t, ask(t, c, "mongo_cps", 1, desc("database=other")), "OK: OK")   // no rule
	})
	t.Run("2 nested and several descriptors", func(t *testing.T) {
		for range 5 {
			expect(t, ask(t, c, "messaging", 1, desc("message_type=marketing", "to_number=2061111111"), desc("to_number=2061111111")), "OK: OK OK")
		}
		expect(t, ask(t, c, "messaging", 1, desc("message_type=marketing", "to_number=2061111111"), desc("to_number=2061111111")), "OVER_LIMIT: OVER_LIMIT OK")
		// Another number has its own 5 a day; a plain message to the first
		// still has most of its 100.
		expect(t, ask(t, c, "messaging", 1, desc("message_type=marketing", "to_number=2062222222")), "OK: OK")
		r := ask(t, c, "messaging", 1, desc("to_number=2061111111"))
		expect(t, r, "OK: OK")
		if got := r.Statuses[0].LimitRemaining; got != 93 {
			t.Fatalf("to_number remaining %d, want 93 (100 less the 6 marketing calls, the refused one included, and this one)", got)
		}
	})
	t.Run("3 most specific match", func(t *testing.T) {
		expect(t, ask(t, c, "edge_proxy_per_ip", 10, desc("remote_address=50.0.0.1")), "OK: OK")
		expect(t, ask(t, c, "edge_proxy_per_ip", 5, desc("remote_address=50.0.0.1")), "OVER_LIMIT: OVER_LIMIT")
		r := ask(t, c, "edge_proxy_per_ip", 1, desc("remote_address=50.0.0.5"))
		expect(t, r, "OVER_LIMIT: OVER_LIMIT")
		if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
			t.Fatalf("the blocked address's limit: %v", r.Statuses[0].CurrentLimit)
		}
	})
	t.Run("4 depth must match", func(t *testing.T) {
		r := ask(t, c, "example4", 1000, desc("key=value", "subkey=subvalue"))
		expect(t, r, "OK: OK")
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("two entries matched a one-level rule: %v", r.Statuses[0])
		}
		expect(t, ask(t, c, "example4b", 300, desc("key=value", "subkey=subvalue")), "OK: OK")
		expect(t, ask(t, c, "example4b", 30, desc("key=value", "subkey=subvalue")), "OVER_LIMIT: OVER_LIMIT")
	})
	t.Run("5 unlimited", func(t *testing.T) {
		r := ask(t, c, "internal", 1_000_000, desc("ldap=anything"))
		expect(t, r, "OK: OK")
		if r.Statuses[0].LimitRemaining != math.MaxUint32 {
			t.Fatalf("unlimited remaining %d, want MaxUint32", r.Statuses[0].LimitRemaining)
		}
		expect(t, ask(t, c, "internal", 100, desc("azure=x")), "OK: OK")
		expect(t, ask(t, c, "internal", 1, desc("azure=x")), "OVER_LIMIT: OVER_LIMIT")
	})
	t.Run("6 shadow mode", func(t *testing.T) {
		for range 15 {
			expect(t, ask(t, c, "example6", 1, desc("service=auth-service", "user=user-a")), "OK: OK")
		}
		expect(t, ask(t, c, "example6", 20, desc("service=auth-service", "user=user-b")), "OK: OK")
		expect(t, ask(t, c, "example6", 5, desc("service=auth-service", "user=user-b")), "OVER_LIMIT: OVER_LIMIT")
		// A shadow rule over its limit never holds back an enforced one.
		r := ask(t, c, "example6", 1, desc("service=auth-service", "user=user-a"), desc("service=s2", "user=user-b"))
		expect(t, r, "OK: OK OK")
	})
	t.Run("7 replaces", func(t *testing.T) {
		both := []*commonpb.RateLimitDescriptor{desc("key_1=value_1", "user=bkthomps"), desc("key_2=value_2", "user=bkthomps")}
		for range 10 {
			expect(t, ask(t, c, "example7", 1, both...), "OK: OK OK")
		}
		expect(t, ask(t, c, "example7", 5, both...), "OVER_LIMIT: OK OVER_LIMIT")
		// The replaced 5/s limit was never charged.
		expect(t, ask(t, c, "example7", 5, desc("key_1=value_1", "user=bkthomps")), "OK: OK")
	})
	t.Run("8 detailed metric", func(t *testing.T) {
		expect(t, ask(t, c, "example8", 10, desc("key1=unspecified_value")), "OK: OK")
		expect(t, ask(t, c, "example8", 1, desc("key1=unspecified_value")), "OVER_LIMIT: OVER_LIMIT")
		expect(t, ask(t, c, "example8", 10, desc("key1=unspecified_value2")), "OK: OK")
		expect(t, ask(t, c, "example8", 20, desc("key1=value1")), "OK: OK")
	})
	t.Run("9 wildcard", func(t *testing.T) {
		expect(t, ask(t, c, "example9", 20, desc("key1=value_1")), "OK: OK")
		expect(t, ask(t, c, "example9", 1, desc("key1=value_1")), "OVER_LIMIT: OVER_LIMIT")
		expect(t, ask(t, c, "example9", 20, desc("key1=value_2")), "OK: OK") // each value its own counter
		r := ask(t, c, "example9", 1, desc("key1=other"))
		if r.Statuses[0].CurrentLimit != nil {
			t.Fatal("a value without the prefix matched the wildcard")
		}
	})
	t.Run("unknown domain", func(t *testing.T) {
		expect(t, ask(t, c, "nope", 1, desc("a=b")), "OK: OK")
	})
}

// TestResponseDetails: statuses carry the limit, the remaining count and
// the time to the end of the window; hits_addend is the cost, and a
// descriptor's own hits_addend wins; headers only when enabled, under the
// configured names.
func TestResponseDetails(t *testing.T) {
	cfg := examplesConfig(t)
	c, _ := serve(t, cfg, memstore.New(memstore.Config{}))
	r := ask(t, c, "internal", 40, desc("azure=y"))
	st := r.Statuses[0]
	if st.CurrentLimit.GetRequestsPerUnit() != 100 || st.CurrentLimit.GetUnit() != rlspb.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 60 {
		t.Fatalf("status %v", st)
	}
	if d := st.DurationUntilReset.AsDuration(); d < time.Second || d > time.Minute || d%time.Second != 0 {
		t.Fatalf("duration until reset %v, want the whole seconds to the end of the minute", d)
	}
	if len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers %v, want none unless enabled", r.ResponseHeadersToAdd)
	}
	d := desc("azure=y")
	d.HitsAddend = wrapperspb.UInt64(60)
	if r := ask(t, c, "internal", 1, d); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("descriptor hits_addend 60: %s remaining %d", codesOf(r), r.Statuses[0].LimitRemaining)
	}
	cfg.Settings.Headers = rls.Headers{Enabled: true, Remaining: "X-RateLimit-Remaining"}
	c, _ = serve(t, cfg, memstore.New(memstore.Config{}))
	ask(t, c, "internal", 100, desc("azure=y"))
	r = ask(t, c, "internal", 1, desc("azure=y"))
	if r.OverallCode != over {
		t.Fatalf("over the limit: %s", codesOf(r))
	}
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	reset := strconv.FormatInt(r.Statuses[0].DurationUntilReset.GetSeconds(), 10)
	if len(h) != 3 || h["RateLimit-Limit"] != "100" || h["X-RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] != reset {
		t.Fatalf("headers %v, want the limit, the renamed remaining and the reset (%s)", h, reset)
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "internal"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no descriptors: %v, want InvalidArgument", err)
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Descriptors: []*commonpb.RateLimitDescriptor{desc("a=b")}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no domain: %v, want InvalidArgument", err)
	}
}

// fairgateWay is c with every domain decided by GCRA as one atomic batch.
func fairgateWay(c rls.Config) rls.Config {
	for i := range c.Domains {
		c.Domains[i].Algorithm, c.Domains[i].Atomic = algo.GCRA, true
	}
	c.Settings.Headers.Enabled = true
	return c
}

// TestFairgateWay: a domain that opts into GCRA and atomic batches answers
// the exact times: duration_until_reset until the limit is whole again,
// Retry-After until the request could pass, as the HTTP API answers.
func TestFairgateWay(t *testing.T) {
	c, _ := serve(t, fairgateWay(examplesConfig(t)), memstore.New(memstore.Config{}))
	r := ask(t, c, "internal", 40, desc("azure=y"))
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); d < 23*time.Second || d > 24*time.Second {
		t.Fatalf("duration until reset %v, want 24s (40 of 100 per minute to refill)", d)
	}
	ask(t, c, "internal", 60, desc("azure=y"))
	r = ask(t, c, "internal", 1, desc("azure=y"))
	if d := r.Statuses[0].DurationUntilReset.AsDuration(); r.OverallCode != over || d < 59*time.Second || d > 60*time.Second {
		t.Fatalf("over the limit: %s, duration until reset %v, want the minute until the limit is whole", codesOf(r), d)
	}
	h := map[string]string{}
	for _, hv := range r.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	if h["RateLimit-Limit"] != "100" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] != "60" || h["Retry-After"] != "1" {
		t.Fatalf("headers %v, want RateLimit-Reset 60 and Retry-After 1 (one emission, 600 ms, rounded up)", h)
	}
}

// TestTenantBatch: with atomic, a tenant's descriptors are one batch: when
// one is over its limit, none is charged.
func TestTenantBatch(t *testing.T) {
	cfg := rls.Config{TenantKey: "tenant", Domains: []rls.Domain{{Name: "api", Atomic: true, Descriptors: []*rls.Descriptor{
		{Key: "tenant", Limit: &rls.RateLimit{RequestsPerUnit: 100, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}, Children: []*rls.Descriptor{
			{Key: "route", Limit: &rls.RateLimit{RequestsPerUnit: 2, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}},
		}},
	}}}}
	c := serveOnRedis(t, cfg)
	both := []*commonpb.RateLimitDescriptor{desc("tenant=acme"), desc("tenant=acme", "route=search")}
	for range 2 {
		if r := ask(t, c, "api", 1, both...); r.OverallCode != ok {
			t.Fatal(codesOf(r))
		}
	}
	for range 5 {
		if r := ask(t, c, "api", 1, both...); codesOf(r) != "OVER_LIMIT: OK OVER_LIMIT" {
			t.Fatal(codesOf(r))
		}
	}
	if r := ask(t, c, "api", 1, desc("tenant=acme")); r.Statuses[0].LimitRemaining != 97 {
		t.Fatalf("tenant remaining %d, want 97: refused requests charged the tenant limit", r.Statuses[0].LimitRemaining)
	}
}

// TestFailModesWithRedisKilled: with Redis gone, a fail-open domain is
// answered OK (from the fallback limiter), a fail-closed one UNAVAILABLE or
// OVER_LIMIT as configured; health stays SERVING.
func TestFailModesWithRedisKilled(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dom := func(name string, f policy.FailMode) rls.Domain {
		return rls.Domain{Name: name, Fail: f, Descriptors: []*rls.Descriptor{{Key: "k", Limit: &rls.RateLimit{RequestsPerUnit: 100, Unit: rlspb.RateLimitResponse_RateLimit_SECOND}}}}
	}
	cfgUnavailable := rls.Config{Domains: []rls.Domain{dom("open", policy.FailOpen), dom("closed", policy.FailClosed)}}
	cfgOver := cfgUnavailable
	cfgOver.FailClosed = rls.ClosedOverLimit
	cu, conn := serve(t, cfgUnavailable, st)
	co, _ := serve(t, cfgOver, st)
	for _, domain := range []string{"open", "closed"} {
		if r := ask(t, cu, domain, 1, desc("k=v")); r.OverallCode != ok {
			t.Fatalf("%s with Redis up: %s", domain, codesOf(r))
		}
	}
	srv.Kill()
	if r := ask(t, cu, "open", 1, desc("k=v")); r.OverallCode != ok {
		t.Fatalf("fail open, Redis down: %s", codesOf(r))
	}
	_, err = cu.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "closed", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("fail closed (unavailable), Redis down: %v", err)
	}
	if r := ask(t, co, "closed", 1, desc("k=v")); r.OverallCode != over {
		t.Fatalf("fail closed (over_limit), Redis down: %s", codesOf(r))
	}
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cu.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "closed", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back, still failing: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNearCacheOnRedis: a client hammering a one-descriptor limit it is
// over costs Redis nothing until the retry-after passes; every answer is
// OVER_LIMIT with the time left.
func TestNearCacheOnRedis(t *testing.T) {
	cfg := rls.Config{Domains: []rls.Domain{{Name: "api", Descriptors: []*rls.Descriptor{
		{Key: "tenant", Limit: &rls.RateLimit{RequestsPerUnit: 1, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}},
	}}}}
	c := serveOnRedis(t, cfg)
	// A minute window: start well inside one, so that the 201 requests
	// do not cross into the next (where the first would be OK again).
	if now := time.Now(); now.Second() >= 45 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(now))
	}
	if r := ask(t, c, "api", 1, desc("tenant=acme")); r.OverallCode != ok {
		t.Fatal(codesOf(r))
	}
	before := scriptCalls(t)
	last := time.Minute
	for i := range 200 {
		r := ask(t, c, "api", 1, desc("tenant=acme"))
		d := r.Statuses[0].DurationUntilReset.AsDuration()
		if r.OverallCode != over || d <= 0 || d > last {
			t.Fatalf("request %d: %s, duration until reset %v after %v", i, codesOf(r), d, last)
		}
		last = d
	}
	if n := scriptCalls(t) - before; n > 1 {
		t.Fatalf("200 requests over the limit made %d script calls, want 1 (the store's rejection)", n)
	}
}

// scriptCalls is how many scripts the test Redis has run.
func scriptCalls(t *testing.T) int {
	t.Helper()
	n, err := redistest.ScriptCalls(redistest.Shared(t).Addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReflection: the server lists its services by reflection, so that
// grpcurl works without the Envoy proto files.
func TestReflection(t *testing.T) {
	_, conn := serve(t, examplesConfig(t), memstore.New(memstore.Config{}))
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want %s among them", names, want)
		}
	}
}

// TestSameDescriptorTwice: a descriptor given twice in one request counts
// twice (envoyproxy/ratelimit's answer), instead of failing the request.
func TestSameDescriptorTwice(t *testing.T) {
	cfg := rls.Config{Domains: []rls.Domain{{Name: "api", Descriptors: []*rls.Descriptor{
		{Key: "k", Limit: &rls.RateLimit{RequestsPerUnit: 10, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
	}}}}
	c, _ := serve(t, cfg, memstore.New(memstore.Config{}))
	for i := range 5 {
		r := ask(t, c, "api", 1, desc("k=v"), desc("k=v"))
		if r.OverallCode != ok || len(r.Statuses) != 2 || r.Statuses[0].LimitRemaining != uint32(8-2*i) || r.Statuses[1].LimitRemaining != uint32(8-2*i) {
			t.Fatalf("pair %d: %s %v", i, codesOf(r), r.Statuses)
		}
	}
	if r := ask(t, c, "api", 1, desc("k=v"), desc("k=v")); r.OverallCode != over {
		t.Fatalf("the 6th pair (12 of 10): %s, want OVER_LIMIT", codesOf(r))
	}
}

// TestDrainIsNotServing: once the service drains, gRPC health answers
// NOT_SERVING (for "" and for the rate limit service), so gRPC probes and
// Envoy's health checks move away before the listener closes; calls are
// still answered meanwhile.
func TestDrainIsNotServing(t *testing.T) {
	svc, err := rls.New(rls.Config{Domains: []rls.Domain{{Name: "d", Descriptors: []*rls.Descriptor{{Key: "k", Limit: &rls.RateLimit{RequestsPerUnit: 5, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE}}}}}},
		testGuard(t, memstore.New(memstore.Config{})), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, conn := serveServiceConn(t, svc)
	hc := healthpb.NewHealthClient(conn)
	status := func(name string) healthpb.HealthCheckResponse_ServingStatus {
		h, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	if s := status(""); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("before the drain: %v", s)
	}
	svc.Drain()
	for _, name := range []string{"", rlspb.RateLimitService_ServiceDesc.ServiceName} {
		if s := status(name); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("draining, %q: %v, want NOT_SERVING", name, s)
		}
	}
	if r := ask(t, c, "d", 1, desc("k=v")); r.OverallCode != ok {
		t.Errorf("a call while draining: %s", codesOf(r))
	}
}
