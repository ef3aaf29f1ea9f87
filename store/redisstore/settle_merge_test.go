package redisstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/storetest"
)

// Merged settlements (settle_multi.lua, settle_node.lua): concurrent
// settlements' parts for one slot, or on a Cluster one node, go together
// in one script call, each its own atomic step.

// settleJob is one settlement of the merge tests, and its retry.
type settleJob struct {
	id     string
	adjs   []store.Adjustment
	tries  int                   // 1, or 2: sent twice at once, as a retry that overtook a slow first call
	res    [2]store.SettleResult // per try
	err    [2]error
	checks []store.Check // its keys' takes before it, one check each
	taken  []store.Result
}

// mergeServers are the two set-ups the merge tests run on, with the
// servers whose script calls they count.
func mergeServers(t *testing.T) []struct {
	name, url string
	addrs     []string
} {
	return []struct {
		name, url string
		addrs     []string
	}{
		{"standalone", standaloneURL(t), []string{redistest.Shared(t).Addr}},
		{"cluster", clusterURL(t), redistest.SharedCluster(t).Addrs()},
	}
}

// warmSettle loads the settle scripts of every algorithm on every node and,
// on a Cluster, waits for the store's slot map (so that parts are merged
// by node).
func warmSettle(t *testing.T, s *Store) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range 96 {
		wg.Go(func() {
			var res store.SettleResult
			l := algo.Limit{Limit: 10, Period: time.Hour, Algorithm: algo.Algorithms[i%len(algo.Algorithms)]}
			adjs := []store.Adjustment{{Key: fmt.Sprintf("{warm%d}k", i), Limit: l, Delta: 1}}
			for _, a := range algo.Algorithms { // every script a mix of algorithms can need
				if a != l.Algorithm && i%3 == 0 {
					adjs = append(adjs, store.Adjustment{Key: fmt.Sprintf("{warm%d}k", i), Limit: l.With(a), Delta: 1})
				}
			}
			if err := s.Settle(context.Background(), fmt.Sprint("warm", i), adjs, &res); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if !s.cluster {
		return
	}
	for deadline := time.Now().Add(5 * time.Second); s.nodes.cur.Load() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slot map was never read")
		}
	}
}

// runSettleJobs takes each job's checks (each alone, all at once), then
// settles every job, each try its own goroutine, all at once, and returns
// the script calls the settlements took and the parts a node refused and
// were sent again alone (node.go).
func runSettleJobs(t *testing.T, s *Store, addrs []string, jobs []*settleJob) (calls int, resent int64) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, j := range jobs {
		j.taken = make([]store.Result, len(j.checks))
		for c := range j.checks {
			wg.Go(func() {
				if err := s.Take(ctx, j.checks[c:c+1], &j.taken[c]); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, j := range jobs {
		for c := range j.adjs {
			j.adjs[c].TakenAt = j.taken[c].Now
		}
	}
	before, resent := scriptCalls(t, addrs...), s.nodes.resent.Load()
	start := make(chan struct{})
	for _, j := range jobs {
		for try := range j.tries {
			wg.Go(func() {
				<-start
				j.err[try] = s.Settle(ctx, j.id, j.adjs, &j.res[try])
			})
		}
	}
	close(start)
	wg.Wait()
	return scriptCalls(t, addrs...) - before, s.nodes.resent.Load() - resent
}

// TestSettleMergedAsReference: 300 settlements (a quarter of them sent
// twice at once, as retries) of random adjustments of every algorithm on
// keys of their own over 300 tenants, all at once, apply exactly as the
// Go reference applies each alone at the time Redis reported, and leave
// the states it leaves; and they take fewer script calls than there are
// settlements: merged by slot on standalone Redis, by node on a Cluster
// (where each settlement's keys are its own tenant's, its own slot).
func TestSettleMergedAsReference(t *testing.T) {
	for _, srv := range mergeServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s := open(t, srv.url)
			warmSettle(t, s)
			r := seeded(t, 37)
			const n = 300
			jobs := make([]*settleJob, n)
			for i := range jobs {
				j := &settleJob{id: fmt.Sprint("m", i), tries: 1}
				if r.IntN(4) == 0 {
					j.tries = 2
				}
				for c := range 1 + r.IntN(3) {
					a := algo.Algorithms[r.IntN(len(algo.Algorithms))]
					l := algo.Limit{Limit: 1 + r.Int64N(8), Algorithm: a}
					l.Period = time.Duration(l.Limit*(500+r.Int64N(4000))) * time.Microsecond
					if r.IntN(3) == 0 {
						l.Period *= 2000 // long periods: grid weighting, coarse windows
					}
					if !a.Windowed() && r.IntN(2) == 0 {
						l.Burst = 1 + r.Int64N(10)
					}
					if a == algo.FixedWindow && r.IntN(2) == 0 {
						l.Offset = time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
					}
					tenant := i // on a Cluster, one slot per settlement
					if !s.cluster && c > 0 {
						tenant = r.IntN(n)
					}
					key := fmt.Sprintf("{t%d}s%d-%d", tenant, i, c)
					capacity := l.Capacity()
					j.checks = append(j.checks, store.Check{Key: key, Limit: l, Cost: r.Int64N(capacity + 1)})
					j.adjs = append(j.adjs, store.Adjustment{Key: key, Limit: l, Delta: r.Int64N(3*capacity+1) - 3*capacity/2})
				}
				jobs[i] = j
			}
			calls, _ := runSettleJobs(t, s, srv.addrs, jobs)
			ref := storetest.NewReference()
			var want store.Result
			var swant store.SettleResult
			for i, j := range jobs {
				for c, ck := range j.checks {
					ref.Take(j.taken[c].Now.UnixMicro(), []store.Check{ck}, &want)
					if j.taken[c].Decisions[0] != want.Decisions[0] {
						t.Fatalf("job %d take %+v: Redis %+v, reference %+v", i, ck, j.taken[c].Decisions[0], want.Decisions[0])
					}
				}
				for try := range j.tries {
					if j.err[try] != nil {
						t.Fatalf("job %d try %d: %v", i, try, j.err[try])
					}
				}
				// The try that applied first, then the other.
				order := []int{0}
				switch {
				case j.tries == 2 && j.res[0].Settled[0].Repeated:
					order = []int{1, 0}
				case j.tries == 2:
					order = []int{0, 1}
				}
				var last int64
				for k, try := range order {
					got := &j.res[try]
					now := got.Now.UnixMicro()
					last = max(last, now)
					ref.Settle(now, j.id, j.adjs, &swant)
					for c, a := range j.adjs {
						if got.Settled[c] != swant.Settled[c] {
							t.Fatalf("job %d (%d tries) try %d, applied %s at %d, %v %q delta %d taken %d: Redis %+v, reference %+v",
								i, j.tries, try, []string{"first", "second"}[k], now, a.Limit, a.Key, a.Delta, a.TakenUs(), got.Settled[c], swant.Settled[c])
						}
					}
				}
				for _, a := range j.adjs {
					checkSettledState(t, s, ref, a, last)
				}
			}
			if calls >= n {
				t.Errorf("%d script calls for %d settlements (%d with their retries) sent at once: want fewer than one per settlement (merged)", calls, n, countTries(jobs))
			}
			t.Logf("%d script calls for %d settlements (%d with their retries)", calls, n, countTries(jobs))
		})
	}
}

func countTries(jobs []*settleJob) (n int) {
	for _, j := range jobs {
		n += j.tries
	}
	return n
}

// checkSettledState compares the state Redis holds for a's key with the
// reference's at now (its last settlement's time): equal, or gone from
// Redis when the reference expires it by Redis's clock at the read.
func checkSettledState(t *testing.T, s *Store, ref *storetest.Reference, a store.Adjustment, now int64) {
	t.Helper()
	st, until, held := ref.State(a.Limit.Algorithm, a.Key, now)
	got, ok := readState(t, s, a.Limit.Algorithm, a.Key)
	switch {
	case !held:
		// Expired for the reference; Redis may hold it up to 1 ms longer
		// (PX is rounded up), which decides the same.
	case !ok:
		if after := redisTime(t, s); until-after > 2000 {
			t.Fatalf("Redis lost the state of %q, %dµs before its expiry", a.Key, until-after)
		}
	case !cmp.Equal(st, got, cmp.Comparer(func(a, b []int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) })):
		t.Fatalf("state of %q (%v): Redis %+v, reference %+v", a.Key, a.Limit.Algorithm, got, st)
	}
}

// onceJobs are n settlements, each sent twice at once, of one to three
// adjustments of every algorithm on a limit no test run fills (remaining
// does not move with time), on keys of their own over n tenants; with
// spread, a settlement's keys are in up to three tenants (cluster slots).
func onceJobs(r interface {
	IntN(int) int
	Int64N(int64) int64
}, prefix string, n int, spread bool) []*settleJob {
	jobs := make([]*settleJob, n)
	for i := range jobs {
		j := &settleJob{id: fmt.Sprint(prefix, i), tries: 2}
		for c := range 1 + r.IntN(3) {
			a := algo.Algorithms[r.IntN(len(algo.Algorithms))]
			l := algo.Limit{Limit: 1_000_000, Period: algo.MaxPeriod, Algorithm: a}
			if a == algo.SlidingLog {
				l.Limit = algo.MaxLogLimit
			}
			tenant := i
			if spread {
				tenant = (i + c*7) % n
			}
			key := fmt.Sprintf("{%s%d}k%d-%d", prefix, tenant, i, c)
			est := 1 + r.Int64N(20)
			j.checks = append(j.checks, store.Check{Key: key, Limit: l, Cost: est})
			j.adjs = append(j.adjs, store.Adjustment{Key: key, Limit: l, Delta: r.Int64N(41) - est})
		}
		jobs[i] = j
	}
	return jobs
}

// checkOnce: of each job's two tries, exactly one applied each adjustment
// (on a Cluster, per slot: the tries may split a settlement over several
// slots between them) and the other reported it repeated, applying
// nothing; and each key holds its take less what was applied, once.
func checkOnce(t *testing.T, s *Store, jobs []*settleJob) {
	t.Helper()
	var res store.Result
	for i, j := range jobs {
		for try := range j.tries {
			if j.err[try] != nil {
				t.Fatalf("job %d try %d: %v", i, try, j.err[try])
			}
		}
		for c, a := range j.adjs {
			first, second := j.res[0].Settled[c], j.res[1].Settled[c]
			if first.Repeated {
				first, second = second, first
			}
			if first.Repeated || !second.Repeated || first.Applied != a.Delta || second.Applied != 0 || first.Remaining != second.Remaining {
				t.Fatalf("job %d adjustment %d (delta %d): tries answered %+v and %+v, want it applied once and repeated once, the same remaining", i, c, a.Delta, j.res[0].Settled[c], j.res[1].Settled[c])
			}
			if err := s.Take(context.Background(), []store.Check{{Key: a.Key, Limit: a.Limit}}, &res); err != nil {
				t.Fatal(err)
			}
			if want := a.Limit.Capacity() - j.checks[c].Cost - a.Delta; res.Decisions[0].Remaining != want {
				t.Fatalf("job %d adjustment %d: %q has %d remaining, want %d (taken %d, settled %+d once)", i, c, a.Key, res.Decisions[0].Remaining, want, j.checks[c].Cost, a.Delta)
			}
		}
	}
}

// TestSettleSameIDConcurrentlyOnce: 200 settlements, each sent twice at
// once (a retry that overtook its first call), over 200 tenants (on a
// Cluster, settlements over up to three slots), apply once each: merged
// into fewer script calls than settlements, the two tries of an id in one
// call or in two.
func TestSettleSameIDConcurrentlyOnce(t *testing.T) {
	for _, srv := range mergeServers(t) {
		t.Run(srv.name, func(t *testing.T) {
			s := open(t, srv.url)
			warmSettle(t, s)
			const n = 200
			jobs := onceJobs(seeded(t, 38), "o", n, true)
			calls, _ := runSettleJobs(t, s, srv.addrs, jobs)
			checkOnce(t, s, jobs)
			if calls >= n {
				t.Errorf("%d script calls for %d settlements sent twice at once: want fewer than one per settlement (merged)", calls, n)
			}
			t.Logf("%d script calls for %d settlements sent twice", calls, n)
		})
	}
}

// TestSettleMergeWithAStaleMap: with a slot map that gives every slot to
// one node, the settlement parts of the other nodes' slots are refused
// there (at their id record: nothing written) and sent again alone:
// every settlement, each sent twice at once, over up to three slots,
// still applies exactly once, and no error reaches a caller.
func TestSettleMergeWithAStaleMap(t *testing.T) {
	s := open(t, clusterURL(t))
	warmSettle(t, s)
	staleMap(t, s)
	jobs := onceJobs(seeded(t, 39), "st", 200, true)
	_, resent := runSettleJobs(t, s, redistest.SharedCluster(t).Addrs(), jobs)
	checkOnce(t, s, jobs)
	if resent == 0 {
		t.Error("no settlement part was refused by the wrong node and sent again: the test did not reach the path it is for")
	}
	t.Logf("%d settlement parts sent again", resent)
}

// TestSettleArgs decodes settleArgs' output as settle_multi.lua does, in
// doubles with Lua's floored %, and finds every adjustment's limit, delta
// (negative ones included) and taken_at.
func TestSettleArgs(t *testing.T) {
	for _, distinct := range []int{1, 3, 8, 40, maxMerge * store.MaxBatch} {
		t.Run(fmt.Sprint("limits=", distinct), func(t *testing.T) {
			r := seeded(t, uint64(distinct))
			var ps []*settlePart
			var want []wireAdj
			for len(want) < max(3*distinct, 64) {
				p := &settlePart{}
				for range 1 + r.IntN(store.MaxBatch) {
					l := r.IntN(distinct)
					w := wireAdj{int64(l % 5), int64(1 + l), 1_000_000_000, int64(l * 7), r.Int64N(2*algo.MaxCount+1) - algo.MaxCount, r.Int64N(1 << 52)}
					if r.IntN(4) == 0 {
						w.delta = []int64{-algo.MaxCount, algo.MaxCount, -1, 0}[r.IntN(4)]
					}
					p.adjs = append(p.adjs, w)
					want = append(want, w)
				}
				ps = append(ps, p)
			}
			args := settleArgs(ps)
			num := func(i int) float64 { // ARGV[i], 1-based, as tonumber
				var v float64
				if _, err := fmt.Sscan(args[i-1], &v); err != nil {
					t.Fatalf("ARGV[%d] = %q: %v", i, args[i-1], err)
				}
				return v
			}
			if int(num(1)) != len(ps) {
				t.Fatalf("ARGV[1] = %s parts, want %d", args[0], len(ps))
			}
			nl := num(2)
			if int(nl) > distinct {
				t.Fatalf("%v limits sent for %d distinct", nl, distinct)
			}
			if life := args[2+4*int(nl)]; life != lifetimeArg {
				t.Fatalf("lifetime %q, want %q", life, lifetimeArg)
			}
			ai, k := 4+4*int(nl), 0
			for _, p := range ps {
				if n := int(num(ai)); n != len(p.adjs) {
					t.Fatalf("a part of %d adjustments encoded as %d", len(p.adjs), n)
				}
				ai++
				for range p.adjs {
					v := num(ai)
					li := v - math.Floor(v/nl)*nl // Lua's %
					if li < 0 || li >= nl {
						t.Fatalf("ARGV[%d] = %s: limit index %v of %v", ai, args[ai-1], li, nl)
					}
					delta := (v - li) / nl
					a := 3 + 4*int(li)
					got := wireAdj{int64(num(a)), int64(num(a + 1)), int64(num(a + 2)), int64(num(a + 3)), int64(delta), int64(num(ai + 1))}
					if got != want[k] {
						t.Fatalf("adjustment %d decodes as %+v, want %+v", k, got, want[k])
					}
					ai += 2
					k++
				}
			}
			if ai != len(args)+1 || k != len(want) {
				t.Fatalf("decoded %d adjustments and %d arguments of %d", k, ai-1, len(args))
			}
		})
	}
}
