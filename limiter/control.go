package limiter

import (
	"context"
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
	// Cheap: instances call it every poll. It may answer from a cache the
	// store keeps fresh by itself (package redisctl: Redis's client
	// tracking), so a change shows there a moment after its write returns:
	// to see a write of its own at once, a caller calls Load.
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
