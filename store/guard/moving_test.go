package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// moving is a memory store whose calls fail with store.ErrMoving (a Redis
// Cluster slot migrating: the store answers, the keys are between two
// servers) while moving is set.
type moving struct {
	*memstore.Store
	moving atomic.Bool
}

func (m *moving) errMoving() error {
	return fmt.Errorf("%w: %w: %w", store.ErrUnavailable, store.ErrMoving, context.DeadlineExceeded)
}

func (m *moving) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if m.moving.Load() {
		return m.errMoving()
	}
	return m.Store.Take(ctx, checks, res)
}

func (m *moving) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if m.moving.Load() {
		return m.errMoving()
	}
	return m.Store.Settle(ctx, id, adjs, res)
}

// Local: not an in-process store, so that the guard uses its breakers.
func (m *moving) Local() bool { return false }

// TestMovingKeysOpenNoBreaker: calls that fail because their keys' slot
// is migrating (store.ErrMoving) are decided by the fail mode but never
// open the breaker (the attacker review of issue 37 saw a resharding of a
// large slot open it, and /readyz say the store was down); and a
// settlement waits the move out, up to SettleMoving, instead of failing
// after SettleAttempts and losing its charge.
func TestMovingKeysOpenNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &moving{Store: memstore.New(memstore.Config{})}
		g, err := New(Config{Store: st, Timeout: time.Second, NoNearCache: true})
		if err != nil {
			t.Fatal(err)
		}
		lim := algo.Limit{Limit: 100, Period: time.Hour}
		var res store.Result
		if err := g.Call(context.Background(), time.Now(), []store.Check{{Key: "k", Limit: lim, Cost: 10}}, &res); err != nil {
			t.Fatal(err)
		}
		st.moving.Store(true)
		for range 50 {
			if err := g.Call(context.Background(), time.Now(), []store.Check{{Key: "k", Limit: lim, Cost: 1}}, &res); err == nil {
				t.Fatal("a call on a moving slot succeeded")
			}
		}
		if !g.Up() {
			t.Fatal("50 calls on a moving slot opened the breaker")
		}
		go func() {
			time.Sleep(5 * time.Second) // the move ends
			st.moving.Store(false)
		}()
		var sres store.SettleResult
		if err := g.Settle(context.Background(), "id-1", []store.Adjustment{{Key: "k", Limit: lim, Delta: -3}}, &sres); err != nil {
			t.Fatalf("a settlement during a 5 s move: %v, want it applied once the move ended", err)
		}
		if sres.Settled[0].Applied != -3 {
			t.Fatalf("applied %d, want -3", sres.Settled[0].Applied)
		}
		// A move that outlasts SettleMoving fails the settlement.
		st.moving.Store(true)
		start := time.Now()
		if err := g.Settle(context.Background(), "id-2", []store.Adjustment{{Key: "k", Limit: lim, Delta: -3}}, &sres); err == nil {
			t.Fatal("a settlement during an endless move succeeded")
		}
		if took := time.Since(start); took < SettleMoving || took > SettleMoving+5*time.Second {
			t.Fatalf("a settlement during an endless move gave up after %v, want about SettleMoving (%v)", took, SettleMoving)
		}
		if !g.Up() {
			t.Fatal("the settlements' calls opened the breaker")
		}
	})
}

// probed is a memory store served, it says, by three servers: it names a
// probe key on each and counts the peeks at them.
type probed struct {
	*memstore.Store
	peeks atomic.Int64
	seen  map[string]bool
}

func (p *probed) ProbeKeys() []string { return []string{"p{a}", "p{b}", "p{c}"} }

func (p *probed) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if k := checks[0].Key; k == "p{a}" || k == "p{b}" || k == "p{c}" {
		p.peeks.Add(1)
		if p.seen == nil {
			p.seen = map[string]bool{}
		}
		p.seen[k] = true
	}
	return p.Store.Take(ctx, checks, res)
}

func (p *probed) Local() bool { return false }

// TestProbePeeksAtEveryServer: idle probes peek at the probe keys of a
// store.Prober's servers in turn, one per probe.
func TestProbePeeksAtEveryServer(t *testing.T) {
	st := &probed{Store: memstore.New(memstore.Config{})}
	g, err := New(Config{Store: st, Timeout: time.Second, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 3 {
		now = now.Add(IdleProbe + time.Second)
		g.Probe(context.Background(), now)
		if n := st.peeks.Load(); n != int64(i+1) {
			t.Fatalf("after %d idle probes, %d peeks at the servers' probe keys, want %d", i+1, n, i+1)
		}
	}
	for _, k := range st.ProbeKeys() {
		if !st.seen[k] {
			t.Errorf("probe key %q never peeked at", k)
		}
	}
}
