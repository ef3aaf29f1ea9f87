package policy

import (
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Compile validates p and returns the snapshot that decides requests. The
// error, if any, is a [Problems] naming every problem found.
func Compile(p Policy) (*Snapshot, error) { return CompileWith(p, Overlay{}) }

// CompileWith is Compile with ov written over p. Problems of overlay
// entries have paths under "overlay.plans.<name>" and
// "overlay.tenants.<id>".
func CompileWith(p Policy, ov Overlay) (*Snapshot, error) {
	var ps problems
	s := &Snapshot{
		plans:    map[string]*cplan{},
		classes:  map[string]*Class{},
		tenants:  map[string]*ctenant{},
		routes:   map[string]*Route{},
		anon:     map[string]*AnonRoute{},
		loc:      p.Location,
		mux:      http.NewServeMux(),
		patterns: map[string]string{},
	}
	if s.loc == nil {
		s.loc = time.UTC
	}
	p.Plans = s.compilePlans(&ps, p.Plans, ov.Plans)
	s.policy = p
	s.compileClasses(&ps, p.Classes)
	s.tenantUnit = tenantUnit(s.classes)
	s.checkDefaults(&ps)
	s.compileTenants(&ps, p.Tenants, ov.Tenants)
	s.checkCaps(&ps)
	s.compileRoutes(&ps, p.Routes)
	s.compileAnonymous(&ps, p.Anonymous)
	s.compilePreflight(&ps, p.Preflight)
	if len(ps.list) > 0 {
		return nil, ps.list
	}
	return s, nil
}

// compilePlans validates the file's plans with the overlay's written over
// them and returns the merged set.
func (s *Snapshot) compilePlans(ps *problems, file, over map[string]Plan) map[string]Plan {
	plans := make(map[string]Plan, len(file)+len(over))
	maps.Copy(plans, file)
	maps.Copy(plans, over)
	for _, name := range sortedKeys(plans) {
		pl := plans[name]
		path := "plans." + name
		if _, ok := over[name]; ok {
			path = "overlay.plans." + name
		}
		if !nameRE.MatchString(name) {
			ps.add(path, "plan name %q: want %s", name, nameRule)
		}
		if pl.Name != "" && pl.Name != name {
			ps.add(path+".name", "name %q differs from the key %q", pl.Name, name)
		}
		pl.Name = name
		s.plans[name] = &cplan{Plan: pl, rules: compileRules(ps, path+".rules", pl.Rules)}
		if pl.Concurrency < 0 || pl.Concurrency > MaxConcurrency {
			ps.add(path+".concurrency", "%d is outside 0..%d", pl.Concurrency, MaxConcurrency)
		}
	}
	return plans
}

// compileClasses validates the classes; a zero Share means 1.
func (s *Snapshot) compileClasses(ps *problems, classes map[string]Class) {
	s.policy.Classes = make(map[string]Class, len(classes)) // with defaults applied
	for _, name := range sortedKeys(classes) {
		c := classes[name]
		path := "classes." + name
		if !nameRE.MatchString(name) || name == "tenant" {
			ps.add(path, "class name %q: want %s, and not \"tenant\"", name, nameRule)
		}
		if c.Share == 0 {
			c.Share = 1 // the config file's default, for a Class built in Go
		}
		if c.Fail == FailDefault {
			c.Fail = FailOpen
		}
		if !(c.Share > 0 && c.Share <= 1) {
			ps.add(path+".share", "share %v is outside (0, 1]: a class gets a fraction of the plan's limit", c.Share)
		}
		if c.Lease < 0 || c.Lease > 1_000_000 {
			ps.add(path+".lease", "lease %d is outside 0..1000000 (0: no leases)", c.Lease)
		}
		if c.SlowDown > MaxSlowDown {
			ps.add(path+".slow_down", "slow_down %v is over %v: a held request keeps its connection busy that long", c.SlowDown, MaxSlowDown)
		}
		if c.Cost != nil {
			mc := *c.Cost // the caller's is not shared
			c.Cost = &mc
			compileCost(ps, path+".cost", &c)
			s.measured = true
		}
		c.Name = name
		s.classes[name] = &c
		s.policy.Classes[name] = c
	}
}

// checkDefaults reports missing plans and classes and unknown defaults.
func (s *Snapshot) checkDefaults(ps *problems) {
	p := &s.policy
	if len(p.Plans) == 0 {
		ps.add("plans", "plans is required: define at least one plan (the limits a tenant gets), such as free: {limit: 100, period: 1m}")
	}
	if p.DefaultPlan == "" {
		ps.add("default_plan", "default_plan is required: the plan of tenants the policy does not list")
	} else if _, ok := s.plans[p.DefaultPlan]; !ok {
		unknown(ps, "default_plan", "plan", p.DefaultPlan, p.Plans)
	}
	if len(p.Classes) == 0 {
		ps.add("classes", "classes is required: define at least one class (a share of the plan's limit that routes and default_class name), such as read: {share: 1}")
	}
	if p.DefaultClass == "" {
		ps.add("default_class", "default_class is required: the class of requests no route matches")
	} else if _, ok := s.classes[p.DefaultClass]; !ok {
		unknown(ps, "default_class", "class", p.DefaultClass, p.Classes)
	}
}

// compileTenants validates the file's tenant entries, then the overlay's
// over them, and the unlisted tenants of every plan.
func (s *Snapshot) compileTenants(ps *problems, file, over map[string]Tenant) {
	for _, id := range sortedKeys(file) {
		path := "tenants." + id
		if err := CheckTenantID(id); err != nil {
			ps.add(path, "tenant ID: %v", err)
			continue
		}
		if ct := compileTenant(ps, s, path, file[id]); ct != nil {
			ct.tenant.Expires = time.Time{} // the file's entries do not expire
			ct.source = PlanFromFile
			s.tenants[id] = ct
		}
	}
	for _, id := range sortedKeys(over) {
		path := "overlay.tenants." + id
		if err := CheckTenantID(id); err != nil {
			ps.add(path, "tenant ID: %v", err)
			continue
		}
		if ct := compileTenant(ps, s, path, over[id]); ct != nil {
			ct.base, ct.source = s.tenants[id], PlanFromRuntime
			s.tenants[id] = ct
		}
	}
	s.defTenant = compileTenant(ps, s, "default_plan", Tenant{})
	s.planTenants = map[string]*ctenant{}
	for name := range s.plans {
		if ct := compileTenant(ps, s, "plans."+name, Tenant{Plan: name}); ct != nil {
			ct.source = PlanFromCredential
			s.planTenants[name] = ct
		}
	}
}

// compileRoutes validates the routes and their costs.
func (s *Snapshot) compileRoutes(ps *problems, routes []Route) {
	s.policy.Routes = slices.Clone(routes) // with defaults applied
	for i, r := range routes {
		path := fmt.Sprintf("routes[%d]", i)
		c, ok := s.classes[r.Class]
		if !ok {
			unknown(ps, path+".class", "class", r.Class, s.policy.Classes)
		}
		switch {
		case ok && c.Cost != nil && (r.Free || r.Cost != 0):
			ps.add(path+".cost", "class %q has a measured cost: its estimate is the route's cost; remove cost", r.Class)
		case ok && c.Cost != nil:
			// The estimate is the cost: 0 stays, so that the policy
			// with its defaults (Snapshot.Policy) compiles again.
		case r.Free && r.Cost != 0:
			ps.add(path+".cost", "cost %d on a free route: give one or the other", r.Cost)
		case r.Free:
		case r.Cost < 0 || r.Cost > algo.MaxCount:
			ps.add(path+".cost", "cost %d is outside 0..%d", r.Cost, algo.MaxCount)
		default:
			r.Cost = max(r.Cost, 1)
			if ok {
				checkCost(ps, s, path+".cost", r.Cost, c)
			}
		}
		s.policy.Routes[i] = r
		if s.register(ps, path+".route", r.Pattern) {
			s.routes[r.Pattern] = &r
		}
	}
}

// compileAnonymous validates the anonymous routes.
func (s *Snapshot) compileAnonymous(ps *problems, anon []AnonRoute) {
	s.policy.Anonymous = slices.Clone(anon) // with defaults and the rules' derived names
	for i, a := range anon {
		path := fmt.Sprintf("anonymous[%d]", i)
		if a.Name == PreflightName {
			ps.add(path+".name", "name %q is the CORS preflights' own (set their limits under preflight)", a.Name)
		}
		a = compileAnon(ps, path, a)
		s.policy.Anonymous[i] = a
		if s.register(ps, path+".route", a.Pattern) {
			s.anon[a.Pattern] = &a
		}
	}
}

// compilePreflight validates the CORS preflights' limits, the defaults
// for none.
func (s *Snapshot) compilePreflight(ps *problems, pf *AnonRoute) {
	a := DefaultPreflight()
	if pf != nil {
		a = *pf
		for _, r := range a.Rules {
			if r.By != ByIP {
				ps.add("preflight.limits", "preflights carry no credential: they are limited per client address (by: ip)")
			}
		}
		if len(a.Rules) == 0 {
			ps.add("preflight.limits", "at least one limit is required")
		}
		if a.Fail == FailDefault {
			a.Fail = FailOpen
		}
	}
	a.Name, a.Pattern = PreflightName, ""
	a = compileAnon(ps, "preflight", a)
	s.preflight = &a
	s.policy.Preflight = &a
}

// compileAnon validates an anonymous route's rules, cost and fail mode,
// and returns it with its defaults.
func compileAnon(ps *problems, path string, a AnonRoute) AnonRoute {
	if !nameRE.MatchString(a.Name) {
		ps.add(path+".name", "name %q: want %s", a.Name, nameRule)
	}
	rules := make([]Rule, len(a.Rules))
	for j, r := range a.Rules {
		rules[j] = r.Rule
	}
	crs := compileRules(ps, path+".rules", rules)
	a.Rules = slices.Clone(a.Rules)
	for j := range a.Rules {
		if j < len(crs) {
			a.Rules[j].Rule = crs[j].Rule
		}
	}
	if a.Cost == 0 {
		a.Cost = 1
	}
	if a.Fail == FailDefault {
		a.Fail = FailClosed
	}
	if a.Cost < 1 || a.Cost > algo.MaxCount {
		ps.add(path+".cost", "cost %d is outside 1..%d", a.Cost, algo.MaxCount)
	} else {
		for j, r := range crs {
			if a.Cost > r.capacity() {
				ps.add(fmt.Sprintf("%s.rules[%d].burst", path, j), "cost %d exceeds the burst %d: such a request could never pass", a.Cost, r.capacity())
			}
		}
	}
	return a
}

// crule is a validated rule.
type crule struct {
	Rule
}

// calWindow is a calendar window: its length and offset as a fixed
// window's, and its label for keys.
type calWindow struct {
	period, offset time.Duration
	label          winLabel
}

// capacity is the rule's burst; a calendar rule's limit.
func (r *crule) capacity() int64 { return r.Limit.Capacity() }

// compileRules validates rules and gives each its name.
func compileRules(ps *problems, path string, rules []Rule) []crule {
	if len(rules) == 0 {
		ps.add(path, "no rules: give at least one limit")
	}
	out := make([]crule, 0, len(rules))
	seen := map[string]bool{}
	for i, r := range rules {
		rp := fmt.Sprintf("%s[%d]", path, i)
		if r.Calendar != NoCalendar {
			r.Limit.Algorithm, r.Limit.Burst, r.Limit.Offset = algo.FixedWindow, 0, 0
			r.Limit.Period = 24 * time.Hour // stands in for validation
			if r.Calendar == Month {
				r.Limit.Period = 31 * 24 * time.Hour
			}
		}
		if r.Name == "" {
			r.Name = ruleName(r)
		}
		if !nameRE.MatchString(r.Name) {
			ps.add(rp+".name", "name %q: want %s", r.Name, nameRule)
		}
		if seen[r.Name] {
			ps.add(rp+".name", "two rules named %q: give them distinct names", r.Name)
		}
		seen[r.Name] = true
		validateLimit(ps, rp, r.Limit)
		out = append(out, crule{Rule: r})
	}
	return out
}

// validateLimit reports what is wrong with l, by field.
func validateLimit(ps *problems, path string, l algo.Limit) {
	switch {
	case l.Limit < 1 || l.Limit > algo.MaxCount:
		ps.add(path+".limit", "limit %d is outside 1..%d", l.Limit, algo.MaxCount)
	case l.Burst < 0 || l.Burst > algo.MaxCount:
		ps.add(path+".burst", "burst %d is outside 1..%d", l.Burst, algo.MaxCount)
	case l.Period <= 0:
		ps.add(path+".period", "period %v: want a positive duration such as 1m, or day or month", l.Period)
	default:
		if err := l.Validate(); err != nil {
			field := ".limit"
			switch msg := err.Error(); {
			case strings.Contains(msg, "period"):
				field = ".period"
			case strings.Contains(msg, "burst"):
				field = ".burst"
			}
			ps.add(path+field, "%s", strings.TrimPrefix(err.Error(), "algo: invalid limit: "))
		}
	}
}

// ruleName derives a rule's default name from its window.
func ruleName(r Rule) string {
	if r.Calendar != NoCalendar {
		return r.Calendar.String()
	}
	d := r.Limit.Period
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d >= u.d && d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.s)
		}
	}
	return fmt.Sprintf("%dus", d/time.Microsecond)
}

// compileTenant validates a tenant entry against the snapshot's plans and
// classes and returns its layers' rules.
func compileTenant(ps *problems, s *Snapshot, path string, t Tenant) *ctenant {
	planName := t.Plan
	if planName == "" {
		planName = s.policy.DefaultPlan
	}
	pl, ok := s.plans[planName]
	if !ok {
		if t.Plan != "" {
			unknown(ps, path+".plan", "plan", t.Plan, s.policy.Plans)
		}
		return nil
	}
	if pl.names == nil {
		pl.names = namesOf(planName, pl.rules, s.classes)
	}
	ct := &ctenant{plan: planName, names: pl.names, tenant: t, rules: slices.Clone(pl.rules), shares: map[string]float64{}, concurrency: pl.Concurrency}
	switch {
	case t.Concurrency < 0 || t.Concurrency > MaxConcurrency:
		ps.add(path+".concurrency", "%d is outside 0..%d", t.Concurrency, MaxConcurrency)
	case t.Concurrency > 0:
		ct.concurrency = t.Concurrency
	}
	apply := func(i int, p string, lim, burst int64) {
		r := &ct.rules[i]
		if lim != 0 {
			r.Limit.Limit = lim
			if r.Limit.Algorithm.Windowed() && r.Limit.Burst != 0 {
				r.Limit.Burst = lim
			}
		}
		if burst != 0 {
			r.Limit.Burst = burst
		}
		validateLimit(ps, p, r.Limit)
	}
	if (t.Limit != 0 || t.Burst != 0) && len(ct.rules) > 0 {
		apply(0, path, t.Limit, t.Burst)
	}
	for _, name := range sortedKeys(t.Rules) {
		i := slices.IndexFunc(ct.rules, func(r crule) bool { return r.Name == name })
		if i < 0 {
			ps.add(path+".rules."+name, "plan %q has no rule %q", planName, name)
			continue
		}
		o := t.Rules[name]
		apply(i, path+".rules."+name, o.Limit, o.Burst)
	}
	for _, name := range sortedKeys(t.Shares) {
		v := t.Shares[name]
		if _, ok := s.classes[name]; !ok {
			ps.add(path+".shares."+name, "unknown class %q", name)
			continue
		}
		if !(v > 0 && v <= 1) {
			ps.add(path+".shares."+name, "share %v is outside (0, 1]", v)
			continue
		}
		ct.shares[name] = v
	}
	return ct
}

// checkCost reports a route cost that some tenant's class layer could never
// admit.
func checkCost(ps *problems, s *Snapshot, path string, cost int64, c *Class) {
	check := func(who string, t *ctenant) bool {
		for _, r := range t.rules {
			l := t.classLimit(r, c)
			if l.Validate() != nil {
				continue // reported where the rule is
			}
			if cost > l.Capacity() {
				ps.add(path, "cost %d exceeds the burst %d of class %q under %s rule %q: such a request could never pass", cost, l.Capacity(), c.Name, who, r.Name)
				return false
			}
		}
		return true
	}
	for _, name := range sortedKeys(s.plans) {
		if !check("plan "+strconv.Quote(name), &ctenant{plan: name, rules: s.plans[name].rules}) {
			return
		}
	}
	for _, id := range sortedKeys(s.tenants) {
		if !check("tenant "+strconv.Quote(id)+"'s", s.tenants[id]) {
			return
		}
	}
}

// scale returns n × share rounded to nearest, at least 1.
func scale(n int64, share float64) int64 {
	return max(1, int64(math.Round(float64(n)*share)))
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
