package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// checkBody is the body of POST /v1/check. The caller is a gateway that
// has verified the tenant itself.
type checkBody struct {
	Tenant opt[string] `json:"tenant"`
	Route  opt[string] `json:"route"`
	Class  opt[string] `json:"class"`
	Cost   opt[int64]  `json:"cost"`
	IP     opt[string] `json:"ip"`
}

// checkFast reads the simple /v1/check bodies, every gateway's in practice.
var checkFast = newFastReader[checkBody]()

type layerJSON struct {
	Policy       string `json:"policy"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow,omitempty"`
}

type checkResponse struct {
	Allowed      bool         `json:"allowed"`
	Status       int          `json:"status"`
	Reason       string       `json:"reason"`
	Policy       string       `json:"policy"`
	RetryAfterMs int64        `json:"retry_after_ms"`
	Headers      headerFields `json:"headers"`
	Decisions    []layerJSON  `json:"decisions"`
	// Settlement is the handle of an admitted request of a measured-cost
	// class, for POST /v1/settle (settle.go); "" for any other.
	Settlement string `json:"settlement,omitempty"`
}

// headerFields are a decision's headers as name, value pairs, encoded as
// one JSON object (what a map would give, without a map per request and
// the sorting of its keys).
type headerFields []string

// MarshalJSON implements json.Marshaler.
func (h headerFields) MarshalJSON() ([]byte, error) { return h.appendJSON(nil), nil }

// parseCheck validates a check request, naming the field at fault.
func parseCheck(req *checkBody) (policy.Request, string) {
	lr := policy.Request{Settles: true} // the gateway settles through the handle
	if req.Tenant.ok {
		lr.Tenant = req.Tenant.v
		if len(lr.Tenant) > policy.MaxTenantID {
			return lr, fmt.Sprintf("tenant: %d bytes, at most %d", len(lr.Tenant), policy.MaxTenantID)
		}
	}
	switch {
	case req.Route.ok && req.Class.ok:
		return lr, "route, class: give one, not both"
	case req.Route.ok:
		m, p, ok := strings.Cut(req.Route.v, " ")
		if !ok || m == "" || !strings.HasPrefix(p, "/") {
			return lr, fmt.Sprintf("route: %q: want a method and a path, such as \"GET /v1/users/7\"", req.Route.v)
		}
		// The path as the request line carries it, read as the proxy and
		// /v1/authz read theirs: the query dropped, spellings that
		// upstreams read differently refused.
		path, err := policy.TargetPath(p)
		if err == nil {
			_, query, _ := strings.Cut(p, "?")
			err = httplimit.MethodOverride(m, nil, query)
		}
		if err != nil {
			return lr, fmt.Sprintf("route: %v", err)
		}
		lr.Method, lr.Path = m, path
	case req.Class.ok:
		if req.Class.v == "" {
			return lr, "class: empty"
		}
		lr.Class = req.Class.v
	default:
		return lr, "route or class: required"
	}
	if req.Cost.ok {
		if req.Cost.v < 0 {
			return lr, fmt.Sprintf("cost: %d is negative", req.Cost.v)
		}
		lr.Cost, lr.HasCost = req.Cost.v, true
	}
	if req.IP.ok {
		a, err := netip.ParseAddr(req.IP.v)
		if err != nil {
			return lr, fmt.Sprintf("ip: %q is not an IP address", req.IP.v)
		}
		lr.IP = a
	}
	return lr, ""
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	var req checkBody
	if !readJSON(w, r, &req, checkFast) {
		return
	}
	lr, detail := parseCheck(&req)
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	// An anonymous route is limited per client address: without one every
	// such caller would share one bucket. A check has no end to give
	// concurrency slots back at, so it takes none (docs/concurrency.md):
	// a gateway holds slots with /v1/concurrency/acquire or /v1/authz's
	// lease.
	lr.RequireIP, lr.NoSlots = true, true
	d, err := s.lim.Decide(r.Context(), lr)
	if err != nil {
		problem.BadRequest(w, checkError(err, lr))
		return
	}
	var hdrs [14]string // on the stack: at most seven headers
	resp := checkResponse{
		Allowed: d.Allowed, Status: http.StatusOK, Reason: string(d.Reason), Policy: d.PolicyName(),
		Headers: limitheader.Append(hdrs[:0], s.form, d),
	}
	var layers [4]layerJSON // on the stack for up to four layers
	resp.Decisions = layers[:0]
	switch {
	case d.Reason == limiter.ReasonUnavailable:
		resp.Status = http.StatusServiceUnavailable
	case !d.Allowed:
		resp.Status = http.StatusTooManyRequests
	}
	if !d.Allowed {
		resp.RetryAfterMs = algo.CeilMillis(d.RetryAfter)
	}
	for _, ld := range d.Layers {
		resp.Decisions = append(resp.Decisions, layerJSON{
			Policy: ld.Policy, Limit: ld.Limit.Capacity(), Remaining: ld.Remaining,
			ResetAfterMs: algo.CeilMillis(ld.ResetAfter), RetryAfterMs: algo.CeilMillis(ld.RetryAfter), Allowed: ld.Allowed, Shadow: ld.Shadow,
		})
	}
	resp.Settlement = s.handleOf(&d)
	out := outPool.Get().(*[]byte)
	*out = resp.appendJSON(*out)
	writeAppended(w, http.StatusOK, out)
}

// checkError names the field a resolution error is about.
func checkError(err error, lr policy.Request) string {
	switch {
	case errors.Is(err, policy.ErrNoTenant):
		return fmt.Sprintf("tenant: required for route %s %s, which is not anonymous", lr.Method, lr.Path)
	case errors.Is(err, policy.ErrNoClientIP):
		return "ip: required without a tenant: anonymous routes are limited per client address"
	case errors.Is(err, policy.ErrUnknownClass):
		return "class: " + strings.TrimPrefix(err.Error(), "policy: ")
	case errors.Is(err, policy.ErrBadCost):
		return "cost: " + strings.TrimPrefix(err.Error(), "policy: ")
	}
	return err.Error()
}
