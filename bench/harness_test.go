package bench

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// keys returns n distinct tenant keys.
func keys(n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("rl:{tenant-%05d}:all", i)
	}
	return k
}

// concurrently runs op b.N times spread over n goroutines and reports
// decisions/s and the p50 and p99 latency of one op, in µs.
func concurrently(b *testing.B, n int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	lat := make([][]time.Duration, n)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range n {
		wg.Go(func() {
			mine := make([]time.Duration, 0, b.N/n+1)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				t := time.Now()
				if err := op(int(i)); err != nil {
					b.Error(err)
					break
				}
				mine = append(mine, time.Since(t))
			}
			lat[g] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op")
}
