package rls

import (
	"sync"
	"time"
)

// localCache is envoyproxy/ratelimit's local cache
// (LOCAL_CACHE_SIZE_IN_BYTES): the keys found over their limit, each until
// its window ends, answered OVER_LIMIT without a store call and without
// counting. Bounded: when full, expired entries go first, then any.
type localCache struct {
	max int
	mu  sync.Mutex
	m   map[string]time.Time
}

// localEntryBytes is what one entry is taken to cost when a size in bytes
// is converted to entries: a key (about 40 bytes), its time and the map's
// overhead.
const localEntryBytes = 128

// LocalCacheEntries converts LOCAL_CACHE_SIZE_IN_BYTES to entries.
func LocalCacheEntries(bytes int) int { return max(bytes, 0) / localEntryBytes }

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
		return false
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
	if len(c.m) >= c.max {
		now := time.Now()
		for k, t := range c.m {
			if !now.Before(t) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = until
}
