package memstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
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

// slotIndex is the index of key's slot shard.
func (s *Store) slotIndex(key string) int {
	ss := &s.slots
	ss.once.Do(func() {
		ss.shards = make([]slotShard, len(s.shards))
		ss.seed = maphash.MakeSeed()
		ss.per = max(1, s.perShard)
		for i := range ss.shards {
			ss.shards[i].keys = map[string]map[string]int64{}
		}
	})
	return int(maphash.String(ss.seed, key) & s.mask)
}

func (s *Store) slotShard(key string) *slotShard { return &s.slots.shards[s.slotIndex(key)] }

// AcquireSlots implements store.Slots: the shards of the keys are locked
// together (in index order, so that two calls never wait on each other),
// so the call is one atomic step.
func (s *Store) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, res []store.SlotResult) error {
	if err := store.ValidateSlots(id, ttl, as, res); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.nowUs()
	unlock := s.lockSlotShards(len(as), func(i int) string { return as[i].Key })
	defer unlock()
	refused := false
	var held [store.MaxSlotBatch]bool  // the lease held the key's slot before the call
	var prev [store.MaxSlotBatch]int64 // and its expiry then
	for i, a := range as {
		leases := s.slotShard(a.Key).keys[a.Key]
		reclaim(leases, now)
		_, held[i] = leases[id]
		ok := held[i] || int64(len(leases)) < a.Limit
		res[i] = store.SlotResult{Acquired: ok, InUse: int64(len(leases)), Now: time.UnixMicro(now)}
		refused = refused || !ok && !a.Optional
	}
	for i, a := range as {
		sh := s.slotShard(a.Key)
		leases := sh.keys[a.Key]
		if refused {
			res[i].Acquired = false
		} else if res[i].Acquired {
			prev[i] = leases[id]
			if leases == nil {
				if len(sh.keys) >= s.slots.per && !sh.sweep(now, s.slots.per) {
					// Slots taken earlier in this call are given back
					// (nothing is taken when the call fails); the ones
					// the lease held before it keep their old expiry.
					for j, b := range as[:i] {
						l := s.slotShard(b.Key).keys[b.Key]
						switch {
						case l == nil || !res[j].Acquired:
						case held[j]:
							l[id] = prev[j]
						default:
							delete(l, id)
						}
					}
					return fmt.Errorf("%w: %w", store.ErrUnavailable, ErrSlotsFull)
				}
				leases = map[string]int64{}
				sh.keys[a.Key] = leases
			}
			leases[id] = now + int64(ttl/time.Microsecond)
		}
		res[i].InUse = int64(len(leases))
		res[i].NextExpiry = nextExpiry(leases, now)
	}
	return nil
}

// ReleaseSlots implements store.Slots.
func (s *Store) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	if err := store.ValidateRelease(id, keys); err != nil {
		return err
	}
	unlock := s.lockSlotShards(len(keys), func(i int) string { return keys[i] })
	defer unlock()
	for _, key := range keys {
		sh := s.slotShard(key)
		if leases, ok := sh.keys[key]; ok {
			delete(leases, id)
			if len(leases) == 0 {
				delete(sh.keys, key)
			}
		}
	}
	return nil
}

// lockSlotShards locks the shards of n keys, each once, in index order,
// and returns the unlock.
func (s *Store) lockSlotShards(n int, key func(int) string) (unlock func()) {
	var idx [store.MaxSlotBatch]int
	m := 0
	for i := range n {
		j := s.slotIndex(key(i))
		if !slices.Contains(idx[:m], j) {
			idx[m] = j
			m++
		}
	}
	slices.Sort(idx[:m])
	for _, j := range idx[:m] {
		s.slots.shards[j].mu.Lock()
	}
	return func() {
		for _, j := range idx[:m] {
			s.slots.shards[j].mu.Unlock()
		}
	}
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
