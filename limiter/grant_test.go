package limiter

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// TestLeases: a hot tenant on two instances sharing one store, a request
// every 0.5 ms on each for 4 s (4,000 a second) under a limit of 5,000 a
// second, then over a limit of 1,000 a second. Near its limit, leases of
// 10 cut the store's calls to about a tenth; in every window the admitted
// requests stay within the limit's bound plus the unspent leases of both
// instances (2 × 10), as documented; without leases, within the bound.
func TestLeases(t *testing.T) {
	for _, lim := range []algo.Limit{{Limit: 5000, Period: time.Second, Burst: 50}, {Limit: 1000, Period: time.Second, Burst: 50}} {
		testLeases(t, lim)
	}
}

func testLeases(t *testing.T, lim algo.Limit) {
	em := lim.Period / time.Duration(lim.Limit)
	policyOf := func(lease int64) policy.Policy {
		return policy.Policy{DefaultPlan: "p", DefaultClass: "hot",
			Plans:   map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: lim}}}},
			Classes: map[string]policy.Class{"hot": {Name: "hot", Share: 1, Lease: lease}}}
	}
	run := func(lease int64) (admitted []time.Time, calls int64) {
		now := time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		st := &storetest.Counting{Store: memstore.New(memstore.Config{Now: clock})}
		var ls []*Limiter
		for range 2 {
			l, err := New(Config{Store: st, Policy: policyOf(lease), Now: clock, Timeout: -1, NoNearCache: true})
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		for i := range 16_000 {
			d, err := ls[i%2].Decide(context.Background(), policy.Request{Tenant: "whale"})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted = append(admitted, now)
			} else if d.RetryAfter <= 0 {
				t.Fatalf("a rejection without retry-after: %+v", d)
			}
			if i%2 == 1 {
				now = now.Add(500 * time.Microsecond)
			}
		}
		return admitted, st.Calls.Load()
	}
	worst := func(adm []time.Time) int64 {
		slices.SortFunc(adm, func(a, b time.Time) int { return a.Compare(b) })
		var w int64
		for j := range adm {
			for i := max(0, j-400); i < j; i++ {
				span := adm[j].Sub(adm[i])
				w = max(w, int64(j-i+1)-(lim.Burst+int64(span/em)))
			}
		}
		return w
	}
	plain, plainCalls := run(0)
	leased, leasedCalls := run(10)
	if over := worst(plain); over > 0 {
		t.Fatalf("without leases %d over the bound", over)
	}
	if over := worst(leased); over > 2*10 {
		t.Fatalf("with leases %d over the bound, more than the 2 × 10 unspent leases allow", over)
	}
	if leasedCalls > plainCalls || lim.Limit == 5000 && leasedCalls*5 > plainCalls {
		t.Fatalf("%v: store calls: %d with leases of 10, %d without", lim, leasedCalls, plainCalls)
	}
	t.Logf("%v: store calls per 1,000 decisions: %d without leases, %d with leases of 10; admitted %d vs %d; worst excess over the bound %d (documented at most 20)", lim,
		plainCalls*1000/16_000, leasedCalls*1000/16_000, len(plain), len(leased), worst(leased))
}

// gateStore holds every Take while its gate is closed (until the call's
// context ends), counting the calls.
type gateStore struct {
	store.Store
	calls atomic.Int64
	held  chan struct{} // receives once per call that waits at the gate
	gate  chan struct{} // closed: calls go through
}

func (g *gateStore) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	g.calls.Add(1)
	select {
	case <-g.gate:
	default:
		g.held <- struct{}{}
		select {
		case <-g.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.Take(ctx, checks, res)
}

// leasePolicy leases 10 units of a limit of 1,000 a second.
var leasePolicy = policy.Policy{DefaultPlan: "p", DefaultClass: "hot",
	Plans:   map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 1000, Period: time.Second, Burst: 1000}}}}},
	Classes: map[string]policy.Class{"hot": {Name: "hot", Share: 1, Lease: 10}}}

// TestLeaseTakeHoldsNoLock: while one request's lease take waits on the
// store, another request of the same key set is not held behind a lock
// for it: it gives up when its own context ends, and is answered.
func TestLeaseTakeHoldsNoLock(t *testing.T) {
	st := &gateStore{Store: memstore.New(memstore.Config{}), held: make(chan struct{}, 4), gate: make(chan struct{})}
	l, err := New(Config{Store: st, Policy: leasePolicy, Timeout: -1, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan Decision, 1)
	go func() {
		d, _ := l.Decide(context.Background(), policy.Request{Tenant: "whale"})
		first <- d
	}()
	<-st.held // the first request's lease take waits on the store
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		_, err := l.Decide(ctx, policy.Request{Tenant: "whale"})
		second <- err
	}()
	cancel()
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("a request whose context ended waited behind another request's lease take")
	}
	close(st.gate)
	if d := <-first; !d.Allowed {
		t.Fatalf("the first request: %+v", d)
	}
}

// TestLeaseWaitersShareTheTake: requests that arrive while a lease is
// being taken wait for it and spend from it, rather than each calling the
// store: 8 concurrent requests with leases of 10 make one store call.
func TestLeaseWaitersShareTheTake(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := &gateStore{Store: memstore.New(memstore.Config{Now: func() time.Time { return now }}), held: make(chan struct{}, 16), gate: make(chan struct{})}
	l, err := New(Config{Store: st, Policy: leasePolicy, Now: func() time.Time { return now }, Timeout: -1, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 8 {
		wg.Go(func() {
			if d, err := l.Decide(context.Background(), policy.Request{Tenant: "whale"}); err == nil && d.Allowed {
				allowed.Add(1)
			}
		})
	}
	<-st.held // one take waits on the store; the others wait for it, or come after it
	close(st.gate)
	wg.Wait()
	if allowed.Load() != 8 || st.calls.Load() != 1 {
		t.Fatalf("%d of 8 allowed with %d store calls; want 8 with 1 (the lease of 10)", allowed.Load(), st.calls.Load())
	}
}

// failingTakes is a store whose takes all fail, counting lease takes (cost
// above 1) apart; the first take waits at the gate.
type failingTakes struct {
	store.Store
	grantTakes atomic.Int64
	held       chan struct{}
	gate       chan struct{}
	once       sync.Once
}

func (f *failingTakes) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if checks[0].Cost > 1 {
		f.grantTakes.Add(1)
	}
	f.once.Do(func() { f.held <- struct{}{}; <-f.gate })
	return store.ErrUnavailable
}

// TestLeaseTakeFailureBacksOff: while the store fails, the requests that
// waited for a failed lease take decide at once on their own, rather than
// each trying a lease in turn: one lease take, not one per request.
func TestLeaseTakeFailureBacksOff(t *testing.T) {
	st := &failingTakes{Store: memstore.New(memstore.Config{}), held: make(chan struct{}, 1), gate: make(chan struct{})}
	l, err := New(Config{Store: st, Policy: leasePolicy, Timeout: -1, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { l.Decide(context.Background(), policy.Request{Tenant: "whale"}) })
	}
	<-st.held
	close(st.gate)
	wg.Wait()
	if n := st.grantTakes.Load(); n != 1 {
		t.Fatalf("%d lease takes for 8 requests while the store fails, want 1", n)
	}
}
