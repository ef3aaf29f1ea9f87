package apikeys_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/apikeys"
)

// loaded returns a Set holding n keys (and the keys), and the heap bytes
// the Set's copy of them takes.
func loaded(b *testing.B, n int) (*apikeys.Set, []string, float64) {
	b.Helper()
	ctx := context.Background()
	be := apikeys.NewMemory()
	keys := make([]string, n)
	for i := range n {
		k, r := apikeys.Generate()
		r.Tenant, r.Plan, r.Label, r.Created = fmt.Sprintf("tenant-%06d", i), "team", "production", time.Now()
		if _, err := be.Write(ctx, apikeys.Create, r); err != nil {
			b.Fatal(err)
		}
		keys[i] = k
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, _ := apikeys.New(apikeys.Config{Backend: be})
	if err := s.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return s, keys, float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkLookup is the cost of accepting a stored key (the SHA-256 of
// the presented key and one map probe) with 1,000 and 100,000 keys held,
// and the memory each held key takes (B/key: the instance's index, its
// records and their strings).
//
//	go test -run '^$' -bench Lookup -benchmem ./internal/apikeys/
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			s, keys, perKey := loaded(b, n)
			i := 0
			for b.Loop() {
				if _, err := s.Lookup(apikeys.Sum(keys[i%n])); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}
