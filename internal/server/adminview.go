package server

import (
	"maps"
	"slices"
	"time"

	"github.com/fairgate/fairgate/internal/limitview"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// The admin API answers in the public API's vocabulary: snake_case names,
// durations in milliseconds, algorithms and fail modes by name, times in
// RFC 3339; never a Go struct as it happens to be.

func ms(d time.Duration) int64 { return d.Milliseconds() }

func timeView(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func ruleView(r policy.Rule) map[string]any {
	out := map[string]any{"name": r.Name, "limit": r.Limit.Limit}
	if r.Calendar != policy.NoCalendar {
		out["calendar"] = r.Calendar.String()
	} else {
		out["period_ms"] = ms(r.Limit.Period)
		out["burst"] = r.Limit.Capacity()
		out["algorithm"] = r.Limit.Algorithm.String()
	}
	if r.Shadow {
		out["shadow"] = true
	}
	return out
}

func planView(p policy.Plan) map[string]any {
	rules := make([]map[string]any, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = ruleView(r)
	}
	out := map[string]any{"name": p.Name, "rules": rules}
	if p.Concurrency != 0 {
		out["concurrency"] = p.Concurrency
	}
	return out
}

func overrideView(t policy.Tenant) map[string]any {
	out := map[string]any{}
	if t.Plan != "" {
		out["plan"] = t.Plan
	}
	if t.Limit != 0 {
		out["limit"] = t.Limit
	}
	if t.Burst != 0 {
		out["burst"] = t.Burst
	}
	if t.Concurrency != 0 {
		out["concurrency"] = t.Concurrency
	}
	if len(t.Rules) > 0 {
		rules := map[string]any{}
		for name, ro := range t.Rules {
			r := map[string]any{}
			if ro.Limit != 0 {
				r["limit"] = ro.Limit
			}
			if ro.Burst != 0 {
				r["burst"] = ro.Burst
			}
			rules[name] = r
		}
		out["limits"] = rules
	}
	if len(t.Shares) > 0 {
		out["shares"] = t.Shares
	}
	if e := timeView(t.Expires); e != nil {
		out["expires_at"] = e
	}
	return out
}

func effectiveView(tl limiter.TenantLimits) map[string]any {
	out := map[string]any{"tenant": tl.Tenant, "plan": tl.Plan, "overridden": tl.Overridden, "layers": limitview.Layers(tl.Layers)}
	if tl.Entry != policy.PlanFromDefault {
		out["entry"] = tl.Entry.String() // "runtime" or "file"
	}
	if e := timeView(tl.Expires); e != nil {
		out["expires_at"] = e
	}
	if len(tl.Concurrency) > 0 {
		out["concurrency"] = concurrencyView(tl.Concurrency)
	}
	return out
}

// concurrencyView lists concurrency layers: policy, limit and class.
type concurrencyLayer struct {
	Policy string `json:"policy"`
	Class  string `json:"class,omitempty"`
	Limit  int64  `json:"limit"`
}

func concurrencyView(sls []policy.SlotLayer) []concurrencyLayer {
	out := make([]concurrencyLayer, len(sls))
	for i, sl := range sls {
		out[i] = concurrencyLayer{sl.Policy, sl.Class, sl.Limit}
	}
	return out
}

func classView(c policy.Class) map[string]any {
	out := map[string]any{"share": c.Share, "fail": c.Fail.String(), "near_cache": !c.NoNearCache}
	if c.Shadow {
		out["shadow"] = true
	}
	if c.Lease > 0 {
		out["lease"] = c.Lease
	}
	if c.Cost != nil {
		out["cost"] = c.Cost // unit, estimate and measure, as the config spells them
	}
	switch {
	case c.SlowDown < 0:
		out["slow_down"] = "off"
	case c.SlowDown > 0:
		out["slow_down_ms"] = ms(c.SlowDown)
	}
	return out
}

func anonView(a policy.AnonRoute) map[string]any {
	rules := make([]map[string]any, len(a.Rules))
	for i, r := range a.Rules {
		v := ruleView(r.Rule)
		v["by"] = r.By.String()
		rules[i] = v
	}
	out := map[string]any{"name": a.Name, "route": a.Pattern, "cost": a.Cost, "fail": a.Fail.String(), "rules": rules}
	if a.Shadow {
		out["shadow"] = true
	}
	return out
}

func overlayView(ov policy.Overlay) map[string]any {
	plans, tenants := map[string]any{}, map[string]any{}
	for name, p := range ov.Plans {
		plans[name] = planView(p)
	}
	for id, t := range ov.Tenants {
		tenants[id] = overrideView(t)
	}
	return map[string]any{"version": ov.Version, "plans": plans, "tenants": tenants}
}

func policyView(p policy.Policy, ov policy.Overlay) map[string]any {
	loc := "UTC"
	if p.Location != nil {
		loc = p.Location.String()
	}
	plans, classes, tenants := map[string]any{}, map[string]any{}, map[string]any{}
	for name, pl := range p.Plans {
		pl.Name = name
		plans[name] = planView(pl)
	}
	for name, c := range p.Classes {
		classes[name] = classView(c)
	}
	for id, t := range p.Tenants {
		tenants[id] = overrideView(t)
	}
	routes := make([]map[string]any, len(p.Routes))
	for i, r := range p.Routes {
		routes[i] = map[string]any{"route": r.Pattern, "class": r.Class, "cost": r.Cost}
	}
	anon := make([]map[string]any, len(p.Anonymous))
	for i, a := range p.Anonymous {
		anon[i] = anonView(a)
	}
	pf := policy.DefaultPreflight()
	if p.Preflight != nil {
		pf = *p.Preflight
	}
	return map[string]any{
		"timezone": loc, "default_plan": p.DefaultPlan, "default_class": p.DefaultClass,
		"plans": plans, "classes": classes, "routes": routes, "anonymous": anon, "tenants": tenants,
		"preflight":   anonView(pf),
		"route_match": map[string]any{"case_sensitive": p.RouteMatch.CaseSensitive, "exact_trailing_slash": p.RouteMatch.ExactTrailingSlash},
		"overlay":     overlayView(ov),
	}
}

// sortedIDs returns the keys of m in order.
func sortedIDs[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
