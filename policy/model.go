package policy

import (
	"fmt"
	"regexp"
	"strings"
	"time"

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
	// Concurrency, when over 0, is how many requests a tenant of the plan
	// may have in flight at once, across all instances; a class with a
	// share below 1 gets that share of it (rounded up) as a layer of its
	// own. A request needs a slot as well as its rate limits' tokens, and
	// a rejected request takes neither. Zero means no concurrency limit.
	Concurrency int64 `json:"concurrency,omitempty"`
}

// MaxConcurrency bounds Plan.Concurrency and Tenant.Concurrency.
const MaxConcurrency = 1_000_000

// FailMode says what a decision is when the store cannot answer.
type FailMode uint8

// The fail modes.
const (
	// FailDefault is the zero value: fail open for a class, closed for an
	// anonymous route, as in the config file.
	FailDefault FailMode = iota
	// FailOpen admits, decided by the in-process fallback limiter.
	FailOpen
	// FailClosed rejects with the limiter's ReasonUnavailable.
	FailClosed
)

// String returns "open", "closed" or "default".
func (f FailMode) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return "default"
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
	// Fail is the class's fail mode. Zero (FailDefault) means open.
	Fail FailMode `json:"fail"`
	// Shadow runs the class's own layers without enforcing them; its
	// requests still count against the tenant's overall limits.
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
	// Cost, when not nil, makes the class's cost measured: a request is
	// charged an estimate at admission and settled at its true cost when
	// its answer ends (see [MeasuredCost]). Its routes give no cost of
	// their own. Nil means each route's fixed cost.
	Cost *MeasuredCost `json:"cost,omitempty"`
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
	// Cost is what a request costs. Zero means 1, as an omitted cost does
	// in the config file.
	Cost int64 `json:"cost"`
	// Free makes the route cost nothing: its requests are never limited
	// (cost 0 in the config file). Cost must then be zero.
	Free bool `json:"free,omitempty"`
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
	// Cost is what a request costs. Zero means 1.
	Cost int64 `json:"cost"`
	// Fail is its fail mode. Zero (FailDefault) means closed: without the
	// store, a login route is better refused than open to guessing.
	Fail FailMode `json:"fail"`
	// Shadow runs its rules without enforcing them.
	Shadow bool `json:"shadow,omitempty"`
}

// PreflightName names the CORS preflights' limits in policies and keys
// ("anonymous.preflight.<rule>"); no anonymous route may take it.
const PreflightName = "preflight"

// DefaultPreflight is what CORS preflights get when the policy says
// nothing: 120 a minute per client address (IPv6 per /64), 60 at once,
// failing open. A browser sends one per URL and method it has not
// cached (5 s by default; an API that answers Access-Control-Max-Age
// keeps it far below this); raise it where many users share an address.
func DefaultPreflight() AnonRoute {
	return AnonRoute{Name: PreflightName, Fail: FailOpen, Cost: 1,
		Rules: []AnonRule{{Rule: Rule{Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 60}}, By: ByIP}}}
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
	// Concurrency overrides the plan's Concurrency; zero keeps it.
	Concurrency int64 `json:"concurrency,omitempty"`
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
	// Preflight limits CORS preflights (Request.Preflight), which carry
	// no credential, per client address; its Name and Pattern are
	// ignored, and its zero Fail means open. Nil means
	// DefaultPreflight.
	Preflight *AnonRoute
	// Tenants by verified tenant ID.
	Tenants map[string]Tenant
	// Location is the time zone of calendar windows. Nil means UTC.
	Location *time.Location
	// RouteMatch says how requests are matched to routes.
	RouteMatch RouteMatch
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

// unknown adds the problem of name, a kind ("plan", "class") that defined
// lacks, listing the names it has; none when it has none, as the missing
// section is then the problem (reported as required).
func unknown[V any](p *problems, path, kind, name string, defined map[string]V) {
	if len(defined) == 0 {
		return
	}
	p.add(path, "unknown %s %q: want one of %s", kind, name, strings.Join(sortedKeys(defined), ", "))
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
