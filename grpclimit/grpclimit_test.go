package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/grpclimit"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// policy: every call is class "rpc", 60 per minute with a burst of 3, and
// the Watch stream fails closed.
var rpcPolicy = policy.Policy{
	DefaultPlan:  "basic",
	DefaultClass: "rpc",
	Plans:        map[string]policy.Plan{"basic": {Name: "basic", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 60, Period: time.Minute, Burst: 3}}}}},
	Classes: map[string]policy.Class{
		"rpc":   {Name: "rpc", Share: 1},
		"watch": {Name: "watch", Share: 1, Fail: policy.FailClosed},
	},
	Routes: []policy.Route{{Pattern: "POST /grpc.health.v1.Health/Watch", Class: "watch", Cost: 1}},
}

// identify is the test's stand-in for a verified identity: the tenant is
// the metadata "tenant" (production code verifies a token or a peer
// certificate instead).
func identify(ctx context.Context, _ string) (policy.Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("tenant"); len(v) == 1 {
		return policy.Identity{Tenant: v[0]}, nil
	}
	return policy.Identity{}, errors.New("no credential")
}

func start(t *testing.T, l *limiter.Limiter) healthpb.HealthClient {
	t.Helper()
	c := grpclimit.Config{Limiter: l, Identify: identify}
	un, err := grpclimit.UnaryServerInterceptor(c)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := grpclimit.StreamServerInterceptor(c)
	g := grpc.NewServer(grpc.UnaryInterceptor(un), grpc.StreamInterceptor(st))
	healthpb.RegisterHealthServer(g, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func TestUnary(t *testing.T) {
	l, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: rpcPolicy})
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, l)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")
	for i := range 3 {
		var tr metadata.MD
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr)); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
		if got := tr.Get("ratelimit-remaining"); len(got) != 1 || got[0] != []string{"2", "1", "0"}[i] {
			t.Fatalf("call %d: trailer ratelimit-remaining %v", i, got)
		}
	}
	var tr metadata.MD
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("over the limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			ri = r
		}
	}
	if ri == nil || ri.RetryDelay.AsDuration() <= 0 || ri.RetryDelay.AsDuration() > time.Second {
		t.Fatalf("RetryInfo %v, want a delay up to one emission (1s)", ri)
	}
	if got := tr.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Fatalf("trailer retry-after %v", got)
	}
	// Waiting the RetryInfo delay is enough.
	time.Sleep(ri.RetryDelay.AsDuration())
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("after the RetryInfo delay: %v", err)
	}
	// Another tenant has its own limit; no credential is UNAUTHENTICATED.
	other := metadata.AppendToOutgoingContext(context.Background(), "tenant", "globex")
	if _, err := c.Check(other, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no credential: %v", err)
	}
}

// failing is a store that is out.
type failing struct{ storetest.Down }

func TestStreamFailsClosed(t *testing.T) {
	l, err := limiter.New(limiter.Config{Store: failing{}, Policy: rpcPolicy, Timeout: 20 * time.Millisecond, Fallback: memstore.New(memstore.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, l)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a fail-closed stream with the store out: %v, want UNAVAILABLE", err)
	}
	// The unary call's class fails open: answered from the fallback.
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a fail-open call with the store out: %v", err)
	}
}

// TestConcurrency: an open stream holds its tenant's one slot until it
// ends; a call meanwhile is RESOURCE_EXHAUSTED with the concurrency
// trailers, and passes once the stream's client has gone.
func TestConcurrency(t *testing.T) {
	p := rpcPolicy
	p.Plans = map[string]policy.Plan{"basic": {Name: "basic", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 60, Period: time.Minute, Burst: 100}}}, Concurrency: 1}}
	p.Classes = map[string]policy.Class{"rpc": {Name: "rpc", Share: 1}, "watch": {Name: "watch", Share: 1}}
	l, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, l)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")
	sctx, cancel := context.WithCancel(ctx)
	w, err := c.Watch(sctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the stream is open and holds the slot
		t.Fatal(err)
	}
	var tr metadata.MD
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
	if status.Code(err) != codes.ResourceExhausted || len(tr.Get("ratelimit-concurrency-limit")) != 1 || tr.Get("ratelimit-concurrency-remaining")[0] != "0" {
		t.Fatalf("a call beside the open stream: %v, trailers %v; want RESOURCE_EXHAUSTED with the concurrency trailers", err, tr)
	}
	cancel()
	testwait.EventuallyNil(t, 30*time.Second, "the slot back after the stream's client went away", func() error {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
}
