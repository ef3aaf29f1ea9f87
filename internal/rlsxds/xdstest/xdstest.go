// Package xdstest runs an in-process go-control-plane management server of
// rate limit configs, for tests.
package xdstest

import (
	"context"
	"net"
	"strings"
	"sync"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// Server is a management server serving ADS on a loopback port.
type Server struct {
	cache cache.SnapshotCache
	// Addr is where it listens.
	Addr string
	g    *grpc.Server

	mu       sync.Mutex
	nacks    []string
	requests int
}

// Start starts a server on addr ("127.0.0.1:0" for any port).
func Start(addr string) (*Server, error) {
	s := &Server{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil)}
	return s, s.Restart(addr)
}

// Restart serves again (after Stop) on addr, with the snapshots it had.
func (s *Server) Restart(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.Addr = ln.Addr().String()
	srv := xdsserver.NewServer(context.Background(), s.cache, xdsserver.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoverypb.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.requests++
			if req.ErrorDetail != nil {
				s.nacks = append(s.nacks, req.ErrorDetail.Message)
			}
			return nil
		},
	})
	s.g = grpc.NewServer()
	discoverypb.RegisterAggregatedDiscoveryServiceServer(s.g, srv)
	go s.g.Serve(ln)
	return nil
}

// Stop stops serving.
func (s *Server) Stop() { s.g.Stop() }

// Set makes cfgs the snapshot version for node.
func (s *Server) Set(node, version string, cfgs ...*confpb.RateLimitConfig) error {
	var rs []types.Resource
	for _, c := range cfgs {
		rs = append(rs, c)
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		return err
	}
	return s.cache.SetSnapshot(context.Background(), node, snap)
}

// NACKs returns the reasons of the refusals received so far, joined by |.
func (s *Server) NACKs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.nacks, "|")
}

// Requests returns the number of discovery requests received so far: a
// client's stream is up, and has asked, once it is above zero.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Domain is a RateLimitConfig of one domain with one key limited to n per
// unit.
func Domain(name string, n uint32, unit confpb.RateLimitUnit) *confpb.RateLimitConfig {
	return &confpb.RateLimitConfig{Name: name + "-config", Domain: name, Descriptors: []*confpb.RateLimitDescriptor{
		{Key: "k", RateLimit: &confpb.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}},
	}}
}
