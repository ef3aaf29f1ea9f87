package policy

import (
	"encoding/json"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fairgate/fairgate/algo"
)

// MeasuredCost is a class's cost when it is known only once the answer
// ends (an LLM completion's tokens, rows scanned, bytes exported):
// admission charges an estimate taken from the request, and the
// difference to the true cost, measured from the answer, is settled
// afterwards on the same keys (see docs/cost.md).
type MeasuredCost struct {
	// Unit names what is counted, for headers and views: "tokens",
	// "rows". Required: see [UnitRule].
	Unit string `json:"unit"`
	// Estimate is what a request is charged at admission.
	Estimate Estimate `json:"estimate"`
	// Measure is where the true cost is read from the answer.
	Measure Measure `json:"measure"`
}

// Estimate says what a request of a measured-cost class is charged at
// admission: the number a request header or a JSON field of the request
// body gives (the header first), else Default, clamped to 1..Cap (see
// [Estimate.Clamp]).
type Estimate struct {
	// Header is a request header holding a decimal count, such as
	// X-Max-Tokens. Empty means none.
	Header string `json:"header,omitempty"`
	// JSON is a dotted path to a number in the request body's JSON object,
	// such as max_tokens or options.limit. Empty means none.
	JSON string `json:"json,omitempty"`
	// Default is the estimate of a request that gives none (or one that
	// is not a count). Zero means Cap.
	Default int64 `json:"default,omitempty"`
	// Cap bounds the estimate, and so what one request is charged at
	// admission. Required: at most the burst of every layer the class is
	// charged against, or such a request could never pass.
	Cap int64 `json:"cap"`
}

// Measure says where the true cost of a measured-cost request is in the
// upstream's answer: at least one of the fields. Reading it is the
// fronts' job (the proxy, the HTTP middleware); a gateway reads it itself
// and sends it to POST /v1/settle.
type Measure struct {
	// Header is a response header holding a decimal count, such as
	// X-Usage-Tokens.
	Header string `json:"header,omitempty"`
	// Trailer is a response trailer holding a decimal count.
	Trailer string `json:"trailer,omitempty"`
	// JSON is a dotted path to a number in a JSON answer's body, such as
	// usage.total_tokens.
	JSON string `json:"json,omitempty"`
	// SSE is a dotted path to a number in the JSON data of a server-sent
	// event; the last event that carries it gives the cost.
	SSE string `json:"sse,omitempty"`
}

// RequestsUnit is the unit of a layer that no class with a measured cost
// is charged on: requests, each charged its route's cost. Views show it
// for [Layer].Unit "".
const RequestsUnit = "requests"

// unit returns the unit c's own layers count in: its measured cost's, ""
// (requests) without one.
func (c *Class) unit() string {
	if c.Cost == nil {
		return ""
	}
	return c.Cost.Unit
}

// tenantUnit returns the unit of the tenant's layers, which every class
// is charged on: the one unit of the classes with a measured cost, as a
// fixed cost counts in it too; several sorted and joined by "+", as the
// layer counts their sum; "" (requests) when no class has one.
func tenantUnit(classes map[string]*Class) string {
	var units []string
	for _, c := range classes {
		if u := c.unit(); u != "" && !slices.Contains(units, u) {
			units = append(units, u)
		}
	}
	slices.Sort(units)
	return strings.Join(units, "+")
}

// UnitRule says what a measured cost's unit may be, for error messages.
const UnitRule = "lower-case letters, digits and '_', starting with a letter, at most 16, such as tokens"

var (
	unitRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,15}$`)
	// headerRE is an HTTP field name (RFC 9110 token), at most 64 bytes.
	headerRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
	// jsonPathRE is a dotted path of object member names.
	jsonPathRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,7}$`)
)

// ValidUnit reports whether u is a measured cost's unit by [UnitRule].
func ValidUnit(u string) bool { return unitRE.MatchString(u) }

// JSONPathRule says what a cost's JSON path may be, for error messages.
const JSONPathRule = "member names of letters, digits, '_' and '-' joined by '.', at most 8, such as usage.total_tokens"

// defaultValue is the estimate of a request that gives none: Default,
// or Cap when it is zero.
func (e *Estimate) defaultValue() int64 {
	if e.Default > 0 {
		return e.Default
	}
	return e.Cap
}

// Clamp returns n as the charge of an admitted request: at least 1 (a
// measured request is never free, or its true cost could not be settled)
// and at most Cap.
func (e *Estimate) Clamp(n int64) int64 { return min(max(n, 1), e.Cap) }

// From returns the estimate of a request with headers h and body, the
// request's JSON body decoded into any (nil when there is none, or it is
// not JSON): the count in the Header (a decimal integer, surrounding
// spaces allowed), else the number at the JSON path (an integer, or a
// fraction rounded up), else Default; never below Default; clamped by
// [Estimate.Clamp]. A client's count raises its charge above Default and
// never lowers it: a client declaring 1 would else be admitted a burst's
// worth of requests at once, each then settled over its estimate up to
// the debt bound, far past its budget (the attacker review drew 94 times
// its plan so). A value that is negative, not a count, or too large to
// be one reads as none; one over Cap is Cap.
func (e *Estimate) From(h http.Header, body any) int64 {
	if e.Header != "" {
		if v := strings.TrimSpace(h.Get(e.Header)); v != "" {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				return e.Clamp(max(n, e.defaultValue()))
			}
		}
	}
	if e.JSON != "" {
		if n, ok := JSONCount(body, e.JSON); ok {
			return e.Clamp(max(n, e.defaultValue()))
		}
	}
	return e.Clamp(e.defaultValue())
}

// JSONCount returns the count at path (dotted member names) in v, a JSON
// value decoded into any (with or without UseNumber): a non-negative
// number, a fraction rounded up, at most [algo.MaxCount] (larger reads as
// MaxCount). It reports false when path names no member, or a member
// that is not such a number.
func JSONCount(v any, path string) (int64, bool) {
	for name := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = m[name]; !ok {
			return 0, false
		}
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case json.Number:
		if n, err := x.Int64(); err == nil {
			if n < 0 {
				return 0, false
			}
			return min(n, algo.MaxCount), true
		}
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	if math.IsNaN(f) || f < 0 {
		return 0, false
	}
	if f >= float64(algo.MaxCount) {
		return algo.MaxCount, true
	}
	return int64(math.Ceil(f)), true
}

// Measured returns the measured cost of the class req resolves to, as
// [Snapshot.Resolve] picks it (req.Class, else the route matched, else the
// default class), or nil when that class has a fixed cost, req is
// anonymous (an anonymous route's cost is fixed) or a CORS preflight. A
// front that settles reads the request's estimate by it before deciding
// ([Estimate.From]). Without a measured class in the snapshot it returns
// nil at once.
func (s *Snapshot) Measured(req Request) *MeasuredCost {
	if !s.measured || req.Tenant == "" || req.Preflight {
		return nil
	}
	var c *Class
	switch {
	case req.Class != "":
		c = s.classes[req.Class]
	default:
		if r := s.routes[s.match(req.Method, req.Path)]; r != nil {
			c = s.classes[r.Class]
		} else {
			c = s.classes[s.policy.DefaultClass]
		}
	}
	if c == nil {
		return nil
	}
	return c.Cost
}

// compileCost validates class c's measured cost at path.
func compileCost(ps *problems, path string, c *Class) {
	m := c.Cost
	if !unitRE.MatchString(m.Unit) {
		ps.add(path+".unit", "unit %q: want %s", m.Unit, UnitRule)
	}
	e := &m.Estimate
	checkHeader(ps, path+".estimate.header", e.Header)
	checkJSONPath(ps, path+".estimate.json", e.JSON)
	switch {
	case e.Cap < 1 || e.Cap > algo.MaxCount:
		ps.add(path+".estimate.cap", "cap %d is outside 1..%d: it bounds what one request is charged at admission", e.Cap, algo.MaxCount)
	case e.Default < 0 || e.Default > e.Cap:
		ps.add(path+".estimate.default", "default %d is outside 0..%d (the cap; 0 means the cap)", e.Default, e.Cap)
	}
	me := &m.Measure
	if me.Header == "" && me.Trailer == "" && me.JSON == "" && me.SSE == "" {
		ps.add(path+".measure", "measure needs at least one of header, trailer, json or sse: where the answer gives the true cost")
	}
	checkHeader(ps, path+".measure.header", me.Header)
	checkHeader(ps, path+".measure.trailer", me.Trailer)
	checkJSONPath(ps, path+".measure.json", me.JSON)
	checkJSONPath(ps, path+".measure.sse", me.SSE)
	if c.Lease > 0 {
		ps.add(path, "a class with a measured cost cannot have a lease: a unit granted to an instance is spent there and has nothing to settle")
	}
}

func checkHeader(ps *problems, path, name string) {
	if name != "" && !headerRE.MatchString(name) {
		ps.add(path, "header name %q: want a field name of letters, digits and -, at most 64, such as X-Usage-Tokens", name)
	}
}

func checkJSONPath(ps *problems, path, p string) {
	if p != "" && !jsonPathRE.MatchString(p) {
		ps.add(path, "JSON path %q: want %s", p, JSONPathRule)
	}
}

// checkCaps reports a measured class whose cap some layer it is charged
// against could never admit.
func (s *Snapshot) checkCaps(ps *problems) {
	for _, name := range sortedKeys(s.classes) {
		c := s.classes[name]
		if c.Cost != nil && c.Cost.Estimate.Cap >= 1 {
			checkCost(ps, s, "classes."+name+".cost.estimate.cap", c.Cost.Estimate.Cap, c)
		}
	}
}
