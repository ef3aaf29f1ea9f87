package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/storetest"
)

// takeTenants runs two concurrent takes of cost 1 on each of n tenants'
// keys (named by tag and a number) (each its own hash tag, so spread over the slots and nodes) on a
// limit of 1, and returns how many were admitted and the script calls the
// cluster served.
func takeTenants(t *testing.T, s *Store, tag string, n int) (admitted int64, calls int) {
	t.Helper()
	l := algo.Limit{Limit: 1, Period: time.Hour}
	before := evalCalls(t)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 * n {
		wg.Go(func() {
			var res store.Result
			if err := s.Take(context.Background(), []store.Check{{Key: fmt.Sprintf("{%s%d}k", tag, i%n), Limit: l, Cost: 1}}, &res); err != nil {
				t.Error(err)
			}
			if res.Allowed {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return ok.Load(), evalCalls(t) - before
}

// TestClusterMergesByNode: concurrent takes on 600 tenants' keys, each in
// a slot of its own, are merged by node into fewer script calls than
// tenants (by slot there would be a call per tenant at least), and admit
// exactly one per tenant.
func TestClusterMergesByNode(t *testing.T) {
	s := open(t, clusterURL(t))
	takeTenants(t, s, "w", 50) // read the slot map, load the scripts
	for deadline := time.Now().Add(5 * time.Second); s.nodes.cur.Load() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slot map was never read")
		}
	}
	const n = 600
	admitted, calls := takeTenants(t, s, "t", n)
	if admitted != n {
		t.Errorf("%d admitted, want exactly %d (one per tenant)", admitted, n)
	}
	if calls >= n {
		t.Errorf("%d script calls for %d takes on %d slots: want fewer than one per slot (merged by node)", calls, 2*n, n)
	}
	t.Logf("%d script calls for %d takes on %d tenants", calls, 2*n, n)
}

// TestNodeMergeWithAStaleMap: with a slot map that gives every slot to one
// node, the batches of the other nodes' slots are refused there key by
// key, charged nothing, and sent again alone: every tenant still gets
// exactly its limit, and no error reaches a caller.
func TestNodeMergeWithAStaleMap(t *testing.T) {
	s := open(t, clusterURL(t))
	takeTenants(t, s, "w", 10) // connect to every node, load the scripts
	staleMap(t, s)
	const n = 300
	if admitted, _ := takeTenants(t, s, "t", n); admitted != n {
		t.Errorf("%d admitted, want exactly %d (one per tenant)", admitted, n)
	}
	if s.nodes.resent.Load() == 0 {
		t.Error("no batch was refused by the wrong node and sent again: the test did not reach the path it is for")
	}
	t.Logf("%d batches sent again", s.nodes.resent.Load())
}

// TestNodeMergeDecidesAsAlone: batches of every algorithm, one to three
// checks each, sent at once over many slots (so merged by node), decide
// exactly as the Go reference does for each batch alone at Redis's time.
func TestNodeMergeDecidesAsAlone(t *testing.T) {
	s := open(t, clusterURL(t))
	takeTenants(t, s, "w", 50)
	r := seeded(t, 37)
	type job struct {
		checks []store.Check
		res    store.Result
		err    error
	}
	jobs := make([]*job, 500)
	for i := range jobs {
		j := &job{}
		for c := range 1 + r.IntN(3) {
			a := algo.Algorithms[r.IntN(len(algo.Algorithms))]
			l := algo.Limit{Limit: 1 + r.Int64N(8), Period: time.Duration(1+r.Int64N(60)) * time.Second, Algorithm: a}
			if !a.Windowed() && r.IntN(2) == 0 {
				l.Burst = 1 + r.Int64N(10)
			}
			j.checks = append(j.checks, store.Check{Key: fmt.Sprintf("{d%d}%d", i, c), Limit: l, Cost: r.Int64N(l.Capacity() + 1)})
		}
		jobs[i] = j
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.err = s.Take(context.Background(), j.checks, &j.res) })
	}
	wg.Wait()
	for i, j := range jobs {
		if j.err != nil {
			t.Fatalf("batch %d: %v", i, j.err)
		}
		var want store.Result
		storetest.NewReference().Take(j.res.Now.UnixMicro(), j.checks, &want)
		if j.res.Allowed != want.Allowed {
			t.Fatalf("batch %d %+v: allowed %v, reference %v", i, j.checks, j.res.Allowed, want.Allowed)
		}
		for c := range j.checks {
			if j.res.Decisions[c] != want.Decisions[c] {
				t.Fatalf("batch %d check %d %+v: Redis %+v, reference %+v", i, c, j.checks[c], j.res.Decisions[c], want.Decisions[c])
			}
		}
	}
}

// staleMap gives s a slot map of the shared Cluster in which node 0
// serves every slot, and keeps s from reading the map again.
func staleMap(t *testing.T, s *Store) {
	t.Helper()
	m, err := s.loadSlotMap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.nodes) != 3 {
		t.Fatalf("slot map has %d masters, want 3", len(m.nodes))
	}
	for i := range m.owner {
		m.owner[i] = 1 // all node 0's
	}
	s.nodes.last.Store(time.Now().Add(time.Hour).UnixNano()) // and never read again
	s.nodes.cur.Store(m)
}

// TestProbeKeysOnePerMaster: on a Cluster the store names a probe key on
// each master (the guard's idle probe peeks at every one; the attacker
// review of issue 37 killed a master an idle instance never looked at),
// and none on standalone Redis.
func TestProbeKeysOnePerMaster(t *testing.T) {
	s := open(t, clusterURL(t))
	var keys []string
	for deadline := time.Now().Add(5 * time.Second); keys == nil; time.Sleep(10 * time.Millisecond) {
		if keys = s.ProbeKeys(); keys == nil && time.Now().After(deadline) {
			t.Fatal("no probe keys: the slot map was never read")
		}
	}
	m := s.nodes.cur.Load()
	seen := map[uint16]bool{}
	for _, k := range keys {
		o := m.owner[slot(s.Key(algo.GCRA, k))]
		if o == 0 || seen[o] {
			t.Errorf("probe key %q: master %d (seen before: %v)", k, o, seen[o])
		}
		seen[o] = true
		var res store.Result
		if err := s.Take(context.Background(), []store.Check{{Key: k, Limit: algo.Limit{Limit: 1, Period: time.Second}}}, &res); err != nil {
			t.Errorf("peek at %q: %v", k, err)
		}
	}
	if len(seen) != 3 {
		t.Errorf("probe keys %q cover %d masters, want 3", keys, len(seen))
	}
	if k := open(t, standaloneURL(t)).ProbeKeys(); k != nil {
		t.Errorf("standalone Redis: probe keys %q, want none", k)
	}
}
