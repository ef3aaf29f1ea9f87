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

// StreamWorkers is how many goroutines serve calls, kept between calls:
// a goroutine per call would grow its stack on every call (a tenth of the
// service's CPU, measured), while a kept one has grown it once. Calls
// beyond them get a goroutine of their own, as without workers.
const StreamWorkers = 128

// NewServer returns a gRPC server with the rate limit service, the
// standard health service (SERVING for "" and for the rate limit service)
// and server reflection (grpcurl needs no proto files), plus opts. The
// caller serves it and stops it.
func NewServer(s *Service, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessage), grpc.NumStreamWorkers(StreamWorkers)}, opts...)...)
	rlspb.RegisterRateLimitServiceServer(g, s)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g
}
