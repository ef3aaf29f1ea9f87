// Command rlsfloor is the floor BenchmarkRLSService measures the Envoy
// rate limit services against: a grpc-go RateLimitService that does no
// work (-redis empty: a static OK), or only one Redis round trip per call
// through rueidis: a script of INCRBY and EXPIRE per descriptor
// (envoyproxy/ratelimit's two commands), keyed by its last value. What a
// service costs above it is its own.
package main

import (
	"context"
	"flag"
	"log"
	"net"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
)

type floor struct {
	rlspb.UnimplementedRateLimitServiceServer
	c rueidis.Client
	s *rueidis.Lua
}

func (f floor) ShouldRateLimit(ctx context.Context, r *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if f.c != nil {
		var keys []string
		for _, d := range r.GetDescriptors() {
			es := d.GetEntries()
			keys = append(keys, "floor:"+es[len(es)-1].GetKey()+":"+es[len(es)-1].GetValue())
		}
		if err := f.s.Exec(ctx, f.c, keys, []string{"1"}).Error(); err != nil {
			return nil, err
		}
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for range r.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK})
	}
	return resp, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "gRPC address")
	redis := flag.String("redis", "", "Redis host:port; empty: no Redis call")
	flag.Parse()
	f := floor{}
	if *redis != "" {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*redis}, DisableCache: true})
		if err != nil {
			log.Fatal(err)
		}
		f.c = c
		f.s = rueidis.NewLuaScript("for _, k in ipairs(KEYS) do redis.call('INCRBY', k, ARGV[1]); redis.call('EXPIRE', k, 3600) end; return 1")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer(grpc.NumStreamWorkers(128))
	rlspb.RegisterRateLimitServiceServer(g, f)
	log.Fatal(g.Serve(ln))
}
