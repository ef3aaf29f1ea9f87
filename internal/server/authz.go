package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/gateway"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// StatusHeader carries the real status of a rejection answered 403.
const StatusHeader = "X-Fairgate-Status"

// LeaseHeader carries, on an allowed forward-auth answer, the lease ID of
// the concurrency slots the request holds, for the gateway to pass to the
// upstream, which releases them when the request ends.
const LeaseHeader = "X-Fairgate-Lease"

// SettlementHeader carries, on an allowed forward-auth answer, the
// settlement handle of a request of a measured-cost class (settle.go),
// for the gateway to pass to the upstream, which posts it to /v1/settle
// with the true cost; it is empty on any other allowed answer.
const SettlementHeader = "X-Fairgate-Settlement"

// handleAuthz is the forward-auth endpoint. A gateway sends it the
// headers of each client request (any method, no body needed) and passes
// the request on when it answers 2xx. It believes the gateway named in
// the config for the headers that gateway sets, and for nothing else the
// client could have sent (package gateway):
//   - the original method and request target from the gateway's headers
//     (X-Original-Method and X-Original-URI for nginx, X-Forwarded-Method
//     and X-Forwarded-Uri for Caddy and Traefik, …), each exactly once;
//     the path read as the proxy reads a request line, spellings that
//     upstreams read differently refused;
//   - the tenant from the client's credential (Authorization, X-API-Key),
//     or from the configured tenant header of a trusted proxy; the client
//     address as the proxy finds it.
//
// A request of a measured-cost class is charged its cap, or, where the
// config says the upstream settles (forward_auth.settles), its estimate:
// the class's estimate header among the original request's headers (the
// gateway forwards no body), else its default.
//
// It answers 200 with the RateLimit headers, the verified tenant and
// plan headers and SettlementHeader; 401 for a missing or bad credential;
// a rejection as DenyStatus says. It never holds a request.
func (s *Server) handleAuthz(w http.ResponseWriter, r *http.Request) {
	id := s.id.Load()
	if id.gw == nil {
		s.metrics.authz.WithLabelValues("misconfigured").Inc()
		if s.authzWarned.CompareAndSwap(false, true) {
			s.log.Error("forward auth: forward_auth.gateway is not set, so /v1/authz refuses every request; name the gateway in front (docs/gateways.md)")
		}
		problem.Write(w, problem.Details{Status: http.StatusInternalServerError,
			Detail: "forward auth is not set up: the config must name the gateway in front (forward_auth.gateway: " + strings.Join(gateway.Names(), ", ") + "), whose headers alone are believed; see docs/gateways.md"})
		return
	}
	if r.URL.Path != gateway.AuthzPath && id.gw.PathPrefix == "" {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no such endpoint: " + r.URL.Path + " (the forward-auth endpoint is " + gateway.AuthzPath + ")"})
		return
	}
	method, path, err := original(id.gw, r)
	if err != nil {
		s.metrics.authz.WithLabelValues("bad_request").Inc()
		problem.BadRequest(w, err.Error())
		return
	}
	// A CORS preflight carries no credential: it is decided per client
	// address under the preflight limits, never answered 401.
	preflight := httplimit.IsPreflightOf(method, r.Header)
	var who policy.Identity
	snap := s.lim.Snapshot()
	if !preflight {
		if who, snap, err = s.pinned(r); err != nil {
			s.metrics.authz.WithLabelValues("unauthorized").Inc()
			httplimit.WriteUnauthorized(w, err.Error())
			return
		}
	}
	if who.Tenant == "" && !preflight && id.fa.TenantHeader != "" && id.ip.Trusts(auth.PeerIP(r)) && len(r.Header.Values(id.fa.TenantHeader)) > 0 {
		if who.Tenant, err = gateway.Once(r.Header, id.fa.TenantHeader, id.gw.Name); err == nil {
			if e := policy.CheckTenantID(who.Tenant); e != nil {
				err = fmt.Errorf("%s: tenant ID: %w", id.fa.TenantHeader, e)
			}
		}
		if err != nil {
			s.metrics.authz.WithLabelValues("bad_request").Inc()
			problem.BadRequest(w, err.Error())
			return
		}
	}
	req := policy.Request{Tenant: who.Tenant, Plan: who.Plan, Method: method, Path: path, IP: s.clientIP(r), Preflight: preflight,
		Settles: id.fa.Settles, Header: r.Header}
	d, err := s.lim.DecideIn(r.Context(), snap, req)
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
	limitheader.Set(w.Header(), s.form, d)
	if d.Slots != nil {
		// The gateway cannot say when the request ends: the slots are held
		// until the upstream gives them back (POST /v1/concurrency/release
		// with this lease ID, the tenant and the route) or the lease runs
		// out (docs/concurrency.md).
		w.Header().Set(LeaseHeader, d.Slots.ID())
	}
	// Every header a gateway may copy to the API's request is in the
	// answer, empty where fairgate has nothing to say (an anonymous or a
	// free request, a class without a measured cost): the gateway then
	// copies what fairgate said, never a client's copy, and Caddy 2.6
	// never its placeholder's own text.
	h := w.Header()
	h[id.tenantHdr] = []string{who.Tenant}
	h[id.planHdr] = []string{d.Resolution.Plan}
	h[SettlementHeader] = []string{s.handleOf(&d)}
	for _, name := range s.form.Names() {
		if h[name] == nil {
			h[name] = []string{""}
		}
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

// original returns the method and the path of the request a gateway
// asks about, from the headers g sets (and nothing else), the path read
// as the proxy reads a request line (policy.TargetPath).
func original(g *gateway.Gateway, r *http.Request) (method, path string, err error) {
	method, target, err := g.Original(r)
	if err != nil {
		return "", "", err
	}
	if path, err = policy.TargetPath(target); err != nil {
		return "", "", fmt.Errorf("the original %v", err)
	}
	// The gateway passes the client's headers on: a method override
	// among them is the upstream's to honour or not.
	_, query, _ := strings.Cut(target, "?")
	if err := httplimit.MethodOverride(method, r.Header, query); err != nil {
		return "", "", err
	}
	return method, path, nil
}
