package rls

import (
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// MaxMessage bounds a request message (a RateLimitRequest is small).
const MaxMessage = 1 << 20

// MaxHeaders bounds a call's header list (its metadata), as the HTTP
// listeners bound a request's headers: gRPC's own default is 16 MiB, read
// before a call is counted. Envoy's calls carry a few hundred bytes, and
// Envoy's own bound on a request's headers is 60 KiB by default, so that
// a trace context it passes on fits.
const MaxHeaders = 64 << 10

// ReadBuffer is each connection's read buffer. gRPC's default, 32 KiB,
// is most of what an idle connection holds (some 40 KB each, measured);
// Envoy's calls are a few hundred bytes, and a larger message is read in
// several reads. Each connection also gives its write buffer back to a
// pool after each flush rather than keep one of its own.
const ReadBuffer = 8 << 10

// StreamWorkers is how many goroutines serve calls, kept between calls:
// a goroutine per call would grow its stack on every call (a tenth of the
// service's CPU, measured), while a kept one has grown it once. Calls
// beyond them get a goroutine of their own, as without workers.
const StreamWorkers = 128

// NewServer returns a gRPC server with the rate limit service, the
// standard health service (for "" and for the rate limit service:
// SERVING, or NOT_SERVING while s.Ready fails, kept up to date by
// SetConfig)
// and server reflection (grpcurl needs no proto files), plus opts, its
// calls bounded by b (nil: a Bound of DefaultMaxCalls and no call
// timeout). The caller serves it, on b.Listener to bound its connections,
// and stops it.
func NewServer(s *Service, b *Bound, opts ...grpc.ServerOption) *grpc.Server {
	if b == nil {
		b = NewBound(Limits{})
	}
	base := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessage), grpc.MaxHeaderListSize(MaxHeaders), grpc.NumStreamWorkers(StreamWorkers),
		grpc.ReadBufferSize(ReadBuffer), grpc.SharedWriteBuffer(true), b.ServerOption()}
	g := grpc.NewServer(append(base, opts...)...)
	rlspb.RegisterRateLimitServiceServer(g, s)
	h := health.NewServer()
	s.setHealth(h)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g
}
