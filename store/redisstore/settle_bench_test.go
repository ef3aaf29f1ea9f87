package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
)

// BenchmarkSettle is a settled request beside an unsettled one on the
// shared standalone Redis: a take of one check (op=take), a settlement of
// one adjustment (op=settle, with its id record), and both
// (op=take+settle), on GCRA over 10,000 keys, 16 callers per CPU. Beside
// the client's time it reports Redis's script calls per op (calls/op:
// below 1 when concurrent calls are merged) and Redis's CPU per op
// (redis-cpu-µs/op, the server's user + system time from INFO cpu, its
// network reads and writes included).
// Run: go test -run '^$' -bench Settle -count 3 ./store/redisstore
func BenchmarkSettle(b *testing.B) {
	lim := algo.Limit{Limit: 1_000_000_000, Period: time.Hour}
	for _, op := range []string{"take", "settle", "take+settle"} {
		b.Run("op="+op, func(b *testing.B) {
			s := open(b, standaloneURL(b))
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("rl:{t%d}:all", i)
			}
			var ids atomic.Int64
			addr := redistest.Shared(b).Addr
			calls0, cpu0 := scriptCallsAndCPU(b, addr)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				var res store.Result
				var sres store.SettleResult
				i := rand.IntN(len(keys))
				for pb.Next() {
					k := keys[i%len(keys)]
					if op != "settle" {
						if err := s.Take(context.Background(), []store.Check{{Key: k, Limit: lim, Cost: 100}}, &res); err != nil {
							b.Fatal(err)
						}
					}
					if op != "take" {
						if err := s.Settle(context.Background(), "b"+strconv.FormatInt(ids.Add(1), 36), []store.Adjustment{{Key: k, Limit: lim, Delta: -40}}, &sres); err != nil {
							b.Fatal(err)
						}
					}
					i += 7919
				}
			})
			calls, cpu := scriptCallsAndCPU(b, addr)
			b.ReportMetric(float64(calls-calls0)/float64(b.N), "calls/op")
			b.ReportMetric(float64(cpu-cpu0)/float64(b.N), "redis-cpu-µs/op")
		})
	}
}

// scriptCallsAndCPU returns the script calls the server at addr has
// served and the CPU time (µs, user + system) it has used.
func scriptCallsAndCPU(b *testing.B, addr string) (calls int, cpuUs int64) {
	b.Helper()
	calls, err := redistest.ScriptCalls(addr)
	if err != nil {
		b.Fatal(err)
	}
	info, err := redistest.Do(addr, "INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu %q: %v", line, err)
			}
			cpuUs += int64(f * 1e6)
		}
	}
	return calls, cpuUs
}
