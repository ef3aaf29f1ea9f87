package limiter

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// LayerState is one layer of a tenant's effective limits, with its current
// state from a cost-0 peek.
type LayerState struct {
	// Policy and Key name the layer; Class is "" for the tenant overall.
	Policy, Key, Class string
	// Limit, Burst and Period are the layer's, shares and overrides applied.
	Limit, Burst int64
	Period       time.Duration
	// Shadow reports a layer that is not enforced.
	Shadow bool
	// Remaining and ResetAfter are the layer's state now.
	Remaining  int64
	ResetAfter time.Duration
	// Unit is what Limit, Burst and Remaining count: "requests"
	// ([policy.RequestsUnit]), or a measured cost's unit such as "tokens"
	// (see [policy.Layer].Unit).
	Unit string
}

// TenantLimits is what a tenant is limited by now.
type TenantLimits struct {
	Tenant string
	Plan   string
	// Entry is where the tenant's entry is: policy.PlanFromRuntime or
	// policy.PlanFromFile; policy.PlanFromDefault for a tenant without one.
	Entry policy.PlanSource
	// Overridden reports that the entry changes a limit of its plan (see
	// policy.Standing.Overrides); Expires is when a run-time entry ends
	// (zero: never).
	Overridden bool
	Expires    time.Time
	Layers     []LayerState
	// Concurrency are the tenant's concurrency layers (the tenant's, then
	// each class's share below 1); none without a concurrency limit.
	Concurrency []policy.SlotLayer
}

// Effective returns tenant id's effective limits, for a tenant whose
// verified credential names plan ("" for none; it applies when the policy
// lists no entry for the tenant, exactly as Request.Plan does for
// decisions): its plan, and every layer (each class with a share below 1,
// then the tenant overall) with limit, burst and the current remaining
// and reset, read by a cost-0 peek that changes nothing.
func (l *Limiter) Effective(ctx context.Context, id, plan string) (TenantLimits, error) {
	return l.EffectiveIn(ctx, l.Snapshot(), id, plan)
}

// EffectiveIn is Effective against snap, a [Policies.Snapshot] read with
// the credential that named plan (see [Limiter.DecideIn]).
func (l *Limiter) EffectiveIn(ctx context.Context, s *policy.Snapshot, id, plan string) (TenantLimits, error) {
	now := l.now()
	if id == "" || len(id) > policy.MaxTenantID {
		return TenantLimits{}, fmt.Errorf("%w: want 1 to %d bytes", policy.ErrBadTenant, policy.MaxTenantID)
	}
	st := s.Standing(id, plan, now)
	out := TenantLimits{Tenant: id, Plan: st.Plan, Overridden: st.Overrides, Expires: st.Expires}
	if st.Source == policy.PlanFromRuntime || st.Source == policy.PlanFromFile {
		out.Entry = st.Source
	}
	var layers []policy.Layer
	for _, name := range s.ClassNames() {
		r, err := s.Resolve(policy.Request{Tenant: id, Plan: plan, Class: name, HasCost: true}, now)
		if err != nil {
			return out, err
		}
		for _, ly := range r.Layers {
			if len(ly.Key) > 0 && !seenKey(layers, ly.Key) {
				layers = append(layers, ly)
			}
		}
		for _, sl := range r.Slots {
			if !slices.ContainsFunc(out.Concurrency, func(x policy.SlotLayer) bool { return x.Key == sl.Key }) {
				out.Concurrency = append(out.Concurrency, sl)
			}
		}
	}
	for start := 0; start < len(layers); start += store.MaxBatch {
		part := layers[start:min(len(layers), start+store.MaxBatch)]
		checks := make([]store.Check, len(part))
		for i, ly := range part {
			checks[i] = store.Check{Key: ly.Key, Limit: ly.Limit}
		}
		var res store.Result
		if err := l.guard.Call(ctx, now, checks, &res); err != nil {
			return out, err
		}
		for i, ly := range part {
			d := res.Decisions[i]
			out.Layers = append(out.Layers, LayerState{
				Policy: ly.Policy, Key: ly.Key, Class: ly.Class,
				Limit: ly.Limit.Limit, Burst: ly.Limit.Capacity(), Period: ly.Limit.Period,
				Shadow: ly.Shadow, Remaining: d.Remaining, ResetAfter: d.ResetAfter,
				Unit: cmp.Or(ly.Unit, policy.RequestsUnit),
			})
		}
	}
	return out, nil
}

func seenKey(ls []policy.Layer, key string) bool {
	for _, l := range ls {
		if l.Key == key {
			return true
		}
	}
	return false
}
