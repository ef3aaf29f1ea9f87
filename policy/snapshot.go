package policy

import (
	"math"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Snapshot is a compiled, immutable policy: what decides requests. It
// holds no state that changes after [Compile] (no caches), so one tenant's
// requests can never change what another's resolve to. It is safe for
// concurrent use.
type Snapshot struct {
	plans     map[string]*cplan
	classes   map[string]*Class
	tenants   map[string]*ctenant
	defTenant *ctenant
	// planTenants are unlisted tenants on each plan (Request.Plan).
	planTenants map[string]*ctenant
	routes      map[string]*Route
	anon        map[string]*AnonRoute
	preflight   *AnonRoute // CORS preflights' limits
	mux         *http.ServeMux
	patterns    map[string]string // the mux's patterns to the policy's
	loc         *time.Location
	policy      Policy
	// tenantUnit is the unit of the tenant's layers (see [Layer].Unit).
	tenantUnit string
}

type cplan struct {
	Plan
	rules []crule
	names *layerNames // built once, by compileTenant
}

// layerNames are a plan's layer policy names, built once instead of per
// decision: per rule its name, the tenant layer's ("<plan>.tenant.<rule>")
// and, per class, the class layer's ("<plan>.<class>.<rule>").
type layerNames struct {
	rule, tenant []string
	class        map[string][]string
}

// namesOf builds pl's layer names for the classes of s.
func namesOf(name string, rules []crule, classes map[string]*Class) *layerNames {
	n := &layerNames{class: make(map[string][]string, len(classes))}
	for _, r := range rules {
		n.rule = append(n.rule, r.Name)
		n.tenant = append(n.tenant, name+".tenant."+r.Name)
	}
	for cn := range classes {
		for _, r := range rules {
			n.class[cn] = append(n.class[cn], name+"."+cn+"."+r.Name)
		}
	}
	return n
}

// tenantPolicy is the policy name of rule i's tenant layer.
func (t *ctenant) tenantPolicy(i int) string {
	if n := t.names; n != nil && i < len(n.rule) && n.rule[i] == t.rules[i].Name {
		return n.tenant[i]
	}
	return t.plan + ".tenant." + t.rules[i].Name
}

// classPolicy is the policy name of rule i's layer for class c.
func (t *ctenant) classPolicy(c string, i int) string {
	if n := t.names; n != nil && i < len(n.rule) && n.rule[i] == t.rules[i].Name {
		if cs, ok := n.class[c]; ok {
			return cs[i]
		}
	}
	return t.plan + "." + c + "." + t.rules[i].Name
}

// ctenant is a tenant's effective plan rules, overrides applied.
type ctenant struct {
	base   *ctenant // what applies once an overlay entry expires; nil: the default
	plan   string
	source PlanSource  // where plan comes from
	names  *layerNames // its plan's; nil: built per decision
	// concurrency is the plan's Concurrency, the tenant's override applied.
	concurrency int64
	tenant      Tenant
	rules       []crule
	shares      map[string]float64
}

// classLimit is rule r's limit for class c: the share applied.
func (t *ctenant) classLimit(r crule, c *Class) algo.Limit {
	share := c.Share
	if v, ok := t.shares[c.Name]; ok {
		share = v
	}
	l := r.Limit
	if share >= 1 || r.Calendar != NoCalendar {
		return l // quotas are the tenant's as a whole
	}
	l.Limit = scale(l.Limit, share)
	if l.Burst != 0 {
		l.Burst = scale(l.Burst, share)
	}
	if l.Algorithm.Windowed() && l.Burst != 0 {
		l.Burst = l.Limit
	}
	return l
}

// Policy returns the policy the snapshot was compiled from.
func (s *Snapshot) Policy() Policy { return s.policy }

// PlanSource is where a tenant's plan comes from. The sources, first to
// last (the first that has something to say decides, see
// [Snapshot.Standing]):
//
//  1. PlanFromRuntime: the tenant's entry written at run time (the admin
//     API's PUT /admin/tenants/{id}, [Overlay].Tenants), until it expires;
//  2. PlanFromFile: the tenant's entry in the config file (tenants.<id>);
//  3. PlanFromCredential: the plan the request's verified credential names
//     (an API key's plan, from the config file or the admin API, or a JWT's
//     plan claim), if the policy has that plan;
//  4. PlanFromDefault: the policy's default plan.
//
// An entry without a plan puts the tenant on the default plan, with its
// overrides: an entry is all the policy says of its tenant. A request
// carries one credential, so the credential sources never compete.
type PlanSource int

// The plan sources, first to last.
const (
	PlanFromDefault PlanSource = iota
	PlanFromCredential
	PlanFromFile
	PlanFromRuntime
)

// String names s as the docs and the admin API do: "default",
// "credential", "file" or "runtime".
func (s PlanSource) String() string {
	switch s {
	case PlanFromCredential:
		return "credential"
	case PlanFromFile:
		return "file"
	case PlanFromRuntime:
		return "runtime"
	}
	return "default"
}

// Standing is what the policy says of one tenant at one time.
type Standing struct {
	// Plan is the plan in force: the tenant entry's, the plan its
	// credential names, or the default plan (see [PlanSource]).
	Plan string
	// Source is where Plan comes from.
	Source PlanSource
	// Listed reports that an entry or a credential's plan, not the default,
	// decides the tenant; Expires is when a run-time entry ends (zero:
	// never).
	Listed  bool
	Expires time.Time
	// Overrides reports that the tenant's entry changes a limit of its
	// plan: its limit or burst, a rule's, a class's share or the
	// concurrency. An entry that only names a plan changes none.
	Overrides bool
}

// Standing returns what decides tenant id at now, for a tenant whose
// verified credential names plan ("" for none), by the order of
// [PlanSource]: the tenant's entry (run-time, then the file's), else the
// credential's plan, else the default plan. Decisions (Resolve) follow the
// same order, in one place.
func (s *Snapshot) Standing(id, plan string, now time.Time) Standing {
	t := s.tenantFor(id, plan, now)
	e := t.tenant
	overrides := e.Limit != 0 || e.Burst != 0 || len(e.Rules) > 0 || len(e.Shares) > 0 || e.Concurrency != 0
	return Standing{Plan: t.plan, Source: t.source, Listed: t != s.defTenant, Expires: e.Expires, Overrides: overrides}
}

// FileStanding is what decides tenant id by the config file alone: what
// [Snapshot.Standing] says once the tenant's run-time entry has ended, by
// expiry or by deletion (DELETE /admin/tenants/{id}). plan is as for
// Standing. A tenant without a run-time entry stands the same either way.
func (s *Snapshot) FileStanding(id, plan string) Standing {
	t, ok := s.tenants[id]
	for ok && t != nil && t.source == PlanFromRuntime {
		t = t.base
	}
	if !ok || t == nil {
		t = s.defTenant
		if pt, known := s.planTenants[plan]; known && plan != "" {
			t = pt
		}
	}
	return Standing{Plan: t.plan, Source: t.source, Listed: t != s.defTenant}
}

// KnownPlan reports whether plan names a plan of the snapshot.
func (s *Snapshot) KnownPlan(plan string) bool {
	_, ok := s.planTenants[plan]
	return ok
}

// PlanNames returns the names of the plans (the file's and the run-time
// ones), sorted.
func (s *Snapshot) PlanNames() []string { return sortedKeys(s.planTenants) }

// ClassNames returns the names of the classes, sorted.
func (s *Snapshot) ClassNames() []string { return sortedKeys(s.classes) }

// HasFailClosed reports whether some class or anonymous route fails closed
// (and so is refused while the store is out).
func (s *Snapshot) HasFailClosed() bool {
	for _, c := range s.classes {
		if c.Fail == FailClosed {
			return true
		}
	}
	for _, a := range s.anon {
		if a.Fail == FailClosed {
			return true
		}
	}
	return false
}

// slotLayers are the concurrency layers of t's requests in class c: the
// tenant's, then the class's share of it when that is below 1. tag is the
// tenant's escaped ID.
func (t *ctenant) slotLayers(c *Class, tag string) []SlotLayer {
	out := []SlotLayer{{Policy: t.plan + ".tenant.concurrency", Key: "rl:{t:" + tag + "}:conc", Limit: t.concurrency}}
	if share := t.share(c); share < 1 {
		out = append(out, SlotLayer{Policy: t.plan + "." + c.Name + ".concurrency", Key: "rl:{t:" + tag + "}:conc:" + c.Name, Class: c.Name,
			Limit: max(1, int64(math.Ceil(float64(t.concurrency)*share))), Shadow: c.Shadow})
	}
	return out
}
