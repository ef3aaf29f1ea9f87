package fairshare

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func mustAcquire(t *testing.T, g *Gate, name string, critical bool) *Ticket {
	t.Helper()
	tk, err := g.Acquire(context.Background(), Request{Tenant: name, Critical: critical})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tk
}

// TestLendsIdleRoom: while nobody else wants it, one tenant may use the
// whole limit.
func TestLendsIdleRoom(t *testing.T) {
	g := New(Config{Initial: 8, Fixed: true})
	for range 8 {
		mustAcquire(t, g, "borrower", false)
	}
	if s := g.Stats(); s.InFlight != 8 || s.Limit != 8 {
		t.Fatalf("%+v, want all 8 in flight", s)
	}
}

// TestUnderShareFirst: when the limit is full, a freed slot goes to a
// waiting tenant under its share before the borrower's queued requests,
// and a request waits at most MaxWait.
func TestUnderShareFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 4, Fixed: true, MaxWait: time.Second})
		var held []*Ticket
		for range 4 {
			held = append(held, mustAcquire(t, g, "borrower", false))
		}
		order := make(chan string, 4)
		for _, name := range []string{"borrower", "borrower", "steady"} {
			go func() {
				if tk, err := g.Acquire(context.Background(), Request{Tenant: name}); err == nil {
					order <- name
					_ = tk
				} else {
					order <- name + ": " + err.Error()
				}
			}()
			synctest.Wait() // queued in this order
		}
		held[0].Done(false)
		synctest.Wait()
		if got := <-order; got != "steady" {
			t.Fatalf("the first freed slot went to %q, want the steady tenant under its share", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		for range 2 {
			if got := <-order; got == "borrower" {
				t.Fatalf("a borrower's request got room that never freed")
			}
		}
	})
}

// TestShed: a full queue and an expired wait shed with a retry-after.
func TestShed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Floor: 1, Initial: 1, Fixed: true, MaxWait: 100 * time.Millisecond, MaxQueue: 1})
		mustAcquire(t, g, "a", false)
		errs := make(chan error, 2)
		go func() { _, err := g.Acquire(context.Background(), Request{Tenant: "a"}); errs <- err }()
		synctest.Wait()
		_, err := g.Acquire(context.Background(), Request{Tenant: "a"})
		var se *ShedError
		if !errors.As(err, &se) || !errors.Is(err, ErrShed) || se.RetryAfter <= 0 {
			t.Fatalf("a second waiter over MaxQueue 1: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if err := <-errs; !errors.Is(err, ErrShed) {
			t.Fatalf("the waiter after MaxWait: %v", err)
		}
		if s := g.Stats(); s.Waiting != 0 || s.InFlight != 1 {
			t.Fatalf("after the sheds: %+v", s)
		}
	})
}

// TestReserve: a reserve of a quarter keeps 2 of 8 slots for critical
// requests.
func TestReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 8, Fixed: true, Reserve: 0.25, MaxWait: 10 * time.Millisecond})
		for range 6 {
			mustAcquire(t, g, "bulk", false)
		}
		if _, err := g.Acquire(context.Background(), Request{Tenant: "bulk"}); !errors.Is(err, ErrShed) {
			t.Fatalf("a seventh non-critical request: %v, want shed", err)
		}
		mustAcquire(t, g, "checkout", true)
		mustAcquire(t, g, "checkout", true)
	})
}

// TestForgets: tenants with nothing in flight or waiting are not kept.
func TestForgets(t *testing.T) {
	g := New(Config{Initial: 4, Fixed: true})
	for i := range 1000 {
		mustAcquire(t, g, string(rune('a'+i%26))+string(rune(i)), false).Done(false)
	}
	if s := g.Stats(); s.Tenants != 0 {
		t.Fatalf("%d tenants kept after all were done", s.Tenants)
	}
}

// TestLearnsCapacity: an upstream of 16 workers whose latency grows with
// the requests beyond them teaches a limit near 16 (its knee, plus the
// tolerance and the queue allowance), not the ceiling; an expensive kind
// beside it is not taken for queueing.
func TestLearnsCapacity(t *testing.T) {
	g := gradient{limit: 4, floor: 4, ceiling: 1000, tolerance: 1.5}
	const base = 5e6 // 5 ms
	for range 20000 {
		inflight := int(g.limit) // a saturating load: always at the limit
		rtt := base * max(1, float64(inflight)/16)
		g.observe("read", rtt, inflight, false)
	}
	if g.limit < 14 || g.limit > 40 {
		t.Fatalf("learned %.1f for 16 workers, want near 16 (the latency knee)", g.limit)
	}
	mixed := gradient{limit: 4, floor: 4, ceiling: 1000, tolerance: 1.5}
	for i := range 20000 {
		inflight := int(mixed.limit)
		q := max(1, float64(inflight)/16)
		if i%2 == 0 {
			mixed.observe("cheap", 5e6*q, inflight, false)
		} else {
			mixed.observe("costly", 200e6*q, inflight, false)
		}
	}
	if mixed.limit < 14 || mixed.limit > 40 {
		t.Fatalf("learned %.1f for 16 workers under a mix of 5 ms and 200 ms requests, want near 16", mixed.limit)
	}
}

// TestHeadroom: a borrower leaves room free for the tenants within their
// shares, sized by their recent demand (Little's law), at most half.
func TestHeadroom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 8, Fixed: true, MaxWait: 10 * time.Millisecond})
		mustAcquire(t, g, "steady", false).Done(false) // wanted room lately
		for range 7 {
			mustAcquire(t, g, "borrower", false)
		}
		if _, err := g.Acquire(context.Background(), Request{Tenant: "borrower"}); !errors.Is(err, ErrShed) {
			t.Fatalf("the borrower's eighth: %v, want shed (one slot kept free)", err)
		}
		mustAcquire(t, g, "steady", false) // the kept slot
	})
	d := demand{rate: 360, lat: 0.006}
	if h := d.headroom(16); h != 7 {
		t.Errorf("headroom for 360 requests a second of 6 ms: %v, want ceil(2.16 + 2√2.16) + 1 = 7", h)
	}
	if h := (&demand{rate: 10000, lat: 0.1}).headroom(16); h != 8 {
		t.Errorf("headroom under a flood: %v, want half the limit", h)
	}
}
