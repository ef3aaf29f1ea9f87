package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// TestByteBound: the store holds at most about MaxBytes whatever the mix
// of keys: full sliding logs (80 KB each), long keys, many small keys,
// single checks and batches; the Go heap follows. Today's findings: 15,000
// sliding logs of 10,000 entries took the process to 1.26 GB, and 60 KB
// keys added 1 GB per 5,000 calls, under a bound of keys only.
func TestByteBound(t *testing.T) {
	const budget = 8 << 20
	log := algo.Limit{Limit: algo.MaxLogLimit, Period: time.Hour, Algorithm: algo.SlidingLog}
	gcra := algo.Limit{Limit: 10, Period: time.Hour}
	mixes := map[string]func(i int) []store.Check{
		"sliding logs": func(i int) []store.Check {
			return []store.Check{{Key: fmt.Sprint("log", i), Limit: log, Cost: algo.MaxLogLimit}}
		},
		"sliding logs in batches": func(i int) []store.Check {
			return []store.Check{{Key: fmt.Sprint("a", i), Limit: log, Cost: algo.MaxLogLimit / 2}, {Key: fmt.Sprint("b", i), Limit: gcra, Cost: 1}}
		},
		"long keys": func(i int) []store.Check {
			return []store.Check{{Key: fmt.Sprint(i, strings.Repeat("k", 60<<10)), Limit: gcra, Cost: 1}}
		},
	}
	for name, mix := range mixes {
		t.Run(name, func(t *testing.T) {
			s := New(Config{MaxBytes: budget, Shards: 4})
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			var res store.Result
			for i := range 600 { // about 48 MB of logs or 36 MB of keys unbounded
				if err := s.Take(context.Background(), mix(i), &res); err != nil {
					t.Fatal(err)
				}
				if b := s.Bytes(); b > budget+100<<10 {
					t.Fatalf("after %d takes the store holds %d bytes, over its %d", i+1, b, budget)
				}
			}
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2*budget {
				t.Errorf("the heap grew by %d MB, over twice the %d MB bound", grown>>20, budget>>20)
			}
			runtime.KeepAlive(s)
		})
	}
}
