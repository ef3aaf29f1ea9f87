// Command httpfloor is what BenchmarkService measures fairgate's HTTP
// service against, each a plain net/http server:
//
//   - -mode floor: a JSON handler that decodes the /v1/take body and
//     answers a fixed decision, no limiter: what serving any JSON API
//     costs on this machine;
//   - -mode redis_rate: the same handler deciding with go-redis and
//     redis_rate (GCRA in Redis), as a team would write it;
//   - -mode floor+redis: the floor plus one Redis round trip per request
//     (a GET of the key through rueidis, auto-pipelined), deciding
//     nothing: what any service making a Redis call per decision pays;
//   - -mode proxy: a bare httputil.ReverseProxy to -upstream, with the
//     transport settings fairgate's proxy uses;
//   - -mode upstream: a tiny API answering 200 with a short JSON body
//     (and, on /v1/completions, X-Usage-Tokens: 150), for
//     the proxies to forward to.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

type takeRequest struct {
	Key      string `json:"key"`
	Limit    int    `json:"limit"`
	PeriodMs int64  `json:"period_ms"`
}

type takeResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	ResetAfterMs int64 `json:"reset_after_ms"`
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address")
	mode := flag.String("mode", "floor", "floor, floor+redis, redis_rate, proxy or upstream")
	redisAddr := flag.String("redis", "", "Redis for redis_rate and floor+redis (several comma-separated: a Redis Cluster)")
	upstream := flag.String("upstream", "", "the proxy's upstream")
	flag.Parse()
	var h http.Handler
	switch *mode {
	case "floor":
		h = take(func(context.Context, takeRequest) (takeResponse, error) {
			return takeResponse{Allowed: true, Limit: 1, Remaining: 1}, nil
		})
	case "redis_rate":
		// One address: a standalone Redis; several (comma-separated): a
		// Redis Cluster, through go-redis's cluster client.
		lim := redis_rate.NewLimiter(redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(*redisAddr, ","), PoolSize: 128}))
		h = take(func(ctx context.Context, r takeRequest) (takeResponse, error) {
			res, err := lim.Allow(ctx, r.Key, redis_rate.Limit{Rate: r.Limit, Burst: r.Limit, Period: time.Duration(r.PeriodMs) * time.Millisecond})
			if err != nil {
				return takeResponse{}, err
			}
			return takeResponse{Allowed: res.Allowed > 0, Limit: int64(r.Limit), Remaining: int64(res.Remaining),
				RetryAfterMs: max(0, res.RetryAfter.Milliseconds()), ResetAfterMs: res.ResetAfter.Milliseconds()}, nil
		})
	case "floor+redis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(*redisAddr, ","), DisableCache: true})
		if err != nil {
			log.Fatal(err)
		}
		h = take(func(ctx context.Context, r takeRequest) (takeResponse, error) {
			if err := c.Do(ctx, c.B().Get().Key(r.Key).Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
				return takeResponse{}, err
			}
			return takeResponse{Allowed: true, Limit: 1, Remaining: 1}, nil
		})
	case "proxy":
		u, err := url.Parse(*upstream)
		if err != nil {
			log.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = &http.Transport{
			DialContext:  (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second, ResponseHeaderTimeout: 30 * time.Second, ExpectContinueTimeout: time.Second, ForceAttemptHTTP2: true,
		}
		h = rp
	case "upstream":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/completions" { // a measured cost: the answer says it
				w.Header().Set("X-Usage-Tokens", "150")
			}
			w.Write([]byte(`{"id":1,"name":"widget"}`))
		})
	default:
		log.Fatalf("httpfloor: -mode %q: want floor, floor+redis, redis_rate, proxy or upstream", *mode)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.SetFlags(0)
	log.Printf("listening %s", ln.Addr()) // the harness reads the address here
	log.Fatal(http.Serve(ln, h))
}

// take is the JSON handler around decide: decode, decide, encode.
func take(decide func(context.Context, takeRequest) (takeResponse, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req takeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := decide(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	})
}
