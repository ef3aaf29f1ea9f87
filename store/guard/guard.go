package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// Config configures a Guard.
type Config struct {
	// Store decides the checks. Required.
	Store store.Store
	// Fallback decides when Store fails and the fail mode is open: an
	// in-process store (memstore) that limits each instance on its own. Nil
	// means admit without limiting while the store is out.
	Fallback store.Store
	// Timeout bounds each store call. Zero means 100 ms, or no deadline for
	// a store that decides in this process ([store.Local], the memory
	// store), for which a timer per call is pure cost; negative means no
	// deadline of the guard's own.
	Timeout time.Duration
	// Instances is how many fairgate instances share the store. While the
	// store is out each instance's fallback limits alone, at the checks'
	// limits × FallbackHeadroom / Instances. Zero means 1.
	Instances int
	// FallbackHeadroom scales the fallback's share of each limit. Zero
	// means 1.2.
	FallbackHeadroom float64
	// BreakerCooldown is how long the circuit breaker keeps the store
	// uncalled once it opens, before one probe. Zero means 2 s.
	BreakerCooldown time.Duration
	// NoNearCache turns off the near cache of rejected keys (it is on by
	// default). See [NearCache].
	NoNearCache bool
	// Now is the clock that ages near-cache answers and samples logs. Nil
	// means time.Now.
	Now func() time.Time
	// Logger receives store errors and breaker changes. Nil means silent.
	Logger *slog.Logger
	// Registerer receives the guard's metrics (fairgate_store_*,
	// fairgate_near_cache_hits_total). Nil means none. Guards sharing a
	// Registerer share its metrics, as limiters do (see package
	// promshare); give each its own prefix to tell them apart.
	Registerer prometheus.Registerer
	// Tracer, if not nil, traces each store call: a span under the
	// caller's recorded span, and the trace ID as the exemplar of
	// fairgate_store_call_seconds. [Guard.Take] starts a decision span of
	// its own. Nil means no tracing, at no cost.
	Tracer trace.Tracer
}

// Outcome says who decided a Take, or why nobody did.
type Outcome uint8

// The outcomes.
const (
	// Decided: the store (or the near cache) decided; the result is its
	// answer.
	Decided Outcome = iota
	// Degraded: the store failed and the fail mode is open; the result is
	// the fallback's answer at this instance's share of each limit, or
	// every check admitted when there is no fallback or it failed too.
	Degraded
	// Unavailable: the store failed and the fail mode is closed; the
	// result is not to be read. Answer with [UnavailableRetryAfter].
	Unavailable
)

// UnavailableRetryAfter is the Retry-After of a fail-closed answer.
const UnavailableRetryAfter = 5 * time.Second

// Guard calls a store under a deadline and circuit breakers (one per
// failure domain of a [store.Sharded]), measures and traces each call,
// and decides by the fail mode when the store fails: the fallback for
// fail open, unavailable for fail closed. It is safe for concurrent use.
type Guard struct {
	store    store.Store
	fallback store.Store
	share    float64 // the fallback's share of each limit
	// local marks a store that decides in this process: it has no
	// outages for a breaker to see, so it is called directly, with no
	// deadline unless asked.
	local    bool
	timeout  time.Duration
	deadline sharedDeadline // timeout's contexts, shared (deadline.go)
	cb       *breakers
	near     *NearCache // nil: off
	now      func() time.Time
	log      *slog.Logger
	m        *metrics
	tracer   trace.Tracer // nil: off
	// lastLog and lastProto are the seconds a store error and a protocol
	// error were last logged.
	lastLog, lastProto atomic.Int64
	// settleFailures counts the settlements failed since the last log
	// line about one, at lastSettleLog (seconds).
	settleFailures, lastSettleLog atomic.Int64
	// settleMoving counts the settlements waiting out a slot migration.
	settleMoving atomic.Int64

	// probe decides when to probe the store (probe.go).
	probe probeState
}

// New returns a guard for c.
func New(c Config) (*Guard, error) {
	if c.Store == nil {
		return nil, errors.New("guard: Config.Store is required")
	}
	g := &Guard{store: c.Store, fallback: c.Fallback, timeout: c.Timeout, now: c.Now, log: c.Logger, tracer: c.Tracer}
	if lc, ok := c.Store.(store.Local); ok && lc.Local() {
		g.local = true
		if g.timeout == 0 {
			g.timeout = -1
		}
	}
	if g.timeout == 0 {
		g.timeout = 100 * time.Millisecond
	}
	g.deadline.timeout = g.timeout
	if g.now == nil {
		g.now = time.Now
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if g.m, err = newMetrics(c.Registerer); err != nil {
		return nil, err
	}
	if !c.NoNearCache {
		g.near = newNearCache(g.m.nearHits)
	}
	instances, headroom := max(1, c.Instances), c.FallbackHeadroom
	if headroom <= 0 {
		headroom = 1.2
	}
	g.share = min(1, headroom/float64(instances))
	cooldown := c.BreakerCooldown
	if cooldown <= 0 {
		cooldown = 2 * time.Second
	}
	g.cb = newBreakers(c.Store, cooldown, g.logChange)
	return g, nil
}

// Store returns the guarded store, for what the guard does not cover (a
// hold, a reset).
func (g *Guard) Store() store.Store { return g.store }

// NearCache returns the near cache of rejected keys, nil when it is off.
func (g *Guard) NearCache() *NearCache { return g.near }

// Timeout returns the deadline of each store call; negative means none.
func (g *Guard) Timeout() time.Duration { return g.timeout }

// Take decides checks, given directly (the /v1/take API, the Envoy
// service): the near cache answers a single check it remembers rejected;
// otherwise the store decides under the deadline and breaker, and when it
// fails, fail decides (see [Guard.Fail]). res receives one decision per
// check unless the outcome is Unavailable. The error is for invalid
// checks only (it wraps [store.ErrInvalidCheck]).
//
// The near cache answers single-check batches only: a batch of several
// that one remembered check rejects would owe its other checks a decision
// the instance does not have.
func (g *Guard) Take(ctx context.Context, checks []store.Check, fail policy.FailMode, res *store.Result) (Outcome, error) {
	if err := store.Validate(checks); err != nil {
		return Decided, err
	}
	if g.tracer == nil {
		o, _, err := g.take(ctx, g.now(), checks, fail, res)
		return o, err
	}
	ctx, span := g.tracer.Start(ctx, "fairgate.decide")
	o, took, err := g.take(ctx, g.now(), checks, fail, res)
	endTake(span, o, len(checks), took, res)
	return o, err
}

// take is Take's pipeline; took is the store call's time when traced.
func (g *Guard) take(ctx context.Context, now time.Time, checks []store.Check, fail policy.FailMode, res *store.Result) (Outcome, time.Duration, error) {
	near := g.near != nil && len(checks) == 1
	if near {
		c := &checks[0]
		if d, ok := g.near.Lookup(c.Key, c.Limit, c.Cost, now); ok {
			d.Limit = c.Limit.Limit
			res.Allowed, res.Now = false, now
			res.Decisions = append(res.Decisions[:0], d)
			g.near.Hit()
			return Decided, 0, nil
		}
	}
	var took time.Time
	if g.tracer != nil {
		took = time.Now()
	}
	err := g.Call(ctx, now, checks, res)
	var storeTime time.Duration
	if g.tracer != nil {
		storeTime = time.Since(took)
	}
	switch {
	case errors.Is(err, store.ErrInvalidCheck):
		return Decided, storeTime, err
	case err != nil:
		o, _ := g.Fail(ctx, checks, fail, res)
		return o, storeTime, nil
	}
	if near && !res.Allowed {
		c := &checks[0]
		g.near.Put(c.Key, c.Limit, c.Cost, res.Decisions[0], now)
	}
	return Decided, storeTime, nil
}

// Call is one store call about checks, and no more: under the deadline,
// through the breakers (one that refuses is [store.ErrUnavailable]),
// timed, traced, its failure counted and logged (now samples the log).
// For peeks, leases and the retries of a decision: the caller decides a
// failure, by [Guard.Fail] or otherwise.
func (g *Guard) Call(ctx context.Context, now time.Time, checks []store.Check, res *store.Result) error {
	caller := ctx
	ctx, cancel := g.storeContext(ctx)
	defer cancel()
	var end func(*store.Result, error)
	if g.tracer != nil {
		ctx, end = g.storeSpan(ctx, checks)
	}
	start := time.Now()
	err := g.breaker(checks, func() error { return g.store.Take(ctx, checks, res) })
	if end != nil {
		end(res, err)
	}
	if refused(err) || errors.Is(err, context.Canceled) && caller.Err() != nil {
		// Refused by a breaker, or the caller gave up (a client gone, a
		// daemon stopping): not a failure of the store, so neither logged
		// nor counted (the breakers do not count it either).
		return err
	}
	g.observeStore(ctx, time.Since(start).Seconds())
	if err == nil {
		g.probe.answered(now) // the store answers: no probe needed for a while
		return nil
	}
	g.m.storeErrors.Inc()
	if errors.Is(err, store.ErrProtocol) {
		// Never an outage: loud, every time, and counted apart.
		g.m.protoErrors.Inc()
		if sec := now.Unix(); g.lastProto.Swap(sec) != sec { // once a second at most
			g.log.Error("store protocol error: a reply of the wrong shape (a bug, not an outage); deciding by the fail mode", slog.String("error", err.Error()))
		}
	} else {
		g.LogRare(now, "store call failed", err)
	}
	return err
}

// Hold holds key (see [store.Store.Hold]) under the deadline and through
// the breaker of key's domain, as [Guard.Call] makes a take; a failure is
// the caller's (a hold has no fallback).
func (g *Guard) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	ctx, cancel := g.storeContext(ctx)
	defer cancel()
	return g.breaker([]store.Check{{Key: key, Limit: lim}}, func() error { return g.store.Hold(ctx, key, lim, d) })
}

// Fail is the one place where a store failure meets a fail mode: it
// counts the failure under the mode (fairgate_store_failure_decisions_total)
// and returns Unavailable for fail closed. For fail open it returns
// Degraded, with res the fallback's answer to checks sized for this
// instance, and those sized checks; or, when there is no fallback or it
// failed too, res every check admitted and sized nil. Checks nil (a slot
// call) asks for the outcome alone.
func (g *Guard) Fail(ctx context.Context, checks []store.Check, fail policy.FailMode, res *store.Result) (o Outcome, sized []store.Check) {
	if fail == policy.FailClosed {
		g.m.failures.WithLabelValues("closed").Inc()
		return Unavailable, nil
	}
	g.m.failures.WithLabelValues("open").Inc()
	if len(checks) == 0 {
		return Degraded, nil
	}
	if g.fallback != nil {
		sized = g.fallbackChecks(checks)
		if g.fallback.Take(ctx, sized, res) == nil {
			return Degraded, sized
		}
	}
	res.Allowed = true
	res.Decisions = res.Decisions[:0]
	for _, ch := range checks {
		res.Decisions = append(res.Decisions, algo.Decision{Allowed: true, Limit: ch.Limit.Limit, Remaining: ch.Limit.Capacity()})
	}
	return Degraded, nil
}

// fallbackChecks are checks sized for the fallback: each limit and burst
// times the instance's share (at least 1, and at least the cost), so that
// the instances together admit about the checks' limits while the store
// is out.
func (g *Guard) fallbackChecks(checks []store.Check) []store.Check {
	out := slices.Clone(checks)
	if g.share >= 1 {
		return out
	}
	for i := range out {
		lim := &out[i].Limit
		lim.Limit = max(1, int64(math.Ceil(float64(lim.Limit)*g.share)))
		if lim.Burst != 0 {
			lim.Burst = max(out[i].Cost, int64(math.Ceil(float64(lim.Burst)*g.share)))
		}
		if lim.Algorithm.Windowed() {
			lim.Burst = 0
			lim.Limit = max(lim.Limit, out[i].Cost)
		} else if lim.Burst == 0 && lim.Limit < out[i].Cost {
			lim.Burst = out[i].Cost
		}
		if lim.Period/time.Microsecond < time.Duration(lim.Limit) || lim.Validate() != nil {
			out[i].Limit = checks[i].Limit // cannot shrink it validly: keep the check's
		}
	}
	return out
}

// storeContext is the one place a store call's deadline is set: the
// store deadline, on a context shared by the calls of the same
// millisecond (deadline.go), or on ctx itself when the call's span needs
// ctx's values (tracing on) or ctx ends sooner. An in-process store gets
// none.
func (g *Guard) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	switch {
	case g.timeout <= 0 || g.local:
		return ctx, noCancel
	case g.tracer != nil:
		return context.WithTimeout(ctx, g.timeout)
	}
	return g.deadline.context(ctx)
}

// breaker runs f, one call of the store about checks, through the
// breakers of their domains (an in-process store has none). A breaker
// that refuses is store.ErrUnavailable.
func (g *Guard) breaker(checks []store.Check, f func() error) error {
	if g.local {
		return f()
	}
	err := g.cb.call(checks, f)
	if refused(err) {
		return fmt.Errorf("%w: breaker open: %w", store.ErrUnavailable, err)
	}
	return err
}

// refused reports an error of a call a breaker refused: it never reached
// the store.
func refused(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// LogRare logs err under msg as a warning, once a second at most (now
// picks the second): for failures that come in floods during an outage.
func (g *Guard) LogRare(now time.Time, msg string, err error) {
	if sec := now.Unix(); g.lastLog.Swap(sec) != sec {
		g.log.Warn(msg, slog.String("error", err.Error()))
	}
}

// Up reports whether the store answers: every breaker is closed (on a
// Redis Cluster, one per slot; a lost master makes it false until its
// replica takes over).
func (g *Guard) Up() bool { return g.cb.allClosed() }

// BreakerState is what the store's breakers say, as /readyz shows it.
type BreakerState struct {
	// State is the worst of the breakers: "closed", "half-open" or "open".
	State string `json:"state"`
	// NotClosed counts the failure domains whose breaker is not closed
	// (on a Redis Cluster a breaker is per hash slot; else there is one).
	NotClosed int `json:"not_closed"`
}

// Breakers reports the store's breakers; ok is false for an in-process
// store, which has none.
func (g *Guard) Breakers() (s BreakerState, ok bool) {
	if g.local {
		return s, false
	}
	worst := gobreaker.StateClosed
	g.cb.m.Range(func(_, v any) bool {
		st := v.(*domain).cb.State()
		if st != gobreaker.StateClosed {
			s.NotClosed++
			if st == gobreaker.StateOpen || worst == gobreaker.StateClosed {
				worst = st
			}
		}
		return true
	})
	s.State = worst.String()
	return s, true
}
