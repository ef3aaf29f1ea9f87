package memstore

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// BenchmarkBytesPerSettleID reports the heap bytes one settlement id
// held costs (22-byte ids), beside the key it settles.
// Run: go test -run '^$' -bench BytesPerSettleID ./store/memstore
func BenchmarkBytesPerSettleID(b *testing.B) {
	const n = 100_000
	var per float64
	for b.Loop() {
		s := New(Config{MaxSettleIDs: n})
		adjs := []store.Adjustment{{Key: "k", Limit: algo.Limit{Limit: 1_000_000_000, Period: time.Hour}, Delta: 1}}
		var res store.SettleResult
		_ = s.Settle(context.Background(), "warm", adjs, &res)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		for i := range n {
			_ = s.Settle(context.Background(), "settle-"+strconv.FormatInt(int64(1e14+i), 10), adjs, &res)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		per = float64(m1.HeapAlloc-m0.HeapAlloc) / n
		runtime.KeepAlive(s)
	}
	b.ReportMetric(per, "bytes/id")
}
