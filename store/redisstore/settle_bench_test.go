package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// BenchmarkSettle is a settled request beside an unsettled one on the
// shared standalone Redis: a take of one check (op=take), a settlement of
// one adjustment (op=settle, with its id record), and both
// (op=take+settle), on GCRA over 10,000 keys, 16 callers per CPU.
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
		})
	}
}
