package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
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
}

// UnavailableRetryAfter is the Retry-After of a fail-closed decision.
const UnavailableRetryAfter = 5 * time.Second

// Config configures a Limiter.
type Config struct {
	// Store decides the layers. Required.
	Store store.Store
	// Policy is the policy from the config file. Required; replace it with
	// [Limiter.SetPolicy].
	Policy policy.Policy
	// Control keeps run-time plan changes and overrides, shared by every
	// instance. Nil means an in-process one ([NewMemoryControl]).
	Control ControlStore
	// PollEvery is how often Run looks for changes in Control. Zero means
	// 1 s, so that a change reaches every instance within 2 s.
	PollEvery time.Duration
	// Timeout bounds each store call. Zero means 50 ms, or no deadline for
	// a store that decides in this process ([store.Local], the memory
	// store), for which a timer per call is pure cost; negative means no
	// deadline of the limiter's own.
	Timeout time.Duration
	// Fallback decides when Store fails and the fail mode is open: an
	// in-process store (memstore) that limits each instance on its own. Nil
	// means admit without limiting while the store is out.
	Fallback store.Store
	// Instances is how many fairgate instances share the store. While the
	// store is out each instance's fallback limits alone, at the policy's
	// limits × FallbackHeadroom / Instances. Zero means 1.
	Instances int
	// FallbackHeadroom scales the fallback's share of each limit. Zero
	// means 1.2.
	FallbackHeadroom float64
	// BreakerCooldown is how long the circuit breaker keeps the store
	// uncalled once it opens, before one probe. Zero means 2 s.
	BreakerCooldown time.Duration
	// Now is the clock for calendar windows and override expiry. Nil means
	// time.Now.
	Now func() time.Time
	// NoNearCache turns off the near cache of rejected keys for every
	// class (it is on by default; a class can turn it off alone). See
	// [Class.NoNearCache].
	NoNearCache bool
	// Limited, if not nil, is told the tenant of every request limited
	// ("" for an anonymous one), as it is decided: for a bounded
	// heavy-hitters count such as the dashboard's. It must be quick.
	Limited func(tenant string)
	// Logger receives shadow rejections, store errors and policy changes.
	// Nil means silent.
	Logger *slog.Logger
	// Registerer receives the limiter's metrics. Nil means none.
	Registerer prometheus.Registerer
}

// Limiter decides requests by policy. It is safe for concurrent use.
type Limiter struct {
	store    store.Store
	fallback store.Store
	control  ControlStore
	poll     time.Duration
	timeout  time.Duration
	now      func() time.Time
	log      *slog.Logger
	limited  func(tenant string)
	near     *nearCache   // nil: off
	held     atomic.Int64 // requests being held (see Class.SlowDown)
	leases   *leaseTable
	m        *metrics
	cb       *breakers
	share    float64 // the fallback's share of each limit
	logged   sampler

	mu      sync.Mutex // serializes recompiles
	base    policy.Policy
	overlay policy.Overlay
	snap    atomic.Pointer[policy.Snapshot]
	lastLog atomic.Int64
	// lastProto is the second a store protocol error was last logged.
	lastProto atomic.Int64
}

// New returns a limiter for c. It fails if c.Policy does not compile, with
// the [Problems].
func New(c Config) (*Limiter, error) {
	if c.Store == nil {
		return nil, errors.New("limiter: Config.Store is required")
	}
	l := &Limiter{store: c.Store, fallback: c.Fallback, control: c.Control, poll: c.PollEvery, timeout: c.Timeout, now: c.Now, log: c.Logger, limited: c.Limited}
	if l.control == nil {
		l.control = NewMemoryControl()
	}
	if !c.NoNearCache {
		l.near = newNearCache()
	}
	l.leases = newLeaseTable()
	if l.poll <= 0 {
		l.poll = time.Second
	}
	if lc, ok := c.Store.(store.Local); l.timeout == 0 && ok && lc.Local() {
		l.timeout = -1
	}
	if l.timeout == 0 {
		l.timeout = 50 * time.Millisecond
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if l.m, err = newMetrics(c.Registerer); err != nil {
		return nil, err
	}
	instances, headroom := max(1, c.Instances), c.FallbackHeadroom
	if headroom <= 0 {
		headroom = 1.2
	}
	l.share = min(1, headroom/float64(instances))
	cooldown := c.BreakerCooldown
	if cooldown <= 0 {
		cooldown = 2 * time.Second
	}
	l.cb = newBreakers(c.Store, cooldown, l.logChange)
	snap, err := policy.Compile(c.Policy)
	if err != nil {
		return nil, err
	}
	l.base = c.Policy
	l.snap.Store(snap)
	return l, nil
}

// Snapshot returns the policy in force.
func (l *Limiter) Snapshot() *policy.Snapshot { return l.snap.Load() }

// SetPolicy replaces the file's policy, keeping the run-time overlay. A
// policy that does not compile changes nothing and returns the [Problems].
func (l *Limiter) SetPolicy(p policy.Policy) error {
	if _, err := policy.Compile(p); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base = p
	l.rebuild()
	return nil
}

// rebuild compiles base with overlay and swaps it in. Overlay entries that
// no longer fit the base (a plan removed from the file, say) are left out
// and logged. The caller holds l.mu; l.base compiles on its own.
func (l *Limiter) rebuild() {
	snap, err := policy.CompileWith(l.base, l.overlay)
	if err != nil {
		l.log.Error("run-time overrides do not fit the policy; leaving out those that do not", slog.String("error", err.Error()))
		kept := policy.Overlay{Version: l.overlay.Version, Plans: map[string]policy.Plan{}, Tenants: map[string]policy.Tenant{}}
		for _, name := range slices.Sorted(maps.Keys(l.overlay.Plans)) {
			kept.Plans[name] = l.overlay.Plans[name]
			if _, err := policy.CompileWith(l.base, kept); err != nil {
				delete(kept.Plans, name)
				l.log.Error("left out run-time plan", slog.String("plan", name))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(l.overlay.Tenants)) {
			kept.Tenants[id] = l.overlay.Tenants[id]
			if _, err := policy.CompileWith(l.base, kept); err != nil {
				delete(kept.Tenants, id)
				l.log.Error("left out run-time override", slog.String("tenant", id))
			}
		}
		if snap, err = policy.CompileWith(l.base, kept); err != nil {
			snap, _ = policy.Compile(l.base)
		}
	}
	l.snap.Store(snap)
	if l.near != nil {
		l.near.clear() // limits may have changed: rejections may not hold
	}
}

// Overlay returns a copy of the run-time overlay in force; its maps are
// never nil.
func (l *Limiter) Overlay() policy.Overlay { _, ov := l.state(); return ov }

// Base returns the file's policy in force.
func (l *Limiter) Base() policy.Policy { p, _ := l.state(); return p }

// state returns the file's policy and a copy of the overlay, read together.
func (l *Limiter) state() (policy.Policy, policy.Overlay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ov := policy.Overlay{Version: l.overlay.Version, Plans: maps.Clone(l.overlay.Plans), Tenants: maps.Clone(l.overlay.Tenants)}
	if ov.Plans == nil {
		ov.Plans = map[string]policy.Plan{}
	}
	if ov.Tenants == nil {
		ov.Tenants = map[string]policy.Tenant{}
	}
	return l.base, ov
}

// Run follows the control store until ctx ends, applying every change
// within PollEvery. It returns nil when ctx ends.
func (l *Limiter) Run(ctx context.Context) error {
	t := time.NewTicker(l.poll)
	defer t.Stop()
	for {
		if err := l.Refresh(ctx); err != nil && ctx.Err() == nil {
			l.logRare("control store poll failed", err)
		}
		l.probe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// probeCheck is the peek Run sends through the breaker, so that an outage
// (and the recovery) is seen without traffic.
var probeCheck = []store.Check{{Key: "fg:probe", Limit: algo.Limit{Limit: 1, Period: time.Second}}}

func (l *Limiter) probe(ctx context.Context) {
	var res store.Result
	_ = l.take(ctx, probeCheck, &res)
	for _, c := range l.cb.toProbe() {
		_ = l.take(ctx, []store.Check{c}, &res)
	}
}

// StoreUp reports whether the store answers: every breaker is closed (on
// a Redis Cluster, one per slot; a lost master makes it false until its
// replica takes over).
func (l *Limiter) StoreUp() bool { return l.cb.allClosed() }

// Refresh loads the control store's overlay if it changed.
func (l *Limiter) Refresh(ctx context.Context) error {
	v, err := l.control.Version(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	same := v == l.overlay.Version
	l.mu.Unlock()
	if same {
		return nil
	}
	ov, err := l.control.Load(ctx)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ov.Version == l.overlay.Version {
		return nil
	}
	l.overlay = ov
	l.rebuild()
	l.log.Info("run-time policy changed", slog.Int64("version", ov.Version))
	return nil
}

// PutOverride writes tenant id's entry to the control store, for every
// instance, after checking that it compiles with the policy in force. An
// entry with Expires in the past is refused.
func (l *Limiter) PutOverride(ctx context.Context, id string, t policy.Tenant) error {
	if !t.Expires.IsZero() && !t.Expires.After(l.now()) {
		return fmt.Errorf("limiter: override for %q expires at %v, already past", id, t.Expires)
	}
	if err := l.check(func(ov *policy.Overlay) { ov.Tenants[id] = t }); err != nil {
		return err
	}
	if err := l.control.PutTenant(ctx, id, t); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	l.refreshAfterWrite(ctx)
	return nil
}

// ErrControlUnavailable means a run-time write did not reach the control
// store within its deadline: it was not applied (see package redisctl).
var ErrControlUnavailable = errors.New("limiter: the control store did not take the write, which was not applied")

// refreshAfterWrite loads the overlay after a write that the control
// store took. Failing that, the write stands and the poll (Run) brings it
// in; it is logged, not returned, since the write itself succeeded.
func (l *Limiter) refreshAfterWrite(ctx context.Context) {
	if err := l.Refresh(ctx); err != nil {
		l.log.Warn("run-time policy written but not yet loaded here; the next poll loads it", slog.String("error", err.Error()))
	}
}

// DeleteOverride removes tenant id's run-time entry.
func (l *Limiter) DeleteOverride(ctx context.Context, id string) error {
	if err := l.control.DeleteTenant(ctx, id); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	l.refreshAfterWrite(ctx)
	return nil
}

// PutPlan writes a plan to the control store, replacing the file's plan of
// that name for every instance, after checking that it compiles.
func (l *Limiter) PutPlan(ctx context.Context, p policy.Plan) error {
	if err := l.check(func(ov *policy.Overlay) { ov.Plans[p.Name] = p }); err != nil {
		return err
	}
	if err := l.control.PutPlan(ctx, p); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	l.refreshAfterWrite(ctx)
	return nil
}

// check compiles the policy in force with edit applied to a copy of the
// overlay.
func (l *Limiter) check(edit func(*policy.Overlay)) error {
	base, ov := l.state()
	edit(&ov)
	_, err := policy.CompileWith(base, ov)
	return err
}

// Decide decides req. The error is for requests that cannot be decided as
// asked (ErrNoTenant, ErrUnknownClass, ErrBadCost, ErrBadTenant); store
// failures are decided by the fail mode, never returned.
func (l *Limiter) Decide(ctx context.Context, req policy.Request) (Decision, error) {
	for { // at most twice: a held near-cache rejection is decided afresh
		now := l.now()
		res, err := l.snap.Load().Resolve(req, now)
		if err != nil {
			return Decision{Tightest: -1, Resolution: res}, err
		}
		d := Decision{Resolution: res, Tightest: -1}
		if res.Cost == 0 {
			d.Allowed, d.Reason = true, ReasonFree
			l.count(&d)
			return d, nil
		}
		if l.near != nil && !res.NoNearCache {
			if ld, ok := l.near.lookup(res.Layers, res.Cost, now); ok {
				if req.Hold && res.SlowDown > 0 && l.hold(ctx, min(ld.RetryAfter, res.SlowDown)) {
					// Decided afresh, once (the hold is spent), at a new
					// time: the time left is less now, and the request may
					// pass if the hold reached its retry-after.
					req.Hold = false
					continue
				}
				d.Layers = []LayerDecision{ld}
				d.Reason, d.RetryAfter, d.Tightest, d.Policy = ReasonLimited, ld.RetryAfter, 0, ld.Policy
				l.m.nearHits.Inc()
				l.count(&d)
				return d, nil
			}
		}
		if res.Lease > 0 {
			if ld, ok := l.leased(ctx, res, now); ok {
				l.count(&ld)
				return ld, nil
			}
		}
		checks := checksOf(res)
		var sr store.Result
		err = l.take(ctx, checks, &sr)
		if err == nil && !sr.Allowed && anyShadowRejects(res.Layers, sr.Decisions) {
			err = l.retryEnforced(ctx, &d, res, checks, &sr)
		} else if err == nil {
			d.Layers = layerDecisions(res.Layers, sr.Decisions)
		}
		switch {
		case err != nil && res.Fail == policy.FailClosed:
			d.Reason, d.RetryAfter = ReasonUnavailable, UnavailableRetryAfter
			d.Layers = nil
			l.m.failures.WithLabelValues("closed").Inc()
		case err != nil:
			var fr store.Result
			if fchecks, ok := l.decideLocally(ctx, checks, &fr); !ok {
				d.Allowed, d.Reason = true, ReasonDegradedOpen
			} else {
				layers := slices.Clone(res.Layers)
				for i := range layers {
					layers[i].Limit = fchecks[i].Limit
				}
				d.Layers = layerDecisions(layers, fr.Decisions)
				d.Allowed, d.Reason, d.RetryAfter = fr.Allowed, ReasonDegradedOpen, fr.RetryAfter()
			}
		default:
			d.Allowed = true
			d.Reason = ReasonAllowed
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
		d.Tightest = tightest(d.Layers)
		if d.Tightest >= 0 {
			d.Policy = d.Layers[d.Tightest].Policy
		}
		for _, ld := range d.Layers {
			if ld.Shadow && !ld.Allowed {
				l.m.shadow.WithLabelValues(ld.Policy).Inc()
				l.log.Info("shadow limit would reject", slog.String("tenant", res.Tenant), slog.String("policy", ld.Policy), slog.Int64("retry_after_ms", ceilMs(ld.RetryAfter)))
			}
		}
		if d.Reason == ReasonLimited && l.near != nil && !res.NoNearCache {
			for _, ld := range d.Layers {
				if !ld.Allowed && !ld.Shadow {
					l.near.put(ld, res.Cost, now)
				}
			}
		}
		l.count(&d)
		if !d.Allowed && d.Reason == ReasonLimited && l.logged.allow(now.Unix()) { // the decision's own clock reading
			l.log.Info("limited", slog.String("tenant", res.Tenant), slog.String("policy", d.Policy), slog.Int64("retry_after_ms", ceilMs(d.RetryAfter)))
		}
		return d, nil
	}
}

// MaxHeld bounds the requests an instance holds at once (see
// [Class.SlowDown]); past it, rejections are answered at once.
const MaxHeld = 4096

// hold waits d, unless MaxHeld requests are held already or ctx ends
// first, and reports whether it waited.
func (l *Limiter) hold(ctx context.Context, d time.Duration) bool {
	defer l.held.Add(-1)
	if l.held.Add(1) > MaxHeld {
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

// count records d in the decisions metric.
func (l *Limiter) count(d *Decision) {
	plan := d.Resolution.Plan
	if d.Resolution.Anonymous {
		plan = "anonymous"
	}
	policy := d.Policy
	if policy == "" {
		policy = d.Resolution.Class
	}
	l.m.decisions.WithLabelValues(policy, plan, string(d.Reason)).Inc()
	if d.Reason == ReasonLimited && l.limited != nil {
		l.limited(d.Resolution.Tenant)
	}
}

// fallbackChecks are checks sized for the fallback: each limit and burst
// times the instance's share (at least 1, and at least the cost), so that
// the instances together admit about the policy's limits while the store
// is out.
func (l *Limiter) fallbackChecks(checks []store.Check) []store.Check {
	out := slices.Clone(checks)
	if l.share >= 1 {
		return out
	}
	for i := range out {
		lim := &out[i].Limit
		lim.Limit = max(1, int64(math.Ceil(float64(lim.Limit)*l.share)))
		if lim.Burst != 0 {
			lim.Burst = max(out[i].Cost, int64(math.Ceil(float64(lim.Burst)*l.share)))
		}
		if lim.Algorithm.Windowed() {
			lim.Burst = 0
			lim.Limit = max(lim.Limit, out[i].Cost)
		} else if lim.Burst == 0 && lim.Limit < out[i].Cost {
			lim.Burst = out[i].Cost
		}
		if lim.Period/time.Microsecond < time.Duration(lim.Limit) || lim.Validate() != nil {
			out[i].Limit = checks[i].Limit // cannot shrink it validly: keep the policy's
		}
	}
	return out
}

// decideLocally decides checks on the fallback, sized for this instance,
// because the store failed and the fail mode is open. It returns the sized
// checks, and false when there is no fallback or it failed too (the caller
// then admits unlimited).
func (l *Limiter) decideLocally(ctx context.Context, checks []store.Check, res *store.Result) ([]store.Check, bool) {
	l.m.failures.WithLabelValues("open").Inc()
	if l.fallback == nil {
		return nil, false
	}
	sized := l.fallbackChecks(checks)
	return sized, l.fallback.Take(ctx, sized, res) == nil
}

// TakeChecks decides checks given directly (the /v1/take API, the Envoy
// service) through the same path as Decide: near cache, deadline, breaker
// and fail mode. The error is for invalid checks only.
//
// The near cache answers single-check batches only: a batch of several
// that one remembered check rejects would owe its other checks a decision
// the instance does not have.
func (l *Limiter) TakeChecks(ctx context.Context, checks []store.Check, fail policy.FailMode, res *store.Result) (Reason, error) {
	if err := store.Validate(checks); err != nil {
		return "", err
	}
	near := l.near != nil && len(checks) == 1
	var now time.Time
	if near {
		c := &checks[0]
		now = l.now()
		if ld, ok := l.near.lookup([]policy.Layer{{Key: c.Key, Limit: c.Limit}}, c.Cost, now); ok {
			res.Allowed, res.Now = false, now
			res.Decisions = append(res.Decisions[:0], algo.Decision{Limit: c.Limit.Limit, Remaining: ld.Remaining, RetryAfter: ld.RetryAfter, ResetAfter: ld.ResetAfter})
			l.m.nearHits.Inc()
			return ReasonLimited, nil
		}
	}
	err := l.take(ctx, checks, res)
	if near && err == nil && !res.Allowed {
		c, d := &checks[0], res.Decisions[0]
		l.near.put(LayerDecision{Layer: policy.Layer{Key: c.Key, Limit: c.Limit}, Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter}, c.Cost, now)
	}
	switch {
	case err == nil && res.Allowed:
		return ReasonAllowed, nil
	case err == nil:
		return ReasonLimited, nil
	case errors.Is(err, store.ErrInvalidCheck):
		return "", err
	case fail == policy.FailClosed:
		l.m.failures.WithLabelValues("closed").Inc()
		return ReasonUnavailable, nil
	}
	if _, ok := l.decideLocally(ctx, checks, res); !ok {
		res.Allowed = true
		res.Decisions = res.Decisions[:0]
		for _, c := range checks {
			res.Decisions = append(res.Decisions, algo.Decision{Allowed: true, Limit: c.Limit.Limit, Remaining: c.Limit.Capacity()})
		}
	}
	return ReasonDegradedOpen, nil
}

// retryEnforced handles a batch rejected at least in part by shadow layers:
// if an enforced layer rejected too, the answer stands; otherwise the batch
// is decided again without the rejecting shadow layers, so that shadow
// limits never block (and, on a second shadow rejection, without any).
func (l *Limiter) retryEnforced(ctx context.Context, d *Decision, res policy.Resolution, checks []store.Check, sr *store.Result) error {
	all := layerDecisions(res.Layers, sr.Decisions)
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
				sub = append(sub, checks[i])
			}
		}
		if len(sub) == 0 {
			d.Layers = all
			return nil
		}
		var r2 store.Result
		if err := l.take(ctx, sub, &r2); err != nil {
			return err
		}
		if r2.Allowed || attempt == 1 || !anyShadowRejectsAt(all, idx, r2.Decisions) {
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

// take runs one store call under the limiter's deadline.
func (l *Limiter) take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	start := time.Now()
	err := l.cb.call(checks, func() error { return l.store.Take(ctx, checks, res) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w: breaker open: %w", store.ErrUnavailable, err)
	}
	l.m.storeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		l.m.storeErrors.Inc()
		if errors.Is(err, store.ErrProtocol) {
			// Never an outage: loud, every time, and counted apart.
			l.m.protoErrors.Inc()
			if now := time.Now().Unix(); l.lastProto.Swap(now) != now { // once a second at most
				l.log.Error("store protocol error: a reply of the wrong shape (a bug, not an outage); deciding by the fail mode", slog.String("error", err.Error()))
			}
		} else {
			l.logRare("store call failed", err)
		}
	}
	return err
}

// sampler lets through at most sampleRate calls per second.
type sampler struct {
	sec atomic.Int64
	n   atomic.Int64
}

const sampleRate = 10

func (s *sampler) allow(now int64) bool {
	if s.sec.Load() != now {
		s.sec.Store(now)
		s.n.Store(0)
	}
	return s.n.Add(1) <= sampleRate
}

func (l *Limiter) logRare(msg string, err error) {
	if now := time.Now().Unix(); l.lastLog.Swap(now) != now {
		l.log.Warn(msg, slog.String("error", err.Error()))
	}
}

// ceilMs is d in whole milliseconds, rounded up, for logs (fields named
// *_ms): a client that waits it is never early.
func ceilMs(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// checksOf returns the store checks of res.
func checksOf(res policy.Resolution) []store.Check {
	cs := make([]store.Check, len(res.Layers))
	for i, l := range res.Layers {
		cs[i] = store.Check{Key: l.Key, Limit: l.Limit, Cost: res.Cost}
	}
	return cs
}
