package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/policy"
)

// Policies holds the policy in force: the config file's (the base), the
// run-time overlay that the [ControlStore] keeps for every instance, and
// the snapshot compiled from both, swapped atomically when either changes
// ([Policies.SetPolicy] for the file; [Policies.Refresh] for the overlay,
// and [Policies.PutOverride], [Policies.DeleteOverride] and
// [Policies.PutPlan] to write it). A [Limiter] embeds one. It is safe for
// concurrent use.
type Policies struct {
	control ControlStore
	now     func() time.Time // decides whether an override is past
	log     *slog.Logger
	changed func() // called after each swap; nil: none

	mu      sync.Mutex // serializes recompiles
	base    policy.Policy
	overlay policy.Overlay
	snap    atomic.Pointer[policy.Snapshot]
}

// newPolicies returns the holder of pol, whose overlay control keeps
// (nil: an in-process one). It fails if pol does not compile, with the
// [policy.Problems]. changed, if not nil, is called after each swap.
func newPolicies(pol policy.Policy, control ControlStore, now func() time.Time, log *slog.Logger, changed func()) (*Policies, error) {
	snap, base, err := compileBase(pol)
	if err != nil {
		return nil, err
	}
	if control == nil {
		control = newMemoryControl()
	}
	p := &Policies{control: control, now: now, log: log, changed: changed, base: base}
	p.snap.Store(snap)
	return p, nil
}

// Snapshot returns the policy in force.
func (p *Policies) Snapshot() *policy.Snapshot { return p.snap.Load() }

// SetPolicy replaces the file's policy, keeping the run-time overlay. A
// policy that does not compile changes nothing and returns the
// [policy.Problems].
func (p *Policies) SetPolicy(pol policy.Policy) error {
	_, base, err := compileBase(pol)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base = base
	p.rebuild()
	return nil
}

// compileBase compiles pol and returns it with its defaults applied (the
// base every rebuild compiles with the overlay), which must compile
// again: a policy whose defaults do not (a bug) is refused here, where it
// is loaded, rather than found by the next overlay change.
func compileBase(pol policy.Policy) (*policy.Snapshot, policy.Policy, error) {
	snap, err := policy.Compile(pol)
	if err != nil {
		return nil, policy.Policy{}, err
	}
	base := snap.Policy()
	if _, err := policy.Compile(base); err != nil {
		return nil, policy.Policy{}, fmt.Errorf("limiter: the policy with its defaults does not compile again: %w", err)
	}
	return snap, base, nil
}

// rebuild compiles base with overlay and swaps it in. Overlay entries that
// no longer fit the base (a plan removed from the file, say) are left out
// and logged. The caller holds p.mu; p.base compiles on its own.
func (p *Policies) rebuild() {
	snap, err := policy.CompileWith(p.base, p.overlay)
	if err != nil {
		p.log.Error("run-time overrides do not fit the policy; leaving out those that do not", slog.String("error", err.Error()))
		kept := policy.Overlay{Version: p.overlay.Version, Plans: map[string]policy.Plan{}, Tenants: map[string]policy.Tenant{}}
		for _, name := range slices.Sorted(maps.Keys(p.overlay.Plans)) {
			kept.Plans[name] = p.overlay.Plans[name]
			if _, err := policy.CompileWith(p.base, kept); err != nil {
				delete(kept.Plans, name)
				p.log.Error("left out run-time plan", slog.String("plan", name))
			}
		}
		for _, id := range slices.Sorted(maps.Keys(p.overlay.Tenants)) {
			kept.Tenants[id] = p.overlay.Tenants[id]
			if _, err := policy.CompileWith(p.base, kept); err != nil {
				delete(kept.Tenants, id)
				p.log.Error("left out run-time override", slog.String("tenant", id))
			}
		}
		if snap, err = policy.CompileWith(p.base, kept); err != nil {
			snap, err = policy.Compile(p.base)
		}
		if err != nil { // never a nil policy: the one in force stays
			p.log.Error("the policy does not compile with any run-time override; keeping the one in force", slog.String("error", err.Error()))
			return
		}
	}
	p.snap.Store(snap)
	if p.changed != nil {
		p.changed() // limits may have changed: the near cache's rejections may not hold
	}
}

// Overlay returns a copy of the run-time overlay in force; its maps are
// never nil.
func (p *Policies) Overlay() policy.Overlay { _, ov := p.state(); return ov }

// Base returns the file's policy in force.
func (p *Policies) Base() policy.Policy { base, _ := p.state(); return base }

// state returns the file's policy and a copy of the overlay, read together.
func (p *Policies) state() (policy.Policy, policy.Overlay) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ov := policy.Overlay{Version: p.overlay.Version, Plans: maps.Clone(p.overlay.Plans), Tenants: maps.Clone(p.overlay.Tenants)}
	if ov.Plans == nil {
		ov.Plans = map[string]policy.Plan{}
	}
	if ov.Tenants == nil {
		ov.Tenants = map[string]policy.Tenant{}
	}
	return p.base, ov
}

// Refresh loads the control store's overlay if its version changed.
func (p *Policies) Refresh(ctx context.Context) error {
	v, err := p.control.Version(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	same := v == p.overlay.Version
	p.mu.Unlock()
	if same {
		return nil
	}
	return p.load(ctx)
}

// load loads the control store's overlay and puts it in force if it is
// not the one in force.
func (p *Policies) load(ctx context.Context) error {
	ov, err := p.control.Load(ctx)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ov.Version == p.overlay.Version {
		return nil
	}
	p.overlay = ov
	p.rebuild()
	p.log.Info("run-time policy changed", slog.Int64("version", ov.Version))
	return nil
}

// PutOverride writes tenant id's entry to the control store, for every
// instance, after checking that it compiles with the policy in force. An
// entry with Expires in the past is refused.
func (p *Policies) PutOverride(ctx context.Context, id string, t policy.Tenant) error {
	if !t.Expires.IsZero() && !t.Expires.After(p.now()) {
		return fmt.Errorf("limiter: override for %q expires at %v, already past", id, t.Expires)
	}
	if err := p.check(func(ov *policy.Overlay) { ov.Tenants[id] = t }); err != nil {
		return err
	}
	if err := p.control.PutTenant(ctx, id, t); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	p.refreshAfterWrite(ctx)
	return nil
}

// ErrControlUnavailable means a run-time write did not reach the control
// store within its deadline: it was not applied (see package redisctl).
var ErrControlUnavailable = errors.New("limiter: the control store did not take the write, which was not applied")

// refreshAfterWrite loads the overlay after a write that the control
// store took (Load, not the version, which may be cached and not show the
// write yet). Failing that, the write stands and the poll (Run) brings it
// in; it is logged, not returned, since the write itself succeeded.
func (p *Policies) refreshAfterWrite(ctx context.Context) {
	if err := p.load(ctx); err != nil {
		p.log.Warn("run-time policy written but not yet loaded here; the next poll loads it", slog.String("error", err.Error()))
	}
}

// DeleteOverride removes tenant id's run-time entry.
func (p *Policies) DeleteOverride(ctx context.Context, id string) error {
	if err := p.control.DeleteTenant(ctx, id); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	p.refreshAfterWrite(ctx)
	return nil
}

// PutPlan writes a plan to the control store, replacing the file's plan of
// that name for every instance, after checking that it compiles.
func (p *Policies) PutPlan(ctx context.Context, plan policy.Plan) error {
	if err := p.check(func(ov *policy.Overlay) { ov.Plans[plan.Name] = plan }); err != nil {
		return err
	}
	if err := p.control.PutPlan(ctx, plan); err != nil {
		return fmt.Errorf("%w: %w", ErrControlUnavailable, err)
	}
	p.refreshAfterWrite(ctx)
	return nil
}

// check compiles the policy in force with edit applied to a copy of the
// overlay.
func (p *Policies) check(edit func(*policy.Overlay)) error {
	base, ov := p.state()
	edit(&ov)
	_, err := policy.CompileWith(base, ov)
	return err
}
