package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/quota"
)

// MaxOutboundWait is the longest max_wait_ms POST /v1/outbound/acquire
// accepts: a worker that would wait longer is better off re-queueing its
// job than holding a connection (and the server's write timeout is 30 s).
const MaxOutboundWait = 20 * time.Second

// acquireBody is the body of POST /v1/outbound/acquire.
type acquireBody struct {
	Provider  opt[string] `json:"provider"`
	Tenant    opt[string] `json:"tenant"`
	MaxWaitMs opt[int64]  `json:"max_wait_ms"`
}

// pauseBody is the body of POST /v1/outbound/pause. Without a tenant it
// pauses the provider; with one, that tenant's calls (and the provider on
// a quorum of tenants, see quota.Quotas.PauseTenant).
type pauseBody struct {
	Provider     opt[string] `json:"provider"`
	Tenant       opt[string] `json:"tenant"`
	RetryAfterMs opt[int64]  `json:"retry_after_ms"`
}

// maxTenantBytes is the longest tenant ID the outbound endpoints accept.
const maxTenantBytes = 16 << 10

// outbound serves the outbound quota endpoints for workers.
type outbound struct {
	q *quota.Quotas
}

// quotaProblem answers a quota error that is the request's fault with 400,
// and a store failure with 503.
func quotaProblem(w http.ResponseWriter, err error) {
	if errors.Is(err, quota.ErrUnknownProvider) || errors.Is(err, quota.ErrInvalid) {
		problem.BadRequest(w, err.Error())
		return
	}
	w.Header().Set("Retry-After", "1")
	problem.Write(w, problem.Details{
		Status: http.StatusServiceUnavailable, Type: httplimit.TypeUnavailable, Title: "Rate limiter unavailable",
		Detail: err.Error() + "; re-queue the job", Ext: map[string]any{"code": "rate_limiter_unavailable", "retry_after_seconds": 1},
	})
}

func (o *outbound) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var req acquireBody
	if !readJSON(w, r, &req, nil) {
		return
	}
	wait := o.q.MaxWait()
	switch {
	case !req.Provider.ok || req.Provider.v == "":
		problem.BadRequest(w, "provider: required, a provider named in the config")
		return
	case !req.Tenant.ok || req.Tenant.v == "":
		problem.BadRequest(w, "tenant: required, the tenant the call is made for")
		return
	case len(req.Tenant.v) > maxTenantBytes:
		problem.BadRequest(w, fmt.Sprintf("tenant: %d bytes is over the 16 KiB limit", len(req.Tenant.v)))
		return
	case req.MaxWaitMs.ok && (req.MaxWaitMs.v < 0 || req.MaxWaitMs.v > MaxOutboundWait.Milliseconds()):
		problem.BadRequest(w, fmt.Sprintf("max_wait_ms: %d is outside 0..%d: re-queue the job rather than wait longer", req.MaxWaitMs.v, MaxOutboundWait.Milliseconds()))
		return
	case req.MaxWaitMs.ok:
		wait = time.Duration(req.MaxWaitMs.v) * time.Millisecond
	}
	waited, err := o.q.AcquireWithin(r.Context(), req.Provider.v, req.Tenant.v, wait)
	var de *quota.DeadlineError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]any{"acquired": true, "waited_ms": waited.Milliseconds()})
	case errors.As(err, &de):
		limited := "provider"
		switch {
		case de.Paused:
			limited = "tenant_pause"
		case de.Share:
			limited = "tenant_share"
		}
		w.Header().Set("Retry-After", limitheader.RetryAfter(de.RetryAfter))
		problem.Write(w, problem.Details{
			Type:   httplimit.TypeRateLimited,
			Status: http.StatusTooManyRequests,
			Detail: err.Error(),
			Ext:    map[string]any{"acquired": false, "retry_after_ms": algo.CeilMillis(de.RetryAfter), "limited_by": limited, "waited_ms": waited.Milliseconds()},
		})
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The worker went away; nobody reads the answer.
	default:
		quotaProblem(w, err)
	}
}

func (o *outbound) handlePause(w http.ResponseWriter, r *http.Request) {
	var req pauseBody
	if !readJSON(w, r, &req, nil) {
		return
	}
	switch {
	case !req.Provider.ok || req.Provider.v == "":
		problem.BadRequest(w, "provider: required, a provider named in the config")
		return
	case req.Tenant.ok && req.Tenant.v == "":
		problem.BadRequest(w, "tenant: empty: name the tenant whose call the provider answered, or leave the field out to pause the provider for every tenant")
		return
	case req.Tenant.ok && len(req.Tenant.v) > maxTenantBytes:
		problem.BadRequest(w, fmt.Sprintf("tenant: %d bytes is over the 16 KiB limit", len(req.Tenant.v)))
		return
	case !req.RetryAfterMs.ok:
		problem.BadRequest(w, "retry_after_ms: required, the provider's Retry-After in milliseconds")
		return
	case req.RetryAfterMs.v < 0 || req.RetryAfterMs.v > o.q.MaxPause().Milliseconds():
		problem.BadRequest(w, fmt.Sprintf("retry_after_ms: %d is outside 0..%d", req.RetryAfterMs.v, o.q.MaxPause().Milliseconds()))
		return
	}
	d := time.Duration(req.RetryAfterMs.v) * time.Millisecond
	answer := map[string]any{"paused": true, "provider": req.Provider.v, "retry_after_ms": req.RetryAfterMs.v}
	if !req.Tenant.ok {
		if err := o.q.Pause(r.Context(), req.Provider.v, d); err != nil {
			quotaProblem(w, err)
			return
		}
		answer["provider_paused"] = d > 0
	} else {
		all, err := o.q.PauseTenant(r.Context(), req.Provider.v, req.Tenant.v, d)
		if err != nil {
			quotaProblem(w, err)
			return
		}
		answer["tenant"], answer["provider_paused"] = req.Tenant.v, all
	}
	writeJSON(w, http.StatusOK, answer)
}
