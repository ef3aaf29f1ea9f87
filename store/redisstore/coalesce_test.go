package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
)

// TestMergedArgs decodes mergedArgs' output as take_multi.lua and
// take1_multi.lua do, in doubles, and finds every check's limit and cost.
func TestMergedArgs(t *testing.T) {
	for _, distinct := range []int{1, 3, 7, 8, 9, 40, 64 * store.MaxBatch} {
		for _, singles := range []bool{true, false} {
			t.Run(fmt.Sprintf("limits=%d/singles=%v", distinct, singles), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(distinct), 7))
				var ps []*part
				var want [][]string
				for len(want) < max(3*distinct, 64) {
					n := 1
					if !singles {
						n = 1 + rng.IntN(store.MaxBatch)
					}
					p := &part{}
					for j := range n {
						l := rng.IntN(distinct)
						w := wireCheck{int64(l % 5), int64(1 + l), 1_000_000_000, int64(l * 7), rng.Int64N(1_000_000_001)}
						p.idx = append(p.idx, j)
						p.checks = append(p.checks, w)
						want = append(want, w.appendArgs(nil))
					}
					ps = append(ps, p)
				}
				args := mergedArgs(ps, singles)
				num := func(i int) float64 { // ARGV[i], 1-based, as tonumber
					v, err := strconv.ParseFloat(args[i-1], 64)
					if err != nil {
						t.Fatalf("ARGV[%d] = %q: %v", i, args[i-1], err)
					}
					return v
				}
				if int(num(1)) != len(ps) {
					t.Fatalf("ARGV[1] = %s batches, want %d", args[0], len(ps))
				}
				nl := num(2)
				if int(nl) > distinct {
					t.Fatalf("%v limits sent for %d distinct", nl, distinct)
				}
				ai, k := 3+4*int(nl), 0
				for _, p := range ps {
					n := 1
					if !singles {
						n = int(num(ai))
						ai++
					}
					if n != len(p.idx) {
						t.Fatalf("a batch of %d checks encoded as %d", len(p.idx), n)
					}
					for range n {
						v := num(ai)
						ai++
						li := math.Mod(v, nl)
						cost := (v - li) / nl
						a := 3 + 4*int(li)
						got := []string{args[a-1], args[a], args[a+1], args[a+2], strconv.FormatFloat(cost, 'f', -1, 64)}
						if fmt.Sprint(got) != fmt.Sprint(want[k]) {
							t.Fatalf("check %d decodes as %v, want %v", k, got, want[k])
						}
						k++
					}
				}
				if ai != len(args)+1 || k != len(want) {
					t.Fatalf("decoded %d checks and %d arguments of %d", k, ai-1, len(args))
				}
			})
		}
	}
}

// TestMergedDistinctLimits: concurrent takes with a limit and a cost of
// their own, merged into shared script calls, each get the decision of
// their own limit and cost.
func TestMergedDistinctLimits(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s, err := New(Config{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			lim := algo.Limit{Limit: int64(10 + i), Period: time.Hour, Burst: int64(10 + i), Algorithm: algo.Algorithm(i % 5)}
			cost := int64(1 + i%9)
			checks := []store.Check{{Key: fmt.Sprint("k", i), Limit: lim, Cost: cost}}
			if i%3 == 0 {
				checks = append(checks, store.Check{Key: fmt.Sprint("j", i), Limit: lim.With(algo.GCRA), Cost: cost})
			}
			var res store.Result
			if err := s.Take(context.Background(), checks, &res); err != nil {
				t.Error(err)
				return
			}
			for j, d := range res.Decisions {
				if !d.Allowed || d.Remaining != lim.Burst-cost {
					t.Errorf("take %d check %d: allowed %v, remaining %d; want allowed with %d left (burst %d, cost %d)", i, j, d.Allowed, d.Remaining, lim.Burst-cost, lim.Burst, cost)
				}
			}
		})
	}
	wg.Wait()
}
