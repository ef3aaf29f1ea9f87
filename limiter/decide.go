package limiter

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// Reason says why a decision is what it is.
type Reason string

// The reasons.
const (
	// ReasonAllowed: every enforced layer admitted.
	ReasonAllowed Reason = "allowed"
	// ReasonLimited: an enforced layer rejected.
	ReasonLimited Reason = "limited"
	// ReasonShadowLimited: admitted, but a shadow layer would have rejected.
	ReasonShadowLimited Reason = "shadow_limited"
	// ReasonDegradedOpen: the store failed and the fail mode is open; the
	// in-process fallback limiter decided.
	ReasonDegradedOpen Reason = "degraded_open"
	// ReasonUnavailable: the store failed and the fail mode is closed.
	ReasonUnavailable Reason = "unavailable_closed"
	// ReasonFree: the request costs nothing and was not checked.
	ReasonFree Reason = "free"
)

// LayerDecision is one layer's decision.
type LayerDecision struct {
	policy.Layer
	// Allowed reports whether the layer admitted (or, when another layer
	// rejected and nothing was charged, would have).
	Allowed bool
	// Remaining is the layer's capacity left.
	Remaining int64
	// RetryAfter is how long until the layer admits the cost; 0 if allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the layer is full again.
	ResetAfter time.Duration
}

func (ld *LayerDecision) set(d algo.Decision) {
	ld.Allowed, ld.Remaining, ld.RetryAfter, ld.ResetAfter = d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter
}

// Decision is the answer for one request. It is a value, never an error.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Reason says why.
	Reason Reason
	// Policy is the policy of the layer closest to exhaustion: the one that
	// rejected, or the one with the least remaining.
	Policy string
	// RetryAfter is zero when allowed; otherwise how long to wait. When the
	// store is unavailable and the mode is closed, a fixed 5 s.
	RetryAfter time.Duration
	// Tightest indexes Layers: the layer Policy names, -1 when none.
	Tightest int
	// Layers holds one decision per layer, narrowest first.
	Layers []LayerDecision
	// Resolution is what the request resolved to.
	Resolution policy.Resolution
	// Now is the time the decision was made at: the one clock reading of
	// the decision (plus any hold), for headers and logs.
	Now time.Time
	// Concurrency holds one decision per concurrency layer
	// (Resolution.Slots): how many requests it lets in flight and how many
	// more it takes now. Empty without a concurrency limit, and when a
	// rate limit decided first.
	Concurrency []SlotDecision
	// Slots are the concurrency slots an allowed request holds: give them
	// back with Slots.Release when the request ends. Nil when none are
	// held.
	Slots *Slots
	// Settlement is what settling an admitted request of a measured-cost
	// class needs: settle it with [Limiter.Settle] when its true cost is
	// known. Nil when there is nothing to settle: not admitted, a fixed
	// cost, or decided degraded (on the instance's fallback).
	Settlement *Settlement
}

// PolicyName is the name the decision is counted and answered under: its
// Policy, or, when no layer was decided (a free route, a store outage
// under fail closed, or under fail open without a fallback), the route
// class or anonymous route whose fail mode decided (Resolution.Class).
func (d *Decision) PolicyName() string {
	if d.Policy != "" {
		return d.Policy
	}
	return d.Resolution.Class
}

// UnavailableRetryAfter is the Retry-After of a fail-closed decision.
const UnavailableRetryAfter = guard.UnavailableRetryAfter

// maxHeld bounds the requests an instance holds at once (see
// [policy.Class].SlowDown); past it, rejections are answered at once.
const maxHeld = 4096

// hold waits d, unless maxHeld requests are held already or ctx ends
// first, and reports whether it waited.
func (l *Limiter) hold(ctx context.Context, d time.Duration) bool {
	defer l.held.Add(-1)
	if l.held.Add(1) > maxHeld {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		l.m.slowed.Inc()
		return true
	case <-ctx.Done():
		return false
	}
}

// count records d in the decisions metric and samples a log line of its
// rejection.
func (l *Limiter) count(c *call, d *Decision) {
	switch {
	case c.slotsSkipped && d.Reason == ReasonAllowed:
		d.Reason = ReasonDegradedOpen
	case c.shadowSlot && d.Reason == ReasonAllowed:
		d.Reason = ReasonShadowLimited
	}
	if d.Reason == ReasonLimited && l.logged.allow(c.now.Unix()) {
		l.log.Info("limited", slog.String("tenant", d.Resolution.Tenant), slog.String("policy", d.Policy), slog.Int64("retry_after_ms", algo.CeilMillis(d.RetryAfter)))
	}
	plan := d.Resolution.Plan
	if d.Resolution.Anonymous {
		plan = "anonymous"
	}
	l.m.decisions.WithLabelValues(d.PolicyName(), plan, string(d.Reason)).Inc()
	if d.Reason == ReasonLimited && l.limited != nil {
		l.limited(d.Resolution.Tenant)
	}
}

// retryEnforced handles a batch rejected at least in part by shadow layers:
// if an enforced layer rejected too, the answer stands; otherwise the batch
// is decided again without the rejecting shadow layers, so that shadow
// limits never block (and, on a second shadow rejection, without any).
func (l *Limiter) retryEnforced(ctx context.Context, c *call, d *Decision, sr *store.Result) error {
	all := layerDecisions(c.res.Layers, sr.Decisions)
	for _, ld := range all {
		if !ld.Allowed && !ld.Shadow {
			d.Layers = all
			return nil
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		var idx []int
		var sub []store.Check
		for i, ld := range all {
			keep := !ld.Shadow || (attempt == 0 && ld.Allowed)
			if keep {
				idx = append(idx, i)
				sub = append(sub, c.checks[i])
			}
		}
		if len(sub) == 0 {
			d.Layers = all
			return nil
		}
		var r2 store.Result
		if err := l.guard.Call(ctx, c.now, sub, &r2); err != nil {
			return err
		}
		if r2.Allowed || attempt == 1 || !anyShadowRejectsAt(all, idx, r2.Decisions) {
			if r2.Allowed {
				c.charged, c.takenAt = idx, r2.Now
			}
			for j, i := range idx {
				all[i].set(r2.Decisions[j])
			}
			d.Layers = all
			return nil
		}
	}
	d.Layers = all
	return nil
}

func anyShadowRejects(layers []policy.Layer, ds []algo.Decision) bool {
	for i, x := range ds {
		if !x.Allowed && layers[i].Shadow {
			return true
		}
	}
	return false
}

func anyShadowRejectsAt(all []LayerDecision, idx []int, ds []algo.Decision) bool {
	for j, x := range ds {
		if !x.Allowed && all[idx[j]].Shadow {
			return true
		}
	}
	return false
}

func layerDecisions(layers []policy.Layer, ds []algo.Decision) []LayerDecision {
	out := make([]LayerDecision, len(layers))
	for i := range layers {
		out[i] = LayerDecision{Layer: layers[i]}
		if i < len(ds) {
			out[i].set(ds[i])
		}
	}
	return out
}

// tightest is store.Result.Tightest over layer decisions, enforced layers
// first: the rejecting enforced layer with the longest retry-after, else
// the layer with the least remaining relative to its burst.
func tightest(ls []LayerDecision) int {
	best := -1
	for i, x := range ls {
		if best < 0 {
			best = i
			continue
		}
		b := ls[best]
		xr, br := !x.Allowed && !x.Shadow, !b.Allowed && !b.Shadow
		switch {
		case xr && (!br || x.RetryAfter > b.RetryAfter):
			best = i
		case !xr && !br && x.Remaining*b.Limit.Capacity() < b.Remaining*x.Limit.Capacity():
			best = i
		}
	}
	return best
}

// Decide decides req now. The error is for requests that cannot be
// decided as asked (ErrNoTenant, ErrUnknownClass, ErrBadCost,
// ErrBadTenant, ErrNoClientIP); store failures are decided by the fail
// mode, never returned.
func (l *Limiter) Decide(ctx context.Context, req policy.Request) (Decision, error) {
	return l.DecideAt(ctx, l.now(), req)
}

// DecideAt is Decide at now: the time that picks calendar windows,
// decides whether overrides have expired and ages near-cache answers. The
// store decides by its own clock (Redis TIME; the memory store's).
func (l *Limiter) DecideAt(ctx context.Context, now time.Time, req policy.Request) (Decision, error) {
	return l.decideAt(ctx, now, l.Snapshot(), req)
}

// DecideIn is Decide against snap, a [Policies.Snapshot] the caller read
// together with what it verified req's identity by, so that a config
// swap in between cannot pair one file's policy with another's
// credentials (a plan renamed in the new file would fall to the default).
func (l *Limiter) DecideIn(ctx context.Context, snap *policy.Snapshot, req policy.Request) (Decision, error) {
	return l.decideAt(ctx, l.now(), snap, req)
}

func (l *Limiter) decideAt(ctx context.Context, now time.Time, snap *policy.Snapshot, req policy.Request) (Decision, error) {
	res, err := snap.Resolve(req, now)
	if err != nil {
		return Decision{Tightest: -1, Resolution: res, Now: now}, err
	}
	if res.Cost == 0 {
		d := Decision{Allowed: true, Reason: ReasonFree, Tightest: -1, Resolution: res, Now: now}
		l.count(&call{now: now}, &d)
		return d, nil
	}
	c := call{now: now, res: res, hold: req.Hold, near: l.near != nil && !res.NoNearCache}
	if len(res.Slots) > 0 && !req.NoSlots {
		return l.decideWithSlots(ctx, &c)
	}
	return l.decide(ctx, &c)
}

// call is one decision on its way through the pipeline, as Decide built
// it.
type call struct {
	// now is the decision's one clock reading; a hold moves it on.
	now time.Time
	// res holds the layers (names, shadow) and how to decide them: cost
	// (for the near cache), fail mode, unit grant, slow-down.
	res policy.Resolution
	// checks are the store checks, in the order of res.Layers; nil until
	// needed.
	checks []store.Check
	// hold lets a near-cache rejection be held for res.SlowDown.
	hold bool
	// near lets the near cache answer and learn.
	near bool
	// storeTime is how long the store call took, when traced.
	storeTime time.Duration
	// slotsSkipped marks a decision whose concurrency slots the store
	// could not take, made without them by a fail-open policy: allowed,
	// it is degraded_open, not allowed.
	slotsSkipped bool
	// shadowSlot marks a decision a shadow concurrency layer would have
	// refused: allowed, it is shadow_limited.
	shadowSlot bool
	// charged indexes the layers of res an admitted batch charged, when
	// the shadow retry left some out; nil: every layer.
	charged []int
	// takenAt is the store's clock of the admitted batch.
	takenAt time.Time
}

// decide is the pipeline: near cache (and hold), unit grant, one store call
// through the guard (deadline, breaker), the shadow retry, then the
// guard's fail mode and fallback. The checks of c.res are built once the
// near cache and the unit grant have not answered.
func (l *Limiter) decide(ctx context.Context, c *call) (Decision, error) {
	if l.tracer == nil {
		return l.decideIn(ctx, c)
	}
	ctx, span := l.tracer.Start(ctx, "fairgate.decide")
	d, err := l.decideIn(ctx, c)
	l.endDecision(span, c, &d)
	return d, err
}

// decideIn is decide's pipeline; with tracing on it times the store call
// for the decision's span.
func (l *Limiter) decideIn(ctx context.Context, c *call) (Decision, error) {
	if ld, ok := l.nearAnswer(ctx, c); ok {
		return l.nearDecision(c, ld), nil
	}
	if c.res.Lease > 0 {
		if d, ok := l.granted(ctx, c.res, c.now); ok {
			d.Now = c.now
			l.count(c, &d)
			return d, nil
		}
	}
	// The checks and the store's answer live only for this call: a
	// pooled scratch holds them (nothing keeps them past the return;
	// decisions and the near cache copy what they keep).
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	c.checks = appendChecks(sc.checks[:0], c.res)
	sc.res = store.Result{Decisions: sc.decisions[:0]}
	sr := &sc.res
	d := Decision{Resolution: c.res, Tightest: -1, Now: c.now}
	var took time.Time
	if l.tracer != nil {
		took = time.Now()
	}
	err := l.guard.Call(ctx, c.now, c.checks, sr)
	if l.tracer != nil {
		c.storeTime = time.Since(took)
	}
	switch {
	case err == nil && !sr.Allowed && anyShadowRejects(c.res.Layers, sr.Decisions):
		err = l.retryEnforced(ctx, c, &d, sr)
	case err == nil:
		d.Layers = layerDecisions(c.res.Layers, sr.Decisions)
		c.takenAt = sr.Now
	}
	switch {
	case errors.Is(err, store.ErrInvalidCheck):
		return d, err
	case err != nil:
		l.failed(ctx, c, &d, sr)
	default:
		verdict(&d)
		if d.Allowed && c.res.Measured != nil {
			d.Settlement = c.settlement()
		}
	}
	l.learn(c, &d)
	l.count(c, &d)
	return d, nil
}

// nearAnswer looks c up in the near cache. A remembered rejection is held
// for the class's slow-down when c lets it be, then looked up once more at
// the time the hold ended: the request may pass if the hold reached its
// retry-after.
func (l *Limiter) nearAnswer(ctx context.Context, c *call) (LayerDecision, bool) {
	for c.near {
		ld, ok := l.nearLookup(c)
		if !ok {
			return LayerDecision{}, false
		}
		wait := min(ld.RetryAfter, c.res.SlowDown)
		if !c.hold || wait <= 0 || !l.hold(ctx, wait) {
			return ld, true
		}
		c.hold, c.now = false, c.now.Add(wait) // the hold is spent
	}
	return LayerDecision{}, false
}

// nearLookup returns the near cache's remembered rejection of one of c's
// enforced layers that still holds at c.now for c's cost.
func (l *Limiter) nearLookup(c *call) (LayerDecision, bool) {
	for _, ly := range c.res.Layers {
		if ly.Shadow {
			continue
		}
		if x, ok := l.near.Lookup(ly.Key, ly.Limit, c.res.Cost, c.now); ok {
			ld := LayerDecision{Layer: ly}
			ld.set(x)
			return ld, true
		}
	}
	return LayerDecision{}, false
}

// nearDecision is the rejection the near cache answered for c, counted.
func (l *Limiter) nearDecision(c *call, ld LayerDecision) Decision {
	d := Decision{Reason: ReasonLimited, RetryAfter: ld.RetryAfter, Policy: ld.Policy, Resolution: c.res, Now: c.now, Layers: []LayerDecision{ld}}
	l.near.Hit()
	l.count(c, &d)
	return d
}

// verdict decides d from its layers: rejected if an enforced layer
// rejected, shadow-limited if only shadow layers did.
func verdict(d *Decision) {
	d.Allowed, d.Reason = true, ReasonAllowed
	for _, ld := range d.Layers {
		if !ld.Allowed && !ld.Shadow {
			d.Allowed, d.Reason = false, ReasonLimited
			d.RetryAfter = max(d.RetryAfter, ld.RetryAfter)
		}
	}
	if d.Allowed {
		for _, ld := range d.Layers {
			if !ld.Allowed && ld.Shadow {
				d.Reason = ReasonShadowLimited
			}
		}
	}
}

// failed decides d by c's fail mode because the store failed: the
// guard's answer is unavailable (fail closed), or degraded (fail open):
// decided on the fallback, at this instance's share of each limit, or
// admitted without limiting when there is no fallback or it failed too.
func (l *Limiter) failed(ctx context.Context, c *call, d *Decision, sr *store.Result) {
	o, sized := l.guard.Fail(ctx, c.checks, c.res.Fail, sr)
	if o == guard.Unavailable {
		d.Reason, d.RetryAfter = ReasonUnavailable, UnavailableRetryAfter
		return
	}
	d.Allowed, d.Reason = true, ReasonDegradedOpen
	if sized != nil {
		layers := slices.Clone(c.res.Layers)
		for i := range layers {
			layers[i].Limit = sized[i].Limit
		}
		d.Layers = layerDecisions(layers, sr.Decisions)
		d.Allowed, d.RetryAfter = sr.Allowed, sr.RetryAfter()
	}
}

// unavailable is the decision of a fail-closed request whose store
// failed.
func unavailable(res policy.Resolution, now time.Time) Decision {
	return Decision{Reason: ReasonUnavailable, RetryAfter: UnavailableRetryAfter, Tightest: -1, Resolution: res, Now: now}
}

// learn finishes d: its tightest layer, shadow rejections counted and
// logged, and its enforced rejections remembered in the near cache.
func (l *Limiter) learn(c *call, d *Decision) {
	d.Tightest = tightest(d.Layers)
	if d.Tightest >= 0 {
		d.Policy = d.Layers[d.Tightest].Policy
	}
	for _, ld := range d.Layers {
		if ld.Shadow && !ld.Allowed {
			l.m.shadow.WithLabelValues(ld.Policy).Inc()
			l.log.Info("shadow limit would reject", slog.String("tenant", c.res.Tenant), slog.String("policy", ld.Policy), slog.Int64("retry_after_ms", algo.CeilMillis(ld.RetryAfter)))
		}
	}
	if d.Reason == ReasonLimited && c.near {
		for _, ld := range d.Layers {
			if !ld.Allowed && !ld.Shadow {
				l.near.Put(ld.Key, ld.Limit, c.res.Cost, algo.Decision{Remaining: ld.Remaining, RetryAfter: ld.RetryAfter, ResetAfter: ld.ResetAfter}, c.now)
			}
		}
	}
}
