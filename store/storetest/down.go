package storetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Down is a store that is out: every call fails with
// [store.ErrUnavailable], as a Redis that refuses connections would. For
// tests of the fail mode.
type Down struct{}

// Take fails.
func (Down) Take(context.Context, []store.Check, *store.Result) error { return store.ErrUnavailable }

// Settle fails.
func (Down) Settle(context.Context, string, []store.Adjustment, *store.SettleResult) error {
	return store.ErrUnavailable
}

// Hold fails.
func (Down) Hold(context.Context, string, algo.Limit, time.Duration) error {
	return store.ErrUnavailable
}

// AcquireSlots fails.
func (Down) AcquireSlots(context.Context, string, time.Duration, []store.SlotAcquire, []store.SlotResult) error {
	return store.ErrUnavailable
}

// ReleaseSlots fails.
func (Down) ReleaseSlots(context.Context, string, []string) error { return store.ErrUnavailable }

// Close does nothing.
func (Down) Close() error { return nil }

var _ store.Store = Down{}

// Counting is a store that counts the takes and the settlements that
// reach the store it wraps: for tests of what is answered without a store
// call.
type Counting struct {
	store.Store
	Calls   atomic.Int64 // takes
	Settles atomic.Int64 // settlements
}

// Settle counts the call and passes it on.
func (c *Counting) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	c.Settles.Add(1)
	return c.Store.Settle(ctx, id, adjs, res)
}

// Take counts the call and passes it on.
func (c *Counting) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	c.Calls.Add(1)
	return c.Store.Take(ctx, checks, res)
}
