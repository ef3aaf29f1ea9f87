package quota

import (
	"slices"
	"sync"
	"time"
)

// maxTallied is the most tenants a tally remembers per provider. Past it
// the tally forgets tenants down to nine tenths of it (so that a full
// tally costs one sweep per maxTallied/10 new tenants, not one per
// tenant): first those neither seen nor asked to wait within the window,
// then those not asked to wait within it, then any. A forgotten tenant is
// counted again from its next call.
const maxTallied = 10_000

// tally is what one instance remembers of one provider's tenants, to tell
// a provider whose account-wide budget is out (it asks most tenants to
// wait) from one that limits per tenant, per end user or per destination
// (it asks one tenant to wait). Its times are the process's clock, passed
// in; it is safe for concurrent use.
type tally struct {
	mu sync.Mutex
	m  map[string]*mark // by policy.TenantTag: bounded in bytes
}

// mark is what a tally remembers of one tenant.
type mark struct {
	called time.Time // its last call to the provider
	paused time.Time // when the provider last asked it to wait; zero: never
	until  time.Time // when that pause ends
}

func newTally() *tally { return &tally{m: map[string]*mark{}} }

// get returns tag's mark, made if need be. Called with mu held.
func (t *tally) get(tag string, now time.Time, window time.Duration) *mark {
	e := t.m[tag]
	if e == nil {
		if len(t.m) >= maxTallied {
			t.evict(now, window)
		}
		e = &mark{}
		t.m[tag] = e
	}
	return e
}

// evict forgets marks down to nine tenths of maxTallied: those that count
// for nothing within window, then those without a vote within it, then
// any. Called with mu held.
func (t *tally) evict(now time.Time, window time.Duration) {
	low := maxTallied - maxTallied/10
	for pass := range 3 {
		for tag, e := range t.m {
			if len(t.m) <= low {
				return
			}
			votes := e.votes(now, window)
			if pass == 2 || !votes && (pass == 1 || now.Sub(e.called) > window) {
				delete(t.m, tag)
			}
		}
	}
}

// votes reports whether the provider asked the tenant to wait within
// window of now.
func (e *mark) votes(now time.Time, window time.Duration) bool {
	return !e.paused.IsZero() && now.Sub(e.paused) <= window
}

// call records that tag called the provider at now.
func (t *tally) call(tag string, now time.Time, window time.Duration) {
	t.mu.Lock()
	t.get(tag, now, window).called = now
	t.mu.Unlock()
}

// pause records that the provider asked tag, calling at now, to wait until
// until, and reports whether that makes a quorum: of the tenants that
// called within window, at least half, and at least min, were asked to
// wait within it. If so, until is the latest time that a quorum of them
// were asked to wait for (the need-th latest end of their pauses), which
// no one tenant's answer can move: the provider is to be paused until
// then.
func (t *tally) pause(tag string, now, until time.Time, window time.Duration, min int) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.get(tag, now, window)
	e.called, e.paused = now, now
	e.until = until
	active := 0
	var ends []time.Time
	for _, e := range t.m {
		if now.Sub(e.called) <= window {
			active++
		}
		if e.votes(now, window) {
			ends = append(ends, e.until)
		}
	}
	need := max(min, (active+1)/2)
	if len(ends) < need {
		return time.Time{}, false
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	return ends[need-1], true
}

// size returns how many tenants t remembers.
func (t *tally) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
