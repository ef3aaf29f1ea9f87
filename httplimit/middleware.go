package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit/costmeter"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// Problem types of the responses fairgate writes.
const (
	// TypeQuotaExceeded is the IETF RateLimit draft's problem type for a
	// request over its quota, used with the Structured form.
	TypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// TypeRateLimited is fairgate's type for a 429 in the other forms.
	TypeRateLimited = "urn:fairgate:problem:rate_limited"
	// TypeUnavailable is the type of a 503 when the store is out and the
	// policy fails closed.
	TypeUnavailable = "urn:fairgate:problem:rate_limiter_unavailable"
	// TypeUnauthorized is the type of a 401 for a missing or unknown
	// credential.
	TypeUnauthorized = "urn:fairgate:problem:unauthorized"
)

// WriteRejection answers a request d did not allow: 429 with Retry-After
// and a problem+json body naming the policy and retry_after_seconds, or
// 503 with Retry-After when the store is out and the policy fails closed.
// The rate-limit headers are written too.
func WriteRejection(w http.ResponseWriter, f Form, d limiter.Decision) {
	limitheader.Set(w.Header(), f, d) // Retry-After with them
	if d.Reason == limiter.ReasonUnavailable {
		problem.Write(w, problem.Details{
			Type:   TypeUnavailable,
			Title:  "Rate limiter unavailable",
			Status: http.StatusServiceUnavailable,
			Detail: "the rate limiter cannot decide right now and this route fails closed; retry later",
			Ext:    map[string]any{"code": "rate_limiter_unavailable", "retry_after_seconds": max(1, algo.CeilSeconds(d.RetryAfter))},
		})
		return
	}
	typ := TypeRateLimited
	if f == Structured {
		typ = TypeQuotaExceeded
	}
	problem.Write(w, problem.Details{
		Type:   typ,
		Title:  "Too many requests",
		Status: http.StatusTooManyRequests,
		Detail: "over the limit of policy " + d.Policy + "; retry after the time given",
		Ext:    map[string]any{"policy": d.Policy, "retry_after_seconds": max(1, algo.CeilSeconds(d.RetryAfter))},
	})
}

// WriteUnauthorized answers 401 for a request without a valid credential.
func WriteUnauthorized(w http.ResponseWriter, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate"`)
	problem.Write(w, problem.Details{Type: TypeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
}

// Config configures the middleware.
type Config struct {
	// Limiter decides. Required.
	Limiter *limiter.Limiter
	// Identify returns the request's verified identity (a zero policy.Identity
	// for an anonymous request), or an error for a bad credential (answered
	// 401 with the error's text). It must never trust a header the client
	// controls. Required.
	Identify func(r *http.Request) (policy.Identity, error)
	// IdentifyIn, if set, replaces Identify: it returns the identity with
	// the policy snapshot it was verified under ([limiter.Policies.Snapshot]
	// read in the same step), and the request is decided against that
	// snapshot ([limiter.Limiter.DecideIn]). For a service that swaps its
	// credentials and its policy together on a config reload, so that no
	// request is decided by one config's policy and the other's
	// credentials.
	IdentifyIn func(r *http.Request) (policy.Identity, *policy.Snapshot, error)
	// Route returns the method and path the route is matched on. Nil means
	// r.Method and the path of the request line as [policy.TargetPath]
	// reads it: a request whose path upstreams read differently (a '#',
	// an encoded slash or dot segment, a backslash) is answered 400
	// before it is decided.
	Route func(r *http.Request) (method, path string)
	// ClientIP returns the client's address for anonymous routes. Nil means
	// the peer address (r.RemoteAddr).
	ClientIP func(r *http.Request) netip.Addr
	// Credential returns what an anonymous request presents (a login name)
	// for rules by credential. Nil means none.
	Credential func(r *http.Request) string
	// Headers is the header form. "" means Draft.
	Headers Form
	// SlowDown holds a request the near cache rejects for its class's
	// slow_down before answering 429 (see policy.Class.SlowDown), pacing a
	// client that retries without waiting; its connection stays busy that
	// long. False (the default) answers at once.
	SlowDown bool
	// Logger receives decision errors. Nil means silent.
	Logger *slog.Logger
	// Observe, if not nil, is called with each request's decision, allowed
	// or not, before the response is written: for metrics by class, say.
	Observe func(r *http.Request, d limiter.Decision)
	// Settled, if not nil, is called with how each admitted request of a
	// measured-cost class was settled, once it has: for metrics by rule
	// (an upstream that does not say its cost shows as RuleUnmeasured).
	Settled func(r *http.Request, s Settled)
}

type decidedKey struct{}

// decided is what the middleware passes on in the request's context.
type decided struct {
	id policy.Identity
	d  limiter.Decision
	// cost is the cost SetCost gave plus 1; 0 while it gave none.
	cost atomic.Int64
}

// IdentityFrom returns the verified identity the middleware decided a
// request under, for the handler it passes the request to; ok is false for
// an anonymous request.
func IdentityFrom(ctx context.Context) (id policy.Identity, ok bool) {
	v, ok := ctx.Value(decidedKey{}).(*decided)
	if !ok || v.id.Tenant == "" {
		return policy.Identity{}, false
	}
	return v.id, true
}

// DecisionFrom returns the decision that let a request through, for the
// handler the middleware passes it to: its Resolution.Plan is the plan in
// force for the tenant, its layers what is left.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	v, ok := ctx.Value(decidedKey{}).(*decided)
	if !ok {
		return limiter.Decision{}, false
	}
	return v.d, true
}

// peerIP is the address of r's peer, from RemoteAddr.
func peerIP(r *http.Request) netip.Addr { return policy.RemoteAddr(r.RemoteAddr) }

// IsPreflight reports whether r is a CORS preflight: OPTIONS with Origin
// and Access-Control-Request-Method, and no body. A browser sends it
// without credentials, so it is decided as an anonymous request under the
// policy's preflight limits, per client address (policy.Request.Preflight)
// and never answered 401; its credential headers, if any, are not read.
func IsPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && isPreflightHeaders(r.Header) && r.ContentLength == 0 && len(r.TransferEncoding) == 0
}

// isPreflightHeaders reports whether h carries a preflight's headers.
func isPreflightHeaders(h http.Header) bool {
	return h.Get("Origin") != "" && h.Get("Access-Control-Request-Method") != ""
}

// IsPreflightOf reports whether a request a gateway asks about, with
// method and the client's headers h, is a CORS preflight.
func IsPreflightOf(method string, h http.Header) bool {
	return method == http.MethodOptions && isPreflightHeaders(h)
}

// overrideHeaders are the headers web frameworks read as a method
// override (Express's method-override, Rack::MethodOverride, Symfony,
// Google's APIs).
var overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// MethodOverride returns an error naming a method override that a
// request of method with headers h and query rawQuery carries and that
// differs from method: an X-HTTP-Method-Override header (or
// X-HTTP-Method, X-Method-Override, or a look-alike of one) or a _method
// query parameter. Some upstreams serve such a POST as the method it
// names and others as a POST, so fairgate cannot know which route it
// charges: it refuses instead of guessing (a POST /v1/search overridden
// to GET was charged as a POST and served as the search). An override
// that names the request's own method changes nothing and passes. A
// _method in a form body is not read.
func MethodOverride(method string, h http.Header, rawQuery string) error {
	for name, vs := range h {
		for _, o := range overrideHeaders {
			if !strings.EqualFold(name, o) && !policy.LookAlike(name, o) {
				continue
			}
			for _, v := range vs {
				if !strings.EqualFold(strings.TrimSpace(v), method) {
					return fmt.Errorf("the request carries a method override (%s: %q): upstreams differ on whether they honour it, so send the method itself", name, v)
				}
			}
		}
	}
	if rawQuery == "" || !strings.Contains(strings.ToLower(rawQuery), "method") {
		return nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil && strings.Contains(strings.ToLower(rawQuery), "_method") {
		return errors.New("the query holds a _method parameter that does not parse: send the method itself")
	}
	for k, vs := range q {
		if !strings.EqualFold(k, "_method") {
			continue
		}
		for _, v := range vs {
			if !strings.EqualFold(strings.TrimSpace(v), method) {
				return fmt.Errorf("the query overrides the method (_method=%s): upstreams differ on whether they honour it, so send the method itself", v)
			}
		}
	}
	return nil
}

// RequestPath returns the path r's route is matched on: its request
// line's, read by [policy.TargetPath] (r.URL.Path for a request made in
// Go, without one), or an error naming a spelling that upstreams read
// differently.
func RequestPath(r *http.Request) (string, error) {
	if r.RequestURI == "" {
		return r.URL.Path, nil
	}
	return policy.TargetPath(r.RequestURI)
}

// Middleware returns net/http middleware that decides every request with
// c.Limiter before passing it on: allowed requests get the rate-limit
// headers and go to next; rejected ones get 429 or 503 and never reach it.
//
// A request of a class with a measured cost (policy.MeasuredCost) is
// charged its estimate, read from its header or the JSON of its body's
// first [MaxEstimateBody] bytes (given back to next whole), and settled
// at its true cost when next returns: the cost [SetCost] gave, else the
// one the answer holds where the class's measure says (read as the
// answer is written, package costmeter: a stream still streams), else by
// the rules of [SettleRule] (docs/cost.md). The settlement goes through
// [limiter.Limiter.Settle], bounded in time, after the answer's bytes
// have been flushed to the client.
func Middleware(c Config) (func(http.Handler) http.Handler, error) {
	if c.Limiter == nil || c.Identify == nil && c.IdentifyIn == nil {
		return nil, errors.New("httplimit: Config.Limiter and Config.Identify (or IdentifyIn) are required")
	}
	form, err := limitheader.ParseForm(string(c.Headers))
	if err != nil {
		return nil, err
	}
	route := func(r *http.Request) (string, string, error) {
		p, err := RequestPath(r)
		if err == nil {
			err = MethodOverride(r.Method, r.Header, r.URL.RawQuery)
		}
		return r.Method, p, err
	}
	if c.Route != nil {
		route = func(r *http.Request) (string, string, error) {
			m, p := c.Route(r)
			return m, p, nil
		}
	}
	clientIP := c.ClientIP
	if clientIP == nil {
		clientIP = peerIP
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var err error
			var id policy.Identity
			var snap *policy.Snapshot
			preflight := IsPreflight(r)
			if !preflight {
				if c.IdentifyIn != nil {
					id, snap, err = c.IdentifyIn(r)
				} else {
					id, err = c.Identify(r)
				}
				if err != nil {
					WriteUnauthorized(w, err.Error())
					return
				}
			}
			// The middleware settles measured costs: a request of such a
			// class is charged its estimate.
			req := policy.Request{Tenant: id.Tenant, Plan: id.Plan, IP: clientIP(r), Hold: c.SlowDown, Preflight: preflight, Settles: true}
			if req.Method, req.Path, err = route(r); err != nil {
				problem.BadRequest(w, err.Error())
				return
			}
			if c.Credential != nil && id.Tenant == "" {
				req.Credential = c.Credential(r)
			}
			if snap == nil {
				snap = c.Limiter.Snapshot()
			}
			if m := snap.Measured(req); m != nil {
				req.Cost, req.HasCost = estimate(r, m), true
			}
			d, err := c.Limiter.DecideIn(r.Context(), snap, req)
			if err == nil && c.Observe != nil {
				c.Observe(r, d)
			}
			switch {
			case errors.Is(err, policy.ErrNoTenant):
				WriteUnauthorized(w, "this route needs a credential")
				return
			case err != nil:
				log.Warn("cannot decide request", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
				problem.Write(w, problem.Details{Status: http.StatusBadRequest, Detail: err.Error()})
				return
			case !d.Allowed:
				WriteRejection(w, form, d)
				return
			}
			limitheader.Set(w.Header(), form, d)
			if d.Slots != nil {
				// The request holds concurrency slots until it ends: when
				// the response is written out (a stream included), the
				// client goes away, or the handler fails.
				stop := d.Slots.KeepAlive()
				defer func() {
					stop()
					d.Slots.Release(r.Context())
				}()
			}
			v := &decided{id: id, d: d}
			dr := r.WithContext(context.WithValue(r.Context(), decidedKey{}, v))
			if d.Settlement == nil {
				next.ServeHTTP(w, dr)
				return
			}
			// A measured cost: the answer is metered as it is written, and
			// the request settled once next has returned, or panicked (the
			// panic goes on after it).
			mw := costmeter.NewWriter(w, d.Resolution.Measured.Measure)
			returned := false
			defer func() {
				if !returned {
					c.settle(dr, mw, v, true)
				}
			}()
			next.ServeHTTP(mw, dr)
			returned = true
			c.settle(dr, mw, v, false)
		})
	}, nil
}
