package limiter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// slotPolicy is a plan of concurrency 4 and 6 requests an hour (nothing
// refills in a test), with an export class that has half of each.
func slotPolicy() policy.Policy {
	p := policy.Policy{
		Plans:        map[string]policy.Plan{"pro": {Name: "pro", Rules: []policy.Rule{{Name: "1h", Limit: algo.Limit{Limit: 6, Period: time.Hour, Burst: 6}}}, Concurrency: 4}},
		DefaultPlan:  "pro",
		Classes:      map[string]policy.Class{"read": {Name: "read", Share: 1}, "export": {Name: "export", Share: 0.5}},
		DefaultClass: "read",
		Routes:       []policy.Route{{Pattern: "GET /export", Class: "export", Cost: 1}},
	}
	return p
}

func slotLimiter(t testing.TB, st store.Store) *Limiter {
	t.Helper()
	l, err := New(Config{Store: st, Policy: slotPolicy(), NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func decideSlot(t *testing.T, l *Limiter, tenant, path string) Decision {
	t.Helper()
	d, err := l.Decide(context.Background(), policy.Request{Tenant: tenant, Method: "GET", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSlotsTakeNeither: a request refused a slot takes no rate token, and
// one refused a rate token keeps no slot; released slots come back.
func TestSlotsTakeNeither(t *testing.T) {
	l := slotLimiter(t, memstore.New(memstore.Config{}))
	var held []Decision
	for i := range 4 {
		d := decideSlot(t, l, "acme", "/x")
		if !d.Allowed || d.Slots == nil || len(d.Concurrency) != 1 || d.Concurrency[0].InUse != int64(i+1) {
			t.Fatalf("request %d: %+v, want allowed holding slot %d of 4", i, d, i+1)
		}
		held = append(held, d)
	}
	for range 5 {
		d := decideSlot(t, l, "acme", "/x")
		if d.Allowed || d.Reason != ReasonLimited || d.Policy != "pro.tenant.concurrency" || d.RetryAfter <= 0 || d.Slots != nil || len(d.Layers) != 0 {
			t.Fatalf("a fifth request in flight: %+v, want limited by pro.tenant.concurrency with a retry-after and no rate layer decided", d)
		}
	}
	for _, d := range held {
		if err := d.Slots.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.Slots.Release(context.Background()) // twice is fine
	}
	// The burst of 6 had 4 taken: the five refused requests took none.
	for i := range 2 {
		d := decideSlot(t, l, "acme", "/x")
		if !d.Allowed {
			t.Fatalf("rate token %d of the 2 left: %+v", 5+i, d)
		}
		d.Slots.Release(context.Background())
	}
	d := decideSlot(t, l, "acme", "/x")
	if d.Allowed || d.Policy != "pro.tenant.1h" || d.Slots != nil {
		t.Fatalf("the seventh request: %+v, want limited by the rate layer", d)
	}
	// ...and it gave its slot back: four can be in flight again.
	if r, err := store.AcquireSlot(context.Background(), l.guard.Store(), d.Resolution.Slots[0].Key, "probe", 4, time.Minute); err != nil || r.InUse != 1 {
		t.Fatalf("slots in use after a rate rejection: %+v, %v; want only the probe", r, err)
	}
}

// TestSlotsClassShare: a class with share 0.5 has half the tenant's
// slots as a layer of its own, checked with the tenant's.
func TestSlotsClassShare(t *testing.T) {
	l := slotLimiter(t, memstore.New(memstore.Config{}))
	a, b := decideSlot(t, l, "acme", "/export"), decideSlot(t, l, "acme", "/export")
	if !a.Allowed || !b.Allowed || len(a.Concurrency) != 2 || a.Concurrency[1].Limit != 2 || a.Concurrency[1].Policy != "pro.export.concurrency" {
		t.Fatalf("two exports: %+v / %+v, want both allowed under pro.export.concurrency of 2", a, b)
	}
	if d := decideSlot(t, l, "acme", "/export"); d.Allowed || d.Policy != "pro.export.concurrency" {
		t.Fatalf("a third export: %+v, want limited by the class's share", d)
	}
	if d := decideSlot(t, l, "acme", "/x"); !d.Allowed {
		t.Fatalf("a read beside two exports: %+v, want allowed (3 of the tenant's 4)", d)
	}
	if d := decideSlot(t, l, "other", "/export"); !d.Allowed {
		t.Fatalf("another tenant: %+v, want its own slots", d)
	}
}

// TestSlotsExactAcrossInstances: N concurrent requests from idle on two
// instances sharing one Redis (standalone, then a Redis Cluster) get
// exactly the tenant's 4 slots, 100 trials each. A slot call that missed
// its deadline on a loaded machine once let a fail-open request through
// as "allowed", without a slot: 6 of 4; it is degraded_open now.
func TestSlotsExactAcrossInstances(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl, err := redistest.StartCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name, url := range map[string]string{"standalone": "redis://" + srv.Addr, "cluster": "redis-cluster://" + cl.Addrs()[0]} {
		t.Run(name, func(t *testing.T) {
			open := func() *Limiter {
				st, err := redisstore.New(redisstore.Config{URL: url, Prefix: "slots-" + name + ":"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return slotLimiter(t, st)
			}
			a, b := open(), open()
			for trial := range 100 {
				tenant := fmt.Sprint("t", trial)
				var got, failed atomic.Int64
				var holds sync.Map
				var wg sync.WaitGroup
				for i := range 12 {
					l := a
					if i%2 == 1 {
						l = b
					}
					wg.Go(func() {
						d, err := l.Decide(context.Background(), policy.Request{Tenant: tenant, Method: "GET", Path: "/x"})
						switch {
						case err != nil || d.Reason == ReasonUnavailable || d.Reason == ReasonDegradedOpen:
							failed.Add(1)
						case d.Allowed:
							got.Add(1)
							holds.Store(i, d.Slots)
						}
					})
				}
				wg.Wait()
				// Exact: never more than 4 slots, and 4 when every store
				// call answered. A call that misses its deadline (a starved
				// machine) is decided by the fail mode and says so
				// (degraded_open), never passed off as a slot.
				if n, f := got.Load(), failed.Load(); n > 4 || f == 0 && n != 4 {
					t.Fatalf("trial %d: 12 requests on two instances, concurrency 4: %d allowed, %d decided by the fail mode; want exactly 4 (or at most 4 beside those)", trial, n, f)
				}
			}
		})
	}
}

// downSlots is a store that is out, counting the slot calls that reach it.
type downSlots struct{ calls atomic.Int64 }

func (*downSlots) Take(context.Context, []store.Check, *store.Result) error {
	return store.ErrUnavailable
}
func (*downSlots) Close() error { return nil }
func (*downSlots) Settle(context.Context, string, []store.Adjustment, *store.SettleResult) error {
	return store.ErrUnavailable
}
func (*downSlots) Hold(context.Context, string, algo.Limit, time.Duration) error {
	return store.ErrUnavailable
}
func (d *downSlots) AcquireSlots(context.Context, string, time.Duration, []store.SlotAcquire, []store.SlotResult) error {
	d.calls.Add(1)
	return store.ErrUnavailable
}
func (*downSlots) ReleaseSlots(context.Context, string, []string) error { return store.ErrUnavailable }

// TestSlotsBehindBreaker: while the store is out, slot calls go through
// the store's breaker: once it opens they are refused at once, and the
// fail mode decides (open here: the rate layers alone, on the fallback).
func TestSlotsBehindBreaker(t *testing.T) {
	st := &downSlots{}
	l, err := New(Config{Store: st, Policy: slotPolicy(), Fallback: memstore.New(memstore.Config{}), BreakerCooldown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		d := decideSlot(t, l, fmt.Sprint("t", i), "/x")
		if !d.Allowed || d.Reason != ReasonDegradedOpen {
			t.Fatalf("request %d with the store out: %+v, want degraded open", i, d)
		}
	}
	if n := st.calls.Load(); n > 10 {
		t.Fatalf("%d of 50 slot calls reached a store that is out, want the breaker to stop them after a few", n)
	}
}

// TestShadowClassSlotsEnforceNothing: a shadow class's concurrency layer
// refuses nothing: past it a request is admitted (shadow_limited) and
// counted as a shadow rejection, holding the tenant's slot only. It was
// enforced: a second export got 429 from a class the config says
// enforces nothing.
func TestShadowClassSlotsEnforceNothing(t *testing.T) {
	p := slotPolicy()
	p.Classes["export"] = policy.Class{Name: "export", Share: 0.5, Shadow: true}
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: p, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var held []Decision
	for i := range 3 {
		d := decideSlot(t, l, "acme", "/export")
		want := ReasonAllowed
		if i == 2 {
			want = ReasonShadowLimited // over the class's 2 of 4
		}
		if !d.Allowed || d.Reason != want {
			t.Fatalf("export %d: %+v, want allowed (%s)", i, d, want)
		}
		held = append(held, d)
	}
	if got := testutil.ToFloat64(l.m.shadow.WithLabelValues("pro.export.concurrency")); got != 1 {
		t.Errorf("shadow rejections of the class layer: %v, want 1", got)
	}
	// The tenant's own layer is enforced: 4 in flight at most.
	if d := decideSlot(t, l, "acme", "/x"); !d.Allowed {
		t.Fatalf("a fourth request: %+v, want allowed (4 of the tenant's 4)", d)
	}
	if d := decideSlot(t, l, "acme", "/export"); d.Allowed {
		t.Fatalf("a fifth request: %+v, want limited by the tenant's 4", d)
	}
	for _, d := range held {
		d.Slots.Release(context.Background())
	}
}

// slotCalls counts a store's slot calls.
type slotCalls struct {
	*memstore.Store
	acquires, releases atomic.Int64
}

func (s *slotCalls) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, res []store.SlotResult) error {
	s.acquires.Add(1)
	return s.Store.AcquireSlots(ctx, id, ttl, as, res)
}

func (s *slotCalls) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	s.releases.Add(1)
	return s.Store.ReleaseSlots(ctx, id, keys)
}

// TestSlotsOneRoundTrip: a request with two concurrency layers (the
// tenant's and its class's) takes its slots in one store call and gives
// them back in one; refused by the class layer, it took none (the
// tenant's count did not move) and gives nothing back.
func TestSlotsOneRoundTrip(t *testing.T) {
	st := &slotCalls{Store: memstore.New(memstore.Config{})}
	l := slotLimiter(t, st)
	a, b := decideSlot(t, l, "acme", "/export"), decideSlot(t, l, "acme", "/export")
	if !a.Allowed || !b.Allowed || len(a.Concurrency) != 2 || st.acquires.Load() != 2 {
		t.Fatalf("two exports: %+v / %+v with %d slot calls; want both allowed with one call each", a, b, st.acquires.Load())
	}
	c := decideSlot(t, l, "acme", "/export")
	if c.Allowed || st.acquires.Load() != 3 || st.releases.Load() != 0 {
		t.Fatalf("a third export: %+v, %d acquires and %d releases; want refused in one call, nothing to give back", c, st.acquires.Load(), st.releases.Load())
	}
	if d := decideSlot(t, l, "acme", "/x"); !d.Allowed || d.Concurrency[0].InUse != 3 {
		t.Fatalf("a read: %+v, want allowed as the tenant's 3rd (the refused export held none)", d)
	}
	if err := a.Slots.Release(context.Background()); err != nil || st.releases.Load() != 1 {
		t.Fatalf("release: %v after %d calls, want one call", err, st.releases.Load())
	}
}

// lateSlots is a remote-like slot store (not Local) whose calls run in
// order on one worker, as commands on one Redis connection do: while
// paused, an acquire whose caller's context ends returns the context's
// error but stays queued, and runs once the worker goes on.
type lateSlots struct {
	mem   *memstore.Store
	ops   chan func()
	pause chan struct{} // closed: the worker runs
	held  chan struct{} // one per acquire that waits in the queue
	ran   atomic.Int64  // acquires the worker ran
}

func newLateSlots() *lateSlots {
	s := &lateSlots{mem: memstore.New(memstore.Config{}), ops: make(chan func(), 64), pause: make(chan struct{}), held: make(chan struct{}, 64)}
	go func() {
		<-s.pause
		for op := range s.ops {
			op()
		}
	}()
	return s
}

func (s *lateSlots) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	return s.mem.Take(ctx, checks, res)
}
func (s *lateSlots) Close() error { return nil }
func (s *lateSlots) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	return s.mem.Settle(ctx, id, adjs, res)
}
func (s *lateSlots) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	return s.mem.Hold(ctx, key, lim, d)
}

func (s *lateSlots) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, res []store.SlotResult) error {
	done := make(chan error, 1)
	own := make([]store.SlotResult, len(res))
	s.ops <- func() { done <- s.mem.AcquireSlots(context.Background(), id, ttl, as, own); s.ran.Add(1) }
	s.held <- struct{}{}
	select {
	case err := <-done:
		copy(res, own)
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
	}
}

func (s *lateSlots) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	done := make(chan error, 1)
	s.ops <- func() { done <- s.mem.ReleaseSlots(context.Background(), id, keys) }
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlotsLateAcquireReleased: an acquire that misses the store
// deadline but reaches the store afterwards takes slots nobody holds; the
// release that follows it gives them back, so the tenant's next requests
// are not refused for the lease's length.
func TestSlotsLateAcquireReleased(t *testing.T) {
	st := newLateSlots()
	l, err := New(Config{Store: st, Policy: slotPolicy(), NoNearCache: true, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Decide(context.Background(), policy.Request{Tenant: "acme", Method: "GET", Path: "/x"})
	if err != nil || d.Slots != nil {
		t.Fatalf("with the store stalled: %+v %v, want a decision without slots", d, err)
	}
	<-st.held
	close(st.pause) // the store goes on: the late acquire runs, then what follows it
	var r store.SlotResult
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ran := st.ran.Load() // read before the probe: the late acquire ran before it
		r, err = store.AcquireSlot(context.Background(), st.mem, d.Resolution.Slots[0].Key, "probe", 4, time.Minute)
		st.mem.ReleaseSlots(context.Background(), "probe", []string{d.Resolution.Slots[0].Key})
		if err == nil && r.InUse == 1 && ran > 0 {
			return // only the probe: the late acquire's slot was given back
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tenant's slots after the late acquire: %+v %v; want only the probe's", r, err)
		}
	}
}

// TestSlotsAfterNearCacheRejection: a tenant over its rate whose
// rejection the near cache remembers is refused without a slot call, and
// holds no slot while its request is held for the slow-down.
func TestSlotsAfterNearCacheRejection(t *testing.T) {
	st := &slotCalls{Store: memstore.New(memstore.Config{})}
	l, err := New(Config{Store: st, Policy: slotPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // the plan's 6 an hour
		if d := decideSlot(t, l, "acme", "/x"); !d.Allowed {
			t.Fatalf("request %d: %+v", i, d)
		} else {
			d.Slots.Release(context.Background())
		}
	}
	if d := decideSlot(t, l, "acme", "/x"); d.Allowed { // the store rejects; the near cache learns
		t.Fatalf("the 7th: %+v", d)
	}
	before := st.acquires.Load()
	for range 5 {
		if d := decideSlot(t, l, "acme", "/x"); d.Allowed || d.Reason != ReasonLimited {
			t.Fatalf("over the rate: %+v", d)
		}
	}
	if n := st.acquires.Load() - before; n != 0 {
		t.Fatalf("%d slot calls for 5 requests the near cache rejects, want 0", n)
	}
}
