package limiter

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// nearCache remembers, per instance, the keys the store has just rejected
// and until when: a request that needs at least as much of such a key
// before then cannot pass (state only moves later: other traffic takes
// more, holds push it further), so it is answered here without a store
// call. A tenant hammering a limited key then costs the store one call per
// retry interval instead of one per request, and cannot slow the others.
//
// It is bounded: nearShards × nearPerShard entries, the expired ones going
// first when a shard is full, then any. A policy change clears it.
type nearCache struct {
	seed   maphash.Seed
	shards [nearShards]nearShard
}

const (
	nearShards   = 16
	nearPerShard = 4096
)

type nearShard struct {
	mu sync.Mutex
	m  map[string]nearEntry
}

// nearEntry is a rejection: until when the key admits nothing of cost or
// more under limit, and the layer's decision to answer with.
type nearEntry struct {
	until time.Time
	cost  int64
	limit algo.Limit
	layer LayerDecision
}

func newNearCache() *nearCache {
	c := &nearCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]nearEntry)
	}
	return c
}

func (c *nearCache) shard(key string) *nearShard {
	return &c.shards[maphash.String(c.seed, key)%nearShards]
}

// lookup returns a remembered rejection of one of layers' enforced keys
// that still holds at now for cost.
func (c *nearCache) lookup(layers []Layer, cost int64, now time.Time) (LayerDecision, bool) {
	for _, ly := range layers {
		if ly.Shadow {
			continue
		}
		sh := c.shard(ly.Key)
		sh.mu.Lock()
		e, ok := sh.m[ly.Key]
		if ok && !now.Before(e.until) {
			delete(sh.m, ly.Key)
			ok = false
		}
		sh.mu.Unlock()
		if ok && cost >= e.cost && e.limit == ly.Limit {
			ld := e.layer
			ld.Layer = ly
			elapsed := ld.RetryAfter - e.until.Sub(now) // since the store's answer
			ld.RetryAfter -= elapsed
			ld.ResetAfter = max(ld.RetryAfter, ld.ResetAfter-elapsed)
			return ld, true
		}
	}
	return LayerDecision{}, false
}

// put remembers that ld's key admits nothing of cost before now + its
// retry-after.
func (c *nearCache) put(ld LayerDecision, cost int64, now time.Time) {
	if ld.RetryAfter <= 0 || ld.Shadow {
		return
	}
	sh := c.shard(ld.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[ld.Key]; !ok && len(sh.m) >= nearPerShard {
		n := 0
		for k, e := range sh.m {
			if !now.Before(e.until) || n >= 64 {
				delete(sh.m, k)
				break
			}
			n++
		}
		if len(sh.m) >= nearPerShard {
			for k := range sh.m { // any one: map order is random
				delete(sh.m, k)
				break
			}
		}
	}
	sh.m[ld.Key] = nearEntry{until: now.Add(ld.RetryAfter), cost: cost, limit: ld.Limit, layer: ld}
}

// clear forgets everything, as a policy change asks.
func (c *nearCache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.mu.Unlock()
	}
}
