package limitheader

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
)

// Form is a response header form. fairgate never switches it silently: it
// is the config's `headers` field. The zero Form is Draft wherever a Form
// is read (see [ParseForm]).
type Form string

// The header forms.
const (
	// Draft is RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
	// (whole seconds from now), as in the early IETF drafts and most APIs.
	// The default.
	Draft Form = "draft"
	// Structured is the current IETF draft's (draft-ietf-httpapi-ratelimit-
	// headers, revision 10 on) structured fields: RateLimit-Policy:
	// "<policy>";q=<quota>;w=<window s> and RateLimit:
	// "<policy>";r=<remaining>;t=<reset s>, with the draft's quota-exceeded
	// problem type on 429.
	Structured Form = "structured"
	// X is X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
	// (the Unix time, in seconds, at which the layer is full again).
	X Form = "x"
)

// A layer that a class with a measured cost is charged on counts its
// limit and remaining in that cost's unit ("tokens"; see
// policy.Layer.Unit), not in requests: each form names it beside the
// tightest layer's numbers, and names nothing for a layer that counts
// requests, the drafts' default unit.
const (
	// UnitParam is the Structured form's RateLimit-Policy parameter
	// naming the unit: "<policy>";q=20000;w=6;fairgate-unit="tokens". The
	// draft's own "qu" takes only the units its IANA registry lists
	// (requests, content-bytes, concurrent-requests), and lets a policy
	// carry other parameters, prefixed with the implementation's name,
	// which a client that does not know them ignores.
	UnitParam = "fairgate-unit"
	// UnitHeader is the Draft form's header naming the unit
	// (RateLimit-Unit: tokens), named as its RateLimit-Limit is.
	UnitHeader = "RateLimit-Unit"
	// XUnitHeader is the X form's (X-RateLimit-Unit: tokens).
	XUnitHeader = "X-RateLimit-Unit"
)

// ParseForm returns the form named s; "" is Draft.
func ParseForm(s string) (Form, error) {
	switch f := Form(s); f {
	case "":
		return Draft, nil
	case Draft, Structured, X:
		return f, nil
	}
	return "", fmt.Errorf("limitheader: unknown header form %q: want draft, structured or x", s)
}

// Names lists the rate-limit headers form f writes for a decision with
// layers (Retry-After, the concurrency headers and the unit header
// aside), canonical.
func (f Form) Names() []string {
	switch f {
	case Structured:
		return []string{canonicalPolicy, canonicalRateLimit}
	case X:
		return []string{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}
	}
	return []string{canonicalLimit, canonicalRemaining, canonicalReset}
}

// RetryAfter formats d as a Retry-After value: whole seconds, rounded up,
// at least 1, so that a client that waits it is never early. It is
// [RetrySeconds] in decimal.
func RetryAfter(d time.Duration) string { return strconv.FormatInt(RetrySeconds(d), 10) }

// RetrySeconds is d in whole seconds, rounded up, at least 1: the number
// of a Retry-After header, and of a problem body's retry_after_seconds
// beside it.
func RetrySeconds(d time.Duration) int64 { return max(1, algo.CeilSeconds(d)) }

// quota returns the layer's quota and window for RateLimit-Policy: for
// GCRA and token bucket the burst and the time to refill it from empty
// (120 per minute with burst 30 is 30 per 15 s: the same rate, and the
// burst a client can spend); for the window algorithms the limit and the
// period.
func quota(ld limiter.LayerDecision) (q int64, w time.Duration) {
	l := ld.Limit
	if l.Algorithm.Windowed() || l.Limit < 1 || l.Period < 0 {
		// (A limit below 1 is invalid and never comes from a limiter; it
		// gets its own numbers rather than a division by zero.)
		return max(l.Limit, 0), max(l.Period, 0)
	}
	em, burst, _ := l.Params()
	return burst, time.Duration(em*burst) * time.Microsecond
}

// Set writes the rate-limit headers of d's tightest layer to h in form f,
// and Retry-After when d rejects. A decision with no layers (free, or the
// store out and failing closed) gets only Retry-After, if any. Times are
// counted from d.Now, the decision's own clock reading (the current time
// for a decision without one).
func Set(h http.Header, f Form, d limiter.Decision) {
	var hs headers
	hs.emit(f, d)
	vals := make([]string, hs.n) // one array for every value
	for i, p := range hs.p[:hs.n] {
		vals[i] = p[1]
		h[canonical(p[0])] = vals[i : i+1 : i+1]
	}
}

// canonical is http.CanonicalHeaderKey(name) for the names emit sets,
// without the allocation it costs for each of them.
func canonical(name string) string {
	switch name {
	case "Retry-After":
		return name
	case "RateLimit-Policy":
		return canonicalPolicy
	case "RateLimit":
		return canonicalRateLimit
	case "RateLimit-Limit":
		return canonicalLimit
	case "RateLimit-Remaining":
		return canonicalRemaining
	case "RateLimit-Reset":
		return canonicalReset
	case UnitHeader:
		return canonicalUnit
	case "RateLimit-Concurrency-Limit":
		return canonicalConcLimit
	case "RateLimit-Concurrency-Remaining":
		return canonicalConcRemaining
	case "RateLimit-Concurrency":
		return canonicalConc
	}
	return http.CanonicalHeaderKey(name)
}

var (
	canonicalPolicy    = http.CanonicalHeaderKey("RateLimit-Policy")
	canonicalRateLimit = http.CanonicalHeaderKey("RateLimit")
	canonicalLimit     = http.CanonicalHeaderKey("RateLimit-Limit")
	canonicalRemaining = http.CanonicalHeaderKey("RateLimit-Remaining")
	canonicalReset     = http.CanonicalHeaderKey("RateLimit-Reset")
	canonicalUnit      = http.CanonicalHeaderKey(UnitHeader)

	canonicalConcLimit     = http.CanonicalHeaderKey("RateLimit-Concurrency-Limit")
	canonicalConcRemaining = http.CanonicalHeaderKey("RateLimit-Concurrency-Remaining")
	canonicalConc          = http.CanonicalHeaderKey("RateLimit-Concurrency")
)

// headers are a decision's headers as name, value pairs, at most seven:
// Retry-After, two of concurrency, three of the tightest layer and its
// unit.
type headers struct {
	p [7][2]string
	n int
}

func (hs *headers) set(name, value string) {
	hs.p[hs.n] = [2]string{name, value}
	hs.n++
}

// emit sets each header of d in form f, named as the drafts spell them.
func (hs *headers) emit(f Form, d limiter.Decision) {
	set := hs.set
	now := d.Now
	if now.IsZero() {
		now = time.Now()
	}
	// Retry-After is set here and nowhere else: once, for a rejection
	// with a wait, and always when the store is out and the route fails
	// closed.
	if !d.Allowed && (d.RetryAfter > 0 || d.Reason == limiter.ReasonUnavailable) {
		set("Retry-After", RetryAfter(d.RetryAfter))
	}
	hs.concurrency(f, d)
	if d.Tightest < 0 || d.Tightest >= len(d.Layers) {
		return
	}
	ld := d.Layers[d.Tightest]
	unit := ld.Unit
	switch f {
	case Structured:
		q, w := quota(ld)
		pol := httpsfv.NewItem(ld.Policy)
		pol.Params.Add("q", q)
		pol.Params.Add("w", max(1, algo.CeilSeconds(w)))
		if unit != "" {
			pol.Params.Add(UnitParam, unit)
		}
		if v, err := httpsfv.Marshal(httpsfv.List{pol}); err == nil {
			set("RateLimit-Policy", v)
		}
		cur := httpsfv.NewItem(ld.Policy)
		cur.Params.Add("r", max(ld.Remaining, 0))
		cur.Params.Add("t", max(algo.CeilSeconds(ld.ResetAfter), 0))
		if v, err := httpsfv.Marshal(httpsfv.List{cur}); err == nil {
			set("RateLimit", v)
		}
	case X:
		set("X-RateLimit-Limit", nonNeg(ld.Limit.Capacity()))
		set("X-RateLimit-Remaining", nonNeg(ld.Remaining))
		set("X-RateLimit-Reset", nonNeg(now.Add(max(ld.ResetAfter, 0)).Add(time.Second-1).Unix()))
		if unit != "" {
			set(XUnitHeader, unit)
		}
	default:
		set("RateLimit-Limit", nonNeg(ld.Limit.Capacity()))
		set("RateLimit-Remaining", nonNeg(ld.Remaining))
		set("RateLimit-Reset", nonNeg(algo.CeilSeconds(ld.ResetAfter)))
		if unit != "" {
			set(UnitHeader, unit)
		}
	}
}

// concurrency sets the headers of d's tightest concurrency layer (the one
// that refused, else the one with the fewest slots left), named in the
// form's manner: RateLimit-Concurrency-Limit and -Remaining (X-RateLimit-…
// in form x), or in the structured form RateLimit-Concurrency:
// "<policy>";q=<limit>;r=<remaining>.
func (hs *headers) concurrency(f Form, d limiter.Decision) {
	if len(d.Concurrency) == 0 {
		return
	}
	t := d.Concurrency[0]
	for _, sd := range d.Concurrency[1:] {
		if !sd.Allowed || t.Allowed && sd.Remaining < t.Remaining {
			t = sd
		}
	}
	switch f {
	case Structured:
		it := httpsfv.NewItem(t.Policy)
		it.Params.Add("q", t.Limit)
		it.Params.Add("r", max(t.Remaining, 0))
		if v, err := httpsfv.Marshal(httpsfv.List{it}); err == nil {
			hs.set("RateLimit-Concurrency", v)
		}
	case X:
		hs.set("X-RateLimit-Concurrency-Limit", nonNeg(t.Limit))
		hs.set("X-RateLimit-Concurrency-Remaining", nonNeg(t.Remaining))
	default:
		hs.set("RateLimit-Concurrency-Limit", nonNeg(t.Limit))
		hs.set("RateLimit-Concurrency-Remaining", nonNeg(t.Remaining))
	}
}

// nonNeg formats n, or 0 for a negative n: no header value is ever
// negative, whatever the decision says.
func nonNeg(n int64) string { return strconv.FormatInt(max(n, 0), 10) }

// Append appends d's headers to dst as name, value pairs, in the order
// Set sets them, named as Map names them: for callers that encode them
// without a map. No name comes twice (Retry-After included): callers
// append nothing of their own to a decision's headers.
func Append(dst []string, f Form, d limiter.Decision) []string {
	var hs headers
	hs.emit(f, d)
	for _, p := range hs.p[:hs.n] {
		dst = append(dst, p[0], p[1])
	}
	return dst
}

// Map is Set into a map, with the names spelled as the drafts do
// (RateLimit-Limit, not Ratelimit-Limit), for APIs that hand the headers
// to a gateway.
func Map(f Form, d limiter.Decision) map[string]string {
	var hs headers
	hs.emit(f, d)
	m := make(map[string]string, hs.n)
	for _, p := range hs.p[:hs.n] {
		m[p[0]] = p[1]
	}
	return m
}
