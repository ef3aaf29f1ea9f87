package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

var callerCounts = []int{1, 16, 64, 256}

// The same generous limit for everyone, so the run measures decisions, not
// rejections: 1e9 per hour, burst 1e6.
var (
	fgLimit = algo.Limit{Limit: 1_000_000_000, Period: time.Hour, Burst: 1_000_000}
	rrLimit = redis_rate.Limit{Rate: 1_000_000_000, Period: time.Hour, Burst: 1_000_000}
)

func fairgateStore(b *testing.B, prefix string) *redisstore.Store {
	s, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(b).Addr, Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func goRedis(b *testing.B, callers int) *redis.Client {
	// The pool as large as the callers: go-redis's best case.
	c := redis.NewClient(&redis.Options{Addr: redistest.Shared(b).Addr, PoolSize: max(callers, 20)})
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkRedis: one decision per call against one local Redis, fairgate
// beside redis_rate, at 1, 16, 64 and 256 concurrent callers; and
// fairgate's 2-key batch (one round trip) beside its single key.
//
//	cd bench && go test -run '^$' -bench Redis -count 6
func BenchmarkRedis(b *testing.B) {
	ks := keys(10_000)
	ctx := context.Background()
	for _, n := range callerCounts {
		b.Run(fmt.Sprintf("impl=fairgate/callers=%d", n), func(b *testing.B) {
			s := fairgateStore(b, "fgb:")
			defer reportCalls(b)()
			concurrently(b, n, func(i int) error {
				var res store.Result
				return s.Take(ctx, []store.Check{{Key: ks[i%len(ks)], Limit: fgLimit, Cost: 1}}, &res)
			})
		})
		b.Run(fmt.Sprintf("impl=fairgate-nocoalesce/callers=%d", n), func(b *testing.B) {
			s, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(b).Addr, Prefix: "fgn:", NoCoalescing: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			defer reportCalls(b)()
			concurrently(b, n, func(i int) error {
				var res store.Result
				return s.Take(ctx, []store.Check{{Key: ks[i%len(ks)], Limit: fgLimit, Cost: 1}}, &res)
			})
		})
		b.Run(fmt.Sprintf("impl=redis_rate/callers=%d", n), func(b *testing.B) {
			l := redis_rate.NewLimiter(goRedis(b, n))
			defer reportCalls(b)()
			concurrently(b, n, func(i int) error {
				_, err := l.Allow(ctx, ks[i%len(ks)], rrLimit)
				return err
			})
		})
	}
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("impl=fairgate-batch2/callers=%d", n), func(b *testing.B) {
			s := fairgateStore(b, "fgb2:")
			concurrently(b, n, func(i int) error {
				k := ks[i%len(ks)]
				var res store.Result
				return s.Take(ctx, []store.Check{{Key: k + ":class", Limit: fgLimit, Cost: 1}, {Key: k, Limit: fgLimit, Cost: 1}}, &res)
			})
		})
		b.Run(fmt.Sprintf("impl=fairgate-batch2-nocoalesce/callers=%d", n), func(b *testing.B) {
			s, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(b).Addr, Prefix: "fgn2:", NoCoalescing: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			concurrently(b, n, func(i int) error {
				k := ks[i%len(ks)]
				var res store.Result
				return s.Take(ctx, []store.Check{{Key: k + ":class", Limit: fgLimit, Cost: 1}, {Key: k, Limit: fgLimit, Cost: 1}}, &res)
			})
		})
		b.Run(fmt.Sprintf("impl=redis_rate-2keys/callers=%d", n), func(b *testing.B) {
			l := redis_rate.NewLimiter(goRedis(b, n))
			concurrently(b, n, func(i int) error {
				k := ks[i%len(ks)]
				if _, err := l.Allow(ctx, k+":class", rrLimit); err != nil {
					return err
				}
				_, err := l.Allow(ctx, k, rrLimit)
				return err
			})
		})
	}
}

// BenchmarkCeiling: the round trips a second this machine completes for 64
// callers that ask Redis for (almost) nothing, a GET of a missing key and a
// script that only does that GET: what any limiter making one call per
// decision can reach at 64 callers here, whatever its script costs.
//
//	cd bench && go test -run '^$' -bench Ceiling -benchtime 300000x -count 3
func BenchmarkCeiling(b *testing.B) {
	ctx := context.Background()
	b.Run("client=rueidis/op=get/callers=64", func(b *testing.B) {
		c := rueidisClient(b)
		concurrently(b, 64, func(i int) error {
			err := c.Do(ctx, c.B().Get().Key("ceiling").Build()).Error()
			if rueidis.IsRedisNil(err) {
				err = nil
			}
			return err
		})
	})
	b.Run("client=rueidis/op=script-get/callers=64", func(b *testing.B) {
		c := rueidisClient(b)
		sc := rueidis.NewLuaScript("return redis.call('GET', KEYS[1])")
		concurrently(b, 64, func(i int) error {
			err := sc.Exec(ctx, c, []string{"ceiling"}, nil).Error()
			if rueidis.IsRedisNil(err) {
				err = nil
			}
			return err
		})
	})
	b.Run("client=go-redis/op=get/callers=64", func(b *testing.B) {
		c := goRedis(b, 64)
		concurrently(b, 64, func(i int) error {
			err := c.Get(ctx, "ceiling").Err()
			if err == redis.Nil {
				err = nil
			}
			return err
		})
	})
}

// reportCalls, deferred around a run, reports where Redis's time went per
// decision (b.N decisions): the script calls it served (below 1 when calls
// were merged), the µs it spent inside them (INFO commandstats), and the
// share of one core it used meanwhile (1 = saturated).
func reportCalls(b *testing.B) func() {
	n0, us0, cpu0 := redisCounters(b)
	start := time.Now()
	return func() {
		n1, us1, cpu1 := redisCounters(b)
		b.ReportMetric(float64(n1-n0)/float64(b.N), "calls/decision")
		b.ReportMetric((us1-us0)/float64(b.N), "script-µs/decision")
		b.ReportMetric((cpu1-cpu0)/time.Since(start).Seconds(), "redis-cores")
	}
}

// redisCounters reads the test Redis's script calls, the µs spent in them,
// and its CPU seconds (user and system).
func redisCounters(b *testing.B) (calls int, scriptUS, cpu float64) {
	calls, usec, err := redistest.ScriptStats(redistest.Shared(b).Addr)
	if err != nil {
		b.Fatal(err)
	}
	info, err := redistest.Do(redistest.Shared(b).Addr, "INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu line %q: %v", line, err)
				}
				cpu += x
			}
		}
	}
	return calls, float64(usec), cpu
}

func rueidisClient(b *testing.B) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Shared(b).Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// BenchmarkClient runs fairgate's own batch script through go-redis and
// through rueidis at 64 callers: the measurement behind the client choice.
//
//	cd bench && go test -run '^$' -bench Client -count 6
func BenchmarkClient(b *testing.B) {
	ks := keys(10_000)
	ctx := context.Background()
	p1, p2, p3 := fgLimit.Params()
	args := []string{"0", strconv.FormatInt(p1, 10), strconv.FormatInt(p2, 10), strconv.FormatInt(p3, 10), "1"}
	src := redisstore.TakeScript()
	b.Run("client=go-redis/callers=64", func(b *testing.B) {
		c := goRedis(b, 64)
		sc := redis.NewScript(src)
		iargs := make([]any, len(args))
		for i, a := range args {
			iargs[i] = a
		}
		concurrently(b, 64, func(i int) error {
			return sc.Run(ctx, c, []string{"fgc:g:" + ks[i%len(ks)]}, iargs...).Err()
		})
	})
	b.Run("client=rueidis/callers=64", func(b *testing.B) {
		c := rueidisClient(b)
		sc := rueidis.NewLuaScript(src)
		concurrently(b, 64, func(i int) error {
			return sc.Exec(ctx, c, []string{"fgc:g:" + ks[i%len(ks)]}, args).Error()
		})
	})
}

// BenchmarkFootprint reports Redis's own cost of one GCRA key: its bytes
// (MEMORY USAGE) and the server time per script call (INFO commandstats
// usec_per_call), fairgate beside redis_rate.
//
//	cd bench && go test -run '^$' -bench Footprint -benchtime 20000x
func BenchmarkFootprint(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, key string, take func(i int) error) {
		if _, err := redistest.Do(redistest.Shared(b).Addr, "CONFIG", "RESETSTAT"); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			if err := take(i); err != nil {
				b.Fatal(err)
			}
		}
		mem, err := redistest.Do(redistest.Shared(b).Addr, "MEMORY", "USAGE", key)
		if err != nil {
			b.Fatal(err)
		}
		stats, err := redistest.Do(redistest.Shared(b).Addr, "INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		bytes, _ := strconv.ParseFloat(mem, 64)
		b.ReportMetric(bytes, "redis-bytes/key")
		b.ReportMetric(usecPerCall(stats, "evalsha"), "redis-µs/call")
	}
	b.Run("impl=fairgate", func(b *testing.B) {
		s := fairgateStore(b, "fgf:")
		run(b, s.Key(algo.GCRA, "rl:{tenant-00001}:all"), func(i int) error {
			var res store.Result
			return s.Take(ctx, []store.Check{{Key: "rl:{tenant-00001}:all", Limit: fgLimit, Cost: 1}}, &res)
		})
	})
	b.Run("impl=redis_rate", func(b *testing.B) {
		l := redis_rate.NewLimiter(goRedis(b, 1))
		run(b, "rate:rl:{tenant-00001}:all", func(i int) error {
			_, err := l.Allow(ctx, "rl:{tenant-00001}:all", rrLimit)
			return err
		})
	})
}

// usecPerCall finds usec_per_call for cmd in INFO commandstats output.
func usecPerCall(stats, cmd string) float64 {
	for _, line := range strings.Split(stats, "\n") {
		if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[len("cmdstat_"+cmd+":"):]), ",") {
			if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
				x, _ := strconv.ParseFloat(v, 64)
				return x
			}
		}
	}
	return -1
}
