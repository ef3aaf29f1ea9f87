package limiter

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// Config configures a Limiter.
type Config struct {
	// Store decides the layers, through the limiter's [guard.Guard]
	// (built from Store, Timeout, Fallback, Instances, FallbackHeadroom,
	// BreakerCooldown and NoNearCache; see [Limiter.Guard]). Required.
	Store store.Store
	// Policy is the policy from the config file. Required; replace it with
	// [Limiter.SetPolicy].
	Policy policy.Policy
	// Control keeps run-time plan changes and overrides, shared by every
	// instance. Nil means an in-process one.
	Control ControlStore
	// PollEvery is how often Run looks for changes in Control. Zero means
	// 1 s, so that a change reaches every instance within 2 s.
	PollEvery time.Duration
	// Timeout bounds each store call. Zero means 100 ms, or no deadline for
	// a store that decides in this process ([store.Local], the memory
	// store), for which a timer per call is pure cost; negative means no
	// deadline of the limiter's own. See [guard.Config].Timeout.
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
	// [policy.Class].NoNearCache.
	NoNearCache bool
	// Limited, if not nil, is told the tenant of every request limited
	// ("" for an anonymous one), as it is decided: for a bounded
	// heavy-hitters count such as the dashboard's. It must be quick.
	Limited func(tenant string)
	// Logger receives shadow rejections, store errors and policy changes.
	// Nil means silent.
	Logger *slog.Logger
	// Registerer receives the limiter's metrics. Nil means none. Several
	// limiters may share one Registerer: they then share its metrics (see
	// package promshare), whose counts and histograms add up and whose
	// fairgate_store_breaker_state shows the breaker that changed last; to
	// tell them apart, give each its own Registerer (a prefix of its own
	// with [prometheus.WrapRegistererWithPrefix], or to every one of them
	// a label of its own with [prometheus.WrapRegistererWith]). A
	// registration refused otherwise (a name registered with other labels
	// or help, or a Registerer that refuses duplicates) fails New.
	Registerer prometheus.Registerer
	// Tracer, if not nil, traces each decision: a span with the policy,
	// outcome and store latency, a child span per store call, and the
	// trace ID as the exemplar of the decision histogram. Nil means no
	// tracing, at no cost.
	Tracer trace.Tracer
	// TraceTenants adds the tenant ID to decision spans. Off by default:
	// a trace backend is often less guarded than the limiter.
	TraceTenants bool
	// SlotLease is how long a concurrency slot is held without a renewal
	// (see [Slots]): a holder that crashed frees its slots within it. Set it
	// to the longest a request may run (the upstream timeout) plus a
	// margin. Zero means 40 s: the proxy's default upstream timeout, 30 s,
	// plus 10.
	SlotLease time.Duration
}

// Limiter decides requests by policy: resolve (with the [Policies] it
// embeds), near cache, unit grant, then the store through its [guard.Guard],
// and the verdict. It is safe for concurrent use.
type Limiter struct {
	// Policies holds the policy in force and its run-time overlay.
	*Policies
	guard  *guard.Guard     // the store's deadline, breakers, fallback, fail mode
	near   *guard.NearCache // the guard's; nil: off
	grants *grantTable
	slots  slotState    // concurrency slots (slots.go)
	held   atomic.Int64 // requests being held (see Class.SlowDown)
	poll   time.Duration
	now    func() time.Time
	log    *slog.Logger
	// limited hears of every limited request's tenant; nil: none.
	limited func(tenant string)
	m       *metrics
	logged  sampler      // the "limited" log lines
	tracer  trace.Tracer // nil: off
	// traceTenants puts tenant IDs on spans.
	traceTenants bool
}

// New returns a limiter for c. It fails if c.Policy does not compile, with
// the [policy.Problems].
func New(c Config) (*Limiter, error) {
	if c.Store == nil {
		return nil, errors.New("limiter: Config.Store is required")
	}
	l := &Limiter{poll: c.PollEvery, now: c.Now, log: c.Logger, limited: c.Limited, tracer: c.Tracer, traceTenants: c.TraceTenants}
	l.grants = newGrantTable()
	if l.poll <= 0 {
		l.poll = time.Second
	}
	l.slots.init(c.SlotLease)
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	var err error
	l.guard, err = guard.New(guard.Config{
		Store: c.Store, Fallback: c.Fallback, Timeout: c.Timeout,
		Instances: c.Instances, FallbackHeadroom: c.FallbackHeadroom, BreakerCooldown: c.BreakerCooldown,
		NoNearCache: c.NoNearCache, Now: l.now, Logger: l.log, Registerer: c.Registerer, Tracer: c.Tracer,
	})
	if err != nil {
		return nil, err
	}
	l.near = l.guard.NearCache()
	if l.m, err = newMetrics(c.Registerer); err != nil {
		return nil, err
	}
	var changed func()
	if l.near != nil {
		changed = l.near.Clear
	}
	if l.Policies, err = newPolicies(c.Policy, c.Control, l.now, l.log, changed); err != nil {
		return nil, err
	}
	return l, nil
}

// Guard returns the limiter's guarded store, for checks given directly
// (the /v1/take API, the Envoy service): they share the limiter's
// deadline, breakers, fallback and near cache.
func (l *Limiter) Guard() *guard.Guard { return l.guard }

// ControlCallTimeout bounds each of Run's polls of the control store.
const ControlCallTimeout = 5 * time.Second

// Run follows the control store until ctx ends, applying every change
// within PollEvery (each poll reads the version, which package redisctl
// reads through the client's cache: it costs Redis nothing until the
// version moves), and runs the guard's probe ([guard.Guard.Run]) so that
// an outage and its recovery are seen without traffic. It returns nil
// when ctx ends.
func (l *Limiter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.guard.Run(ctx) })
	t := time.NewTicker(l.poll)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, ControlCallTimeout)
		if err := l.Refresh(rctx); err != nil && ctx.Err() == nil {
			l.guard.LogRare(l.now(), "control store poll failed", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// StoreUp reports whether the store answers: every breaker is closed (on
// a Redis Cluster, one per slot; a lost master makes it false until its
// replica takes over).
func (l *Limiter) StoreUp() bool { return l.guard.Up() }
