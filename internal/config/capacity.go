package config

import (
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
)

// UpstreamCapacity shares the proxied upstream's concurrency between
// tenants (the upstream_capacity section; package fairshare).
type UpstreamCapacity struct {
	// Gate is the gate's config: the limit's bounds (or a fixed limit),
	// the wait, the queue, the tolerance and the reserve.
	Gate fairshare.Config
	// Critical are the route classes that may use the reserve.
	Critical []string
	// Weights are the tenants' weights by plan (unlisted plans: 1).
	Weights map[string]float64
}

// Bounds of the upstream_capacity section's values.
const (
	maxCapacityLimit = 100_000
	maxCapacityWait  = 30 * time.Second
	maxCapacityQueue = 100_000
)

// capacity decodes the upstream_capacity section into c.
func (d *decoder) capacity(v *yaml.Node, path string, c *Config) {
	u := &UpstreamCapacity{Weights: map[string]float64{}}
	var fixed, learned *yaml.Node
	limit := func(v *yaml.Node, path string) int {
		n := d.Int(v, path)
		if n < 1 || n > maxCapacityLimit {
			d.Add(v, path, "%d requests in flight: want 1 to %d", n, maxCapacityLimit)
		}
		return int(n)
	}
	d.Fields(v, path, policyfile.Handlers{
		"limit": func(v *yaml.Node, path string) {
			u.Gate.Initial, u.Gate.Fixed, fixed = limit(v, path), true, v
		},
		"floor":   func(v *yaml.Node, path string) { u.Gate.Floor, learned = limit(v, path), v },
		"ceiling": func(v *yaml.Node, path string) { u.Gate.Ceiling, learned = limit(v, path), v },
		"initial": func(v *yaml.Node, path string) { u.Gate.Initial, learned = limit(v, path), v },
		"tolerance": func(v *yaml.Node, path string) {
			if u.Gate.Tolerance = d.Float(v, path); u.Gate.Tolerance <= 1 || u.Gate.Tolerance > 10 {
				d.Add(v, path, "tolerance %v: want over 1 and at most 10, how much the upstream's latency may grow over its least before the limit shrinks (1.25: by 25%%)", u.Gate.Tolerance)
			}
			learned = v
		},
		"margin": func(v *yaml.Node, path string) {
			if u.Gate.Margin = d.Float(v, path); u.Gate.Margin < 0.5 || u.Gate.Margin > 6 {
				d.Add(v, path, "margin %v: want 0.5 to 6 standard deviations of the fair requests' demand kept free (more protects the tenants within their shares and lends less)", u.Gate.Margin)
			}
		},
		"max_wait": func(v *yaml.Node, path string) {
			if u.Gate.MaxWait = d.Duration(v, path); u.Gate.MaxWait <= 0 || u.Gate.MaxWait > maxCapacityWait {
				d.Add(v, path, "max_wait %v: want over 0 and at most %v, how long a request waits for room before it is answered 503", u.Gate.MaxWait, maxCapacityWait)
			}
		},
		"max_queue": func(v *yaml.Node, path string) {
			if n := d.Int(v, path); n < 1 || n > maxCapacityQueue {
				d.Add(v, path, "max_queue %d: want 1 to %d requests waiting per tenant", n, maxCapacityQueue)
			} else {
				u.Gate.MaxQueue = int(n)
			}
		},
		"max_waiting": func(v *yaml.Node, path string) {
			if n := d.Int(v, path); n < 1 || n > maxCapacityQueue {
				d.Add(v, path, "max_waiting %d: want 1 to %d requests waiting in all", n, maxCapacityQueue)
			} else {
				u.Gate.MaxWaiting = int(n)
			}
		},
		"reserve": func(v *yaml.Node, path string) {
			if u.Gate.Reserve = d.Float(v, path); u.Gate.Reserve < 0 || u.Gate.Reserve > 0.9 {
				d.Add(v, path, "reserve %v: want 0 to 0.9, the part of the limit kept for the critical classes", u.Gate.Reserve)
			}
		},
		"critical": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				u.Critical = append(u.Critical, d.Str(v, path))
				d.capacityKeys = append(d.capacityKeys, capacityKey{v, path, ""})
			})
		},
		"weights": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(plan string, k, v *yaml.Node, path string) {
				if w := d.Float(v, path); w < 0.01 || w > 1000 {
					d.Add(v, path, "weight %v: want 0.01 to 1000", w)
				} else {
					u.Weights[plan] = w
				}
				d.capacityKeys = append(d.capacityKeys, capacityKey{k, path, plan})
			})
		},
	})
	g := u.Gate
	switch {
	case fixed != nil && learned != nil:
		d.Add(learned, path, "limit fixes the limit: floor, ceiling, initial and tolerance are for a learned one; give one or the other")
	case g.Floor > 0 && g.Ceiling > 0 && g.Floor > g.Ceiling:
		d.Add(v, path, "floor %d is over ceiling %d", g.Floor, g.Ceiling)
	case g.Initial > 0 && (g.Floor > 0 && g.Initial < g.Floor || g.Ceiling > 0 && g.Initial > g.Ceiling):
		d.Add(v, path, "initial %d is outside floor %d and ceiling %d", g.Initial, g.Floor, g.Ceiling)
	}
	if g.Reserve > 0 && len(u.Critical) == 0 {
		d.Add(v, path, "reserve %v keeps room that no class may use: name the critical classes", g.Reserve)
	}
	c.UpstreamCapacity = u
}

// capacityKey is a class (plan empty) or a plan the section names,
// checked once the policy is known.
type capacityKey struct {
	n    *yaml.Node
	path string
	plan string
}

// checkCapacity reports critical classes and weighted plans the policy
// does not have.
func (d *decoder) checkCapacity(pd *policyfile.Decoder, p policy.Policy) {
	for _, k := range d.capacityKeys {
		if k.plan != "" {
			if _, ok := p.Plans[k.plan]; !ok && len(p.Plans) > 0 { // none: "plans is required"
				pd.Add(k.n, k.path, "unknown plan %q: want one of %s", k.plan, strings.Join(slices.Sorted(maps.Keys(p.Plans)), ", "))
			}
			continue
		}
		if _, ok := p.Classes[k.n.Value]; !ok && len(p.Classes) > 0 { // none: "classes is required"
			pd.Add(k.n, k.path, "unknown class %q: want one of %s", k.n.Value, strings.Join(slices.Sorted(maps.Keys(p.Classes)), ", "))
		}
	}
}
