package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Config configures a Gate. Zero values have the defaults named.
type Config struct {
	// Floor and Ceiling bound the learned limit. Zero means 4 and 1,000.
	Floor, Ceiling int
	// Initial is the limit before anything is learned. Zero means Floor.
	Initial int
	// Fixed turns learning off: the limit stays Initial.
	Fixed bool
	// MaxWait is how long a request waits for room before it is shed.
	// Zero means 250 ms.
	MaxWait time.Duration
	// MaxQueue bounds each tenant's waiting requests. Zero means 128.
	MaxQueue int
	// Tolerance is how much the upstream's latency may grow over its
	// least before the limit shrinks. Zero means 1.25 (25% more).
	Tolerance float64
	// Reserve is the part of the limit, in [0, 1), kept for requests that
	// ask for it (critical routes): others are admitted only while the
	// rest has room. Zero means none.
	Reserve float64
}

// ErrShed means the request found no room within MaxWait, or its
// tenant's queue was full.
var ErrShed = errors.New("fairshare: shed")

// ShedError is ErrShed with how long to wait before retrying.
type ShedError struct {
	RetryAfter time.Duration
	Why        string
}

func (e *ShedError) Error() string {
	return fmt.Sprintf("fairshare: shed (%s); retry after %v", e.Why, e.RetryAfter)
}

// Unwrap returns ErrShed.
func (e *ShedError) Unwrap() error { return ErrShed }

// Gate admits requests to an upstream. Safe for concurrent use.
type Gate struct {
	c Config

	mu       sync.Mutex
	lim      gradient
	inflight int
	tenants  map[string]*tenant
	waiting  int       // requests queued, all tenants
	rr       []*tenant // tenants with waiters, in round-robin order
	demand   demand    // who wants room lately, and how much
}

type tenant struct {
	name     string
	weight   float64
	inflight int
	queue    []*waiter
	queued   bool // in g.rr
}

type waiter struct {
	ready    chan struct{}
	critical bool
	fair     bool // within its tenant's share when it came
	granted  bool
}

// New returns a Gate.
func New(c Config) *Gate {
	if c.Floor <= 0 {
		c.Floor = 4
	}
	if c.Ceiling <= 0 {
		c.Ceiling = 1000
	}
	c.Ceiling = max(c.Ceiling, c.Floor)
	if c.Initial <= 0 {
		c.Initial = c.Floor
	}
	c.Initial = min(max(c.Initial, c.Floor), c.Ceiling)
	if c.MaxWait <= 0 {
		c.MaxWait = 250 * time.Millisecond
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 128
	}
	if c.Tolerance <= 1 {
		c.Tolerance = 1.25
	}
	c.Reserve = min(max(c.Reserve, 0), 0.9)
	g := &Gate{c: c, tenants: map[string]*tenant{}, demand: demand{recent: map[string]recentTenant{}}}
	g.lim = gradient{limit: float64(c.Initial), floor: float64(c.Floor), ceiling: float64(c.Ceiling), tolerance: c.Tolerance, fixed: c.Fixed}
	return g
}

// Limit returns the limit in force: requests in flight at most.
func (g *Gate) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit()
}

func (g *Gate) limit() int { return int(math.Floor(g.lim.limit)) }

// Stats are a Gate's numbers of the moment.
type Stats struct {
	Limit, InFlight, Waiting, Tenants int
}

// Stats returns the gate's numbers.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{g.limit(), g.inflight, g.waiting, len(g.tenants)}
}

// Ticket is an admitted request. Call Done once when it ends.
type Ticket struct {
	g     *Gate
	t     *tenant
	kind  string
	fair  bool
	start time.Time
	once  sync.Once
}

// Done ends the request: failed reports an upstream failure or timeout
// (which shrinks the limit); the time since admission, compared with the
// least seen for the request's kind, teaches the limit.
func (tk *Ticket) Done(failed bool) {
	tk.once.Do(func() { tk.g.done(tk, time.Since(tk.start), failed) })
}

// Request is what Acquire admits.
type Request struct {
	// Tenant is who asks; Weight its weight (its plan's; zero means 1).
	Tenant string
	Weight float64
	// Kind groups requests of like cost (a route class): the limit learns
	// each kind's own latency.
	Kind string
	// Critical requests may use the reserve.
	Critical bool
}

// Acquire admits r, waiting up to MaxWait for room. The error is a
// *ShedError, or ctx's.
func (g *Gate) Acquire(ctx context.Context, r Request) (*Ticket, error) {
	name, weight, critical := r.Tenant, r.Weight, r.Critical
	if weight <= 0 {
		weight = 1
	}
	g.mu.Lock()
	t := g.tenants[name]
	if t == nil {
		t = &tenant{name: name, weight: weight}
		g.tenants[name] = t
	}
	t.weight = weight
	now := time.Now()
	g.demand.seen(name, weight, now)
	fair := float64(t.inflight) < g.share(t)
	if g.waiting == 0 && g.room(critical, fair) {
		t.inflight++
		g.inflight++
		if fair {
			g.demand.arrive(now)
		}
		g.mu.Unlock()
		return &Ticket{g: g, t: t, kind: r.Kind, fair: fair, start: now}, nil
	}
	if len(t.queue) >= g.c.MaxQueue {
		g.forget(t)
		ra := g.retryAfter()
		g.mu.Unlock()
		return nil, &ShedError{RetryAfter: ra, Why: "its queue is full"}
	}
	w := &waiter{ready: make(chan struct{}), critical: critical, fair: fair}
	t.queue = append(t.queue, w)
	g.waiting++
	if !t.queued {
		t.queued = true
		g.rr = append(g.rr, t)
	}
	g.dispatch()
	g.mu.Unlock()

	timer := time.NewTimer(g.c.MaxWait)
	defer timer.Stop()
	var why string
	select {
	case <-w.ready:
		return &Ticket{g: g, t: t, kind: r.Kind, fair: w.fair, start: time.Now()}, nil
	case <-timer.C:
		why = "no room within the wait"
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted { // granted as the wait ended: give the room back
		t.inflight--
		g.inflight--
		g.dispatch()
	} else {
		g.unqueue(t, w)
	}
	g.forget(t)
	if why == "" {
		return nil, ctx.Err()
	}
	return nil, &ShedError{RetryAfter: g.retryAfter(), Why: why}
}

// share is t's fair share of the limit among the tenants that wanted room
// lately (weighted).
func (g *Gate) share(t *tenant) float64 {
	return float64(g.limit()) * t.weight / math.Max(g.demand.weights, t.weight)
}

// room reports whether a request may start now: there is room in the
// limit (the reserve only for a critical one); a request over its
// tenant's share (a borrower's) also leaves the headroom that the tenants
// within their shares are expected to need.
func (g *Gate) room(critical, fair bool) bool {
	lim := float64(g.limit())
	if !critical {
		lim = math.Max(1, math.Floor(lim*(1-g.c.Reserve)))
	}
	if !fair {
		lim -= g.demand.headroom(float64(g.limit()))
	}
	return float64(g.inflight) < lim
}

// dispatch starts waiting requests while there is room: first those of
// tenants under their share, round robin, then the others'.
func (g *Gate) dispatch() {
	for g.waiting > 0 {
		w, t := g.next(true)
		if w == nil {
			w, t = g.next(false)
		}
		if w == nil {
			return
		}
		w.granted = true
		t.inflight++
		g.inflight++
		g.waiting--
		if w.fair {
			g.demand.arrive(time.Now())
		}
		close(w.ready)
	}
}

// next takes the first waiter, round robin over the tenants with waiters,
// that may start now: of a tenant under its share when under is set.
func (g *Gate) next(under bool) (*waiter, *tenant) {
	for i := range g.rr {
		t := g.rr[i]
		if under && float64(t.inflight) >= g.share(t) {
			continue
		}
		for j, w := range t.queue {
			if !g.room(w.critical, w.fair) {
				continue
			}
			t.queue = append(t.queue[:j], t.queue[j+1:]...)
			// t goes to the back of the round.
			g.rr = append(append(g.rr[:i:i], g.rr[i+1:]...), t)
			if len(t.queue) == 0 {
				g.rr = g.rr[:len(g.rr)-1]
				t.queued = false
			}
			return w, t
		}
	}
	return nil, nil
}

// unqueue removes w, which gave up, from t's queue.
func (g *Gate) unqueue(t *tenant, w *waiter) {
	for j, x := range t.queue {
		if x == w {
			t.queue = append(t.queue[:j], t.queue[j+1:]...)
			g.waiting--
			break
		}
	}
	if len(t.queue) == 0 && t.queued {
		for i, x := range g.rr {
			if x == t {
				g.rr = append(g.rr[:i], g.rr[i+1:]...)
				break
			}
		}
		t.queued = false
	}
}

// forget drops t when it holds and wants nothing: the tenants kept are
// those with requests in flight or waiting, so callers' names cannot grow
// memory beyond what is in flight.
func (g *Gate) forget(t *tenant) {
	if t.inflight == 0 && len(t.queue) == 0 {
		delete(g.tenants, t.name)
	}
}

// retryAfter estimates when room frees: the learned base latency, at
// least 1 ms.
func (g *Gate) retryAfter() time.Duration {
	return max(time.Millisecond, time.Duration(g.lim.base))
}

func (g *Gate) done(tk *Ticket, rtt time.Duration, failed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := tk.t
	g.lim.observe(tk.kind, float64(rtt), g.inflight, failed)
	if tk.fair {
		g.demand.took(rtt)
	}
	t.inflight--
	g.inflight--
	g.forget(t)
	g.dispatch()
}
