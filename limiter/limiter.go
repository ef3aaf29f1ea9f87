package limiter

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// Config configures a Limiter.
type Config struct {
	// Store decides the layers. Required.
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

// Limiter decides requests by policy. It is safe for concurrent use.
type Limiter struct {
	store    store.Store
	fallback store.Store
	control  ControlStore
	poll     time.Duration
	timeout  time.Duration
	slots    slotState      // concurrency slots (slots.go)
	deadline sharedDeadline // timeout's contexts, shared (deadline.go)
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
	tracer   trace.Tracer // nil: off
	// local marks a store that decides in this process: it has no outages
	// for a breaker to see, so it is called directly.
	local bool
	// traceTenants puts tenant IDs on spans.
	traceTenants bool

	mu      sync.Mutex // serializes recompiles
	base    policy.Policy
	overlay policy.Overlay
	snap    atomic.Pointer[policy.Snapshot]
	lastLog atomic.Int64
	// lastProto is the second a store protocol error was last logged.
	lastProto atomic.Int64
}

// New returns a limiter for c. It fails if c.Policy does not compile, with
// the [policy.Problems].
func New(c Config) (*Limiter, error) {
	if c.Store == nil {
		return nil, errors.New("limiter: Config.Store is required")
	}
	l := &Limiter{store: c.Store, fallback: c.Fallback, control: c.Control, poll: c.PollEvery, timeout: c.Timeout, now: c.Now, log: c.Logger, limited: c.Limited, tracer: c.Tracer, traceTenants: c.TraceTenants}
	if l.control == nil {
		l.control = newMemoryControl()
	}
	if !c.NoNearCache {
		l.near = newNearCache()
	}
	l.leases = newLeaseTable()
	if l.poll <= 0 {
		l.poll = time.Second
	}
	if lc, ok := c.Store.(store.Local); ok && lc.Local() {
		l.local = true
		if l.timeout == 0 {
			l.timeout = -1
		}
	}
	if l.timeout == 0 {
		l.timeout = 100 * time.Millisecond
	}
	l.deadline.timeout = l.timeout
	l.slots.init(c.Store, c.SlotLease)
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
	l.base = snap.Policy() // defaults applied
	l.snap.Store(snap)
	return l, nil
}

// Snapshot returns the policy in force.
func (l *Limiter) Snapshot() *policy.Snapshot { return l.snap.Load() }

// SetPolicy replaces the file's policy, keeping the run-time overlay. A
// policy that does not compile changes nothing and returns the
// [policy.Problems].
func (l *Limiter) SetPolicy(p policy.Policy) error {
	snap, err := policy.Compile(p)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base = snap.Policy() // defaults applied
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
			l.logRare(l.now(), "control store poll failed", err)
		}
		l.probe(ctx, l.now())
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

func (l *Limiter) probe(ctx context.Context, now time.Time) {
	var res store.Result
	_ = l.take(ctx, now, probeCheck, &res)
	for _, c := range l.cb.toProbe() {
		_ = l.take(ctx, now, []store.Check{c}, &res)
	}
}

// StoreUp reports whether the store answers: every breaker is closed (on
// a Redis Cluster, one per slot; a lost master makes it false until its
// replica takes over).
func (l *Limiter) StoreUp() bool { return l.cb.allClosed() }
