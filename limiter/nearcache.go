package limiter

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// nearCache remembers, per instance, the keys the store has just rejected
// and until when: a request that needs at least as much of such a key
// before then cannot pass (state only moves later: other traffic takes
// more, holds push it further), so it is answered here without a store
// call. A tenant hammering a limited key then costs the store one call per
// retry interval instead of one per request, and cannot slow the others.
//
// It is bounded: nearShards × nearPerShard entries and nearShards ×
// nearShardBytes bytes (nearEntryBytes plus the key per entry), the expired
// ones going first when a shard is full, then any. A policy change clears
// it.
type nearCache struct {
	seed   maphash.Seed
	shards [nearShards]nearShard
}

const (
	nearShards     = 16
	nearPerShard   = 4096
	nearShardBytes = 1 << 20 // 16 MiB in all
	nearEntryBytes = 256     // an entry without its key, map overhead included
)

type nearShard struct {
	mu    sync.Mutex
	m     map[string]nearEntry
	bytes int
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
func (c *nearCache) lookup(layers []policy.Layer, cost int64, now time.Time) (LayerDecision, bool) {
	for _, ly := range layers {
		if ly.Shadow {
			continue
		}
		sh := c.shard(ly.Key)
		sh.mu.Lock()
		e, ok := sh.m[ly.Key]
		if ok && !now.Before(e.until) {
			sh.drop(ly.Key)
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
	size := nearEntryBytes + len(ld.Key)
	if size > nearShardBytes/16 {
		return // a key this long is never worth a sixteenth of the shard
	}
	sh := c.shard(ld.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[ld.Key]; !ok {
		for len(sh.m) > 0 && (len(sh.m) >= nearPerShard || sh.bytes+size > nearShardBytes) {
			sh.evict(now)
		}
		sh.bytes += size
	}
	sh.m[ld.Key] = nearEntry{until: now.Add(ld.RetryAfter), cost: cost, limit: ld.Limit, layer: ld}
}

// evict removes an expired entry among the first 64 the map yields, else
// any one (map order is random). The caller holds sh.mu.
func (sh *nearShard) evict(now time.Time) {
	n := 0
	var victim string
	for k, e := range sh.m {
		if n == 0 {
			victim = k
		}
		if !now.Before(e.until) {
			victim = k
			break
		}
		if n++; n >= 64 {
			break
		}
	}
	sh.drop(victim)
}

// drop removes key. The caller holds sh.mu.
func (sh *nearShard) drop(key string) {
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		sh.bytes -= nearEntryBytes + len(key)
	}
}

// bytes is what the cache holds, as its bound counts.
func (c *nearCache) bytes() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// clear forgets everything, as a policy change asks.
func (c *nearCache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.bytes = 0
		sh.mu.Unlock()
	}
}
