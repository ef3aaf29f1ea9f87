package limiter

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// Unit grants (opt-in per class, Class.Lease = n): for a hot tenant, an
// instance takes a grant of n units from every layer of the request's
// batch in one store call and spends them locally, one request at a time,
// so the store sees one call per n requests instead of one per request.
// The config key is `lease` (Class.Lease); everywhere else the thing is a
// "unit grant" (docs/glossary.md): a job lease (fairq) and a slot (its id
// and TTL) are other things.
//
// The price is exactness in time: units granted at t and spent later were
// charged at t. In any window the requests admitted can exceed the
// limit's bound by at most the units granted but not yet spent, summed
// over the instances (n per instance per key set). A grant not spent
// within grantTTL is dropped, its units left charged (under-admission,
// never over). Retry-After: a request that finds no grant and whose grant
// take is refused is decided as usual at its own cost, so its retry-after
// is exact for that cost.

// grantTTL is how long an instance keeps the unspent units of a grant.
const grantTTL = time.Second

// grantErrorBackoff is how long no grant is asked for after a take failed.
const grantErrorBackoff = 250 * time.Millisecond

// maxGrants bounds the key sets an instance keeps grants for.
const maxGrants = 10_000

// grant is the unit grant an instance keeps for one key set. Its mutex
// guards the fields only and is never held across a store call: the take
// of a new grant is marked in taking, and the requests that arrive meanwhile wait
// for it (or for their context) and then spend from it.
type grant struct {
	mu      sync.Mutex
	units   int64
	expires time.Time
	backoff time.Time       // no grant is tried before: the last was refused
	wait    time.Duration   // the last backoff, doubled on each refusal
	layers  []LayerDecision // the decision of the take that granted them
	taking  chan struct{}   // closed when the take in flight ends; nil when none
}

type grantTable struct {
	mu sync.Mutex
	m  map[string]*grant
}

func newGrantTable() *grantTable { return &grantTable{m: map[string]*grant{}} }

// get returns the grant entry of a batch's keys, making one.
func (t *grantTable) get(res policy.Resolution) *grant {
	var b strings.Builder
	for _, ly := range res.Layers {
		b.WriteString(ly.Key)
		b.WriteByte(0)
	}
	k := b.String()
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[k]; ok {
		return e
	}
	if len(t.m) >= maxGrants {
		for old := range t.m { // any one: map order is random
			delete(t.m, old)
			break
		}
	}
	e := &grant{}
	t.m[k] = e
	return e
}

// granted decides req from a grant when its class grants: spending a unit
// held, or taking a new grant. ok is false when the request must be
// decided as usual (no grant could be had).
func (l *Limiter) granted(ctx context.Context, res policy.Resolution, now time.Time) (Decision, bool) {
	n := res.Lease
	for _, ly := range res.Layers {
		if ly.Shadow {
			return Decision{}, false // shadow layers are decided per request
		}
		n = min(n, ly.Limit.Capacity())
	}
	if n < res.Cost {
		return Decision{}, false
	}
	e := l.grants.get(res)
	e.mu.Lock()
	for e.units < res.Cost || !now.Before(e.expires) {
		if now.Before(e.backoff) {
			e.mu.Unlock()
			return Decision{}, false // n units are not there yet: decide as usual
		}
		if ch := e.taking; ch != nil {
			// Another request is taking a grant: wait for it, then look
			// again (it may have brought units).
			e.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return Decision{}, false
			}
			e.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		e.taking = ch
		e.mu.Unlock()
		checks := checksOf(res)
		for i := range checks {
			checks[i].Cost = n
		}
		var sr store.Result
		err := l.guard.Call(ctx, now, checks, &sr)
		e.mu.Lock()
		e.taking = nil
		close(ch)
		if err != nil || !sr.Allowed {
			if err == nil {
				// Under a load over the limit, n units may never gather
				// while requests take them one by one: back off longer
				// after each refusal, up to grantTTL.
				e.wait = min(max(sr.RetryAfter(), 2*e.wait), grantTTL)
				e.backoff = now.Add(e.wait)
			} else {
				// The store failed: the requests that waited for this
				// take decide as usual, at once and each on its own,
				// rather than each trying a grant in turn and waiting a
				// store deadline apiece.
				e.backoff = now.Add(grantErrorBackoff)
			}
			e.mu.Unlock()
			return Decision{}, false
		}
		e.wait = 0
		e.units, e.expires = n, now.Add(grantTTL)
		e.layers = layerDecisions(res.Layers, sr.Decisions)
		l.m.grantTakes.Inc()
	}
	defer e.mu.Unlock()
	e.units -= res.Cost
	d := Decision{Resolution: res, Allowed: true, Reason: ReasonAllowed, Tightest: -1}
	d.Layers = make([]LayerDecision, len(e.layers))
	for i, ld := range e.layers {
		ld.Remaining += e.units // what this instance can still admit at once
		d.Layers[i] = ld
	}
	d.Tightest = tightest(d.Layers)
	if d.Tightest >= 0 {
		d.Policy = d.Layers[d.Tightest].Policy
	}
	return d, true
}
