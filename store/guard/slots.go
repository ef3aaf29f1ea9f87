package guard

import (
	"context"
	"errors"
	"time"

	"github.com/fairgate/fairgate/store"
)

// AcquireSlots takes the slots of as for lease id, lasting ttl, in one
// store call (see [store.Slots]), under the deadline and through the
// breaker of the slot keys' domain (a tenant's slots live beside its rate
// keys): while the store is out, slot calls are refused at once rather
// than each waiting for its deadline. The caller decides a failure by
// [Guard.Fail].
//
// A call that failed may still take its slots: one that missed its
// deadline can reach Redis after its caller gave up, and the slots it then
// takes are nobody's until their lease runs out (a day for a worker's),
// refusing the tenant's requests meanwhile. So a release follows a failed
// call on the same connection, which Redis runs after the acquire (when
// the acquire never arrived it releases nothing), without making the
// caller wait. None follows a call never sent: invalid, refused by the
// breaker, or to a store in this process.
func (g *Guard) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, rs []store.SlotResult) error {
	err := g.acquireSlots(ctx, id, ttl, as, rs)
	if err != nil && !g.local && !errors.Is(err, store.ErrInvalidCheck) && !refused(err) {
		keys := make([]string, len(as))
		for i, a := range as {
			keys[i] = a.Key
		}
		go g.ReleaseSlots(context.Background(), id, keys)
	}
	return err
}

// RenewSlots extends lease id's slots of as by ttl from now, as
// AcquireSlots would take them, with no release after a failure: the
// lease holds its slots still.
func (g *Guard) RenewSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, rs []store.SlotResult) error {
	return g.acquireSlots(ctx, id, ttl, as, rs)
}

func (g *Guard) acquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, rs []store.SlotResult) error {
	sctx, cancel := g.storeContext(ctx)
	defer cancel()
	return g.breaker(slotChecks(as, nil), func() error { return g.store.AcquireSlots(sctx, id, ttl, as, rs) })
}

// ReleaseSlots gives lease id's slots of keys back, even when ctx has
// ended, within the store deadline and through the breaker: while the
// store is out a release costs nothing (the caller's response waits for
// it), and the lease frees the slot. A failure is logged, at most once a
// second.
func (g *Guard) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	rctx, cancel := g.storeContext(context.WithoutCancel(ctx))
	defer cancel()
	err := g.breaker(slotChecks(nil, keys), func() error { return g.store.ReleaseSlots(rctx, id, keys) })
	if err != nil {
		g.LogRare(time.Now(), "concurrency slots were not released; their lease frees them", err)
	}
	return err
}

// slotChecks are the checks that name the breaker domains of slot keys:
// those of as, or keys.
func slotChecks(as []store.SlotAcquire, keys []string) []store.Check {
	checks := make([]store.Check, 0, len(as)+len(keys))
	for _, a := range as {
		checks = append(checks, store.Check{Key: a.Key})
	}
	for _, k := range keys {
		checks = append(checks, store.Check{Key: k})
	}
	return checks
}
