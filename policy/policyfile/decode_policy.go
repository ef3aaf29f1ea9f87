package policyfile

import (
	"maps"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// policy decodes the top level: the policy's fields, and sections.
func (d *Decoder) policy(n *yaml.Node, sections Sections) policy.Policy {
	p := policy.Policy{Plans: map[string]policy.Plan{}, Classes: map[string]policy.Class{}, Tenants: map[string]policy.Tenant{}}
	h := Handlers{
		"timezone": func(v *yaml.Node, path string) {
			name := d.Str(v, path)
			loc, err := time.LoadLocation(name)
			if err != nil {
				d.Add(v, path, "unknown time zone %q: want UTC or an IANA name such as Europe/Berlin", name)
				return
			}
			p.Location = loc
		},
		"default_plan":  func(v *yaml.Node, path string) { p.DefaultPlan = d.Str(v, path) },
		"default_class": func(v *yaml.Node, path string) { p.DefaultClass = d.Str(v, path) },
		"plans": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
				pl := policy.Plan{Name: name}
				pl.Rules, pl.Concurrency = d.planRules(v, path)
				p.Plans[name] = pl
			})
		},
		"classes":   func(v *yaml.Node, path string) { d.classes(v, path, p.Classes) },
		"routes":    func(v *yaml.Node, path string) { p.Routes = d.routes(v, path) },
		"anonymous": func(v *yaml.Node, path string) { p.Anonymous = d.anonymous(v, path) },
		"preflight": func(v *yaml.Node, path string) { p.Preflight = d.preflight(v, path) },
		"tenants":   func(v *yaml.Node, path string) { d.tenants(v, path, p.Tenants) },
		"route_match": func(v *yaml.Node, path string) {
			d.Fields(v, path, Handlers{
				"case_sensitive":       func(v *yaml.Node, path string) { p.RouteMatch.CaseSensitive = d.Bool(v, path) },
				"exact_trailing_slash": func(v *yaml.Node, path string) { p.RouteMatch.ExactTrailingSlash = d.Bool(v, path) },
			})
		},
	}
	for name, f := range sections {
		h[name] = func(v *yaml.Node, path string) { f(d, v, path) }
	}
	d.Fields(n, "", h)
	return p
}

// classes decodes the route classes into cs.
func (d *Decoder) classes(n *yaml.Node, path string, cs map[string]policy.Class) {
	d.Entries(n, path, func(name string, k, v *yaml.Node, path string) {
		cl := policy.Class{Name: name, Share: 1}
		d.Fields(v, path, Handlers{
			"share":      func(v *yaml.Node, path string) { cl.Share = d.share(v, path) },
			"fail":       func(v *yaml.Node, path string) { cl.Fail = d.Fail(v, path) },
			"shadow":     func(v *yaml.Node, path string) { cl.Shadow = d.Bool(v, path) },
			"near_cache": func(v *yaml.Node, path string) { cl.NoNearCache = !d.Bool(v, path) },
			"lease":      func(v *yaml.Node, path string) { cl.Lease = d.Int(v, path) },
			"slow_down":  func(v *yaml.Node, path string) { cl.SlowDown = d.slowDown(v, path) },
			"cost":       func(v *yaml.Node, path string) { cl.Cost = d.measuredCost(v, path) },
		})
		cs[name] = cl
	})
}

// measuredCost decodes a class's measured cost (see
// policy.MeasuredCost); policy.Compile validates it.
func (d *Decoder) measuredCost(n *yaml.Node, path string) *policy.MeasuredCost {
	var m policy.MeasuredCost
	d.Fields(n, path, Handlers{
		"unit": func(v *yaml.Node, path string) { m.Unit = d.Str(v, path) },
		"estimate": func(v *yaml.Node, path string) {
			e := &m.Estimate
			d.Fields(v, path, Handlers{
				"header":  func(v *yaml.Node, path string) { e.Header = d.Str(v, path) },
				"json":    func(v *yaml.Node, path string) { e.JSON = d.Str(v, path) },
				"default": func(v *yaml.Node, path string) { e.Default = d.Count(v, path) },
				"cap":     func(v *yaml.Node, path string) { e.Cap = d.Count(v, path) },
			})
		},
		"measure": func(v *yaml.Node, path string) {
			me := &m.Measure
			d.Fields(v, path, Handlers{
				"header":  func(v *yaml.Node, path string) { me.Header = d.Str(v, path) },
				"trailer": func(v *yaml.Node, path string) { me.Trailer = d.Str(v, path) },
				"json":    func(v *yaml.Node, path string) { me.JSON = d.Str(v, path) },
				"sse":     func(v *yaml.Node, path string) { me.SSE = d.Str(v, path) },
			})
		},
	})
	return &m
}

// routes decodes the routes; a cost of 0 makes a route free.
func (d *Decoder) routes(n *yaml.Node, path string) []policy.Route {
	var out []policy.Route
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		var r policy.Route
		d.Fields(v, path, Handlers{
			"route": func(v *yaml.Node, path string) { r.Pattern = d.Str(v, path) },
			"class": func(v *yaml.Node, path string) { r.Class = d.Str(v, path) },
			"cost": func(v *yaml.Node, path string) {
				r.Cost = d.Int(v, path)
				r.Free = r.Cost == 0
			},
		})
		if r.Pattern == "" {
			d.Add(v, path+".route", "route is required: a method and a path such as \"GET /v1/users/{id}\"")
		}
		if r.Class == "" {
			d.Add(v, path+".class", "class is required")
		}
		out = append(out, r)
	})
	return out
}

// anonymous decodes the anonymous routes.
func (d *Decoder) anonymous(n *yaml.Node, path string) []policy.AnonRoute {
	var out []policy.AnonRoute
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		var a policy.AnonRoute
		d.Fields(v, path, Handlers{
			"name":   func(v *yaml.Node, path string) { a.Name = d.Str(v, path) },
			"route":  func(v *yaml.Node, path string) { a.Pattern = d.Str(v, path) },
			"cost":   func(v *yaml.Node, path string) { a.Cost = d.Int(v, path) },
			"fail":   func(v *yaml.Node, path string) { a.Fail = d.Fail(v, path) },
			"shadow": func(v *yaml.Node, path string) { a.Shadow = d.Bool(v, path) },
			"limits": func(v *yaml.Node, path string) {
				d.List(v, path, func(j int, v *yaml.Node, path string) {
					by := policy.ByIP
					r := d.rule(v, path, Handlers{
						"by": func(v *yaml.Node, path string) {
							switch s := d.Str(v, path); s {
							case "ip":
							case "credential":
								by = policy.ByCredential
							default:
								d.Add(v, path, "by %q: want ip or credential", s)
							}
						},
					})
					a.Rules = append(a.Rules, policy.AnonRule{Rule: r, By: by})
				})
			},
		})
		if a.Name == "" {
			d.Add(v, path+".name", "name is required: it tells the route's keys apart")
		}
		if a.Pattern == "" {
			d.Add(v, path+".route", "route is required")
		}
		if a.Cost == 0 && v.Kind == yaml.MappingNode && hasKey(v, "cost") {
			d.Add(v, path+".cost", "cost 0 is outside 1..%d: an anonymous route is never free", algo.MaxCount)
		}
		out = append(out, a)
	})
	return out
}

// preflight decodes the CORS preflights' limits: per client address.
func (d *Decoder) preflight(n *yaml.Node, path string) *policy.AnonRoute {
	a := policy.AnonRoute{Name: policy.PreflightName}
	d.Fields(n, path, Handlers{
		"fail":   func(v *yaml.Node, path string) { a.Fail = d.Fail(v, path) },
		"shadow": func(v *yaml.Node, path string) { a.Shadow = d.Bool(v, path) },
		"limits": func(v *yaml.Node, path string) {
			d.List(v, path, func(j int, v *yaml.Node, path string) {
				a.Rules = append(a.Rules, policy.AnonRule{Rule: d.rule(v, path, nil), By: policy.ByIP})
			})
		},
	})
	return &a
}

// tenants decodes the tenant entries into ts.
func (d *Decoder) tenants(n *yaml.Node, path string, ts map[string]policy.Tenant) {
	d.Entries(n, path, func(id string, k, v *yaml.Node, path string) {
		var t policy.Tenant
		d.Fields(v, path, Handlers{
			"plan":  func(v *yaml.Node, path string) { t.Plan = d.Str(v, path) },
			"limit": func(v *yaml.Node, path string) { t.Limit = d.Int(v, path) },
			"burst": func(v *yaml.Node, path string) { t.Burst = d.Int(v, path) },
			"concurrency": func(v *yaml.Node, path string) {
				if t.Concurrency = d.Int(v, path); t.Concurrency < 1 {
					d.Add(v, path, "%d: want at least 1 request in flight (omit it to keep the plan's)", t.Concurrency)
				}
			},
			"limits": func(v *yaml.Node, path string) {
				t.Rules = map[string]policy.RuleOverride{}
				d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
					var o policy.RuleOverride
					d.Fields(v, path, Handlers{
						"limit": func(v *yaml.Node, path string) { o.Limit = d.Int(v, path) },
						"burst": func(v *yaml.Node, path string) { o.Burst = d.Int(v, path) },
					})
					t.Rules[name] = o
				})
			},
			"shares": func(v *yaml.Node, path string) {
				t.Shares = map[string]float64{}
				d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
					t.Shares[name] = d.Float(v, path)
				})
			},
		})
		ts[id] = t
	})
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// planRules decodes a plan: a list of limits, or one limit. A last item
// {concurrency: N} is the plan's concurrency limit (last, so that the
// limits keep their indices in the policy's paths).
func (d *Decoder) planRules(n *yaml.Node, path string) (rules []policy.Rule, concurrency int64) {
	if n.Kind != yaml.SequenceNode {
		return d.rules(n, path), 0
	}
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		if v.Kind != yaml.MappingNode || !hasKey(v, "concurrency") {
			if concurrency != 0 {
				d.Add(v, path, "a limit after the concurrency item: put {concurrency: N} last")
			}
			rules = append(rules, d.rule(v, path, nil))
			return
		}
		if concurrency != 0 {
			d.Add(v, path, "a second concurrency limit: a plan has at most one")
		}
		d.Fields(v, path, Handlers{"concurrency": func(v *yaml.Node, path string) {
			if concurrency = d.Int(v, path); concurrency < 1 {
				d.Add(v, path, "%d: want at least 1 request in flight (omit the item for no limit)", concurrency)
			}
		}})
	})
	if len(rules) == 0 {
		d.Add(n, path, "no limits: give at least one rate limit")
	}
	return rules, concurrency
}

// rules decodes a plan: a list of limits, or one limit.
func (d *Decoder) rules(n *yaml.Node, path string) []policy.Rule {
	if n.Kind == yaml.MappingNode {
		return []policy.Rule{d.rule(n, path, nil)}
	}
	var out []policy.Rule
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		out = append(out, d.rule(v, path, nil))
	})
	if n.Kind == yaml.SequenceNode && len(out) == 0 {
		d.Add(n, path, "no limits: give at least one")
	}
	return out
}

// rule decodes one limit; extra adds fields (such as an anonymous rule's
// by).
func (d *Decoder) rule(n *yaml.Node, path string, extra Handlers) policy.Rule {
	var r policy.Rule
	var hasLimit, hasPeriod bool
	h := Handlers{
		"name":  func(v *yaml.Node, path string) { r.Name = d.Str(v, path) },
		"limit": func(v *yaml.Node, path string) { r.Limit.Limit, hasLimit = d.Int(v, path), true },
		"period": func(v *yaml.Node, path string) {
			r.Limit.Period, r.Calendar = d.Period(v, path)
			hasPeriod = true
		},
		"burst": func(v *yaml.Node, path string) { r.Limit.Burst = d.Int(v, path) },
		"algorithm": func(v *yaml.Node, path string) {
			a, err := algo.ParseAlgorithm(d.Str(v, path))
			if err != nil {
				d.Add(v, path, "unknown algorithm %q: want %s", v.Value, algo.AlgorithmNames())
			}
			r.Limit.Algorithm = a
		},
		"shadow": func(v *yaml.Node, path string) { r.Shadow = d.Bool(v, path) },
	}
	maps.Copy(h, extra)
	d.Fields(n, path, h)
	if n.Kind == yaml.MappingNode {
		if !hasLimit {
			d.Add(n, path+".limit", "limit is required: how many per period")
		}
		if !hasPeriod {
			d.Add(n, path+".period", "period is required: a duration such as 1m, or day or month")
		}
		if r.Calendar != policy.NoCalendar && r.Limit.Algorithm != algo.GCRA && r.Limit.Algorithm != algo.FixedWindow {
			d.Add(n, path+".algorithm", "a calendar window (%v) is always a fixed window: leave algorithm out", r.Calendar)
		}
	}
	return r
}

// Fail reads a fail mode: open or closed.
func (d *Decoder) Fail(n *yaml.Node, path string) policy.FailMode {
	switch d.Str(n, path) {
	case "open":
		return policy.FailOpen
	case "closed":
		return policy.FailClosed
	case "":
	default:
		d.Add(n, path, "fail mode %q: want open or closed", n.Value)
	}
	return policy.FailDefault
}

// slowDown reads a class's slow_down: off, or a duration (see
// policy.Class.SlowDown; off is stored as -1).
func (d *Decoder) slowDown(n *yaml.Node, path string) time.Duration {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "off", "false", "no":
			return -1
		case "on", "true", "yes":
			return 0
		}
		if v, err := time.ParseDuration(n.Value); err == nil && v > 0 {
			return v
		}
	}
	d.Add(n, path, "slow_down %q: want off, or a positive duration such as 100ms", n.Value)
	return 0
}

// Period reads a duration ("1m", "10s", "7d") or a calendar window ("day",
// "month").
func (d *Decoder) Period(n *yaml.Node, path string) (time.Duration, policy.Calendar) {
	v := d.Str(n, path)
	switch v {
	case "day":
		return 0, policy.Day
	case "month":
		return 0, policy.Month
	case "":
		return 0, policy.NoCalendar
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil {
			return time.Duration(n) * 24 * time.Hour, policy.NoCalendar
		}
	}
	p, err := time.ParseDuration(v)
	if err != nil || p <= 0 {
		d.Add(n, path, "period %q does not parse: want a positive duration such as 1s, 1m, 1h or 7d, or day or month for a calendar window", v)
		return 0, policy.NoCalendar
	}
	return p, policy.NoCalendar
}

// share reads a class's share of the plan's limit, a fraction in (0, 1].
// A bad value reads as the default 1, so that nothing else follows from it.
func (d *Decoder) share(v *yaml.Node, path string) float64 {
	n := len(d.problems)
	s := d.Float(v, path)
	switch {
	case len(d.problems) > n:
		return 1
	case s == 0:
		// Written out, 0 is a mistake (the zero of Go means 1).
		d.Add(v, path, "share 0 is outside (0, 1]: a class gets a fraction of the plan's limit; omit it for 1")
		return 1
	}
	return s
}
