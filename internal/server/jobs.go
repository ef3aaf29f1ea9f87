package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// jobTenant returns the verified tenant of a jobs request, answering 401
// itself when there is none: a job belongs to the credential's tenant,
// never to one a client names.
func (s *Server) jobTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, _, err := s.pinned(r)
	if err != nil {
		httplimit.WriteUnauthorized(w, err.Error())
		return "", false
	}
	if id.Tenant == "" {
		httplimit.WriteUnauthorized(w, "jobs belong to a tenant: send a credential")
		return "", false
	}
	return id.Tenant, true
}

// jobProblem answers a queue error: the caller's fault 400 or 404, a full
// queue 503 with Retry-After 30, anything else (the store) 503.
func jobProblem(w http.ResponseWriter, err error) {
	var full *fairq.FullError
	switch {
	case errors.As(err, &full) && full.Tenant != "":
		// The caller's own share is full: its fault, a 429 for it alone.
		w.Header().Set("Retry-After", limitheader.RetryAfter(full.RetryAfter))
		problem.Write(w, problem.Details{Status: http.StatusTooManyRequests, Detail: err.Error(),
			Ext: map[string]any{"code": "tenant_queue_full", "kind": full.Kind, "retry_after_seconds": limitheader.RetrySeconds(full.RetryAfter)}})
	case errors.As(err, &full):
		w.Header().Set("Retry-After", limitheader.RetryAfter(full.RetryAfter))
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error(),
			Ext: map[string]any{"code": "queue_full", "kind": full.Kind, "retry_after_seconds": limitheader.RetrySeconds(full.RetryAfter)}})
	case errors.Is(err, fairq.ErrUnknownKind), errors.Is(err, fairq.ErrNotFound):
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: err.Error()})
	case errors.Is(err, fairq.ErrLeaseLost):
		problem.Write(w, problem.Details{Status: http.StatusConflict, Detail: err.Error()})
	case errors.Is(err, fairq.ErrInvalid):
		problem.BadRequest(w, err.Error())
	default:
		w.Header().Set("Retry-After", "1")
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Type: httplimit.TypeUnavailable, Title: "Job queue unavailable", Detail: err.Error()})
	}
}

// handleEnqueue serves POST /v1/jobs/{kind}: the body (JSON, up to
// fairq.MaxPayload) is the job's payload.
func (s *Server) handleEnqueue(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.jobTenant(w, r)
	if !ok {
		return
	}
	kind := r.PathValue("kind")
	if _, err := s.kinds.Lookup(kind); err != nil {
		jobProblem(w, err)
		return
	}
	// An enqueue is a request like any other: charged to the tenant's
	// limits for its route (the default class when no route names it).
	d, err := s.lim.Decide(r.Context(), policy.Request{Tenant: tenant, Method: r.Method, Path: r.URL.Path})
	if err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	limitheader.Set(w.Header(), s.form, d)
	if !d.Allowed {
		httplimit.WriteRejection(w, s.form, d)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, fairq.MaxPayload))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem.Write(w, problem.Details{Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("a job's payload is at most %d bytes", fairq.MaxPayload)})
			return
		}
		problem.BadRequest(w, "reading body: "+err.Error())
		return
	}
	if len(body) > 0 && !json.Valid(body) {
		problem.BadRequest(w, "the job's payload (the body) must be JSON")
		return
	}
	ctx, cancel := s.control(r)
	defer cancel()
	e, err := s.jobs.Enqueue(ctx, tenant, kind, body)
	if err != nil {
		jobProblem(w, err)
		return
	}
	state := "ok"
	if e.Warn {
		state = "warn"
	}
	w.Header().Set("Location", "/v1/jobs/"+e.ID)
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": e.ID, "status": fairq.StatusQueued, "queue_state": state})
}

// handleJob serves GET /v1/jobs/{id}: one of the caller's own jobs.
func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.jobTenant(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.control(r)
	defer cancel()
	in, err := s.jobs.Get(ctx, tenant, r.PathValue("id"))
	if err != nil {
		jobProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job_id": in.ID, "kind": in.Kind, "status": in.Status, "attempts": in.Attempts,
		"created": in.Created.UTC().Format(time.RFC3339Nano), "updated": in.Updated.UTC().Format(time.RFC3339Nano)})
}

// handleLease serves POST /v1/jobs/{kind}/lease for workers: 200 with a
// job, or 204 when none is ready. The lease token names the kind, so ack
// and nack need only the job ID and the token.
func (s *Server) handleLease(w http.ResponseWriter, r *http.Request) {
	kind := r.PathValue("kind")
	ctx, cancel := s.control(r)
	defer cancel()
	l, ok, err := s.jobs.Lease(ctx, kind)
	if err != nil {
		jobProblem(w, err)
		return
	}
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	payload := json.RawMessage("null")
	if len(l.Payload) > 0 {
		payload = l.Payload
	}
	writeJSON(w, http.StatusOK, map[string]any{"job_id": l.ID, "kind": l.Kind, "tenant": l.Tenant, "payload": payload,
		"attempt": l.Attempt, "lease": l.Kind + "." + l.Token, "lease_expires_ms": time.Until(l.Expires).Milliseconds()})
}

// finishBody is the body of ack and nack.
type finishBody struct {
	Lease        opt[string] `json:"lease"`
	RetryAfterMs opt[int64]  `json:"retry_after_ms"`
}

// handleAck serves POST /v1/jobs/{id}/ack {"lease"}.
func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) { s.finishJob(w, r, false) }

// handleNack serves POST /v1/jobs/{id}/nack {"lease", "retry_after_ms"}.
func (s *Server) handleNack(w http.ResponseWriter, r *http.Request) { s.finishJob(w, r, true) }

func (s *Server) finishJob(w http.ResponseWriter, r *http.Request, nack bool) {
	var req finishBody
	if !readJSON(w, r, &req, nil) {
		return
	}
	if !req.Lease.ok {
		problem.BadRequest(w, "lease: required, the lease token the lease answered")
		return
	}
	kind, token, ok := strings.Cut(req.Lease.v, ".")
	if !ok || token == "" {
		problem.BadRequest(w, "lease: not a lease token: want the \"lease\" value of the lease answer")
		return
	}
	id := r.PathValue("id")
	ctx, cancel := s.control(r)
	defer cancel()
	var err error
	if nack {
		var delay time.Duration
		if req.RetryAfterMs.ok {
			if req.RetryAfterMs.v < 0 || req.RetryAfterMs.v > int64(fairq.Retention/time.Millisecond) {
				problem.BadRequest(w, fmt.Sprintf("retry_after_ms: %d is outside 0..%d", req.RetryAfterMs.v, int64(fairq.Retention/time.Millisecond)))
				return
			}
			delay = time.Duration(req.RetryAfterMs.v) * time.Millisecond
		}
		err = s.jobs.Nack(ctx, kind, id, token, delay)
	} else {
		if req.RetryAfterMs.ok {
			problem.BadRequest(w, "retry_after_ms: only nack takes it")
			return
		}
		err = s.jobs.Ack(ctx, kind, id, token)
	}
	if err != nil {
		jobProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"job_id": id, "ok": true})
}
