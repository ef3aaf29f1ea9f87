package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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
