package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/fairgate/fairgate/store"
)

// Concurrency slots (store.Slots) live beside the rate-limit entries, in
// shards of their own: per key, its leases and when each runs out. A key
// with no lease left is dropped; the keys held are bounded by the store's
// MaxKeys, so that callers' keys cannot grow memory without bound.

// ErrSlotsFull means the store holds MaxKeys slot keys, each with a live
// lease: a new key gets no slot until one frees.
var ErrSlotsFull = errors.New("memstore: slot keys at their bound")

// slotShards holds the slot keys, sharded like the entries.
type slotShards struct {
	once   sync.Once
	shards []slotShard
	seed   maphash.Seed
	per    int // keys per shard, at most
}

type slotShard struct {
	mu   sync.Mutex
	keys map[string]map[string]int64 // key → lease id → expiry, µs
}

func (s *Store) slotShard(key string) *slotShard {
	ss := &s.slots
	ss.once.Do(func() {
		ss.shards = make([]slotShard, len(s.shards))
		ss.seed = maphash.MakeSeed()
		ss.per = max(1, s.perShard)
		for i := range ss.shards {
			ss.shards[i].keys = map[string]map[string]int64{}
		}
	})
	return &ss.shards[maphash.String(ss.seed, key)&s.mask]
}

// AcquireSlot implements store.Slots.
func (s *Store) AcquireSlot(ctx context.Context, key, id string, limit int64, ttl time.Duration) (store.SlotResult, error) {
	if err := store.ValidateSlot(key, id, limit, ttl); err != nil {
		return store.SlotResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.SlotResult{}, err
	}
	now := s.nowUs()
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	leases := sh.keys[key]
	reclaim(leases, now)
	_, held := leases[id]
	res := store.SlotResult{Now: time.UnixMicro(now)}
	if held || int64(len(leases)) < limit {
		if leases == nil {
			if len(sh.keys) >= s.slots.per && !sh.sweep(now, s.slots.per) {
				return res, fmt.Errorf("%w: %w", store.ErrUnavailable, ErrSlotsFull)
			}
			leases = map[string]int64{}
			sh.keys[key] = leases
		}
		leases[id] = now + int64(ttl/time.Microsecond)
		res.Acquired = true
	}
	res.InUse = int64(len(leases))
	res.NextExpiry = nextExpiry(leases, now)
	return res, nil
}

// ReleaseSlot implements store.Slots.
func (s *Store) ReleaseSlot(ctx context.Context, key, id string) error {
	if key == "" || id == "" {
		return fmt.Errorf("%w: release needs a key and a lease id", store.ErrInvalidCheck)
	}
	sh := s.slotShard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if leases, ok := sh.keys[key]; ok {
		delete(leases, id)
		if len(leases) == 0 {
			delete(sh.keys, key)
		}
	}
	return nil
}

// reclaim drops the leases that ran out by now.
func reclaim(leases map[string]int64, now int64) {
	for id, until := range leases {
		if until <= now {
			delete(leases, id)
		}
	}
}

// nextExpiry is how long until the first lease runs out; 0 for none.
func nextExpiry(leases map[string]int64, now int64) time.Duration {
	first := int64(0)
	for _, until := range leases {
		if first == 0 || until < first {
			first = until
		}
	}
	if first == 0 {
		return 0
	}
	return time.Duration(first-now) * time.Microsecond
}

// sweep drops the shard's keys whose leases all ran out, reporting
// whether there is room for one more key under per.
func (sh *slotShard) sweep(now int64, per int) bool {
	for k, leases := range sh.keys {
		reclaim(leases, now)
		if len(leases) == 0 {
			delete(sh.keys, k)
		}
	}
	return len(sh.keys) < per
}

var _ store.Slots = (*Store)(nil)
