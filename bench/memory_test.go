package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// xrateMap is the hand-written baseline: one x/time/rate limiter per key in
// a map behind a mutex.
type xrateMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (x *xrateMap) allow(key string) bool { return x.limiter(key).Allow() }

func (x *xrateMap) limiter(key string) *rate.Limiter {
	x.mu.Lock()
	l := x.m[key]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(1_000_000_000.0/3600), 1_000_000_000)
		x.m[key] = l
	}
	x.mu.Unlock()
	return l
}

// BenchmarkMemory: one decision on one of 10,000 keys, at -cpu 1,2.
//
//	cd bench && go test -run '^$' -bench Memory -cpu 1,2 -count 6
func BenchmarkMemory(b *testing.B) {
	ks := keys(10_000)
	lim := algo.Limit{Limit: 1_000_000_000, Period: time.Hour}
	b.Run("impl=fairgate/keys=10000", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var res store.Result
			var c [1]store.Check
			i := rand.IntN(len(ks))
			for pb.Next() {
				c[0] = store.Check{Key: ks[i%len(ks)], Limit: lim, Cost: 1}
				_ = s.Take(context.Background(), c[:], &res)
				i += 7919
			}
		})
	})
	// The same two with the time passed in (TakeAt, AllowN): what each costs
	// without this machine's clock read, which both pay in the runs above.
	at := time.Now()
	b.Run("impl=fairgate/keys=10000/clock=given", func(b *testing.B) {
		s := memstore.New(memstore.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var res store.Result
			var c [1]store.Check
			i := rand.IntN(len(ks))
			for pb.Next() {
				c[0] = store.Check{Key: ks[i%len(ks)], Limit: lim, Cost: 1}
				_ = s.TakeAt(context.Background(), at, c[:], &res)
				i += 7919
			}
		})
	})
	b.Run("impl=xrate-map-mutex/keys=10000/clock=given", func(b *testing.B) {
		x := &xrateMap{m: map[string]*rate.Limiter{}}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(ks))
			for pb.Next() {
				_ = x.limiter(ks[i%len(ks)]).AllowN(at, 1)
				i += 7919
			}
		})
	})
	b.Run("impl=xrate-map-mutex/keys=10000", func(b *testing.B) {
		x := &xrateMap{m: map[string]*rate.Limiter{}}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(ks))
			for pb.Next() {
				_ = x.allow(ks[i%len(ks)])
				i += 7919
			}
		})
	})
}
