package rls_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/connlimit"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/store/memstore"
)

// bounded serves the service of oneRule on a loopback port, its calls
// bounded by l and its connections by maxConns, and returns the Bound,
// the connection limit and the address.
func bounded(t *testing.T, l rls.Limits, maxConns int) (*rls.Bound, *connlimit.Listener, string) {
	t.Helper()
	svc, err := rls.New(oneRule(1000, rls.Domain{Algorithm: algo.FixedWindow}), testGuard(t, memstore.New(memstore.Config{})), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := rls.NewBound(l)
	cl := connlimit.New(ln, maxConns)
	g := rls.NewServer(svc, b)
	go g.Serve(b.Listener(cl))
	t.Cleanup(g.Stop)
	return b, cl, ln.Addr().String()
}

// dial is a gRPC client connection to addr.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// pending opens a ShouldRateLimit call on conn, within ctx, and sends its
// headers but not its message, as a slow or hostile client does; cancel
// ends it.
func pending(t *testing.T, ctx context.Context, conn *grpc.ClientConn) (grpc.ClientStream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlspb.RateLimitService_ShouldRateLimit_FullMethodName)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return s, cancel
}

// raw is a codec that sends bytes as they are: a message that does not
// decode.
type raw struct{}

func (raw) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (raw) Unmarshal(d []byte, v any) error { return nil }
func (raw) Name() string                    { return "proto" }

// TestBoundCountsEveryCall: a call is counted from its headers to its
// end, whatever the method and however it ends (answered, refused by its
// handler, a message that does not decode or is past MaxMessage, an
// unknown method, cancelled or past the client's deadline before its
// message),
// and the count returns to zero after each.
func TestBoundCountsEveryCall(t *testing.T) {
	b, _, addr := bounded(t, rls.Limits{MaxCalls: 4}, 100)
	conn := dial(t, addr)
	c := rlspb.NewRateLimitServiceClient(conn)
	call := func(ctx context.Context, req *rlspb.RateLimitRequest) error {
		_, err := c.ShouldRateLimit(ctx, req)
		return err
	}
	small := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}
	for _, tc := range []struct {
		name string
		do   func() error
		code codes.Code
	}{
		{"answered", func() error { return call(context.Background(), small) }, codes.OK},
		{"refused by the handler", func() error { return call(context.Background(), &rlspb.RateLimitRequest{Domain: "api"}) }, codes.InvalidArgument},
		{"past MaxMessage", func() error {
			return call(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=" + strings.Repeat("v", rls.MaxMessage))}})
		}, codes.ResourceExhausted},
		{"not a message", func() error {
			var out []byte
			return conn.Invoke(context.Background(), rlspb.RateLimitService_ShouldRateLimit_FullMethodName, []byte{0xff, 0xff, 0xff, 0xff}, &out, grpc.ForceCodec(raw{}))
		}, codes.Internal},
		{"unknown method", func() error {
			var out []byte
			return conn.Invoke(context.Background(), "/no.Such/Method", []byte{}, &out, grpc.ForceCodec(raw{}))
		}, codes.Unimplemented},
		{"health", func() error {
			_, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
			return err
		}, codes.OK},
		{"the client's deadline, before its message", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, _ := pending(t, ctx, conn)
			testwait.Eventually(t, 30*time.Second, "the pending call counted", func() bool { return b.InFlight() == 1 })
			return s.RecvMsg(new(rlspb.RateLimitResponse))
		}, codes.DeadlineExceeded},
		{"cancelled before its message", func() error {
			s, cancel := pending(t, context.Background(), conn)
			testwait.Eventually(t, 30*time.Second, "the pending call counted", func() bool { return b.InFlight() == 1 })
			cancel()
			return s.RecvMsg(new(rlspb.RateLimitResponse))
		}, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.do(); status.Code(err) != tc.code {
				t.Fatalf("%v, want %v", err, tc.code)
			}
			testwait.Eventually(t, 30*time.Second, "no call in flight", func() bool { return b.InFlight() == 0 })
		})
	}
	if b.Refused() != 0 {
		t.Errorf("%d refused, want none", b.Refused())
	}
}

// TestBoundRefusesPastMaxCalls: with MaxCalls calls in flight that have
// sent their headers and not their message (holding no message yet, so
// the count is taken before any message is read), the next call of any
// method is refused with ResourceExhausted at once, and /json with 503;
// when one ends, calls pass again.
func TestBoundRefusesPastMaxCalls(t *testing.T) {
	const most = 3
	b, _, addr := bounded(t, rls.Limits{MaxCalls: most}, 100)
	conn := dial(t, addr)
	var cancels []context.CancelFunc
	for range most {
		_, cancel := pending(t, context.Background(), conn)
		defer cancel()
		cancels = append(cancels, cancel)
	}
	testwait.Eventually(t, 30*time.Second, "the pending calls counted", func() bool { return b.InFlight() == most })
	c := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}
	_, err := c.ShouldRateLimit(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "3 calls in flight") {
		t.Fatalf("a call past the bound: %v, want ResourceExhausted saying 3 calls in flight", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a health check past the bound: %v, want ResourceExhausted", err)
	}
	rec := httptest.NewRecorder()
	b.JSON(func(http.ResponseWriter, *http.Request) { t.Error("/json served past the bound") })(rec, httptest.NewRequest("POST", "/json", strings.NewReader("{}")))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("/json past the bound: %d, Retry-After %q; want 503 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	if b.Refused() != 3 || b.InFlight() != most {
		t.Errorf("%d refused, %d in flight; want 3 and %d", b.Refused(), b.InFlight(), most)
	}
	cancels[0]()
	testwait.Eventually(t, 30*time.Second, "a place free", func() bool { return b.InFlight() == most-1 })
	if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("with a place free: %v %v", r, err)
	}
}

// TestBoundCallTimeout: a call that sends its headers and never its
// message ends with DeadlineExceeded after CallTimeout, and gives its
// place back.
func TestBoundCallTimeout(t *testing.T) {
	b, _, addr := bounded(t, rls.Limits{MaxCalls: 2, CallTimeout: 100 * time.Millisecond}, 100)
	s, cancel := pending(t, context.Background(), dial(t, addr))
	defer cancel()
	if err := s.RecvMsg(new(rlspb.RateLimitResponse)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call whose message never comes: %v, want DeadlineExceeded", err)
	}
	testwait.Eventually(t, 30*time.Second, "no call in flight", func() bool { return b.InFlight() == 0 })
}

// TestBoundHeaderList: a call whose metadata is past MaxHeaders is
// refused before it is counted; gRPC's own bound is 16 MiB.
func TestBoundHeaderList(t *testing.T) {
	b, _, addr := bounded(t, rls.Limits{}, 100)
	c := rlspb.NewRateLimitServiceClient(dial(t, addr))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-big", strings.Repeat("x", rls.MaxHeaders))
	if _, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}); err == nil {
		t.Fatal("a call with 64 KiB of metadata was served")
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", strings.Repeat("v", 8<<10))
	if _, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}); err != nil {
		t.Fatalf("a call with 8 KiB of trace context: %v", err)
	}
	testwait.Eventually(t, 30*time.Second, "no call in flight", func() bool { return b.InFlight() == 0 })
}

// TestBoundIdleConnections: at the connection bound a new gRPC connection
// closes the one idle the longest (no call in flight), never one with a
// call in flight; connections idle or busy never pass the bound.
func TestBoundIdleConnections(t *testing.T) {
	const most = 4
	b, cl, addr := bounded(t, rls.Limits{}, most)
	req := &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*commonpb.RateLimitDescriptor{desc("k=v")}}
	// The first holds a call in flight; the others are idle after one call.
	s, cancel := pending(t, context.Background(), dial(t, addr))
	defer cancel()
	testwait.Eventually(t, 30*time.Second, "the busy connection's call counted", func() bool { return b.InFlight() == 1 })
	for i := range 20 {
		// Were the idle ones not reclaimed, the connection would wait in
		// the accept queue.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rlspb.NewRateLimitServiceClient(dial(t, addr)).ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if n := cl.Open(); n > most {
			t.Fatalf("%d connections open, want at most %d", n, most)
		}
	}
	if cl.Reclaimed() < 20-(most-1) {
		t.Errorf("%d idle connections reclaimed, want at least %d", cl.Reclaimed(), 20-(most-1))
	}
	testwait.Eventually(t, 30*time.Second, "only the busy connection's call in flight", func() bool { return b.InFlight() == 1 })
	var r rlspb.RateLimitResponse
	if err := s.SendMsg(req); err != nil {
		t.Fatalf("the call in flight: %v", err)
	}
	s.CloseSend()
	if err := s.RecvMsg(&r); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("the call in flight, on the connection with it: %v %v", r.OverallCode, err)
	}
}
