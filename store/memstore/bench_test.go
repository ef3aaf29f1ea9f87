package memstore

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

// BenchmarkTake decides one GCRA check over 10,000 keys, in parallel at
// -cpu N. Run: go test -run '^$' -bench Take -cpu 1,2 ./store/memstore
func BenchmarkTake(b *testing.B) {
	for _, batch := range []int{1, 2} {
		b.Run(fmt.Sprintf("keys=10000/batch=%d", batch), func(b *testing.B) {
			s := New(Config{})
			keys := make([][]store.Check, 10_000)
			for i := range keys {
				for j := range batch {
					keys[i] = append(keys[i], store.Check{Key: fmt.Sprintf("rl:{t%d}:%d", i, j), Limit: algo.Limit{Limit: 1_000_000_000, Period: time.Hour}, Cost: 1})
				}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var res store.Result
				i := rand.IntN(len(keys))
				for pb.Next() {
					_ = s.Take(context.Background(), keys[i%len(keys)], &res)
					i += 7919
				}
			})
		})
	}
}

// BenchmarkTakeHotKey decides one check on one key: the cost without cache
// misses.
func BenchmarkTakeHotKey(b *testing.B) {
	s := New(Config{})
	c := []store.Check{{Key: "rl:{acme}:all", Limit: algo.Limit{Limit: 1_000_000_000, Period: time.Hour}, Cost: 1}}
	var res store.Result
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Take(context.Background(), c, &res)
	}
}

// BenchmarkBytesPerKey reports the heap bytes one key costs, by algorithm.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, a := range algo.Algorithms {
		b.Run(a.String(), func(b *testing.B) {
			const n = 100_000
			var bytes uint64
			for b.Loop() {
				bytes = bytesPerKey(a, n)
			}
			b.ReportMetric(float64(bytes)/n, "bytes/key")
		})
	}
}

// BenchmarkSettle is a settled request beside an unsettled one: a take of
// one check (op=take), a settlement of one adjustment (op=settle), and
// both (op=take+settle), on GCRA over 10,000 keys, in parallel at -cpu N.
// Each settlement has an id of its own (recorded in the id table).
// Run: go test -run '^$' -bench Settle -cpu 1,2 ./store/memstore
func BenchmarkSettle(b *testing.B) {
	lim := algo.Limit{Limit: 1_000_000_000, Period: time.Hour}
	for _, op := range []string{"take", "settle", "take+settle"} {
		b.Run("op="+op, func(b *testing.B) {
			s := New(Config{})
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = fmt.Sprintf("rl:{t%d}:all", i)
			}
			var ids atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var res store.Result
				var sres store.SettleResult
				checks := make([]store.Check, 1)
				adjs := make([]store.Adjustment, 1)
				i := rand.IntN(len(keys))
				for pb.Next() {
					k := keys[i%len(keys)]
					if op != "settle" {
						checks[0] = store.Check{Key: k, Limit: lim, Cost: 100}
						_ = s.Take(context.Background(), checks, &res)
					}
					if op != "take" {
						adjs[0] = store.Adjustment{Key: k, Limit: lim, Delta: -40}
						_ = s.Settle(context.Background(), strconv.FormatInt(ids.Add(1), 36), adjs, &sres)
					}
					i += 7919
				}
			})
		})
	}
}
