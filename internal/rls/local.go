package rls

import (
	"sync"
	"time"
)

// localCache is envoyproxy/ratelimit's local cache
// (LOCAL_CACHE_SIZE_IN_BYTES): the keys found over their limit, each until
// its window ends, answered OVER_LIMIT without a store call and without
// counting. Bounded: when full, expired entries go first, then any.
//
// It counts, since it was made, as freecache's statistics there
// (ratelimit.localcache.*): lookups that found a live entry (hits) or not
// (misses), entries dropped because their window ended (expired) or to
// make room (evacuated), and entries set again while present (overwrites).
type localCache struct {
	max int
	mu  sync.Mutex
	m   map[string]time.Time

	hits, misses, expired, evacuated, overwrites uint64
}

func newLocalCache(n int) *localCache {
	if n <= 0 {
		return &localCache{}
	}
	return &localCache{max: n, m: make(map[string]time.Time)}
}

// over reports whether key is over its limit until a time after now.
func (c *localCache) over(key string, now time.Time) bool {
	if c.max == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.m[key]
	if ok && !now.Before(until) {
		delete(c.m, key)
		c.expired++
		ok = false
	}
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return ok
}

// add remembers key as over its limit until until.
func (c *localCache) add(key string, until time.Time) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		c.overwrites++
	} else if len(c.m) >= c.max {
		now := time.Now()
		for k, t := range c.m {
			if !now.Before(t) {
				delete(c.m, k)
				c.expired++
			}
		}
		for k := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
			c.evacuated++
		}
	}
	c.m[key] = until
}

// gauges sets the cache's statistics by envoyproxy/ratelimit's names
// (ratelimit.localcache.*; averageAccessTime, freecache's mean last-access
// time of the entries, is not kept: docs/rls.md).
func (c *localCache) gauges(set func(name string, v uint64)) {
	c.mu.Lock()
	hits, misses, expired, evacuated, overwrites, entries := c.hits, c.misses, c.expired, c.evacuated, c.overwrites, len(c.m)
	c.mu.Unlock()
	const p = "ratelimit.localcache."
	set(p+"hitCount", hits)
	set(p+"missCount", misses)
	set(p+"lookupCount", hits+misses)
	set(p+"expiredCount", expired)
	set(p+"evacuateCount", evacuated)
	set(p+"overwriteCount", overwrites)
	set(p+"entryCount", uint64(entries))
}
