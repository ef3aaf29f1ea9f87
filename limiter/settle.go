package limiter

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Settlement is what settling an admitted request of a measured-cost
// class needs (see [policy.MeasuredCost]): the layers it was charged on,
// what it was charged, when, and the id that makes settling it happen
// once. Decide sets it on such a decision ([Decision].Settlement); an
// HTTP gateway carries it in a signed handle.
type Settlement struct {
	// ID names the settlement in the store: random, made by fairgate for
	// the decision (never chosen by a client), at most
	// [store.MaxSettleID] bytes. Every Settle with this ID applies once.
	ID string
	// Cost is what the request was charged at admission: its estimate.
	Cost int64
	// TakenAt is the store's clock when it charged the request (its
	// [store.Result].Now): the window algorithms refund only a take of
	// the window in force.
	TakenAt time.Time
	// Layers are the layers the request was charged on, shadow ones
	// included (a shadow limit counts what it would enforce).
	Layers []SettleLayer

	// mu serializes [Limiter.Settle]'s calls with this settlement;
	// applied is set when one of them applied it.
	mu      sync.Mutex
	applied bool
}

// SettleLayer is one layer a settlement moves: its key and the limit it
// was taken under.
type SettleLayer struct {
	// Policy names the layer, as [policy.Layer].Policy.
	Policy string
	// Key is the store key.
	Key string
	// Limit is the limit the key was taken under.
	Limit algo.Limit
}

// SettleOutcome is the answer to a settle.
type SettleOutcome struct {
	// Delta is the true cost minus the charged cost: the units asked to
	// move on each layer (negative: refunded).
	Delta int64
	// Repeated reports that the settlement had been applied already (an
	// earlier call with the same ID, or this call's own first store
	// call, which timed out after it ran: the retry found it applied):
	// nothing moved now.
	Repeated bool
	// Layers holds one answer per layer of the settlement, in its order.
	Layers []SettledLayer
}

// SettledLayer is one layer's answer to a settle.
type SettledLayer struct {
	// Policy names the layer.
	Policy string
	store.Settled
}

// ErrSettleCost means a true cost given to settle is negative or over
// [algo.MaxCount].
var ErrSettleCost = errors.New("limiter: bad true cost")

// Settle settles d, an admitted decision of a measured-cost class, at
// trueCost: each layer d was charged on is charged trueCost − the
// estimate more (refunded, when negative), through the guard's
// [guard.Guard.SettleOnce] (bounded retries with the same id, the
// fairgate_settlement* metrics). For work that is not HTTP; the HTTP
// fronts settle the same way.
//
// It applies once per decision: d carries its settlement, and calls with
// it wait for each other, so a call after one that applied it applies
// nothing and reports Repeated, with the layers' remaining as they stand;
// a call after one that failed (an error) tries again, its store calls
// under the settlement's ID, so that a call that timed out after it ran
// applies once (and answers Repeated: its retry found it applied). On the memory store
// the ID is not recorded ([guard.Guard.SettleOnce]): these settlements
// never fill its bounded id table. A charge puts a layer in debt
// at most one burst ([algo.Limit.Settle]); a refund gives back at most
// what makes it full.
//
// What to settle with when the true cost is not known:
//   - the upstream failed (an error status, or no answer): settle at 0
//     (the HTTP middleware settles at 1: a request is never free there),
//     refunding the estimate. The tenant got nothing, providers do not
//     bill failed requests, and a refund never lifts a layer above full,
//     so failing requests on purpose gains nothing but their own charge.
//     An answer that carries its measured cost with the error is settled
//     at that cost.
//   - the client went away before the answer said its cost, or the
//     answer never said it: settle at the class's cap
//     (Decision.Resolution.Measured.Estimate.Cap). The upstream did the
//     work, but how much is not known, and the estimate is the client's
//     own number: settled at it, a client could declare 1 and hang up
//     before a stream's usage event (the HTTP middleware's rules,
//     docs/cost.md).
//
// A decision with nothing to settle (d.Settlement nil: not admitted, not
// of a measured-cost class, or decided degraded on the instance's
// fallback, whose approximate limits have nothing in the store to
// settle) gives the zero outcome and no error. The error wraps
// [ErrSettleCost] for a bad trueCost, else it is the store's (see
// [store.Settler]): the settlement is then not applied.
func (l *Limiter) Settle(ctx context.Context, d *Decision, trueCost int64) (SettleOutcome, error) {
	s := d.Settlement
	if s == nil {
		return SettleOutcome{}, nil
	}
	if trueCost < 0 || trueCost > algo.MaxCount {
		return SettleOutcome{}, fmt.Errorf("%w: %d is outside 0..%d", ErrSettleCost, trueCost, algo.MaxCount)
	}
	// The decision is held here, so this process alone can settle it:
	// once, by its own record (calls with it wait for each other), and
	// on an in-process store without an id record (guard.SettleOnce),
	// which no number of in-process settlements can then fill. A call
	// after one that applied it moves nothing (a settlement of the
	// estimate: zero on every layer) and reads the layers as they stand.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied {
		out, err := l.settle(ctx, s, s.Cost, false)
		if err != nil {
			return SettleOutcome{}, err
		}
		out.Delta, out.Repeated = trueCost-s.Cost, true
		for i := range out.Layers {
			out.Layers[i].Applied, out.Layers[i].Repeated = 0, true
		}
		return out, nil
	}
	out, err := l.settle(ctx, s, trueCost, false)
	if err != nil {
		return out, err // not applied: a retry may apply it
	}
	s.applied = true
	return out, nil
}

// SettleTake is Settle for a settlement carried apart from its decision,
// which a client may present again (the HTTP API's handle): the store
// records its ID for [store.SettleIDLifetime], and a settlement presented
// again within it applies nothing and reports Repeated, with the layers'
// remaining as they stand.
func (l *Limiter) SettleTake(ctx context.Context, s *Settlement, trueCost int64) (SettleOutcome, error) {
	if trueCost < 0 || trueCost > algo.MaxCount {
		return SettleOutcome{}, fmt.Errorf("%w: %d is outside 0..%d", ErrSettleCost, trueCost, algo.MaxCount)
	}
	return l.settle(ctx, s, trueCost, true)
}

// settle applies s at trueCost through the guard: with the id recorded
// (Guard.Settle) when a client may replay it, else Guard.SettleOnce.
func (l *Limiter) settle(ctx context.Context, s *Settlement, trueCost int64, replayable bool) (SettleOutcome, error) {
	out := SettleOutcome{Delta: trueCost - s.Cost}
	adjs := make([]store.Adjustment, len(s.Layers))
	for i, ly := range s.Layers {
		adjs[i] = store.Adjustment{Key: ly.Key, Limit: ly.Limit, Delta: out.Delta, TakenAt: s.TakenAt}
	}
	var res store.SettleResult
	settle := l.guard.SettleOnce
	if replayable {
		settle = l.guard.Settle
	}
	if err := settle(ctx, s.ID, adjs, &res); err != nil {
		return SettleOutcome{}, err
	}
	out.Layers = make([]SettledLayer, len(res.Settled))
	out.Repeated = len(res.Settled) > 0
	for i, x := range res.Settled {
		out.Layers[i] = SettledLayer{Policy: s.Layers[i].Policy, Settled: x}
		out.Repeated = out.Repeated && x.Repeated
	}
	return out, nil
}

// settlement is the settlement of c's admitted measured-cost request:
// charged on c.charged (nil: every layer) at the store's c.takenAt.
func (c *call) settlement() *Settlement {
	s := &Settlement{ID: newSettleID(c.res.Tenant), Cost: c.res.Cost, TakenAt: c.takenAt}
	add := func(i int) {
		ly := &c.res.Layers[i]
		s.Layers = append(s.Layers, SettleLayer{Policy: ly.Policy, Key: ly.Key, Limit: ly.Limit})
	}
	if c.charged == nil {
		for i := range c.res.Layers {
			add(i)
		}
	} else {
		for _, i := range c.charged {
			add(i)
		}
	}
	return s
}

// newSettleID returns a random settlement ID of tenant's: its scope, 8
// bytes of base64url naming the tenant (48 bits of its SHA-256), then
// '.' and 128 random bits in 22 bytes of base64url. The scope keeps one
// tenant's ids together in the memory store's id table, which bounds
// them there to half a table ([memstore.Config].MaxSettleIDs).
func newSettleID(tenant string) string {
	var b [6 + 16]byte
	sum := sha256.Sum256([]byte(tenant))
	copy(b[:6], sum[:6])
	_, _ = rand.Read(b[6:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:6]) + "." + base64.RawURLEncoding.EncodeToString(b[6:])
}
