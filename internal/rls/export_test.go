package rls

// LocalCacheLen is the local cache's size, for tests.
func LocalCacheLen(s *Service) int {
	c := s.local.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// StatName and StatsdName are the statistics' key bounds and statsd form,
// for tests.
var (
	StatName   = statName
	StatsdName = statsdName
)

// StoreKey is the store key of a configured rule's counter for a
// descriptor of these entries, for tests.
func StoreKey(domain, tenantKey string, entries ...Entry) string {
	return storeKey(domain, entries, tenantKey, "")
}
