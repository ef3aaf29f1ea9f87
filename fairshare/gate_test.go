package fairshare

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

// TestUnderShareFirst: when the limit is full, a freed slot goes to the
// waiting tenant with the fewest requests in flight before the borrower's
// queued requests, and a request waits at most MaxWait.
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
	now := time.Unix(0, 0)
	for i := range 20000 {
		inflight := int(g.limit) // a saturating load: always at the limit
		rtt := base * max(1, float64(inflight)/16)
		now = now.Add(time.Millisecond)
		g.observe([]string{"a", "b", "c"}[i%3], "read", rtt, inflight, false, now)
	}
	if g.limit < 14 || g.limit > 40 {
		t.Fatalf("learned %.1f for 16 workers, want near 16 (the latency knee)", g.limit)
	}
	mixed := gradient{limit: 4, floor: 4, ceiling: 1000, tolerance: 1.5}
	for i := range 20000 {
		inflight := int(mixed.limit)
		q := max(1, float64(inflight)/16)
		now = now.Add(time.Millisecond)
		if i%2 == 0 {
			mixed.observe("a", "cheap", 5e6*q, inflight, false, now)
		} else {
			mixed.observe("b", "costly", 200e6*q, inflight, false, now)
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
		time.Sleep(loadWindow) // the borrower holds over its share of 4
		if _, err := g.Acquire(context.Background(), Request{Tenant: "borrower"}); !errors.Is(err, ErrShed) {
			t.Fatalf("the borrower's eighth: %v, want shed (one slot kept free)", err)
		}
		mustAcquire(t, g, "steady", false) // the kept slot
	})
	d := demand{rate: 360, lat: 0.006}
	if h := d.headroom(16, 2); h != 7 {
		t.Errorf("headroom for 360 requests a second of 6 ms: %v, want ceil(2.16 + 2√2.16) + 1 = 7", h)
	}
	if h := (&demand{rate: 10000, lat: 0.1}).headroom(16, 2); h != 8 {
		t.Errorf("headroom under a flood: %v, want half the limit", h)
	}
}

// TestSetConfig: a new config keeps what is in flight and waiting, starts
// waiters the new limit has room for, and moves a learned limit into the
// new bounds.
func TestSetConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 2, Floor: 1, Fixed: true, MaxWait: time.Second})
		mustAcquire(t, g, "a", false)
		mustAcquire(t, g, "a", false)
		got := make(chan error, 1)
		go func() { _, err := g.Acquire(context.Background(), Request{Tenant: "b"}); got <- err }()
		synctest.Wait()
		if s := g.Stats(); s.Waiting != 1 {
			t.Fatalf("%+v, want one waiting", s)
		}
		g.SetConfig(Config{Initial: 3, Floor: 1, Fixed: true, MaxWait: time.Second})
		synctest.Wait()
		if err := <-got; err != nil {
			t.Fatalf("the waiter after the limit grew: %v", err)
		}
		if s := g.Stats(); s.InFlight != 3 || s.Limit != 3 || s.Waiting != 0 {
			t.Fatalf("%+v, want 3 in flight of 3", s)
		}
	})
	tests := []struct {
		name      string
		from, to  Config
		wantLimit int
	}{
		{"learned, under a lower ceiling", Config{Initial: 50}, Config{Floor: 2, Ceiling: 20}, 20},
		{"learned, over a higher floor", Config{Initial: 5}, Config{Floor: 8}, 8},
		{"learned, within the new bounds", Config{Initial: 12}, Config{Floor: 2, Ceiling: 40}, 12},
		{"fixed to learned starts from the fixed", Config{Initial: 30, Fixed: true}, Config{Floor: 2, Initial: 6}, 6},
		{"learned to fixed", Config{Initial: 30}, Config{Initial: 9, Fixed: true}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := New(tt.from)
			g.SetConfig(tt.to)
			if got := g.Limit(); got != tt.wantLimit {
				t.Fatalf("limit %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

// TestAnsweredOnce: Answered teaches the limit once; Done after it only
// frees the room; a skipped request teaches nothing, and an upload
// answered before its body was sent only its failure.
func TestAnsweredOnce(t *testing.T) {
	g := New(Config{Initial: 20, Floor: 1})
	taught := func() (n int, failed bool) {
		if p := g.lim.parties["a"]; p != nil {
			return p.n, p.failed
		}
		return 0, false
	}
	tk := mustAcquire(t, g, "a", false)
	tk.Answered(true)
	tk.Answered(false)
	tk.Done(false)
	tk.Done(false)
	if n, f := taught(); n != 1 || !f {
		t.Fatalf("%d samples, failed %v; want one failed sample", n, f)
	}
	if s := g.Stats(); s.InFlight != 0 || s.Tenants != 0 {
		t.Fatalf("%+v, want nothing held", s)
	}
	mustAcquire(t, g, "a", false).Done(true)
	if n, _ := taught(); n != 2 {
		t.Fatalf("Done without Answered: %d samples; want 2", n)
	}
	tk = mustAcquire(t, g, "a", false)
	tk.Skip()
	tk.Answered(true)
	tk.Done(true)
	if n, _ := taught(); n != 2 || g.Stats().InFlight != 0 {
		t.Fatalf("a skipped request taught the limit (%d samples) or kept its room (%+v)", n, g.Stats())
	}
	upload := func() *Ticket {
		tk, err := g.Acquire(context.Background(), Request{Tenant: "a", Upload: true})
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	upload().Done(false)
	if n, _ := taught(); n != 2 || g.Stats().InFlight != 0 {
		t.Fatalf("an upload answered before it was sent taught the limit (%d samples) or kept its room (%+v)", n, g.Stats())
	}
	g.lim.parties["a"].failed = false
	upload().Done(true)
	if n, f := taught(); n != 3 || !f {
		t.Fatalf("an upload that failed before it was sent: %d samples, failed %v; want its failure counted", n, f)
	}
}

// TestUploadNotLatency: an upload's latency counts from when its body was
// sent, so a body that takes a second to arrive is not queueing.
func TestUploadNotLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 10, Floor: 1})
		for i := range 30 {
			tk, err := g.Acquire(context.Background(), Request{Tenant: "a", Upload: i > 0})
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				time.Sleep(time.Second) // the client's upload
				tk.Sent()
			}
			time.Sleep(5 * time.Millisecond) // the upstream's work
			tk.Done(false)
		}
		if l := g.Limit(); l < 10 {
			t.Fatalf("limit %d after slow uploads answered in 5 ms, want 10 (nothing queued)", l)
		}
	})
}

// TestShareGrowsWhileWaiting: a request over its tenant's share waits
// while another tenant wants room, and starts once that tenant has gone
// quiet, though no request ended meanwhile.
func TestShareGrowsWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 2, Fixed: true, MaxWait: 5 * time.Second})
		start := time.Now()
		mustAcquire(t, g, "b", false).Done(false) // b wanted room
		mustAcquire(t, g, "a", false)
		time.Sleep(loadWindow) // a holds its share of 1
		if _, err := g.Acquire(context.Background(), Request{Tenant: "a"}); err != nil {
			t.Fatalf("a's second request: %v", err)
		}
		if at := time.Since(start); at < recentFor || at > recentFor+recentFor/2 {
			t.Fatalf("a's second request started %v after b wanted room, want once b was forgotten (%v) and soon after", at, recentFor)
		}
	})
}

// TestFair: who is within its share. With ten tenants wanting room, each
// has 1.6 of a limit of 16; one that held less than that on average may
// burst to 1.6 + 2√1.6 + 1 ≈ 5.1 as its own; a new one's burst is borrowed.
func TestFair(t *testing.T) {
	g := New(Config{Initial: 16, Fixed: true})
	now := time.Now()
	for i := range 10 {
		g.demand.seen(string(rune('a'+i)), 1, now)
	}
	for _, tc := range []struct {
		name     string
		windows  int
		avg      float64
		inflight int
		want     bool
	}{
		{"new, under its share", 0, 0, 1, true},
		{"new, at its share", 0, 0, 2, false},
		{"new, bursting", 0, 0, 4, false},
		{"light on average, bursting", 3, 0.3, 4, true},
		{"light on average, at the burst bound", 3, 0.3, 6, false},
		{"at its share on average", 3, 1.6, 2, false},
		{"heavy on average, under its share", 3, 9, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := &tenant{name: "a", weight: 1, inflight: tc.inflight, rec: &recentTenant{weight: 1, load: load{windows: tc.windows, avg: tc.avg}}}
			if got := g.fair(tn); got != tc.want {
				t.Fatalf("fair = %v, want %v (share %.2f)", got, tc.want, g.share(tn))
			}
		})
	}
}

// TestLoad: a tenant's average in flight is the time-weighted mean of each
// window, the first taken as it is and later ones averaged in by half.
func TestLoad(t *testing.T) {
	var l load
	t0 := time.Unix(0, 0)
	l.change(0, 4, t0)
	l.change(4, 2, t0.Add(125*time.Millisecond))
	l.change(2, 2, t0.Add(250*time.Millisecond)) // window: 4 for half, 2 for half
	if l.avg != 3 || l.windows != 1 || l.held != 2 {
		t.Fatalf("%+v, want an average of 3 after one window, 2 held", l)
	}
	l.change(2, 0, t0.Add(500*time.Millisecond)) // window: 2 throughout
	if l.avg != 2.5 {
		t.Fatalf("average %v, want (3 + 2) / 2", l.avg)
	}
	l.change(0, 1, t0.Add(10*time.Second)) // a long idle window
	if l.avg != 1.25 {
		t.Fatalf("average %v after idling, want 2.5 / 2", l.avg)
	}
}

// TestBorrowersByWeight: two borrowers waiting for room share what frees
// in proportion to their weights.
func TestBorrowersByWeight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 8, Fixed: true, MaxWait: time.Hour, Margin: 0.5})
		var held []*Ticket
		for range 8 {
			held = append(held, mustAcquire(t, g, "other", false))
		}
		got := map[string]int{}
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		defer synctest.Wait()
		defer cancel()
		for _, r := range []Request{{Tenant: "light", Weight: 1}, {Tenant: "heavy", Weight: 3}} {
			for range 8 {
				go func() {
					if _, err := g.Acquire(ctx, r); err == nil {
						mu.Lock()
						got[r.Tenant]++
						mu.Unlock()
					}
				}()
			}
		}
		synctest.Wait()
		time.Sleep(loadWindow) // both hold nothing yet, and wait
		for _, tk := range held {
			tk.Done(false)
			synctest.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("admitted %v", got)
		if got["heavy"] < 3*got["light"]-1 || got["heavy"] > 3*got["light"]+1 || got["heavy"]+got["light"] < 6 {
			t.Fatalf("admitted %v as room freed, want about three heavy for one light", got)
		}
	})
}

// TestMaxWaiting: past MaxWaiting waiting requests, a borrower's is shed
// at once; past twice that, anyone's.
func TestMaxWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Config{Initial: 1, Fixed: true, MaxWait: time.Second, MaxWaiting: 2})
		mustAcquire(t, g, "a", false)
		for _, name := range []string{"b", "c"} { // fair: nothing in flight
			go g.Acquire(context.Background(), Request{Tenant: name})
			synctest.Wait()
		}
		var se *ShedError
		if _, err := g.Acquire(context.Background(), Request{Tenant: "a"}); !errors.As(err, &se) || !se.QueueFull {
			t.Fatalf("a borrower past MaxWaiting: %v, want shed at once", err)
		}
		for _, name := range []string{"d", "e"} {
			go g.Acquire(context.Background(), Request{Tenant: name})
			synctest.Wait()
		}
		if _, err := g.Acquire(context.Background(), Request{Tenant: "f"}); !errors.As(err, &se) || !se.QueueFull {
			t.Fatalf("anyone past twice MaxWaiting: %v, want shed at once", err)
		}
		if s := g.Stats(); s.Waiting != 4 {
			t.Fatalf("%+v, want 4 waiting", s)
		}
		time.Sleep(time.Second) // the waiters' MaxWait
	})
}

// BenchmarkGate is the gate's cost per request with room: Acquire, then
// Answered and Done, from parallel callers of 100 tenants; with a fixed
// limit, and with a learned one (its floor and ceiling 64, so that it
// learns, votes and decides but always has room).
//
//	go test -run '^$' -bench Gate -benchmem ./fairshare/
func BenchmarkGate(b *testing.B) {
	for _, bc := range []struct {
		name string
		c    Config
	}{
		{"fixed", Config{Initial: 1 << 20, Fixed: true}},
		{"learned", Config{Floor: 64, Ceiling: 64, Initial: 64}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := New(bc.c)
			names := make([]string, 100)
			for i := range names {
				names[i] = "tenant-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			}
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req := Request{Tenant: names[n.Add(1)%100], Kind: "read"}
				for pb.Next() {
					tk, err := g.Acquire(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					tk.Answered(false)
					tk.Done(false)
				}
			})
		})
	}
}

// TestTypicalLatencyIgnoresOneParty: the latency a shed request's
// Retry-After comes from is the median of the parties' averages, so one
// tenant's 30 s requests do not tell every other tenant to wait 30 s (the
// average of all answers did).
func TestTypicalLatencyIgnoresOneParty(t *testing.T) {
	var g gradient
	g.configure(Config{Floor: 4, Ceiling: 64, Tolerance: 1.25, Fixed: true})
	now := time.Unix(1_800_000_000, 0)
	for i := range 200 {
		now = now.Add(time.Millisecond)
		for _, p := range []string{"t:a", "t:b", "t:c"} {
			g.observe(p, "read", float64(10*time.Millisecond), 1, false, now)
		}
		if i%2 == 0 {
			g.observe("t:mallory", "read", float64(30*time.Second), 1, false, now)
		}
	}
	if got := time.Duration(g.typical(now)); got != 10*time.Millisecond {
		t.Fatalf("typical latency %v with one slow party among four, want the others' 10ms", got)
	}
	if avg := time.Duration(g.base); avg < time.Second {
		t.Fatalf("the average of all answers is %v: the test no longer shows what one party did to it", avg)
	}
}
