package store

import (
	"context"
	"fmt"
	"time"
)

// Slots is a store of concurrency slots: at most a limit of leases per key,
// each one a request in flight, shared by every instance that uses the
// store. A lease ends when it is released or when its time runs out, so a
// crashed holder's slots come back within the lease. Every [Store] is one.
//
// A request's slots (one per concurrency layer) are taken in one call, as
// one atomic step, and given back in one call.
type Slots interface {
	// AcquireSlots takes, for lease id lasting ttl from the store's clock,
	// a slot of each key of as, as one atomic step (expired leases are
	// reclaimed first; an id that holds a slot already has it renewed):
	// either the slot of every key that is not Optional is taken, with
	// each Optional one's that has room, or, when a key that is not
	// Optional is full, none is. res[i] answers as[i]; res must be as
	// long as as. The keys must differ; on Redis Cluster they must share
	// a hash slot (a {hash tag}). The error wraps ErrInvalidCheck for a
	// bad call and ErrUnavailable when the backend could not be reached;
	// nothing is taken then.
	AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []SlotAcquire, res []SlotResult) error
	// ReleaseSlots gives lease id's slots of keys back, in one step.
	// Releasing a lease not held (released already, or expired) is no
	// error.
	ReleaseSlots(ctx context.Context, id string, keys []string) error
}

// SlotAcquire is one slot an AcquireSlots call asks for.
type SlotAcquire struct {
	// Key is the slot key.
	Key string
	// Limit is how many leases may hold Key at once.
	Limit int64
	// Optional: when Key is full, the others are taken all the same (a
	// shadow layer, which enforces nothing).
	Optional bool
}

// SlotResult is the answer for one key of AcquireSlots.
type SlotResult struct {
	// Acquired reports whether the call took (or renewed) the lease's
	// slot of the key.
	Acquired bool
	// InUse is how many leases hold key after the call.
	InUse int64
	// NextExpiry is how long until the first of key's leases runs out
	// (zero when none is held): the longest a refused caller waits for a
	// slot when no holder releases one.
	NextExpiry time.Duration
	// Now is the store's clock when it decided.
	Now time.Time
}

// AcquireSlot takes one slot of key for lease id: an AcquireSlots of one
// key.
func AcquireSlot(ctx context.Context, s Slots, key, id string, limit int64, ttl time.Duration) (SlotResult, error) {
	var res [1]SlotResult
	err := s.AcquireSlots(ctx, id, ttl, []SlotAcquire{{Key: key, Limit: limit}}, res[:])
	return res[0], err
}

// Bounds of a slot call.
const (
	// MaxSlotKey is the longest slot key, in bytes.
	MaxSlotKey = 8 << 10
	// MaxSlotID is the longest lease ID, in bytes.
	MaxSlotID = 128
	// MaxSlotTTL is the longest lease: a day.
	MaxSlotTTL = 24 * time.Hour
	// MaxSlots is the largest slot limit.
	MaxSlots = 1_000_000
	// MaxSlotBatch is the most keys one AcquireSlots or ReleaseSlots
	// call takes.
	MaxSlotBatch = 64
)

// ValidateSlots reports whether an AcquireSlots can be done as asked.
func ValidateSlots(id string, ttl time.Duration, as []SlotAcquire, res []SlotResult) error {
	switch {
	case len(as) == 0 || len(as) > MaxSlotBatch:
		return fmt.Errorf("%w: %d slot keys in one call: want 1 to %d", ErrInvalidCheck, len(as), MaxSlotBatch)
	case len(res) != len(as):
		return fmt.Errorf("%w: %d results for %d slot keys", ErrInvalidCheck, len(res), len(as))
	case id == "" || len(id) > MaxSlotID:
		return fmt.Errorf("%w: lease id of %d bytes: want 1 to %d", ErrInvalidCheck, len(id), MaxSlotID)
	case ttl < time.Millisecond || ttl > MaxSlotTTL:
		return fmt.Errorf("%w: lease of %v: want 1ms to %v", ErrInvalidCheck, ttl, MaxSlotTTL)
	}
	for i, a := range as {
		switch {
		case a.Key == "" || len(a.Key) > MaxSlotKey:
			return fmt.Errorf("%w: slot key %q: want 1 to %d bytes", ErrInvalidCheck, truncate(a.Key), MaxSlotKey)
		case a.Limit < 1 || a.Limit > MaxSlots:
			return fmt.Errorf("%w: slot limit %d: want 1 to %d", ErrInvalidCheck, a.Limit, MaxSlots)
		}
		for _, b := range as[:i] {
			if b.Key == a.Key {
				return fmt.Errorf("%w: slot key %q twice in one call", ErrInvalidCheck, truncate(a.Key))
			}
		}
	}
	return nil
}

// ValidateRelease reports whether a ReleaseSlots can be done as asked.
func ValidateRelease(id string, keys []string) error {
	if id == "" || len(keys) == 0 || len(keys) > MaxSlotBatch {
		return fmt.Errorf("%w: a release needs a lease id and 1 to %d keys", ErrInvalidCheck, MaxSlotBatch)
	}
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: a release of an empty slot key", ErrInvalidCheck)
		}
	}
	return nil
}
