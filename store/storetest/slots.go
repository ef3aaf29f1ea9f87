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
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testSlotBatch(t, a, b) })
	t.Run("BatchExact", func(t *testing.T) { t.Parallel(); testSlotBatchExact(t, a, b, o.Trials) })
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
				r, err := store.AcquireSlot(context.Background(), s, key, fmt.Sprintf("req-%d", i), limit, time.Minute)
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
		r, err := store.AcquireSlot(ctx, s, key, id, 2, time.Minute)
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
		if err := b.ReleaseSlots(ctx, "x", []string{key}); err != nil {
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
		if r, err := store.AcquireSlot(ctx, a, key, fmt.Sprint("gone-", i), 3, 300*time.Millisecond); err != nil || !r.Acquired {
			t.Fatalf("lease %d: %+v, %v", i, r, err)
		}
	}
	r, err := store.AcquireSlot(ctx, b, key, "waiting", 3, time.Minute)
	if err != nil || r.Acquired || r.NextExpiry <= 0 || r.NextExpiry > 300*time.Millisecond {
		t.Fatalf("while the leases last: %+v, %v; want refused, the first free within 300 ms", r, err)
	}
	wait(350 * time.Millisecond)
	if r, err := store.AcquireSlot(ctx, b, key, "waiting", 3, time.Minute); err != nil || !r.Acquired || r.InUse != 1 {
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
		if _, err := store.AcquireSlot(ctx, s, c.key, c.id, c.limit, c.ttl); !errors.Is(err, store.ErrInvalidCheck) {
			t.Errorf("AcquireSlot(%q, %d-byte id, %d, %v): %v, want ErrInvalidCheck", c.key, len(c.id), c.limit, c.ttl, err)
		}
	}
	key := prefix(t) + "{inv}"
	twice := []store.SlotAcquire{{Key: key, Limit: 1}, {Key: key, Limit: 1}}
	for what, err := range map[string]error{
		"no key":         s.AcquireSlots(ctx, "id", time.Second, nil, nil),
		"a key twice":    s.AcquireSlots(ctx, "id", time.Second, twice, make([]store.SlotResult, 2)),
		"short results":  s.AcquireSlots(ctx, "id", time.Second, twice[:1], nil),
		"too many keys":  s.AcquireSlots(ctx, "id", time.Second, make([]store.SlotAcquire, store.MaxSlotBatch+1), make([]store.SlotResult, store.MaxSlotBatch+1)),
		"release no key": s.ReleaseSlots(ctx, "id", nil),
		"release no id":  s.ReleaseSlots(ctx, "", []string{key}),
	} {
		if !errors.Is(err, store.ErrInvalidCheck) {
			t.Errorf("%s: %v, want ErrInvalidCheck", what, err)
		}
	}
}

// testSlotBatch: a request's slots of several keys (one hash tag, as a
// tenant's layers are) are taken as one step: when one that is not
// optional is full, none is taken, and the others' counts do not move;
// an optional one that is full does not stop the others; one release
// gives them all back.
func testSlotBatch(t *testing.T, a, b store.Slots) {
	ctx := context.Background()
	p := prefix(t)
	tenant, class, shadow := p+"{batch}:t", p+"{batch}:c", p+"{batch}:s"
	take := func(s store.Slots, id string, as ...store.SlotAcquire) []store.SlotResult {
		t.Helper()
		res := make([]store.SlotResult, len(as))
		if err := s.AcquireSlots(ctx, id, time.Minute, as, res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	layers := func(optionalShadow bool) []store.SlotAcquire {
		return []store.SlotAcquire{{Key: tenant, Limit: 3}, {Key: class, Limit: 1}, {Key: shadow, Limit: 1, Optional: optionalShadow}}
	}
	r := take(a, "r1", layers(true)...)
	if !r[0].Acquired || !r[1].Acquired || !r[2].Acquired || r[0].InUse != 1 || r[1].InUse != 1 {
		t.Fatalf("the first request: %+v, want every slot", r)
	}
	// The class layer is full: none is taken, the tenant's count stays 1.
	r = take(b, "r2", layers(true)...)
	if r[0].Acquired || r[1].Acquired || r[2].Acquired || r[0].InUse != 1 || r[1].InUse != 1 {
		t.Fatalf("with the class layer full: %+v, want none taken and the tenant's count still 1", r)
	}
	if err := a.ReleaseSlots(ctx, "r1", []string{class}); err != nil {
		t.Fatal(err)
	}
	// The shadow layer is full and optional: the others are taken.
	r = take(b, "r2", layers(true)...)
	if !r[0].Acquired || !r[1].Acquired || r[2].Acquired || r[0].InUse != 2 {
		t.Fatalf("with only the optional layer full: %+v, want the others taken", r)
	}
	// Required, the full shadow layer stops the call.
	if err := b.ReleaseSlots(ctx, "r2", []string{tenant, class}); err != nil {
		t.Fatal(err)
	}
	r = take(b, "r3", layers(false)...)
	if r[0].Acquired || r[1].Acquired || r[0].InUse != 1 {
		t.Fatalf("with a required layer full: %+v, want none taken", r)
	}
	// One release gives every key back.
	if err := a.ReleaseSlots(ctx, "r1", []string{tenant, class, shadow}); err != nil {
		t.Fatal(err)
	}
	r = take(b, "r3", layers(false)...)
	if !r[0].Acquired || !r[1].Acquired || !r[2].Acquired || r[0].InUse != 1 || r[2].InUse != 1 {
		t.Fatalf("after the release: %+v, want every slot, each held once", r)
	}
}

// testSlotBatchExact: callers on two instances asking for a tenant slot
// (limit 5) and one of two class slots (limit 3 each) at once: exactly as
// many get both as the limits allow, and no slot is left held by a caller
// that was refused.
func testSlotBatchExact(t *testing.T, a, b store.Slots, trials int) {
	p := prefix(t)
	for trial := range max(1, trials/4) {
		tenant := fmt.Sprintf("%s{bx%d}:t", p, trial)
		classes := []string{tenant + ":c0", tenant + ":c1"}
		var got [2]atomic.Int64
		var failed atomic.Int64
		var wg sync.WaitGroup
		for i := range 16 {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				res := make([]store.SlotResult, 2)
				err := s.AcquireSlots(context.Background(), fmt.Sprint("req-", i), time.Minute, []store.SlotAcquire{{Key: tenant, Limit: 5}, {Key: classes[i%4/2], Limit: 3}}, res)
				switch {
				case err != nil:
					failed.Add(1)
				case res[0].Acquired != res[1].Acquired:
					failed.Add(1) // half taken: never
				case res[0].Acquired:
					got[i%4/2].Add(1)
				}
			})
		}
		wg.Wait()
		res := make([]store.SlotResult, 3)
		if err := a.AcquireSlots(context.Background(), "probe", time.Minute, []store.SlotAcquire{{Key: tenant, Limit: 1000}, {Key: classes[0], Limit: 1000}, {Key: classes[1], Limit: 1000}}, res); err != nil {
			t.Fatal(err)
		}
		total := got[0].Load() + got[1].Load()
		if failed.Load() != 0 || total != 5 || got[0].Load() > 3 || got[1].Load() > 3 ||
			res[0].InUse != total+1 || res[1].InUse != got[0].Load()+1 || res[2].InUse != got[1].Load()+1 {
			t.Fatalf("trial %d: %d and %d got both slots (%d failed or half); held after: %d %d %d; want 5 in all, at most 3 per class, and nothing else held",
				trial, got[0].Load(), got[1].Load(), failed.Load(), res[0].InUse-1, res[1].InUse-1, res[2].InUse-1)
		}
	}
}
