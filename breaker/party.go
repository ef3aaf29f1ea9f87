package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Party is who a call is made for: a tenant, or an anonymous client (by
// its address; IPv6 per /64). Its failures open its own breaker, which
// refuses its own calls only; the shared breaker, which refuses everyone,
// opens only when a quorum of tenants fails (see the package doc).
type Party struct {
	// ID tells the party apart: the tenant's ID, or the client address.
	ID string
	// Anonymous marks a party without a credential. Anonymous parties
	// have breakers of their own but no vote in the shared breaker's
	// quorum: spreading calls over addresses gains a client nothing.
	Anonymous bool
}

type partyKey struct{}

// WithParty returns ctx saying its calls are made for p. A call with no
// party is fairgate's own (or the operator's code): its failures count
// against the shared breaker as they come.
func WithParty(ctx context.Context, p Party) context.Context {
	return context.WithValue(ctx, partyKey{}, p)
}

// PartyFrom returns the party of ctx, if any.
func PartyFrom(ctx context.Context) (Party, bool) {
	p, ok := ctx.Value(partyKey{}).(Party)
	return p, ok && p.ID != ""
}

type uncountedKey struct{}

// Uncounted returns ctx saying the outcome of its calls says nothing of
// the dependency's health (a CORS preflight, which an upstream may answer
// 501): they are refused while a breaker is open, and counted neither as
// a success nor as a failure.
func Uncounted(ctx context.Context) context.Context {
	return context.WithValue(ctx, uncountedKey{}, true)
}

func uncounted(ctx context.Context) bool { v, _ := ctx.Value(uncountedKey{}).(bool); return v }

// Bounds of the parties remembered per dependency. Past them the entries
// not seen within the window go first, then any entry that is not open
// (an evicted party starts again with a closed breaker of its own, which
// can only help it, never another).
const (
	maxTenants   = 10_000
	maxAnonymous = 4_096
)

// party is what a dependency remembers of one party.
type party struct {
	seen    time.Time
	tripped atomic.Int64 // when its own breaker last opened, Unix ns; 0: never
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// trippedWithin reports whether its own breaker opened within window of
// now.
func (p *party) trippedWithin(now time.Time, window time.Duration) bool {
	t := p.tripped.Load()
	return t != 0 && now.Sub(time.Unix(0, t)) <= window
}

// open reports whether its own breaker refuses calls now.
func (p *party) open() bool { return p.cb != nil && p.cb.State() == gobreaker.StateOpen }

// parties are a dependency's parties, tenants and anonymous apart.
type parties struct {
	mu        sync.Mutex
	tenants   map[string]*party
	anonymous map[string]*party
}

func (ps *parties) table(anon bool) (map[string]*party, int) {
	if anon {
		return ps.anonymous, maxAnonymous
	}
	return ps.tenants, maxTenants
}

// get returns p's entry, made and marked seen at now. Called with mu held.
func (ps *parties) get(p Party, now time.Time, window time.Duration) *party {
	m, limit := ps.table(p.Anonymous)
	e := m[p.ID]
	if e == nil {
		if len(m) >= limit {
			evict(m, now, window)
		}
		e = &party{}
		m[p.ID] = e
	}
	e.seen = now
	return e
}

// evict removes the entries not seen within window, or else one entry
// whose own breaker is not open (map order: any).
func evict(m map[string]*party, now time.Time, window time.Duration) {
	n := len(m)
	for id, e := range m {
		if now.Sub(e.seen) > window && !e.open() {
			delete(m, id)
		}
	}
	if len(m) < n {
		return
	}
	for id, e := range m {
		if !e.open() {
			delete(m, id)
			return
		}
	}
	for id := range m { // every one open: the oldest gains nothing by it
		delete(m, id)
		return
	}
}

// vote counts, in one table, the parties seen within window and those
// whose own breaker opened within it.
func vote(m map[string]*party, now time.Time, window time.Duration) (active, tripped int) {
	for _, e := range m {
		if now.Sub(e.seen) <= window {
			active++
		}
		if e.trippedWithin(now, window) {
			tripped++
		}
	}
	return active, tripped
}

// quorum reports whether the tenants' own breakers say the dependency
// itself is failing: of the tenants that called it within window, at
// least half, and at least min, tripped within window. Anonymous clients
// do not vote (see dep.judge).
func (ps *parties) quorum(now time.Time, window time.Duration, min int) bool {
	active, tripped := vote(ps.tenants, now, window)
	return tripped >= need(active, min)
}

// need is how many of active make a quorum: half, rounded up, and at
// least min.
func need(active, min int) int { return max(min, (active+1)/2) }
