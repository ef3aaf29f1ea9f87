package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// benchLimiter is a limiter on the benchmark Redis with one generous plan
// (so that the measured requests are decided, not limited) and a small
// one for the abuser; slowDown is the classes' slow_down (0: the default).
func benchLimiter(b *testing.B, slowDown time.Duration) *limiter.Limiter {
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(b).Addr, Prefix: fmt.Sprintf("mw%d:", time.Now().UnixNano())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rs.Close() })
	l, err := limiter.New(limiter.Config{
		Store: rs,
		Policy: policy.Policy{
			DefaultPlan: "big", DefaultClass: "read",
			Plans: map[string]policy.Plan{
				"big":   {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 1_000_000, Period: time.Second, Burst: 100_000}}}},
				"small": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 10, Period: time.Second, Burst: 10}}}},
			},
			Classes: map[string]policy.Class{"read": {Share: 1, SlowDown: slowDown}, "search": {Share: 0.5, SlowDown: slowDown}},
			Routes:  []policy.Route{{Pattern: "GET /v1/search", Class: "search", Cost: 1}},
			Tenants: map[string]policy.Tenant{"abuser": {Plan: "small"}},
		},
		Fallback: memstore.New(memstore.Config{}),
	})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// tenantFromHeader stands in for a verified credential in the benchmark.
func tenantFromHeader(r *http.Request) (policy.Identity, error) {
	return policy.Identity{Tenant: r.Header.Get("X-Bench-Tenant")}, nil
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 128, IdleConnTimeout: time.Minute}}
}

func get(c *http.Client, url, tenant string) (int, error) {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Bench-Tenant", tenant)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// paced sends b.N requests at rate per second from a pool of 128 workers
// over at most 128 kept-alive connections (warmed first), and reports the
// p50 and p99 latency measured from each request's scheduled time, so that
// a request that waited for a free worker counts its wait (no coordinated
// omission).
func paced(b *testing.B, rate int, send func(i int) error) {
	const workers = 128
	var warm sync.WaitGroup
	for i := range workers {
		warm.Go(func() { send(-1 - i) })
	}
	warm.Wait()
	lat := make([]time.Duration, b.N)
	interval := time.Second / time.Duration(rate)
	type job struct {
		i  int
		at time.Time
	}
	jobs := make(chan job, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				if d := time.Until(j.at); d > 0 {
					time.Sleep(d)
				}
				if err := send(j.i); err != nil {
					b.Error(err)
				}
				lat[j.i] = time.Since(j.at)
			}
		})
	}
	start := time.Now()
	for i := range b.N {
		jobs <- job{i, start.Add(time.Duration(i) * interval)}
	}
	close(jobs)
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkMiddleware: the latency a request sees through a bare handler
// and through fairgate's middleware (two layers, on one local Redis), at
// 1,000 and 10,000 requests/s, open loop. The difference is the overhead.
//
//	cd bench && go test -run '^$' -bench Middleware -benchtime 5000x -count 3
func BenchmarkMiddleware(b *testing.B) {
	for _, rate := range []int{1000, 10000} {
		for _, impl := range []string{"bare", "fairgate"} {
			b.Run(fmt.Sprintf("rate=%d/impl=%s", rate, impl), func(b *testing.B) {
				h := http.Handler(okHandler)
				if impl == "fairgate" {
					mw, err := httplimit.Middleware(httplimit.Config{Limiter: benchLimiter(b, 0), Identify: tenantFromHeader})
					if err != nil {
						b.Fatal(err)
					}
					h = mw(h)
				}
				ts := httptest.NewServer(h)
				defer ts.Close()
				c := benchClient()
				paced(b, rate, func(i int) error {
					code, err := get(c, ts.URL+"/v1/search", fmt.Sprintf("t%d", (i+1000)%1000))
					if err == nil && code != 200 {
						err = fmt.Errorf("status %d", code)
					}
					return err
				})
			})
		}
	}
}

// BenchmarkNoisyNeighbour: the latency of quiet tenants (1,000 requests/s
// in all, open loop) through the middleware, alone and while one abusive
// tenant (limited to 10/s) sends as fast as 16 connections allow
// (abuser=true), or at a fixed 10,000 requests/s over 16 connections
// (abuser=paced10k: the same offered load whatever the near cache does,
// so the store's share of the harm is what moves); with the classes'
// default slow_down, and with slow_down off (every near-cache rejection
// answered at once).
//
//	cd bench && go test -run '^$' -bench NoisyNeighbour -benchtime 5000x -count 3
func BenchmarkNoisyNeighbour(b *testing.B) {
	for _, bc := range []struct {
		mode     string
		slowDown time.Duration
	}{{"false", 0}, {"true", 0}, {"true", -1}, {"paced10k", -1}} {
		mode, abuse := bc.mode, bc.mode != "false"
		name := "abuser=" + mode
		if abuse {
			name += "/slow_down=" + map[bool]string{true: "default", false: "off"}[bc.slowDown == 0]
		}
		b.Run(name, func(b *testing.B) {
			mw, err := httplimit.Middleware(httplimit.Config{Limiter: benchLimiter(b, bc.slowDown), Identify: tenantFromHeader})
			if err != nil {
				b.Fatal(err)
			}
			ts := httptest.NewServer(mw(okHandler))
			defer ts.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			var abused, limited int64
			var mu sync.Mutex
			if abuse {
				start := time.Now()
				for w := range 16 {
					wg.Go(func() {
						c := benchClient()
						for k := 0; ctx.Err() == nil; k++ {
							if mode == "paced10k" { // 625/s on each of 16
								if d := time.Until(start.Add(time.Duration(k*16+w) * 100 * time.Microsecond)); d > 0 {
									time.Sleep(d)
								}
							}
							code, err := get(c, ts.URL+"/v1/search", "abuser")
							mu.Lock()
							abused++
							if err == nil && code == 429 {
								limited++
							}
							mu.Unlock()
						}
					})
				}
			}
			c := benchClient()
			paced(b, 1000, func(i int) error {
				code, err := get(c, ts.URL+"/v1/search", fmt.Sprintf("quiet%d", (i+10)%10))
				if err == nil && code != 200 {
					err = fmt.Errorf("quiet tenant got %d", code)
				}
				return err
			})
			cancel()
			wg.Wait()
			if abuse {
				b.ReportMetric(float64(abused)/b.Elapsed().Seconds(), "abuser-req/s")
				b.ReportMetric(float64(limited)/float64(max(1, abused)), "abuser-limited-share")
			}
		})
	}
}
