package store

import (
	"context"
	"fmt"
	"time"
)

// Slots is a store of concurrency slots: at most a limit of leases per key,
// each one a request in flight, shared by every instance that uses the
// store. A lease ends when it is released or when its time runs out, so a
// crashed holder's slots come back within the lease. Both of fairgate's
// stores implement it.
type Slots interface {
	// AcquireSlot takes a slot of key for lease id, lasting ttl from the
	// store's clock, when fewer than limit unexpired leases hold key
	// (expired ones are reclaimed first). An id that holds a slot already
	// has it renewed, and is acquired. The error wraps ErrInvalidCheck for
	// a bad key, id, limit or ttl and ErrUnavailable when the backend
	// could not be reached.
	AcquireSlot(ctx context.Context, key, id string, limit int64, ttl time.Duration) (SlotResult, error)
	// ReleaseSlot gives lease id's slot of key back. Releasing a lease not
	// held (released already, or expired) is no error.
	ReleaseSlot(ctx context.Context, key, id string) error
}

// SlotResult is the answer to AcquireSlot.
type SlotResult struct {
	// Acquired reports whether the lease holds a slot now.
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
)

// ValidateSlot reports whether an AcquireSlot can be done as asked.
func ValidateSlot(key, id string, limit int64, ttl time.Duration) error {
	switch {
	case key == "" || len(key) > MaxSlotKey:
		return fmt.Errorf("%w: slot key %q: want 1 to %d bytes", ErrInvalidCheck, truncate(key), MaxSlotKey)
	case id == "" || len(id) > MaxSlotID:
		return fmt.Errorf("%w: lease id of %d bytes: want 1 to %d", ErrInvalidCheck, len(id), MaxSlotID)
	case limit < 1 || limit > MaxSlots:
		return fmt.Errorf("%w: slot limit %d: want 1 to %d", ErrInvalidCheck, limit, MaxSlots)
	case ttl < time.Millisecond || ttl > MaxSlotTTL:
		return fmt.Errorf("%w: lease of %v: want 1ms to %v", ErrInvalidCheck, ttl, MaxSlotTTL)
	}
	return nil
}
