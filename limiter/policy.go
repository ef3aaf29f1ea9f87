package limiter

import (
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/fairgate/fairgate/algo"
)

// Calendar names a calendar window for a quota: the window is a day or a
// month in the policy's time zone instead of a fixed period.
type Calendar uint8

// The calendar windows.
const (
	// NoCalendar means the rule's Limit.Period is the window.
	NoCalendar Calendar = iota
	// Day is the calendar day, midnight to midnight.
	Day
	// Month is the calendar month, from the first at midnight.
	Month
)

// String returns "day", "month" or "".
func (c Calendar) String() string {
	switch c {
	case Day:
		return "day"
	case Month:
		return "month"
	}
	return ""
}

// Rule is one limit of a plan or of an anonymous route.
type Rule struct {
	// Name tells the rule apart within its plan and is part of its keys.
	// Lower-case letters, digits, '-' and '_'. Empty means one derived from
	// the window ("1m", "day", "month").
	Name string `json:"name,omitempty"`
	// Limit is the limit. For a calendar rule only Limit.Limit counts: the
	// window is the calendar's, the algorithm a fixed window.
	Limit algo.Limit `json:"limit"`
	// Calendar makes the rule a quota per calendar day or month.
	Calendar Calendar `json:"calendar,omitempty"`
	// Shadow runs the rule without enforcing it: would-be rejections are
	// counted and logged.
	Shadow bool `json:"shadow,omitempty"`
}

// Plan is a named set of rules that tenants are on.
type Plan struct {
	// Name is the plan's name.
	Name string `json:"name"`
	// Rules are the plan's limits, stacked: a request passes only if all
	// pass. The first is the primary one that Override.Limit and
	// Override.Burst change.
	Rules []Rule `json:"rules"`
}

// FailMode says what a decision is when the store cannot answer.
type FailMode uint8

// The fail modes.
const (
	// FailOpen admits, decided by the in-process fallback limiter.
	FailOpen FailMode = iota
	// FailClosed rejects with [ReasonUnavailable].
	FailClosed
)

// String returns "open" or "closed".
func (f FailMode) String() string {
	if f == FailClosed {
		return "closed"
	}
	return "open"
}

// Class is a route class: a share of the plan's limits that the routes of
// the class may use, with its own fail mode and shadow switch.
type Class struct {
	// Name is the class's name.
	Name string `json:"name"`
	// Share is the fraction of each plan rule's limit and burst the class
	// gets, in (0, 1]. A class with share 1 has no layer of its own. Zero
	// means 1, as an omitted share does in the config file.
	Share float64 `json:"share"`
	// Fail is the class's fail mode.
	Fail FailMode `json:"fail"`
	// Shadow runs the class's own layers without enforcing them; its
	// requests still count against the tenant's overall limits as before.
	Shadow bool `json:"shadow,omitempty"`
	// NoNearCache sends every request of the class to the store, even
	// for a key the store has just rejected (the near cache is on by
	// default: a rejected key is answered locally until its retry-after).
	NoNearCache bool `json:"no_near_cache,omitempty"`
	// Lease, when over 0, lets each instance take this many units of a
	// tenant's layers in one store call and spend them locally (for very
	// hot tenants on one Redis Cluster slot). It admits up to the unspent
	// leases of all instances over the limit in a window; see lease.go.
	Lease int64 `json:"lease,omitempty"`
	// SlowDown is how long a request the near cache rejects is held
	// before its 429 goes out, when the caller lets it be (Request.Hold:
	// the HTTP middleware, the proxy, the gRPC interceptors). Such a
	// request came while its key was already known rejected: its client
	// did not wait the Retry-After it was given. Holding it (never past
	// its retry-after) paces a client that retries in a loop to a few
	// requests per connection a second, so its requests stop competing
	// with other tenants' for the instance's CPU. Zero means
	// [DefaultSlowDown]; negative turns it off.
	SlowDown time.Duration `json:"slow_down,omitempty"`
}

// slowDown is how long a near-cache rejection of the class may be held.
func (c *Class) slowDown() time.Duration {
	switch {
	case c.SlowDown < 0:
		return 0
	case c.SlowDown == 0:
		return DefaultSlowDown
	}
	return c.SlowDown
}

// DefaultSlowDown is a class's SlowDown when the policy gives none.
const DefaultSlowDown = 100 * time.Millisecond

// MaxSlowDown bounds Class.SlowDown.
const MaxSlowDown = 10 * time.Second

// Route maps requests to a class and a cost.
type Route struct {
	// Pattern is a net/http ServeMux pattern with a method, such as
	// "GET /v1/users/{id}".
	Pattern string `json:"route"`
	// Class is the class's name.
	Class string `json:"class"`
	// Cost is what a request costs; 0 is a free route (never limited).
	Cost int64 `json:"cost"`
}

// By says what an anonymous rule is keyed by.
type By uint8

// What anonymous rules are keyed by.
const (
	// ByIP keys by the client's address: IPv4 per address, IPv6 per /64.
	ByIP By = iota
	// ByCredential keys by the credential the request presents (a user
	// name, an e-mail address), hashed; by IP when there is none.
	ByCredential
)

// String returns "ip" or "credential".
func (b By) String() string {
	if b == ByCredential {
		return "credential"
	}
	return "ip"
}

// AnonRule is one rule of an anonymous route with what it is keyed by.
type AnonRule struct {
	Rule
	// By is what the rule is keyed by.
	By By `json:"by"`
}

// AnonRoute limits requests that carry no tenant, such as login, password
// reset or OTP, per client IP or per credential.
type AnonRoute struct {
	// Name tells the route apart and is part of its keys.
	Name string `json:"name"`
	// Pattern is a ServeMux pattern with a method, as in [Route].
	Pattern string `json:"route"`
	// Rules are its limits.
	Rules []AnonRule `json:"rules"`
	// Cost is what a request costs; at least 1.
	Cost int64 `json:"cost"`
	// Fail is its fail mode; anonymous routes usually fail closed.
	Fail FailMode `json:"fail"`
	// Shadow runs its rules without enforcing them.
	Shadow bool `json:"shadow,omitempty"`
}

// RuleOverride changes one rule's limit or burst for one tenant. Zero keeps
// the plan's value.
type RuleOverride struct {
	Limit int64 `json:"limit,omitempty"`
	Burst int64 `json:"burst,omitempty"`
}

// Tenant is what a policy says of one tenant: its plan and its overrides.
type Tenant struct {
	// Plan is the tenant's plan; empty means the policy's default plan.
	Plan string `json:"plan,omitempty"`
	// Limit and Burst override the plan's primary rule; zero keeps it.
	Limit int64 `json:"limit,omitempty"`
	Burst int64 `json:"burst,omitempty"`
	// Rules override rules by name.
	Rules map[string]RuleOverride `json:"rules,omitempty"`
	// Shares override class shares by class name.
	Shares map[string]float64 `json:"shares,omitempty"`
	// Expires ends an override written at run time (a temporary bump): from
	// then on the tenant is decided as if it were not written. Zero means
	// never. Ignored in the config file.
	Expires time.Time `json:"expires,omitzero"`
}

// Policy is the whole policy as written: what the config file holds, in Go.
// [Compile] validates it into a [Snapshot].
type Policy struct {
	// Plans by name.
	Plans map[string]Plan
	// DefaultPlan is the plan of tenants not listed in Tenants.
	DefaultPlan string
	// Classes by name.
	Classes map[string]Class
	// DefaultClass is the class of requests no route matches.
	DefaultClass string
	// Routes map requests to classes and costs.
	Routes []Route
	// Anonymous are the routes limited per IP or credential.
	Anonymous []AnonRoute
	// Tenants by verified tenant ID.
	Tenants map[string]Tenant
	// Location is the time zone of calendar windows. Nil means UTC.
	Location *time.Location
	// RouteMatch says how requests are matched to routes.
	RouteMatch RouteMatch
}

// RouteMatch says how a request's method and path are matched to routes.
// A request is classified as the upstream will most likely read it, so
// that no spelling of a path escapes its class into a cheaper one: the
// method is upper-cased; the path is cleaned (".." and "." resolved,
// repeated slashes collapsed) and loses its ";" path parameters
// ("/v1/search;x" is "/v1/search"). The zero value also ignores case and
// a trailing slash, which most frameworks do; the fields switch that off
// for upstreams that tell them apart.
type RouteMatch struct {
	// CaseSensitive matches paths as they are spelled. False (the
	// default) matches "/v1/Search" as "/v1/search".
	CaseSensitive bool `json:"case_sensitive,omitempty"`
	// ExactTrailingSlash tells "/v1/search/" from "/v1/search". False (the
	// default) matches them alike.
	ExactTrailingSlash bool `json:"exact_trailing_slash,omitempty"`
}

// CleanRoute returns method and path as m matches them to routes.
func (m RouteMatch) CleanRoute(method, p string) (string, string) {
	method = strings.ToUpper(method)
	if strings.IndexByte(p, ';') >= 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	slash := strings.HasSuffix(p, "/")
	p = path.Clean("/" + p)
	if slash && p != "/" && m.ExactTrailingSlash {
		p += "/"
	}
	if !m.CaseSensitive {
		p = strings.ToLower(p)
	}
	return method, p
}

// Problem is one thing wrong with a policy: where (a path such as
// "plans.free.rules[0].burst") and what.
type Problem struct {
	Path    string
	Message string
}

// Problems is every problem Compile found. It is an error.
type Problems []Problem

// Error lists the problems, one per line.
func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s: %s", p.Path, p.Message)
	}
	return b.String()
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

const nameRule = NameRule

// NameRule says what ValidName accepts, for error messages.
const NameRule = "lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 64"

// ValidName reports whether s can name a plan, class, rule, provider,
// job kind or dependency: see NameRule. Such names go into store keys,
// metric labels and URLs as they are.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// MaxTenantID is the longest tenant ID the policy accepts. Longer IDs are
// rejected at the edge; keys hash IDs that escape to over 64 bytes anyway.
const MaxTenantID = 16 << 10

// problems collects Problems.
type problems struct{ list Problems }

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, Problem{path, fmt.Sprintf(format, args...)})
}

// Overlay is what is written at run time over the policy from the config
// file: plans that replace or add to the file's, and tenant entries that
// replace the file's (until they expire). A [ControlStore] keeps it.
type Overlay struct {
	// Version increases with every write.
	Version int64 `json:"version"`
	// Plans by name.
	Plans map[string]Plan `json:"plans,omitempty"`
	// Tenants by ID.
	Tenants map[string]Tenant `json:"tenants,omitempty"`
}

// Compile validates p and returns the snapshot that decides requests. The
// error, if any, is a [Problems] naming every problem found.
func Compile(p Policy) (*Snapshot, error) { return CompileWith(p, Overlay{}) }

// CompileWith is Compile with ov written over p. Problems of overlay
// entries have paths under "overlay.plans.<name>" and
// "overlay.tenants.<id>".
func CompileWith(p Policy, ov Overlay) (*Snapshot, error) {
	var ps problems
	s := &Snapshot{
		plans:   map[string]*cplan{},
		classes: map[string]*Class{},
		tenants: map[string]*ctenant{},
		routes:  map[string]*Route{},
		anon:    map[string]*AnonRoute{},
		loc:     p.Location,
		mux:     http.NewServeMux(),
		policy:  p,

		patterns: map[string]string{},
	}
	if s.loc == nil {
		s.loc = time.UTC
	}
	plans := make(map[string]Plan, len(p.Plans)+len(ov.Plans))
	for name, pl := range p.Plans {
		plans[name] = pl
	}
	for name, pl := range ov.Plans {
		plans[name] = pl
	}
	for _, name := range sortedKeys(plans) {
		pl := plans[name]
		path := "plans." + name
		if _, ok := ov.Plans[name]; ok {
			path = "overlay.plans." + name
		}
		if !nameRE.MatchString(name) {
			ps.add(path, "plan name %q: want %s", name, nameRule)
		}
		if pl.Name != "" && pl.Name != name {
			ps.add(path+".name", "name %q differs from the key %q", pl.Name, name)
		}
		pl.Name = name
		s.plans[name] = &cplan{Plan: pl, rules: compileRules(&ps, path+".rules", pl.Rules)}
	}
	for _, name := range sortedKeys(p.Classes) {
		c := p.Classes[name]
		path := "classes." + name
		if !nameRE.MatchString(name) || name == "tenant" {
			ps.add(path, "class name %q: want %s, and not \"tenant\"", name, nameRule)
		}
		if c.Share == 0 {
			c.Share = 1 // the config file's default, for a Class built in Go
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
		c.Name = name
		s.classes[name] = &c
	}
	p.Plans = plans
	s.policy.Plans = plans
	if len(p.Plans) == 0 {
		ps.add("plans", "no plans: define at least one")
	}
	if p.DefaultPlan == "" {
		ps.add("default_plan", "default_plan is required: the plan of tenants the policy does not list")
	} else if _, ok := s.plans[p.DefaultPlan]; !ok {
		ps.add("default_plan", "unknown plan %q: want one of %s", p.DefaultPlan, strings.Join(sortedKeys(p.Plans), ", "))
	}
	if len(p.Classes) == 0 {
		ps.add("classes", "no classes: define at least one")
	}
	if p.DefaultClass == "" {
		ps.add("default_class", "default_class is required: the class of requests no route matches")
	} else if _, ok := s.classes[p.DefaultClass]; !ok {
		ps.add("default_class", "unknown class %q: want one of %s", p.DefaultClass, strings.Join(sortedKeys(p.Classes), ", "))
	}
	for _, id := range sortedKeys(p.Tenants) {
		t := p.Tenants[id]
		path := "tenants." + id
		if id == "" || len(id) > MaxTenantID {
			ps.add(path, "tenant ID must be 1 to %d bytes", MaxTenantID)
			continue
		}
		ct := compileTenant(&ps, s, path, t)
		if ct != nil {
			ct.tenant.Expires = time.Time{} // the file's entries do not expire
			s.tenants[id] = ct
		}
	}
	for _, id := range sortedKeys(ov.Tenants) {
		path := "overlay.tenants." + id
		if id == "" || len(id) > MaxTenantID {
			ps.add(path, "tenant ID must be 1 to %d bytes", MaxTenantID)
			continue
		}
		ct := compileTenant(&ps, s, path, ov.Tenants[id])
		if ct != nil {
			ct.base = s.tenants[id]
			s.tenants[id] = ct
		}
	}
	s.defTenant = compileTenant(&ps, s, "default_plan", Tenant{})
	s.planTenants = map[string]*ctenant{}
	for name := range s.plans {
		s.planTenants[name] = compileTenant(&ps, s, "plans."+name, Tenant{Plan: name})
	}
	for i, r := range p.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		c, ok := s.classes[r.Class]
		if !ok {
			ps.add(path+".class", "unknown class %q: want one of %s", r.Class, strings.Join(sortedKeys(p.Classes), ", "))
		}
		if r.Cost < 0 || r.Cost > algo.MaxCount {
			ps.add(path+".cost", "cost %d is outside 0..%d", r.Cost, algo.MaxCount)
		} else if ok && r.Cost > 0 {
			checkCost(&ps, s, path+".cost", r.Cost, c)
		}
		r := r
		if s.register(&ps, path+".route", r.Pattern) {
			s.routes[r.Pattern] = &r
		}
	}
	for i, a := range p.Anonymous {
		path := fmt.Sprintf("anonymous[%d]", i)
		if !nameRE.MatchString(a.Name) {
			ps.add(path+".name", "name %q: want %s", a.Name, nameRule)
		}
		rules := make([]Rule, len(a.Rules))
		for j, r := range a.Rules {
			rules[j] = r.Rule
		}
		crs := compileRules(&ps, path+".rules", rules)
		for j := range a.Rules {
			if j < len(crs) {
				a.Rules[j].Rule = crs[j].Rule
			}
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
		a := a
		if s.register(&ps, path+".route", a.Pattern) {
			s.anon[a.Pattern] = &a
		}
	}
	if len(ps.list) > 0 {
		return nil, ps.list
	}
	return s, nil
}

// register adds a route pattern to the snapshot's mux, reporting a bad or
// duplicate pattern. The mux holds it as RouteMatch reads requests (the
// method upper-cased, the path lower-cased unless case-sensitive); match
// maps it back.
func (s *Snapshot) register(ps *problems, path, pattern string) (ok bool) {
	method, rest, found := strings.Cut(pattern, " ")
	if !found || method == "" || !strings.HasPrefix(strings.TrimLeft(rest, " "), "/") {
		ps.add(path, "pattern %q: want a method and a path, such as \"GET /v1/users/{id}\"", pattern)
		return false
	}
	muxPattern := strings.ToUpper(method) + " " + strings.TrimLeft(rest, " ")
	if !s.policy.RouteMatch.CaseSensitive {
		muxPattern = strings.ToUpper(method) + " " + lowerOutsideWildcards(strings.TrimLeft(rest, " "))
	}
	if _, dup := s.routes[pattern]; dup {
		ps.add(path, "duplicate route %q", pattern)
		return false
	}
	if _, dup := s.anon[pattern]; dup {
		ps.add(path, "duplicate route %q", pattern)
		return false
	}
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprint(v)
			if strings.Contains(msg, "conflicts with") {
				msg = "duplicate route: " + msg
			}
			ps.add(path, "pattern %q: %s", pattern, strings.TrimPrefix(msg, "http: "))
			ok = false
		}
	}()
	s.mux.Handle(muxPattern, http.NotFoundHandler())
	s.patterns[muxPattern] = pattern
	return true
}

// lowerOutsideWildcards lower-cases a pattern's path but for its wildcard
// names ({userID} stays as written).
func lowerOutsideWildcards(p string) string {
	var b strings.Builder
	depth := 0
	for _, r := range p {
		switch {
		case r == '{':
			depth++
		case r == '}':
			depth--
		case depth == 0:
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// crule is a validated rule.
type crule struct {
	Rule
}

// calWindow is a calendar window: its bounds, its length and offset as a
// fixed window's, and its label for keys. It holds nothing of any rule or
// tenant, so that sharing it can never carry one tenant's limit to another.
type calWindow struct {
	start, end     int64 // µs
	period, offset time.Duration
	label          string
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
			ps.add(path+".plan", "unknown plan %q: want one of %s", t.Plan, strings.Join(sortedKeys(s.policy.Plans), ", "))
		}
		return nil
	}
	ct := &ctenant{plan: planName, tenant: t, rules: slices.Clone(pl.rules), shares: map[string]float64{}}
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

// Snapshot is a compiled, immutable policy. It is safe for concurrent use.
type Snapshot struct {
	plans     map[string]*cplan
	classes   map[string]*Class
	tenants   map[string]*ctenant
	defTenant *ctenant
	// planTenants are unlisted tenants on each plan (Request.Plan).
	planTenants map[string]*ctenant
	routes      map[string]*Route
	anon        map[string]*AnonRoute
	mux         *http.ServeMux
	patterns    map[string]string // the mux's patterns to the policy's
	loc         *time.Location
	policy      Policy
	// cal remembers the current day and month windows (indexed by
	// Calendar), so that most requests reuse them instead of computing
	// dates. Windows only: every rule's limit is its own.
	cal [Month + 1]atomic.Pointer[calWindow]
}

type cplan struct {
	Plan
	rules []crule
}

// ctenant is a tenant's effective plan rules, overrides applied.
type ctenant struct {
	base   *ctenant // what applies once an overlay entry expires; nil: the default
	plan   string
	tenant Tenant
	rules  []crule
	shares map[string]float64
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

// match returns the pattern of the route or anonymous route that method and
// path match, or "".
func (s *Snapshot) match(method, path string) string {
	method, path = s.policy.RouteMatch.CleanRoute(method, path)
	r := &http.Request{Method: method, URL: &url.URL{Path: path}}
	_, pattern := s.mux.Handler(r)
	return s.patterns[pattern]
}
