package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// TestTableMatchesMap drives one shard's index through random inserts and
// removals, across resizes and wrap-around probe runs, and checks every key
// against a map after each step.
func TestTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sh shard
	sh.init()
	want := map[string]uint32{}
	// Few distinct tags force long probe runs and tag collisions.
	tagOf := func(k string) uint32 { return uint32(len(k)*7919) ^ uint32(k[len(k)-1]) }
	for step := range 20_000 {
		k := fmt.Sprintf("k%d", rng.IntN(600))
		if i, ok := want[k]; ok {
			if sh.lookup(tagOf(k), algo.GCRA, k) != i {
				t.Fatalf("step %d: lookup(%q) = %d, want %d", step, k, sh.lookup(tagOf(k), algo.GCRA, k), i)
			}
			if rng.IntN(2) == 0 {
				sh.remove(i)
				delete(want, k)
			}
		} else {
			if got := sh.lookup(tagOf(k), algo.GCRA, k); got != 0 {
				t.Fatalf("step %d: lookup(%q) = %d for an absent key", step, k, got)
			}
			want[k] = sh.insert(tagOf(k), algo.GCRA, k, 0, 1<<30)
		}
		if sh.n != len(want) {
			t.Fatalf("step %d: n = %d, want %d", step, sh.n, len(want))
		}
	}
	for k, i := range want {
		if got := sh.lookup(tagOf(k), algo.GCRA, k); got != i {
			t.Fatalf("lookup(%q) = %d at the end, want %d", k, got, i)
		}
		if got := sh.lookup(tagOf(k), algo.TokenBucket, k); got != 0 {
			t.Fatalf("lookup(%q) under another algorithm = %d, want 0", k, got)
		}
	}
}

// TestBatchNeverEvictsItsOwnKeys fills a one-shard store to its bound and
// decides a batch of one held key and two new ones: inserting the new keys
// must not evict the held one (the shard may exceed its bound by the batch
// instead), and every key keeps its own state.
func TestBatchNeverEvictsItsOwnKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_000_000, 0)}
	s := New(Config{Shards: 1, MaxKeys: 2, Now: clk.now})
	ctx := context.Background()
	long := algo.Limit{Limit: 10, Period: time.Hour}
	var res store.Result
	take := func(keys ...string) {
		t.Helper()
		var cs []store.Check
		for _, k := range keys {
			cs = append(cs, store.Check{Key: k, Limit: long, Cost: 1})
		}
		if err := s.Take(ctx, cs, &res); err != nil || !res.Allowed {
			t.Fatalf("Take(%v) = %v, allowed %v", keys, err, res.Allowed)
		}
	}
	take("a")
	take("b")
	take("a", "c", "d") // a is least recently used; b is the one to go
	for k, want := range map[string]int64{"a": 8, "c": 9, "d": 9} {
		if err := s.Take(ctx, []store.Check{{Key: k, Limit: long}}, &res); err != nil {
			t.Fatal(err)
		}
		if got := res.Decisions[0].Remaining; got != want {
			t.Errorf("%s: remaining %d, want %d", k, got, want)
		}
	}
	if _, ok := s.State(algo.GCRA, "b"); ok {
		t.Error("b, the only key outside the batch, was not evicted")
	}
}

// TestShardSize: shards are a whole number of 128-byte line pairs, so
// that two cores working on neighbouring shards never share a line (the
// array of shards is allocated line-aligned, being large).
func TestShardSize(t *testing.T) {
	if n := unsafe.Sizeof(shard{}); n%128 != 0 {
		t.Fatalf("a shard is %d bytes: adjust its padding to a multiple of 128", n)
	}
}
