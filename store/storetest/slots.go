package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/store"
)

// SlotOptions tune RunSlots.
type SlotOptions struct {
	// Trials is how many times the exactness test runs. Zero means 100.
	Trials int
	// Wait sleeps for d on the clock the stores decide by: time.Sleep for
	// a real one. Nil means time.Sleep.
	Wait func(d time.Duration)
}

// RunSlots runs the concurrency-slot suite against a and b: two instances
// sharing one backend (the same store twice for an in-process one).
func RunSlots(t *testing.T, a, b store.Slots, o SlotOptions) {
	if o.Trials == 0 {
		o.Trials = 100
	}
	if o.Wait == nil {
		o.Wait = time.Sleep
	}
	t.Run("Exact", func(t *testing.T) { t.Parallel(); testSlotsExact(t, a, b, o.Trials) })
	t.Run("Lifecycle", func(t *testing.T) { t.Parallel(); testSlotLifecycle(t, a, b) })
	t.Run("LeaseExpires", func(t *testing.T) { t.Parallel(); testSlotExpiry(t, a, b, o.Wait) })
	t.Run("Invalid", func(t *testing.T) { t.Parallel(); testSlotInvalid(t, a) })
}

// testSlotsExact: 3×limit callers from idle, half on each instance, get
// exactly limit slots, trial after trial.
func testSlotsExact(t *testing.T, a, b store.Slots, trials int) {
	p := prefix(t)
	const limit = 7
	for trial := range trials {
		key := fmt.Sprintf("%s{slots%d}", p, trial)
		var got, failed atomic.Int64
		var wg sync.WaitGroup
		for i := range 3 * limit {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				r, err := s.AcquireSlot(context.Background(), key, fmt.Sprintf("req-%d", i), limit, time.Minute)
				switch {
				case err != nil:
					failed.Add(1)
				case r.Acquired:
					got.Add(1)
				}
			})
		}
		wg.Wait()
		if got.Load() != limit || failed.Load() != 0 {
			t.Fatalf("trial %d: %d callers on two instances, limit %d: %d acquired, %d failed; want exactly %d and none",
				trial, 3*limit, limit, got.Load(), failed.Load(), limit)
		}
	}
}

// testSlotLifecycle: acquire to the limit, refuse, renew a held lease,
// release (twice is fine), acquire again; keys are apart.
func testSlotLifecycle(t *testing.T, a, b store.Slots) {
	ctx := context.Background()
	key, other := prefix(t)+"{life}", prefix(t)+"{life-other}"
	acquire := func(s store.Slots, key, id string) store.SlotResult {
		t.Helper()
		r, err := s.AcquireSlot(ctx, key, id, 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := acquire(a, key, "x"); !r.Acquired || r.InUse != 1 || r.NextExpiry <= 0 || r.NextExpiry > time.Minute {
		t.Fatalf("first lease: %+v, want acquired, 1 in use, next expiry within the minute", r)
	}
	if r := acquire(b, key, "y"); !r.Acquired || r.InUse != 2 {
		t.Fatalf("second lease on the other instance: %+v", r)
	}
	if r := acquire(a, key, "z"); r.Acquired || r.InUse != 2 {
		t.Fatalf("a third lease over a limit of 2: %+v, want refused", r)
	}
	if r := acquire(b, key, "x"); !r.Acquired || r.InUse != 2 {
		t.Fatalf("renewing a held lease: %+v, want acquired without a new slot", r)
	}
	if r := acquire(a, other, "z"); !r.Acquired || r.InUse != 1 {
		t.Fatalf("another key: %+v, want its own slots", r)
	}
	for range 2 {
		if err := b.ReleaseSlot(ctx, key, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if r := acquire(a, key, "z"); !r.Acquired || r.InUse != 2 {
		t.Fatalf("after a release: %+v, want acquired", r)
	}
}

// testSlotExpiry: leases never released (a crashed holder) come back when
// their time runs out.
func testSlotExpiry(t *testing.T, a, b store.Slots, wait func(time.Duration)) {
	ctx := context.Background()
	key := prefix(t) + "{expiry}"
	for i := range 3 {
		if r, err := a.AcquireSlot(ctx, key, fmt.Sprint("gone-", i), 3, 300*time.Millisecond); err != nil || !r.Acquired {
			t.Fatalf("lease %d: %+v, %v", i, r, err)
		}
	}
	r, err := b.AcquireSlot(ctx, key, "waiting", 3, time.Minute)
	if err != nil || r.Acquired || r.NextExpiry <= 0 || r.NextExpiry > 300*time.Millisecond {
		t.Fatalf("while the leases last: %+v, %v; want refused, the first free within 300 ms", r, err)
	}
	wait(350 * time.Millisecond)
	if r, err := b.AcquireSlot(ctx, key, "waiting", 3, time.Minute); err != nil || !r.Acquired || r.InUse != 1 {
		t.Fatalf("after the leases ran out: %+v, %v; want acquired, alone", r, err)
	}
}

func testSlotInvalid(t *testing.T, s store.Slots) {
	ctx := context.Background()
	for _, c := range []struct {
		key, id string
		limit   int64
		ttl     time.Duration
	}{
		{"", "id", 1, time.Second}, {"k", "", 1, time.Second}, {"k", "id", 0, time.Second},
		{"k", "id", 1, 0}, {"k", "id", 1, 25 * time.Hour}, {"k", string(make([]byte, store.MaxSlotID+1)), 1, time.Second},
	} {
		if _, err := s.AcquireSlot(ctx, c.key, c.id, c.limit, c.ttl); !errors.Is(err, store.ErrInvalidCheck) {
			t.Errorf("AcquireSlot(%q, %d-byte id, %d, %v): %v, want ErrInvalidCheck", c.key, len(c.id), c.limit, c.ttl, err)
		}
	}
}
