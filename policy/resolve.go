package policy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Identity is who a request is from, as its verified credential says:
// what the HTTP middleware's and the gRPC interceptors' Identify return.
type Identity struct {
	// Tenant is the tenant ID; "" for an anonymous request.
	Tenant string
	// Plan is a plan the credential names, for tenants the policy does not
	// list; "" for none.
	Plan string
}

// Request is what a decision is asked about.
type Request struct {
	// Tenant is the verified tenant ID, from a credential the caller has
	// checked; never from a header the client controls. Empty for an
	// anonymous request.
	Tenant string
	// Plan is a plan named by the verified credential (a JWT claim). It
	// applies to tenants the policy does not list; an unknown plan is
	// ignored (the default plan applies).
	Plan string
	// Method and Path are the HTTP request's, for route matching.
	Method, Path string
	// Class names the class directly instead of Method and Path.
	Class string
	// Cost, when HasCost, replaces the route's cost. For a class with a
	// measured cost it is the estimate ([Estimate.From]), clamped to
	// 1..cap; without it, when Settles, the estimate the class's
	// estimate header gives in Header, else its default; when not, its
	// cap.
	Cost    int64
	HasCost bool
	// Header is the request's headers, read only for a measured-cost
	// class's estimate header when the caller settles and gives no Cost
	// (forward auth, which sees the headers and never the body). Nil
	// means none.
	Header http.Header
	// Settles reports that the caller settles a measured-cost request when
	// it ends (Limiter.Settle, or the handle of /v1/check or /v1/authz).
	// A caller that does not (the proxy, the HTTP middleware, forward auth
	// unless told that the upstream settles, and gRPC) is charged the
	// class's cap when it gives no cost: the most one request may cost,
	// so that the budget holds without a settlement; a default estimate,
	// or a client's own, would let a request cost more than it was
	// charged.
	Settles bool
	// IP is the client's address, for anonymous routes.
	IP netip.Addr
	// Credential is what an anonymous request presents (a user name, an
	// e-mail address), for anonymous rules by credential. It is hashed
	// before use.
	Credential string
	// Hold lets Decide hold a request its near cache rejects for the
	// class's SlowDown before answering (see [Class.SlowDown]). Set it
	// where the request's connection is the client's own, as the HTTP
	// middleware does; leave it unset where the caller is another service
	// asking for a decision (the /v1/check API), which holding would stall.
	Hold bool
	// NoSlots decides the rate layers alone, leaving the concurrency
	// layers' slots untaken: for a caller that cannot say when the
	// request ends, such as /v1/check (a slot taken there would be held
	// until its lease ran out).
	NoSlots bool
	// Preflight marks a CORS preflight (OPTIONS with Origin and
	// Access-Control-Request-Method, never a credential): it is decided
	// as an anonymous request under the policy's Preflight limits, per
	// client address, whatever its path.
	Preflight bool
	// RequireIP makes a request without a valid IP that an anonymous route
	// matches an error ([ErrNoClientIP]) instead of sharing one key with
	// every other such request. Set it where the caller asks on behalf of
	// clients (the /v1/check API).
	RequireIP bool
}

// Layer is one limit a request is checked against.
type Layer struct {
	// Policy names the layer: "<plan>.<class>.<rule>" for a tenant and
	// class, "<plan>.tenant.<rule>" for the tenant overall,
	// "anonymous.<route>.<rule>" for an anonymous route.
	Policy string
	// Key is the store key.
	Key string
	// Class is the route class whose layer this is; "" for the tenant
	// overall and for anonymous routes.
	Class string
	// Limit is the layer's limit, shares and overrides applied.
	Limit algo.Limit
	// Shadow reports that the layer is not enforced.
	Shadow bool
	// Unit is what Limit counts, for headers and views (see
	// [MeasuredCost].Unit): a class's layer counts in its class's unit;
	// the tenant's layers, which every class is charged on, in the unit
	// of the policy's measured-cost classes (a plan of 200,000 tokens a
	// minute that a chat class charges 1 a request counts tokens),
	// several joined by "+" ("rows+tokens"). "" means requests: no
	// class charged on the layer has a measured cost.
	Unit string
}

// Resolution is what a request resolves to: the layers to check as one
// batch, narrowest first, and how to decide them.
type Resolution struct {
	Tenant string
	// Plan is the tenant's plan ("" for anonymous requests).
	Plan string
	// Class is the route class, or the anonymous route's name.
	Class string
	// Anonymous reports an anonymous route.
	Anonymous bool
	// Cost is what the request costs in every layer; 0 is free.
	Cost int64
	// Fail is the fail mode.
	Fail FailMode
	// NoNearCache reports that the class keeps rejected keys out of the
	// near cache: every request goes to the store.
	NoNearCache bool
	// Lease is the class's lease size (see [Class.Lease]); 0: none.
	Lease int64
	// SlowDown is how long a near-cache rejection may be held (see
	// [Class.SlowDown]); 0: not at all.
	SlowDown time.Duration
	// Measured is the class's measured cost (see [Class.Cost]): Cost is
	// then the estimate, to be settled at the true cost. Nil for a fixed
	// cost.
	Measured *MeasuredCost
	// Layers are the limits to check.
	Layers []Layer
	// Slots are the concurrency limits to hold a slot of while the
	// request is in flight, the tenant's first (see Plan.Concurrency);
	// none without one.
	Slots []SlotLayer
}

// SlotLayer is one concurrency limit of a request.
type SlotLayer struct {
	// Policy names it: "<plan>.tenant.concurrency", or
	// "<plan>.<class>.concurrency" for a class's share.
	Policy string
	// Key is the slot key in the store.
	Key string
	// Class is the route class whose layer this is; "" for the tenant.
	Class string
	// Limit is how many requests may be in flight.
	Limit int64
	// Shadow reports that the layer is not enforced (a shadow class's):
	// a request it has no slot for is admitted and counted as a shadow
	// rejection.
	Shadow bool
}

// Errors of resolution.
var (
	// ErrNoTenant means a request without a tenant matched no anonymous
	// route: it needs a credential (the proxy answers 401).
	ErrNoTenant = errors.New("policy: no tenant for a route that is not anonymous")
	// ErrUnknownClass means Request.Class names no class.
	ErrUnknownClass = errors.New("policy: unknown class")
	// ErrBadCost means Request.Cost is negative or over a layer's burst.
	ErrBadCost = errors.New("policy: bad cost")
	// ErrNoClientIP means a request with RequireIP set and no valid IP
	// matched an anonymous route, which is limited per client address.
	ErrNoClientIP = errors.New("policy: anonymous routes are limited per client address: the request needs one")
	// ErrBadTenant means the tenant ID is longer than MaxTenantID.
	ErrBadTenant = errors.New("policy: tenant ID too long")
)

// Resolve returns the layers of req at time now (which picks calendar
// windows and decides whether overrides have expired).
func (s *Snapshot) Resolve(req Request, now time.Time) (Resolution, error) {
	if len(req.Tenant) > MaxTenantID {
		return Resolution{}, fmt.Errorf("%w: %d bytes, at most %d", ErrBadTenant, len(req.Tenant), MaxTenantID)
	}
	if req.Preflight {
		if req.RequireIP && !req.IP.IsValid() {
			return Resolution{Class: PreflightName, Anonymous: true}, ErrNoClientIP
		}
		return s.resolveAnon(s.preflight, req, now)
	}
	pattern := ""
	if req.Class == "" {
		pattern = s.match(req.Method, req.Path)
	}
	if req.Tenant == "" {
		a, ok := s.anon[pattern]
		if !ok {
			return Resolution{}, ErrNoTenant
		}
		if req.RequireIP && !req.IP.IsValid() {
			return Resolution{Class: a.Name, Anonymous: true}, ErrNoClientIP
		}
		return s.resolveAnon(a, req, now)
	}
	var c *Class
	cost := int64(1)
	switch {
	case req.Class != "":
		var ok bool
		if c, ok = s.classes[req.Class]; !ok {
			return Resolution{}, fmt.Errorf("%w %q", ErrUnknownClass, req.Class)
		}
	case s.routes[pattern] != nil:
		r := s.routes[pattern]
		c, cost = s.classes[r.Class], r.Cost
	default:
		c = s.classes[s.policy.DefaultClass]
	}
	if req.HasCost {
		cost = req.Cost
	}
	if m := c.Cost; m != nil && cost >= 0 {
		// The estimate, given or the default, clamped: never free, never
		// over the cap.
		switch {
		case req.HasCost:
		case req.Settles:
			cost = m.Estimate.From(req.Header, nil)
		default:
			cost = m.Estimate.Cap
		}
		cost = m.Estimate.Clamp(cost)
	}
	t := s.tenantFor(req.Tenant, req.Plan, now)
	res := Resolution{Tenant: req.Tenant, Plan: t.plan, Class: c.Name, Cost: cost, Fail: c.Fail, NoNearCache: c.NoNearCache, Lease: c.Lease, SlowDown: c.slowDown(), Measured: c.Cost}
	if cost < 0 {
		return res, fmt.Errorf("%w: %d is negative", ErrBadCost, cost)
	}
	res.Layers = make([]Layer, 0, 2*len(t.rules))
	tag := escapeID(req.Tenant) // TenantTag, less its "t:"
	if t.share(c) < 1 {
		for i, r := range t.rules {
			if r.Calendar != NoCalendar {
				continue
			}
			res.Layers = append(res.Layers, Layer{
				Policy: t.classPolicy(c.Name, i),
				Key:    key("t:", tag, "c", c.Name, r.Name, winLabel{}),
				Class:  c.Name,
				Limit:  t.classLimit(r, c),
				Shadow: r.Shadow || c.Shadow,
				Unit:   c.unit(),
			})
		}
	}
	if t.concurrency > 0 {
		res.Slots = t.slotLayers(c, tag)
	}
	for i, r := range t.rules {
		l, window := s.window(r, now)
		res.Layers = append(res.Layers, Layer{
			Policy: t.tenantPolicy(i),
			Key:    key("t:", tag, "all", "", r.Name, window),
			Limit:  l,
			Shadow: r.Shadow, // a shadow class shadows only the layer it adds
			Unit:   s.tenantUnit,
		})
	}
	return res, checkCosts(res)
}

func (s *Snapshot) resolveAnon(a *AnonRoute, req Request, now time.Time) (Resolution, error) {
	cost := a.Cost
	if req.HasCost {
		cost = req.Cost
	}
	res := Resolution{Class: a.Name, Anonymous: true, Cost: cost, Fail: a.Fail}
	if cost < 0 {
		return res, fmt.Errorf("%w: %d is negative", ErrBadCost, cost)
	}
	ip := "unknown"
	if req.IP.IsValid() {
		ip = clientPrefix(req.IP)
	}
	for _, r := range a.Rules {
		kind, tag := "ip:", ip
		if r.By == ByCredential && req.Credential != "" {
			kind, tag = "cr:", hashB64(req.Credential)
		}
		l, window := s.window(crule{Rule: r.Rule}, now)
		res.Layers = append(res.Layers, Layer{
			Policy: "anonymous." + a.Name + "." + r.Name,
			Key:    key(kind, tag, "a", a.Name, r.Name, window),
			Limit:  l,
			Shadow: r.Shadow || a.Shadow,
		})
	}
	return res, checkCosts(res)
}

func checkCosts(res Resolution) error {
	for _, l := range res.Layers {
		if res.Cost > l.Limit.Capacity() {
			return fmt.Errorf("%w: cost %d exceeds the burst %d of %s", ErrBadCost, res.Cost, l.Limit.Capacity(), l.Policy)
		}
	}
	return nil
}

// tenantFor is tenant for a tenant whose credential names plan: the plan
// applies when the policy has no entry for the tenant.
func (s *Snapshot) tenantFor(id, plan string, now time.Time) *ctenant {
	// The one place the plan sources are ordered (PlanSource): an entry
	// decides; only a tenant without one takes its credential's plan.
	t := s.tenant(id, now)
	if t == s.defTenant && plan != "" {
		if pt, ok := s.planTenants[plan]; ok {
			return pt
		}
	}
	return t
}

// tenant returns the effective rules of tenant id at now.
func (s *Snapshot) tenant(id string, now time.Time) *ctenant {
	t, ok := s.tenants[id]
	if !ok {
		return s.defTenant
	}
	for t.expired(now) {
		if t.base == nil {
			return s.defTenant
		}
		t = t.base
	}
	return t
}

func (t *ctenant) expired(now time.Time) bool {
	return !t.tenant.Expires.IsZero() && !now.Before(t.tenant.Expires)
}

func (t *ctenant) share(c *Class) float64 {
	if v, ok := t.shares[c.Name]; ok {
		return v
	}
	return c.Share
}

// window returns rule r's limit at now and, for a calendar rule, the
// window's label for its key.
func (s *Snapshot) window(r crule, now time.Time) (algo.Limit, winLabel) {
	if r.Calendar == NoCalendar {
		return r.Limit, winLabel{}
	}
	w := calendar(r.Calendar, s.loc, now)
	return algo.Limit{Limit: r.Limit.Limit, Period: w.period, Offset: w.offset, Algorithm: algo.FixedWindow}, w.label
}

// calendar returns the day or month window that holds now in loc. It is
// computed afresh from its arguments alone: a window is never shared
// between rules or tenants.
func calendar(c Calendar, loc *time.Location, now time.Time) calWindow {
	if loc == time.UTC {
		return calendarUTC(c, now.UnixMicro())
	}
	y, m, d := now.In(loc).Date()
	var start, end time.Time
	var label winLabel
	switch c {
	case Day:
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		end = start.AddDate(0, 0, 1)
		label = dateLabel('d', y, m, d)
	default:
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = start.AddDate(0, 1, 0)
		label = dateLabel('m', y, m, 0)
	}
	period := end.Sub(start)
	pus := int64(period / time.Microsecond)
	return calWindow{period: period, label: label,
		offset: time.Duration(((start.UnixMicro()%pus)+pus)%pus) * time.Microsecond}
}

// calendarUTC is calendar in UTC, by integer arithmetic on days (the
// common case, and the default zone): days and months start at multiples
// of a day since the epoch.
func calendarUTC(c Calendar, us int64) calWindow {
	const dayUs = int64(24 * time.Hour / time.Microsecond)
	day := us / dayUs
	if us%dayUs < 0 {
		day--
	}
	y, m, d := civil(day)
	if c == Day {
		return calWindow{period: 24 * time.Hour, label: dateLabel('d', y, m, d)}
	}
	ny, nm := y, m+1
	if nm > 12 {
		ny, nm = y+1, 1
	}
	start, end := daysFromCivil(y, m, 1), daysFromCivil(ny, nm, 1)
	pus := (end - start) * dayUs
	offset := (start*dayUs%pus + pus) % pus
	return calWindow{period: time.Duration(pus) * time.Microsecond, offset: time.Duration(offset) * time.Microsecond, label: dateLabel('m', y, m, 0)}
}

// civil returns the proleptic Gregorian date of day days after 1970-01-01
// (H. Hinnant's civil_from_days).
func civil(day int64) (int, time.Month, int) {
	z := day + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	y := yoe + era*400
	if m <= 2 {
		y++
	}
	return int(y), time.Month(m), int(d)
}

// daysFromCivil is civil's inverse: the days from 1970-01-01 to y-m-d.
func daysFromCivil(y int, m time.Month, d int) int64 {
	yy := int64(y)
	if m <= 2 {
		yy--
	}
	era := yy / 400
	if yy < 0 && yy%400 != 0 {
		era--
	}
	yoe := yy - era*400
	mm := int64(m) + 9
	if m > 2 {
		mm = int64(m) - 3
	}
	doy := (153*mm+2)/5 + int64(d) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// winLabel is a calendar window's label in keys: d20261204 for a day,
// m202612 for a month; empty for a rule without a calendar. A value, so
// that labelling a window allocates nothing.
type winLabel struct {
	b [9]byte
	n uint8
}

// dateLabel is the label of the window starting on y-m-d (d 0: a month).
func dateLabel(kind byte, y int, m time.Month, d int) winLabel {
	l := winLabel{n: 7}
	l.b[0] = kind
	y = min(max(y, 0), 9999)
	l.b[1], l.b[2], l.b[3], l.b[4] = byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10)
	l.b[5], l.b[6] = byte('0'+int(m)/10), byte('0'+int(m)%10)
	if d > 0 {
		l.b[7], l.b[8], l.n = byte('0'+d/10), byte('0'+d%10), 9
	}
	return l
}
