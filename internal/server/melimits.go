package server

import (
	"net/http"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/limitview"
)

// handleMyLimits serves GET /v1/me/limits: the verified caller's own
// limits (each in its unit: requests, or a measured cost's such as
// tokens), concurrency layers and, with a job queue, its part of each
// queue.
func (s *Server) handleMyLimits(w http.ResponseWriter, r *http.Request) {
	id, snap, err := s.pinned(r)
	if err != nil {
		httplimit.WriteUnauthorized(w, err.Error())
		return
	}
	if id.Tenant == "" {
		httplimit.WriteUnauthorized(w, "send a credential to see your limits")
		return
	}
	ctx, cancel := s.control(r)
	defer cancel()
	tl, err := s.lim.EffectiveIn(ctx, snap, id.Tenant, id.Plan)
	if err != nil {
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: "limits cannot be read right now: " + err.Error()})
		return
	}
	out := struct {
		Tenant      string             `json:"tenant"`
		Plan        string             `json:"plan"`
		Layers      []limitview.Layer  `json:"layers"`
		Concurrency []concurrencyLayer `json:"concurrency,omitempty"`
		Queues      map[string]any     `json:"queues,omitempty"`
	}{Tenant: tl.Tenant, Plan: tl.Plan, Layers: limitview.Layers(tl.Layers), Concurrency: concurrencyView(tl.Concurrency)}
	if s.jobs != nil {
		out.Queues = s.queueStates(r, tl.Tenant)
	}
	writeJSON(w, http.StatusOK, out)
}

// queueStates is the tenant's part of each queue for /v1/me/limits.
func (s *Server) queueStates(r *http.Request, tenant string) map[string]any {
	out := map[string]any{}
	ctx, cancel := s.control(r)
	defer cancel()
	for name, k := range s.kinds {
		all, mine, err := s.jobs.Depth(ctx, name, tenant)
		if err != nil {
			continue
		}
		state := "ok"
		switch {
		case k.Refuse > 0 && all >= k.Refuse:
			state = "refusing"
		case k.Warn > 0 && all >= k.Warn:
			state = "warn"
		}
		out[name] = map[string]any{"depth": mine, "kind_depth": all, "state": state, "warn": k.Warn, "refuse": k.Refuse}
	}
	return out
}
