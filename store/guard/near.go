package guard

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
)

// NearCache remembers, per instance, the keys the store has just rejected
// and until when: a request that needs at least as much of such a key
// before then cannot pass (state only moves later: other traffic takes
// more, holds push it further), so it is answered here without a store
// call. A tenant hammering a limited key then costs the store one call per
// retry interval instead of one per request, and cannot slow the others.
//
// It is bounded: nearShards × nearPerShard entries and nearShards ×
// nearShardBytes bytes (nearEntryBytes plus the key per entry), the expired
// ones going first when a shard is full, then any. [NearCache.Clear]
// forgets it all (a policy change). It is safe for concurrent use.
type NearCache struct {
	seed   maphash.Seed
	shards [nearShards]nearShard
	hits   prometheus.Counter
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
// more under limit, and the store's decision to answer with.
type nearEntry struct {
	until time.Time
	cost  int64
	limit algo.Limit
	d     algo.Decision
}

func newNearCache(hits prometheus.Counter) *NearCache {
	c := &NearCache{seed: maphash.MakeSeed(), hits: hits}
	for i := range c.shards {
		c.shards[i].m = make(map[string]nearEntry)
	}
	return c
}

func (c *NearCache) shard(key string) *nearShard {
	return &c.shards[maphash.String(c.seed, key)%nearShards]
}

// Lookup returns the remembered rejection of key under lim that still
// holds at now for cost, aged to now: its retry-after and reset-after are
// what is left of them.
func (c *NearCache) Lookup(key string, lim algo.Limit, cost int64, now time.Time) (algo.Decision, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && !now.Before(e.until) {
		sh.drop(key)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || cost < e.cost || e.limit != lim {
		return algo.Decision{}, false
	}
	d := e.d
	elapsed := d.RetryAfter - e.until.Sub(now) // since the store's answer
	d.RetryAfter -= elapsed
	d.ResetAfter = max(d.RetryAfter, d.ResetAfter-elapsed)
	return d, true
}

// Hit counts a request answered from the cache, in
// fairgate_near_cache_hits_total.
func (c *NearCache) Hit() { c.hits.Inc() }

// Put remembers that key, under lim, admits nothing of cost before now +
// d's retry-after (d is the store's rejection).
func (c *NearCache) Put(key string, lim algo.Limit, cost int64, d algo.Decision, now time.Time) {
	if d.RetryAfter <= 0 {
		return
	}
	size := nearEntryBytes + len(key)
	if size > nearShardBytes/16 {
		return // a key this long is never worth a sixteenth of the shard
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; !ok {
		for len(sh.m) > 0 && (len(sh.m) >= nearPerShard || sh.bytes+size > nearShardBytes) {
			sh.evict(now)
		}
		sh.bytes += size
	}
	d.Allowed = false
	sh.m[key] = nearEntry{until: now.Add(d.RetryAfter), cost: cost, limit: lim, d: d}
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
func (c *NearCache) bytes() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Clear forgets everything, as a policy change asks.
func (c *NearCache) Clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.bytes = 0
		sh.mu.Unlock()
	}
}
