package fairshare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Gate. Zero values have the defaults named.
type Config struct {
	// Floor and Ceiling bound the learned limit. Zero means 4 and 1,000.
	Floor, Ceiling int
	// Initial is the limit before anything is learned. Zero means Floor.
	Initial int
	// Fixed turns learning off: the limit stays Initial (Floor and
	// Ceiling do not apply).
	Fixed bool
	// MaxWait is how long a request waits for room before it is shed.
	// Zero means 250 ms.
	MaxWait time.Duration
	// MaxQueue bounds each tenant's waiting requests. Zero means 128.
	MaxQueue int
	// MaxWaiting bounds the waiting requests of all tenants: past it a
	// borrower's request is shed at once, and past twice it anyone's, so
	// that many tenants' queues cannot hold without bound. Zero means
	// 1,024.
	MaxWaiting int
	// Tolerance is how much the upstream's latency may grow over its
	// least before the limit shrinks. Zero means 1.25 (25% more).
	Tolerance float64
	// Margin is how many standard deviations of the fair requests'
	// demand the headroom keeps free beyond its mean: more protects the
	// tenants within their shares better and lends less. Zero means 2;
	// at most 6.
	Margin float64
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
	// QueueFull reports a request shed because its tenant's queue was
	// full, rather than one that waited MaxWait.
	QueueFull bool
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
	waiting  int           // requests queued, all tenants
	stopLook chan struct{} // stops the look, which runs while requests wait
	rr       []*tenant     // tenants with waiters, in round-robin order
	demand   demand        // who wants room lately, and how much
}

type tenant struct {
	name     string
	weight   float64
	rec      *recentTenant // its load, kept while it is recent
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
	c = c.normalized()
	g := &Gate{c: c, tenants: map[string]*tenant{}, demand: demand{recent: map[string]*recentTenant{}}}
	g.lim = gradient{limit: float64(c.Initial)}
	g.lim.configure(c)
	return g
}

// normalized is c with its defaults filled in and its values bounded.
func (c Config) normalized() Config {
	if c.Fixed && c.Initial > 0 {
		c.Floor, c.Ceiling = c.Initial, c.Initial
	}
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
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = 1024
	}
	if c.Tolerance <= 1 {
		c.Tolerance = 1.25
	}
	c.Reserve = min(max(c.Reserve, 0), 0.9)
	if c.Margin <= 0 {
		c.Margin = 2
	}
	c.Margin = min(c.Margin, 6)
	return c
}

// SetConfig puts c in force without losing what the gate holds: requests
// in flight and waiting stay, and the learned limit stays, moved into
// c's floor and ceiling (a fixed limit is c's Initial). Waiting requests
// that the new limit has room for start at once; a shorter MaxWait or
// MaxQueue applies to requests that come after.
func (g *Gate) SetConfig(c Config) {
	c = c.normalized()
	g.mu.Lock()
	defer g.mu.Unlock()
	wasFixed := g.c.Fixed
	g.c = c
	if c.Fixed || wasFixed {
		g.lim.limit = float64(c.Initial)
	}
	g.lim.configure(c)
	g.dispatch()
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
	g      *Gate
	t      *tenant
	kind   string
	fair   bool
	upload bool
	start  time.Time
	sent   atomic.Int64 // 1 + ns from start to Sent; zero before
	answer sync.Once
	once   sync.Once
}

// Sent reports that the request's body has been read to its end (by the
// upstream's transport, or the handler): a request admitted with
// [Request.Upload] counts its latency from here. Only the first call
// counts; it is safe to call from any goroutine.
func (tk *Ticket) Sent() { tk.sent.CompareAndSwap(0, 1+int64(time.Since(tk.start))) }

// Answered teaches the limit the request's latency: the time since
// admission (since [Ticket.Sent] for an upload), compared with the least
// its tenant has seen for the request's kind. Call it when the upstream's
// answer begins (its response headers), so that a long stream's body, or
// a client slow to read it, is not read as queueing; failed reports an
// upstream failure or timeout, which counts against the limit. An upload
// answered before Sent teaches only its failure, if it failed: its time
// is the client's. Only the first call counts.
func (tk *Ticket) Answered(failed bool) {
	tk.answer.Do(func() {
		now := time.Now()
		held := now.Sub(tk.start)
		rtt := held
		if tk.upload {
			s := tk.sent.Load()
			switch {
			case s == 0 && !failed:
				return
			case s == 0:
				rtt = -1 // not known
			default:
				rtt = held - time.Duration(s-1)
			}
		}
		tk.g.observe(tk, rtt, held, failed, now)
	})
}

// Skip marks the request as one the limit should not learn from: its
// client gave up, or its answer is not the upstream's work (a 404 answered
// at once would teach a least latency that real requests never reach).
// Done then only frees its room. It does nothing after Answered.
func (tk *Ticket) Skip() { tk.answer.Do(func() {}) }

// Done ends the request and frees its room. If Answered was not called,
// Done calls it with failed first. Only the first call counts.
func (tk *Ticket) Done(failed bool) {
	tk.once.Do(func() {
		tk.Answered(failed)
		tk.g.release(tk)
	})
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
	// Upload reports a request whose body is still to be sent: the
	// latency the limit learns counts from [Ticket.Sent], so that a slow
	// upload is not read as the upstream's queueing.
	Upload bool
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
	t.rec = g.demand.seen(name, weight, now)
	t.rec.load.change(t.inflight, t.inflight, now)
	fair := g.fair(t)
	if g.waiting == 0 && g.room(critical, fair) {
		g.admit(t, fair, now)
		g.mu.Unlock()
		return &Ticket{g: g, t: t, kind: r.Kind, fair: fair, upload: r.Upload, start: now}, nil
	}
	if why := g.full(t, fair); why != "" {
		g.lim.want(name)
		g.forget(t)
		ra := g.retryAfter()
		g.mu.Unlock()
		return nil, &ShedError{RetryAfter: ra, Why: why, QueueFull: true}
	}
	w := &waiter{ready: make(chan struct{}), critical: critical, fair: fair}
	t.queue = append(t.queue, w)
	g.waiting++
	if g.stopLook == nil {
		g.stopLook = make(chan struct{})
		go g.look(g.stopLook)
	}
	if !t.queued {
		t.queued = true
		g.rr = append(g.rr, t)
	}
	g.dispatch()
	if !w.granted {
		g.lim.want(name)
	}
	g.mu.Unlock()

	return g.wait(ctx, t, w, r)
}

// wait waits for w, queued for t, to be granted room, for MaxWait at
// most.
func (g *Gate) wait(ctx context.Context, t *tenant, w *waiter, r Request) (*Ticket, error) {
	timer := time.NewTimer(g.c.MaxWait)
	defer timer.Stop()
	var why string
	select {
	case <-w.ready:
		return &Ticket{g: g, t: t, kind: r.Kind, fair: w.fair, upload: r.Upload, start: time.Now()}, nil
	case <-timer.C:
		why = "no room within the wait"
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted { // granted as the wait ended: give the room back
		g.leave(t, time.Now())
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

// unwait counts one request less waiting, and stops the look when none
// is left.
func (g *Gate) unwait() {
	g.waiting--
	if g.waiting == 0 && g.stopLook != nil {
		close(g.stopLook)
		g.stopLook = nil
	}
}

// look dispatches every recentFor/4 while requests wait, until stop is
// closed: the tenants that wanted room lately set the shares, and as they
// go quiet a waiting request may come within its share though no request
// ended. One goroutine looks for all waiters.
func (g *Gate) look(stop chan struct{}) {
	tick := time.NewTicker(recentFor / 4)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			g.mu.Lock()
			g.demand.maybePrune(time.Now())
			g.dispatch()
			g.mu.Unlock()
		}
	}
}

// full says why a request of t may not wait, or "": t's queue is full, or
// all tenants' waiting requests are at MaxWaiting (for a borrower) or
// twice that (for anyone).
func (g *Gate) full(t *tenant, fair bool) string {
	switch {
	case len(t.queue) >= g.c.MaxQueue:
		return "its queue is full"
	case g.waiting >= 2*g.c.MaxWaiting || !fair && g.waiting >= g.c.MaxWaiting:
		return "the gate's queues are full"
	}
	return ""
}

// share is t's fair share of the limit among the tenants that wanted room
// lately (weighted).
func (g *Gate) share(t *tenant) float64 {
	return float64(g.limit()) * t.weight / math.Max(g.demand.weights, t.weight)
}

// fair reports whether t's next request is within its share: t has
// fewer requests in flight than its share; or, if it held less than its
// share on average lately, fewer than its share plus two of its standard
// deviations plus one, as a Poisson stream of that mean bursts. So the
// momentary bursts of a tenant within its plan are its own, and a tenant
// that holds more than its share is the borrower. A tenant new to the
// gate has no average yet: its burst is borrowed.
func (g *Gate) fair(t *tenant) bool {
	s, in := g.share(t), float64(t.inflight)
	l := &t.rec.load
	return in < s || l.windows > 0 && l.avg < s && in < s+2*math.Sqrt(s)+1
}

// admit counts a request of t admitted at now.
func (g *Gate) admit(t *tenant, fair bool, now time.Time) {
	t.rec.load.change(t.inflight, t.inflight+1, now)
	t.inflight++
	g.inflight++
	if fair {
		g.demand.arrive(now)
	}
}

// leave counts a request of t ended at now.
func (g *Gate) leave(t *tenant, now time.Time) {
	t.rec.load.change(t.inflight, t.inflight-1, now)
	t.inflight--
	g.inflight--
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
	if !fair && float64(g.inflight) >= lim-g.demand.headroom(float64(g.limit()), g.c.Margin) {
		// A borrower leaves the whole headroom free, whatever the fair
		// requests hold at the moment: theirs come and go in a moment,
		// a borrower's may hold for long (measured: counting the fair
		// requests in flight against the headroom lets borrowers fill
		// it, and the steady tenants' p99 in BenchmarkFairConcurrency
		// grows by a fifth).
		return false
	}
	return float64(g.inflight) < lim
}

// dispatch starts waiting requests while there is room: first those of
// tenants within their shares, then the borrowers', each in next's order.
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
		g.unwait()
		g.admit(t, w.fair, time.Now())
		close(w.ready)
	}
}

// next takes a waiter that may start now: of the tenants with one (only
// those within their shares when under is set), the tenant with the
// fewest requests in flight for its weight, round robin between equals.
// This is weighted max-min order for the borrowers too: as room frees,
// their excess evens out in proportion to their weights.
func (g *Gate) next(under bool) (*waiter, *tenant) {
	bi, bj, bfair, least := -1, -1, false, math.Inf(1)
	for i, t := range g.rr {
		// Whether t is within its share is decided now: shares change
		// as tenants come and go.
		fair := g.fair(t)
		if under && !fair {
			continue
		}
		j := slices.IndexFunc(t.queue, func(w *waiter) bool { return g.room(w.critical, fair) })
		if j < 0 {
			continue
		}
		if n := float64(t.inflight) / t.weight; n < least {
			bi, bj, bfair, least = i, j, fair, n
		}
	}
	if bi < 0 {
		return nil, nil
	}
	t := g.rr[bi]
	w := t.queue[bj]
	w.fair = bfair
	t.queue = slices.Delete(t.queue, bj, bj+1)
	// t goes to the back of the round.
	g.rr = append(slices.Delete(g.rr, bi, bi+1), t)
	if len(t.queue) == 0 {
		g.rr = g.rr[:len(g.rr)-1]
		t.queued = false
	}
	return w, t
}

// unqueue removes w, which gave up, from t's queue.
func (g *Gate) unqueue(t *tenant, w *waiter) {
	for j, x := range t.queue {
		if x == w {
			t.queue = append(t.queue[:j], t.queue[j+1:]...)
			g.unwait()
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

// retryAfter estimates when room frees: the typical latency (the median
// of the parties' averages, so that no one party's slow requests lengthen
// everyone's Retry-After), at least 1 ms.
func (g *Gate) retryAfter() time.Duration {
	return max(time.Millisecond, time.Duration(g.lim.typical(time.Now())))
}

// observe learns from tk's answer at now: rtt is its latency (negative
// when not known), held the time it has held its room.
func (g *Gate) observe(tk *Ticket, rtt, held time.Duration, failed bool, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lim.observe(tk.t.name, tk.kind, float64(rtt), g.inflight, failed, now)
	if tk.fair {
		g.demand.took(held)
	}
	g.dispatch() // the limit may have grown
}

func (g *Gate) release(tk *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := tk.t
	g.leave(t, time.Now())
	g.forget(t)
	g.dispatch()
}
