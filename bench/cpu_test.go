package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
)

// redisCPU returns Redis's used CPU seconds, user and system.
func redisCPU(b *testing.B) float64 {
	info, _ := redistest.Do(redistest.Shared(b).Addr, "INFO", "cpu")
	var total float64
	for _, line := range strings.Split(info, "\n") {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return total
}

// BenchmarkRedisCPU reports how much of a core Redis uses while 64 callers
// take through fairgate: whether Redis is the bottleneck.
//
//	cd bench && go test -run '^$' -bench RedisCPU -benchtime 60000x
func BenchmarkRedisCPU(b *testing.B) {
	ks := keys(10_000)
	s := fairgateStore(b, "cpu:")
	c0, t0 := redisCPU(b), time.Now()
	concurrently(b, 64, func(i int) error {
		var res store.Result
		return s.Take(context.Background(), []store.Check{{Key: ks[i%len(ks)], Limit: fgLimit, Cost: 1}}, &res)
	})
	b.ReportMetric((redisCPU(b)-c0)/time.Since(t0).Seconds(), "redis-cores")
	b.ReportMetric(float64(time.Since(t0).Microseconds())/float64(b.N), "wall-µs/op")
}
