package fairshare

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// simUpstream is an upstream of a fixed number of workers, in a synctest
// bubble: a request holds a worker for its service time, and requests
// beyond the workers queue for one, so latency grows with queueing.
type simUpstream chan struct{}

func (u simUpstream) serve(d time.Duration) {
	u <- struct{}{}
	time.Sleep(d)
	<-u
}

// simParty is one tenant's load in a simulation: clients goroutines, each
// asking for room and then running one request after another.
type simParty struct {
	name    string
	clients int
	// request serves the i-th request of the client through up and says
	// whether it failed.
	request func(up simUpstream, i int) (failed bool)
}

// victim runs cheap 5 ms requests back to back.
func victim(name string, clients int) simParty {
	return simParty{name, clients, func(up simUpstream, _ int) bool { up.serve(5 * time.Millisecond); return false }}
}

// simResult is what a simulation measured after its warm-up.
type simResult struct {
	done                  map[string]int // requests completed, by party
	least, median, latest int            // the limit: its least, its median, and at the end
}

// simulate runs parties (the first from the start, the others after a
// warm-up of a second) through g before an upstream of workers, for run
// after the warm-up, in virtual time.
func simulate(t *testing.T, g *Gate, workers int, run time.Duration, parties ...simParty) simResult {
	t.Helper()
	res := simResult{done: map[string]int{}}
	var mu sync.Mutex
	var measuring atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	up := make(simUpstream, workers)
	var wg sync.WaitGroup
	for j, p := range parties {
		for c := range p.clients {
			wg.Go(func() {
				if j > 0 {
					time.Sleep(time.Second)
				}
				for i := c; ctx.Err() == nil; i += p.clients {
					tk, err := g.Acquire(ctx, Request{Tenant: p.name, Kind: "api"})
					if err != nil {
						time.Sleep(10 * time.Millisecond) // shed: back off a little
						continue
					}
					failed := p.request(up, i)
					tk.Done(failed)
					if measuring.Load() {
						mu.Lock()
						res.done[p.name]++
						mu.Unlock()
					}
				}
			})
		}
	}
	time.Sleep(time.Second)
	measuring.Store(true)
	var limits []int
	for end := time.Now().Add(run); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		limits = append(limits, g.Limit())
	}
	slices.Sort(limits)
	res.least, res.median = limits[0], limits[len(limits)/2]
	measuring.Store(false)
	res.latest = g.Limit()
	cancel()
	wg.Wait()
	return res
}

// TestLearnedLimitRobust: no single party can talk the learned limit
// down. Before an upstream of 16 workers, a victim running cheap requests
// keeps, under each attack of another tenant inside its share, at least
// 90% of the throughput it has behind a fixed limit of 16 under the same
// attack, and the limit stays near 16; the same learned gate still
// shrinks when the upstream is overloaded for everyone. In virtual time
// (testing/synctest): the figures are exact, not timings.
func TestLearnedLimitRobust(t *testing.T) {
	slow := simParty{"attacker", 6, func(up simUpstream, _ int) bool { up.serve(300 * time.Millisecond); return false }}
	failing := simParty{"attacker", 2, func(simUpstream, int) bool { time.Sleep(200 * time.Microsecond); return true }}
	// Fast answers of the victim's kind, then slow ones: a least latency
	// shared by everyone would make the victim's own requests look queued.
	fastThenSlow := simParty{"attacker", 6, func(up simUpstream, i int) bool {
		if i%2 == 0 {
			up.serve(100 * time.Microsecond)
		} else {
			up.serve(300 * time.Millisecond)
		}
		return false
	}}
	for _, tc := range []struct {
		name   string
		attack []simParty
	}{
		{"six slow requests", []simParty{slow}},
		{"a stream of fast failures", []simParty{failing}},
		{"fast answers lowering the least latency, then slow ones", []simParty{fastThenSlow}},
		{"a slow party among four quiet ones", []simParty{slow, victim("b", 2), victim("c", 2), victim("d", 2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parties := append([]simParty{victim("victim", 16)}, tc.attack...)
				fixed := simulate(t, New(Config{Initial: 16, Fixed: true}), 16, 10*time.Second, parties...)
				learned := simulate(t, New(Config{Floor: 4, Ceiling: 64, Initial: 16}), 16, 10*time.Second, parties...)
				t.Logf("victim %d behind the fixed limit, %d behind the learned (limit %d at least, %d median, %d at the end)",
					fixed.done["victim"], learned.done["victim"], learned.least, learned.median, learned.latest)
				if learned.median < 14 || learned.least < 10 {
					t.Errorf("the learned limit under the attack: median %d, least %d; want it near the 16 workers (a median of 14 and 10 at least)", learned.median, learned.least)
				}
				if learned.done["victim"]*10 < fixed.done["victim"]*9 {
					t.Errorf("the victim completed %d requests behind the learned limit, %d behind the fixed one: want at least 90%%",
						learned.done["victim"], fixed.done["victim"])
				}
			})
		})
	}
	t.Run("overload for everyone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := New(Config{Floor: 4, Ceiling: 64, Initial: 64})
			res := simulate(t, g, 16, 10*time.Second, victim("a", 32), victim("b", 32), victim("c", 32))
			if res.median > 26 {
				t.Fatalf("limit %d (median) with three parties queueing in 16 workers, want it shrunk from 64 to near the knee of 20", res.median)
			}
		})
	})
}

// TestLoneParty: a party alone may shrink the limit (an overloaded
// upstream with one client is protected), but what it taught alone is
// undone as soon as another party's requests show no congestion.
func TestLoneParty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Floor: 4, Ceiling: 64, Initial: 16})
		failing := simParty{"alone", 2, func(simUpstream, int) bool { time.Sleep(200 * time.Microsecond); return true }}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range failing.clients {
			wg.Go(func() {
				for ctx.Err() == nil {
					if tk, err := g.Acquire(ctx, Request{Tenant: failing.name, Kind: "api"}); err == nil {
						tk.Done(failing.request(nil, 0))
					} else {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(time.Second)
		if l := g.Limit(); l != 4 {
			t.Fatalf("limit %d after a second of failures from the only party, want the floor", l)
		}
		up := make(simUpstream, 16)
		for range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					if tk, err := g.Acquire(ctx, Request{Tenant: "other", Kind: "api"}); err == nil {
						up.serve(5 * time.Millisecond)
						tk.Done(false)
					} else {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(time.Second)
		if l := g.Limit(); l < 16 {
			t.Errorf("limit %d a second after another party came and saw no congestion, want the 16 before the lone party's failures", l)
		}
		cancel()
		wg.Wait()
	})
}

// TestPartiesBounded: the parties the learned limit remembers are bounded
// however many names come, those past the bound share one vote, and an
// idle party's least latencies are forgotten after forgetAfter.
func TestPartiesBounded(t *testing.T) {
	g := gradient{limit: 16, floor: 4, ceiling: 64, tolerance: 1.25}
	now := time.Unix(0, 0)
	for i := range 3 * maxParties {
		now = now.Add(time.Microsecond)
		g.observe(fmt.Sprint("tenant-", i), fmt.Sprint("kind-", i%5), 5e6, 16, false, now)
	}
	if len(g.parties) != maxParties || g.mins > maxMins || len(g.voters) > maxParties+1 {
		t.Fatalf("%d parties, %d least latencies, %d voters: want at most %d, %d and one more voter",
			len(g.parties), g.mins, len(g.voters), maxParties, maxMins)
	}
	now = now.Add(forgetAfter)
	g.observe("late", "kind-0", 5e6, 16, false, now)
	if len(g.parties) != 1 || g.mins != 1 {
		t.Fatalf("after %v idle: %d parties, %d least latencies; want only the late one's", forgetAfter, len(g.parties), g.mins)
	}
}
