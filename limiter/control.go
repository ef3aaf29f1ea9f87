package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	"github.com/fairgate/fairgate/policy"
)

// ControlStore keeps the run-time overlay (plan changes and tenant
// overrides written through the admin API) where every instance reads it:
// Redis when the store is Redis, memory for the embedded default.
// Implementations are safe for concurrent use.
type ControlStore interface {
	// Version returns the overlay's version: it changes with every write.
	// Cheap: instances call it every poll.
	Version(ctx context.Context) (int64, error)
	// Load returns the whole overlay, consistent with its version.
	Load(ctx context.Context) (policy.Overlay, error)
	// PutPlan writes a plan.
	PutPlan(ctx context.Context, p policy.Plan) error
	// PutTenant writes tenant id's entry.
	PutTenant(ctx context.Context, id string, t policy.Tenant) error
	// DeleteTenant removes tenant id's entry, if any.
	DeleteTenant(ctx context.Context, id string) error
}

// memoryControl is the in-process ControlStore of the embedded default.
type memoryControl struct {
	mu sync.Mutex
	ov policy.Overlay
}

// newMemoryControl returns an empty memoryControl.
func newMemoryControl() *memoryControl {
	return &memoryControl{ov: policy.Overlay{Plans: map[string]policy.Plan{}, Tenants: map[string]policy.Tenant{}}}
}

// Version implements ControlStore.
func (m *memoryControl) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ov.Version, nil
}

// Load implements ControlStore.
func (m *memoryControl) Load(context.Context) (policy.Overlay, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return policy.Overlay{Version: m.ov.Version, Plans: maps.Clone(m.ov.Plans), Tenants: maps.Clone(m.ov.Tenants)}, nil
}

// PutPlan implements ControlStore.
func (m *memoryControl) PutPlan(_ context.Context, p policy.Plan) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ov.Plans[p.Name] = p
	m.ov.Version++
	return nil
}

// PutTenant implements ControlStore.
func (m *memoryControl) PutTenant(_ context.Context, id string, t policy.Tenant) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ov.Tenants[id] = t
	m.ov.Version++
	return nil
}

// DeleteTenant implements ControlStore.
func (m *memoryControl) DeleteTenant(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ov.Tenants, id)
	m.ov.Version++
	return nil
}

var _ ControlStore = (*memoryControl)(nil)

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
