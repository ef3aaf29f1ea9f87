package memstore

import (
	"context"
	"fmt"
	"runtime"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// bytesPerKey measures the live heap that n keys of algorithm a hold.
func bytesPerKey(a algo.Algorithm, n int) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New(Config{MaxKeys: n})
	var res store.Result
	l := algo.Limit{Limit: 100, Period: 60e9, Algorithm: a}
	for i := range n {
		_ = s.Take(context.Background(), []store.Check{{Key: fmt.Sprintf("rl:{tenant-%07d}:all", i), Limit: l, Cost: 1}}, &res)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return after.HeapAlloc - before.HeapAlloc
}
