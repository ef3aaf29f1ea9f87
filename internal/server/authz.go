package server

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// ForwardAuth configures /v1/authz, the forward-auth endpoint.
type ForwardAuth struct {
	// DenyStatus is the status of a rejected request: 429 (zero means
	// 429), or 403 with the real status (429, or 503 for a fail-closed
	// answer) in X-Fairgate-Status, for gateways that turn anything but
	// 2xx, 401 and 403 into 500 (nginx auth_request, ingress-nginx).
	DenyStatus int
	// TenantHeader, if set, names the tenant when the peer is a trusted
	// proxy and the request carries no credential of its own.
	TenantHeader string
}

// StatusHeader carries the real status of a rejection answered 403.
const StatusHeader = "X-Fairgate-Status"

// handleAuthz is the forward-auth endpoint. A gateway sends it the
// headers of each client request (any method, no body needed) and passes
// the request on when it answers 2xx:
//   - the method from X-Original-Method or X-Forwarded-Method, else the
//     request's own;
//   - the path from X-Original-URI, the path of X-Original-URL, or
//     X-Forwarded-Uri (the query dropped; matched to routes as the proxy
//     does);
//   - the tenant from the client's credential (Authorization, X-API-Key),
//     or from the configured tenant header of a trusted proxy; the client
//     address as the proxy finds it.
//
// It answers 200 with the RateLimit headers and the verified tenant and
// plan headers; 401 for a missing or bad credential; a rejection as
// DenyStatus says. It never holds a request.
// LeaseHeader carries, on an allowed forward-auth answer, the lease ID of
// the concurrency slots the request holds, for the gateway to pass to the
// upstream, which releases them when the request ends.
const LeaseHeader = "X-Fairgate-Lease"

func (s *Server) handleAuthz(w http.ResponseWriter, r *http.Request) {
	id := s.id.Load()
	method, path, err := original(r)
	if err != nil {
		s.metrics.authz.WithLabelValues("bad_request").Inc()
		problem.BadRequest(w, err.Error())
		return
	}
	who, err := s.identify(r)
	if err != nil {
		s.metrics.authz.WithLabelValues("unauthorized").Inc()
		httplimit.WriteUnauthorized(w, err.Error())
		return
	}
	if who.Tenant == "" && id.fa.TenantHeader != "" && id.ip.Trusts(auth.PeerIP(r)) {
		who.Tenant = r.Header.Get(id.fa.TenantHeader)
	}
	req := policy.Request{Tenant: who.Tenant, Plan: who.Plan, Method: method, Path: path, IP: s.clientIP(r)}
	d, err := s.lim.Decide(r.Context(), req)
	switch {
	case errors.Is(err, policy.ErrNoTenant):
		s.metrics.authz.WithLabelValues("unauthorized").Inc()
		httplimit.WriteUnauthorized(w, "this route needs a credential")
		return
	case err != nil:
		s.metrics.authz.WithLabelValues("bad_request").Inc()
		problem.BadRequest(w, checkError(err, req))
		return
	case !d.Allowed:
		s.metrics.authz.WithLabelValues("limited").Inc()
		s.deny(w, id, d)
		return
	}
	s.metrics.authz.WithLabelValues("allowed").Inc()
	httplimit.SetHeaders(w.Header(), s.form, d)
	if d.Slots != nil {
		// The gateway cannot say when the request ends: the slots are held
		// until the upstream gives them back (POST /v1/concurrency/release
		// with this lease ID, the tenant and the route) or the lease runs
		// out (docs/concurrency.md).
		w.Header().Set(LeaseHeader, d.Slots.ID())
	}
	if who.Tenant != "" {
		w.Header().Set(id.tenantHdr, who.Tenant)
		w.Header().Set(id.planHdr, d.Resolution.Plan)
	}
	w.WriteHeader(http.StatusOK)
}

// deny answers a rejection: as it is (429, or 503 failing closed), or 403
// with the real status in StatusHeader.
func (s *Server) deny(w http.ResponseWriter, id *identity, d limiter.Decision) {
	if id.fa.DenyStatus != http.StatusForbidden {
		httplimit.WriteRejection(w, s.form, d)
		return
	}
	real := http.StatusTooManyRequests
	if d.Reason == limiter.ReasonUnavailable {
		real = http.StatusServiceUnavailable
	}
	w.Header().Set(StatusHeader, strconv.Itoa(real))
	httplimit.WriteRejection(statusAs{w, http.StatusForbidden}, s.form, d)
}

// statusAs writes code instead of the status its handler writes.
type statusAs struct {
	http.ResponseWriter
	code int
}

func (s statusAs) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.code) }

// original returns the method and path of the request a gateway asks
// about.
func original(r *http.Request) (method, path string, err error) {
	method = r.Header.Get("X-Original-Method")
	if method == "" {
		method = r.Header.Get("X-Forwarded-Method")
	}
	if method == "" {
		method = r.Method
	}
	switch {
	case r.Header.Get("X-Original-URI") != "":
		path, err = uriPath(r.Header.Get("X-Original-URI"))
	case r.Header.Get("X-Original-URL") != "":
		var u *url.URL
		if u, err = url.Parse(r.Header.Get("X-Original-URL")); err == nil {
			path = u.Path
		}
	case r.Header.Get("X-Forwarded-Uri") != "":
		path, err = uriPath(r.Header.Get("X-Forwarded-Uri"))
	default:
		return "", "", errors.New("no original path: the gateway must send X-Original-URI (nginx), X-Original-URL (ingress-nginx) or X-Forwarded-Uri (Caddy, Traefik)")
	}
	if err != nil {
		return "", "", errors.New("the original path does not parse: " + err.Error())
	}
	if strings.ContainsAny(method, " \t\r\n") || method == "" {
		return "", "", errors.New("the original method is not a token")
	}
	return method, path, nil
}

// uriPath returns the decoded path of a request URI, its query dropped.
func uriPath(uri string) (string, error) {
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return "", err
	}
	return u.Path, nil
}
