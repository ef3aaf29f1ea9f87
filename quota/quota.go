package quota

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// Provider is one provider's budget.
type Provider struct {
	// Limit is the account-wide budget every tenant draws on. Only GCRA
	// (the zero Algorithm) is accepted, since a pause holds a GCRA key.
	Limit algo.Limit
	// Tenant is each tenant's share of it. The zero Limit means no share:
	// tenants draw on the budget alone.
	Tenant algo.Limit
}

// Defaults.
const (
	// DefaultMaxWait is how long Acquire waits before giving up with a
	// DeadlineError.
	DefaultMaxWait = 2 * time.Second
	// DefaultMaxPause is the longest pause Pause accepts.
	DefaultMaxPause = time.Hour
	// DefaultTimeout is the deadline of each store call. It is looser
	// than an inbound decision's (a worker waits for its provider anyway)
	// and still ends a call to a stalled store well within DefaultMaxWait.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultWindow is how long a tenant's call, and a provider's request
	// that a tenant wait, count toward the quorum that pauses the
	// provider (see [Quotas.PauseTenant]).
	DefaultWindow = time.Minute
	// DefaultMinTenants is the fewest tenants the provider must have
	// asked to wait, within the window, for the provider to be paused.
	DefaultMinTenants = 2
)

// Config configures Quotas.
type Config struct {
	// Store holds the budgets and the pauses ([store.Holder]). Share one
	// Redis between instances to share the budgets. Required.
	Store store.Store
	// Providers are the providers by name: lower-case letters, digits, '-'
	// and '_'.
	Providers map[string]Provider
	// MaxWait is Acquire's wait limit. Zero means DefaultMaxWait.
	MaxWait time.Duration
	// MaxPause is the longest pause Pause accepts. Zero means
	// DefaultMaxPause.
	MaxPause time.Duration
	// Timeout is the deadline of each store call (a wait between calls is
	// not bounded by it). Zero means DefaultTimeout; negative means none,
	// for an in-process store. The budget's calls go through a
	// [guard.Guard] of their own with this deadline: a circuit breaker
	// refuses them at once (store.ErrUnavailable) while the store is out.
	Timeout time.Duration
	// Window is how long a tenant counts as calling a provider after its
	// last call, and how long a provider's request that a tenant wait
	// counts toward the quorum that pauses the provider for every tenant
	// (see [Quotas.PauseTenant]). Zero means DefaultWindow.
	Window time.Duration
	// MinTenants is the fewest tenants the provider must have asked to
	// wait within Window for the provider to be paused (with at least
	// half of the tenants that called it in that window). Zero means
	// DefaultMinTenants; it is never less than 2, so that no one tenant
	// is a quorum.
	MinTenants int
	// Registerer, if not nil, receives the metrics (see [Quotas]).
	// Several Quotas may share one Registerer: they then share its
	// metrics, whose counts add up (see package promshare). A
	// registration refused otherwise (a name registered with other labels
	// or help, or a Registerer that refuses duplicates) fails New.
	Registerer prometheus.Registerer
	// Now is the clock of this instance's tally of which tenants called a
	// provider and which it asked to wait (Window's clock). Nil means
	// time.Now. Budgets and pauses are timed by the store's clock.
	Now func() time.Time
}

// Quotas decides outbound calls. It is safe for concurrent use.
//
// Metrics, labelled by provider (a name from the config, never a tenant):
// fairgate_outbound_wait_seconds, how long acquired calls waited;
// fairgate_outbound_requeues_total, acquires that gave up with a
// DeadlineError; fairgate_outbound_pauses_total, pauses of a provider for
// every tenant; fairgate_outbound_tenant_pauses_total, pauses of one
// tenant's calls.
type Quotas struct {
	guard      *guard.Guard // the store under the timeout and a breaker
	provs      atomic.Pointer[map[string]*provider]
	maxWait    time.Duration
	maxPause   time.Duration
	window     time.Duration
	minTenants int
	now        func() time.Time
	m          *metrics
}

// provider is one configured provider, its budget's key and this
// instance's tally of its tenants.
type provider struct {
	Provider
	budget string
	tally  *tally
}

// Errors.
var (
	// ErrUnknownProvider means a provider is not in the config.
	ErrUnknownProvider = errors.New("quota: unknown provider")
	// ErrInvalid means a call or a provider is malformed: an empty
	// tenant (outside [ForOperator]), a negative wait, a pause over the
	// limit, a bad limit.
	ErrInvalid = errors.New("quota: invalid")
)

// DeadlineError is Acquire's answer when waiting would pass its deadline:
// re-queue the job to run after RetryAfter, when (given no other traffic)
// it is admitted.
type DeadlineError struct {
	// Tenant is "" for the operator's own call ([ForOperator]).
	Provider, Tenant string
	// RetryAfter is how long from now until the call can be admitted.
	RetryAfter time.Duration
	// Paused reports that the tenant's own pause ([Quotas.PauseTenant]:
	// the provider asked this tenant's calls to wait) holds the call.
	Paused bool
	// Share reports that the tenant's share, not the provider's budget,
	// is what is exhausted (and the tenant is not paused).
	Share bool
}

// Error says which call gave up and what delay to re-queue it with.
func (e *DeadlineError) Error() string {
	what := "budget"
	switch {
	case e.Paused:
		what = "tenant's pause (the provider asked this tenant's calls to wait)"
	case e.Share:
		what = "tenant share"
	}
	return fmt.Sprintf("quota: provider %q, tenant %q: the %s admits nothing within the wait limit; re-queue the job to run in %v", e.Provider, e.Tenant, what, e.RetryAfter)
}

// New returns Quotas for c.
func New(c Config) (*Quotas, error) {
	if c.Store == nil {
		return nil, errors.New("quota: Config.Store is required")
	}
	q := &Quotas{maxWait: c.MaxWait, maxPause: c.MaxPause,
		window: cmp.Or(c.Window, DefaultWindow), minTenants: cmp.Or(c.MinTenants, DefaultMinTenants), now: c.Now}
	if q.now == nil {
		q.now = time.Now
	}
	if c.Window < 0 {
		return nil, fmt.Errorf("%w: Config.Window %v is negative", ErrInvalid, c.Window)
	}
	if q.minTenants < 2 {
		return nil, fmt.Errorf("%w: Config.MinTenants %d is under 2: one tenant's answers must never pause a provider for every tenant", ErrInvalid, c.MinTenants)
	}
	g, err := guard.New(guard.Config{Store: c.Store, Timeout: cmp.Or(c.Timeout, DefaultTimeout), NoNearCache: true})
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	q.guard = g
	if q.maxWait <= 0 {
		q.maxWait = DefaultMaxWait
	}
	if q.maxPause <= 0 {
		q.maxPause = DefaultMaxPause
	}
	if err := q.SetProviders(c.Providers); err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	q.m = m
	return q, nil
}

// SetProviders replaces the providers, as a config reload does. Invalid
// providers give an error naming them and replace nothing. A provider's
// budget state, pauses and tally survive a change of its limits; a removed
// provider's tally is forgotten.
func (q *Quotas) SetProviders(p map[string]Provider) error {
	valid, err := checkProviders(p)
	if err != nil {
		return err
	}
	var prev map[string]*provider
	if old := q.provs.Load(); old != nil {
		prev = *old
	}
	next := make(map[string]*provider, len(valid))
	for name, pr := range valid {
		t := newTally()
		if old, ok := prev[name]; ok {
			t = old.tally
		}
		next[name] = &provider{Provider: pr, budget: budgetKey(name), tally: t}
	}
	q.provs.Store(&next)
	return nil
}

// CheckProviders returns the error SetProviders would give for p, and
// changes nothing.
func (q *Quotas) CheckProviders(p map[string]Provider) error {
	_, err := checkProviders(p)
	return err
}

// checkProviders validates p and returns a copy.
func checkProviders(p map[string]Provider) (map[string]Provider, error) {
	next := make(map[string]Provider, len(p))
	for _, name := range slices.Sorted(maps.Keys(p)) {
		pr := p[name]
		if !policy.ValidName(name) {
			return nil, fmt.Errorf("%w: provider name %q: want %s", ErrInvalid, name, policy.NameRule)
		}
		if err := pr.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("%w: provider %q: limit: %w", ErrInvalid, name, err)
		}
		if pr.Limit.Algorithm != algo.GCRA {
			return nil, fmt.Errorf("%w: provider %q: limit: the budget must use gcra, not %v (pauses hold a GCRA key)", ErrInvalid, name, pr.Limit.Algorithm)
		}
		if pr.Tenant != (algo.Limit{}) {
			if err := pr.Tenant.Validate(); err != nil {
				return nil, fmt.Errorf("%w: provider %q: tenant share: %w", ErrInvalid, name, err)
			}
		}
		next[name] = pr
	}
	return next, nil
}

// Providers returns the names of the providers, sorted.
func (q *Quotas) Providers() []string {
	return slices.Sorted(maps.Keys(*q.provs.Load()))
}

// lookup returns the named provider or an error naming it and the
// configured ones.
func (q *Quotas) lookup(name string) (*provider, error) {
	p, ok := (*q.provs.Load())[name]
	if !ok {
		known := q.Providers()
		if len(known) == 0 {
			return p, fmt.Errorf("%w %q: no providers are configured (add a providers section to the config)", ErrUnknownProvider, name)
		}
		return p, fmt.Errorf("%w %q: configured are %s", ErrUnknownProvider, name, strings.Join(known, ", "))
	}
	return p, nil
}

// budgetKey, shareKey and pauseKey are the store keys of a provider's
// budget, of a tenant's share of it and of the tenant's pause; tag is the
// tenant's policy.TenantTag.
func budgetKey(provider string) string { return "ob:{p:" + provider + "}:all" }

// shareKey: see budgetKey.
func shareKey(provider, tag string) string { return "ob:{p:" + provider + "}:" + tag }

// pauseKey: see budgetKey.
func pauseKey(provider, tag string) string { return "ob:{p:" + provider + "}:pause:" + tag }

// pauseLimit decides a tenant's pause key: 1,000 calls a millisecond, so
// that it refuses nothing but a hold (whose key lives as long as the hold,
// plus a millisecond), and an admitted call's write of it lives at most a
// millisecond.
var pauseLimit = algo.Limit{Limit: 1000, Period: time.Millisecond, Burst: 1000}

// Acquire waits until provider admits one call for tenant, for at most the
// configured MaxWait. See AcquireWithin.
func (q *Quotas) Acquire(ctx context.Context, provider, tenant string) error {
	_, err := q.AcquireWithin(ctx, provider, tenant, q.maxWait)
	return err
}

// AcquireWithin waits until the tenant's pause (if any) has ended and both
// the tenant's share and the provider's budget admit one call, and takes
// it from both at once. An empty tenant is an error unless ctx is from
// [ForOperator]: the operator's own call, which draws on the budget
// alone. Between tries it sleeps the store's retry-after plus a little
// jitter (so that waiting workers do not all wake together). When the next try would come after
// maxWait (or after ctx's deadline, if sooner) it gives up at once with a
// *DeadlineError; maxWait 0 means try once. ctx's cancellation ends the
// wait at once with ctx's error. It returns how long it waited.
//
// A store error ends the wait with an error wrapping it (the store is the
// only place the budget is known across instances, so there is no fallback:
// re-queue the job).
func (q *Quotas) AcquireWithin(ctx context.Context, provider, tenant string, maxWait time.Duration) (time.Duration, error) {
	p, err := q.lookup(provider)
	if err != nil {
		return 0, err
	}
	own := tenant == "" && isOperator(ctx)
	if tenant == "" && !own {
		return 0, fmt.Errorf("%w: provider %q: empty tenant: name the tenant the call is for (or, for the operator's own call, pass a context from quota.ForOperator)", ErrInvalid, provider)
	}
	if maxWait < 0 {
		return 0, fmt.Errorf("%w: provider %q: negative wait limit %v", ErrInvalid, provider, maxWait)
	}
	// The checks: the tenant's pause, its share, the budget; the
	// operator's own call has the budget alone.
	checks := make([]store.Check, 0, 3)
	var tag string
	share := false
	if !own {
		tag = policy.TenantTag(tenant)
		checks = append(checks, store.Check{Key: pauseKey(provider, tag), Limit: pauseLimit, Cost: 1})
		if share = p.Tenant != (algo.Limit{}); share {
			checks = append(checks, store.Check{Key: shareKey(provider, tag), Limit: p.Tenant, Cost: 1})
		}
	}
	checks = append(checks, store.Check{Key: p.budget, Limit: p.Limit, Cost: 1})
	start := time.Now()
	deadline := start.Add(maxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	res := store.Result{Decisions: make([]algo.Decision, 0, len(checks))}
	var timer *time.Timer
	for {
		if err := q.take(ctx, checks, &res); err != nil {
			if ctx.Err() != nil {
				return time.Since(start), ctx.Err()
			}
			if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
				// ctx's own deadline, before its timer has fired.
				return time.Since(start), context.DeadlineExceeded
			}
			return time.Since(start), fmt.Errorf("quota: provider %q: %w", provider, err)
		}
		now := time.Now()
		if res.Allowed {
			if !own {
				p.tally.call(tag, q.now(), q.window)
			}
			waited := now.Sub(start)
			q.m.wait.WithLabelValues(provider).Observe(waited.Seconds())
			return waited, nil
		}
		retry := res.RetryAfter()
		if now.Add(retry).After(deadline) {
			q.m.requeues.WithLabelValues(provider).Inc()
			paused := !own && !res.Decisions[0].Allowed
			return now.Sub(start), &DeadlineError{Provider: provider, Tenant: tenant, RetryAfter: retry,
				Paused: paused, Share: !paused && share && !res.Decisions[1].Allowed}
		}
		sleep := min(retry+jitter(retry), deadline.Sub(now))
		if timer == nil {
			timer = time.NewTimer(sleep)
			defer timer.Stop()
		} else {
			timer.Reset(sleep)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-timer.C:
		}
	}
}

// take is one store call through the guard: under the timeout and the
// breaker. A failure is the caller's error (there is no fallback). A
// caller already gone sends nothing, so that it takes no budget.
func (q *Quotas) take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return q.guard.Call(ctx, time.Now(), checks, res)
}

// jitter is a random extra sleep of up to a quarter of d plus 1 ms.
func jitter(d time.Duration) time.Duration {
	return rand.N(d/4 + time.Millisecond)
}

// Pause makes provider admit nothing for d, for every tenant and every
// instance sharing the store: the operator's word that the provider's
// account-wide budget is out (its Retry-After to a call made for no
// tenant, or an operator's request). A pause never shortens a longer one;
// d <= 0 does nothing. d over MaxPause is an error (a provider's far-off
// date is more likely a clock or parsing error than a real request; pass
// min(d, MaxPause) to pause anyway).
//
// An answer to a call made for a tenant goes to [Quotas.PauseTenant]
// instead: a provider that limits per end user or per destination asks
// one tenant to wait, and that must not stop the others.
func (q *Quotas) Pause(ctx context.Context, provider string, d time.Duration) error {
	p, err := q.lookup(provider)
	if err != nil {
		return err
	}
	if d > q.maxPause {
		return fmt.Errorf("%w: provider %q: pause of %v is over the %v limit", ErrInvalid, provider, d, q.maxPause)
	}
	return q.pause(ctx, provider, p, d)
}

// pause holds provider's budget for d.
func (q *Quotas) pause(ctx context.Context, provider string, p *provider, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := q.guard.Hold(ctx, p.budget, p.Limit, d); err != nil {
		return fmt.Errorf("quota: pausing provider %q: %w", provider, err)
	}
	q.m.pauses.WithLabelValues(provider).Inc()
	return nil
}

// PauseTenant makes provider admit nothing for tenant for d, on every
// instance sharing the store, as the provider's Retry-After to a call made
// for tenant asks; the other tenants' calls go on. The pause is one store
// key per paused tenant that lives as long as the pause. A pause never
// shortens a longer one; d <= 0 does nothing; d over MaxPause is an error,
// as for Pause.
//
// It is also the tenant's vote that the provider's account-wide budget is
// out. When, within Window, the provider has asked at least half of the
// tenants that called it through this instance to wait, and at least
// MinTenants of them, the provider is paused for every tenant (as Pause
// does) until the latest time that a quorum of those tenants were asked to
// wait for, and providerPaused is true. No one tenant can make the quorum,
// nor lengthen the provider's pause. The tally is kept in this process
// (bounded to 10,000 tenants a provider); the pauses themselves are in the
// store.
//
// On an error the tenant's vote is counted all the same (the provider did
// answer); the error says which pause could not be stored.
func (q *Quotas) PauseTenant(ctx context.Context, provider, tenant string, d time.Duration) (providerPaused bool, err error) {
	p, err := q.lookup(provider)
	if err != nil {
		return false, err
	}
	switch {
	case tenant == "":
		return false, fmt.Errorf("%w: provider %q: empty tenant: name the tenant whose call the provider answered (Pause pauses the provider)", ErrInvalid, provider)
	case d > q.maxPause:
		return false, fmt.Errorf("%w: provider %q, tenant %q: pause of %v is over the %v limit", ErrInvalid, provider, tenant, d, q.maxPause)
	case d <= 0:
		return false, nil
	}
	tag := policy.TenantTag(tenant)
	now := q.now()
	until, quorum := p.tally.pause(tag, now, now.Add(d), q.window, q.minTenants)
	err = q.guard.Hold(ctx, pauseKey(provider, tag), pauseLimit, d)
	if err != nil {
		err = fmt.Errorf("quota: pausing tenant %q of provider %q: %w", tenant, provider, err)
	} else {
		q.m.tenantPauses.WithLabelValues(provider).Inc()
	}
	if !quorum || !until.After(now) {
		return false, err
	}
	if perr := q.pause(ctx, provider, p, until.Sub(now)); perr != nil {
		return false, errors.Join(err, perr)
	}
	return true, err
}

// MaxPause is the longest pause Pause accepts.
func (q *Quotas) MaxPause() time.Duration { return q.maxPause }

// MaxWait is Acquire's wait limit.
func (q *Quotas) MaxWait() time.Duration { return q.maxWait }
