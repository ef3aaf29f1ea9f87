package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// AdminConfig configures the admin API.
type AdminConfig struct {
	// Limiter is the limiter whose overrides the API changes. Required.
	Limiter *limiter.Limiter
	// Token is the bearer token every admin request must carry. Required:
	// without one the admin listener does not start.
	Token string
	// Reload reloads the config file; nil when there is none.
	Reload func() error
	// Logger receives every change, with what changed. Nil means silent.
	Logger *slog.Logger
	// Timeout bounds each store call a request makes. Zero means
	// DefaultControlTimeout.
	Timeout time.Duration
	// Keys, if not nil, are the stored API keys /admin/keys manages.
	Keys *apikeys.Set
}

// DefaultControlTimeout bounds the store calls that are not decisions:
// admin reads and writes, job queue calls and /v1/me/limits.
const DefaultControlTimeout = 2 * time.Second

type admin struct {
	lim     *limiter.Limiter
	token   [sha256.Size]byte
	reload  func() error
	log     *slog.Logger
	timeout time.Duration
	keys    *apikeys.Set
}

// NewAdmin returns the admin API handler: the endpoints the package doc
// lists under Admin (doc.go). Every request needs Authorization: Bearer
// <token>.
func NewAdmin(c AdminConfig) (http.Handler, error) {
	if c.Limiter == nil {
		return nil, errors.New("server: AdminConfig.Limiter is required")
	}
	if len(c.Token) < 16 {
		return nil, errors.New("server: the admin token (FAIRGATE_ADMIN_TOKEN or --admin-token-file) must be at least 16 characters: make one with openssl rand -hex 16")
	}
	a := &admin{lim: c.Limiter, token: sha256.Sum256([]byte(c.Token)), reload: c.Reload, log: c.Logger, timeout: cmp.Or(c.Timeout, DefaultControlTimeout), keys: c.Keys}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/tenants", a.listTenants)
	mux.HandleFunc("GET /admin/plans/{name}", a.getPlan)
	mux.HandleFunc("PUT /admin/plans/{name}", a.putPlan)
	mux.HandleFunc("GET /admin/tenants/{id}", a.getTenant)
	mux.HandleFunc("PUT /admin/tenants/{id}", a.putTenant)
	mux.HandleFunc("DELETE /admin/tenants/{id}", a.deleteTenant)
	mux.HandleFunc("POST /admin/reload", a.doReload)
	mux.HandleFunc("GET /admin/config", a.getConfig)
	if a.keys != nil {
		a.keyRoutes(mux)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			unauthorized(w, r, "fairgate-admin", "admin requests need Authorization: Bearer <admin token>", "FAIRGATE_ADMIN_TOKEN")
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			// The mux's own 404 and 405 are plain text: answer problems.
			rec := &statusOnly{header: http.Header{}}
			mux.ServeHTTP(rec, r)
			if allow := rec.header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			detail := fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, http.StatusText(rec.status))
			if rec.status == http.StatusNotFound && !under(r.URL.Path, "/admin") {
				detail += "; " + notAdmin
			}
			problem.Write(w, problem.Details{Status: rec.status, Detail: detail})
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// writeFailed answers a run-time write that did not happen: 400 naming the
// problem for one the policy refuses, 503 (logged as msg, with who) for
// one the control store did not take in time.
func (a *admin) writeFailed(w http.ResponseWriter, err error, msg string, who slog.Attr) {
	var ps policy.Problems
	switch {
	case errors.As(err, &ps):
		problem.BadRequest(w, ps.Error())
	case errors.Is(err, limiter.ErrControlUnavailable):
		a.log.Error(msg, who, slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
	default:
		problem.BadRequest(w, err.Error())
	}
}

// statusOnly keeps a handler's status and headers and drops its body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(p []byte) (int, error) { return len(p), nil }
func (s *statusOnly) WriteHeader(code int)        { s.status = code }

// authorized reports whether r carries the admin token.
func (a *admin) authorized(r *http.Request) bool { return auth.BearerMatches(r, a.token) }

func (a *admin) getTenant(w http.ResponseWriter, r *http.Request) {
	a.writeTenant(w, r, nil)
}

// writeTenant answers GET /admin/tenants/{id}'s view of the tenant, with
// warnings (omitted when none).
func (a *admin) writeTenant(w http.ResponseWriter, r *http.Request, warnings []string) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	tl, err := a.lim.Effective(ctx, id, "")
	if err != nil {
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	entry, ok := a.lim.Overlay().Tenants[id]
	out := map[string]any{"effective": effectiveView(tl)}
	if ok {
		out["override"] = overrideView(entry)
	}
	if len(warnings) > 0 {
		out["warnings"] = warnings
	}
	writeJSON(w, http.StatusOK, out)
}

// entryPlanWarnings warns of what an entry without a plan does: it puts
// its tenant on the default plan while in force, whatever plan the
// tenant's keys or tokens name (an operator raising one limit would
// otherwise move a tenant off its plan unawares).
func entryPlanWarnings(snap *policy.Snapshot, id string, t policy.Tenant) []string {
	if t.Plan != "" {
		return nil
	}
	def := snap.Policy().DefaultPlan
	return []string{fmt.Sprintf("plan: omitted, so while this entry is in force tenant %q is on the default plan %q with these overrides, whatever plan its API keys or tokens name (an entry decides a tenant's plan before its credentials: docs/config.md#where-a-tenants-plan-comes-from); give plan to keep another", id, def)}
}

// listTenants serves GET /admin/tenants: the tenants with run-time entries.
func (a *admin) listTenants(w http.ResponseWriter, r *http.Request) {
	ov := a.lim.Overlay()
	out := make([]map[string]any, 0, len(ov.Tenants))
	for _, id := range sortedIDs(ov.Tenants) {
		v := overrideView(ov.Tenants[id])
		v["tenant"] = id
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"version": ov.Version, "tenants": out})
}

// getPlan serves GET /admin/plans/{name}: the plan in force (a run-time
// plan replaces the file's of its name).
func (a *admin) getPlan(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, runtime := a.lim.Overlay().Plans[name]
	if !runtime {
		var ok bool
		if p, ok = a.lim.Base().Plans[name]; !ok {
			problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: fmt.Sprintf("no plan %q", name)})
			return
		}
	}
	p.Name = name
	out := planView(p)
	out["runtime"] = runtime
	writeJSON(w, http.StatusOK, out)
}

// putPlan serves PUT /admin/plans/{name}: the plan's rules, for every
// instance, checked against the policy in force first.
func (a *admin) putPlan(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var b planBody
	if !readJSON(w, r, &b, nil) {
		return
	}
	p, detail := b.plan(name)
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	before, had := a.lim.Overlay().Plans[name]
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.lim.PutPlan(ctx, p); err != nil {
		a.writeFailed(w, err, "admin: plan NOT set", slog.String("plan", name))
		return
	}
	prev := []byte("null")
	if had {
		prev, _ = json.Marshal(planView(before))
	}
	next, _ := json.Marshal(planView(p))
	a.log.Info("admin: plan set", slog.String("plan", name), slog.String("before", string(prev)), slog.String("after", string(next)))
	a.getPlan(w, r)
}

func (a *admin) putTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b tenantBody
	if !readJSON(w, r, &b, nil) {
		return
	}
	t := policy.Tenant{Plan: b.Plan, Limit: b.Limit, Burst: b.Burst, Rules: b.Limits, Shares: b.Shares, Concurrency: b.Concurrency}
	var err error
	if t.Expires, err = expiry(b.ExpiresAt, b.TTLSeconds, maxTTLSeconds); err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	before, had := a.lim.Overlay().Tenants[id]
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.lim.PutOverride(ctx, id, t); err != nil {
		a.writeFailed(w, err, "admin: tenant override NOT set", slog.String("tenant", id))
		return
	}
	prev, _ := json.Marshal(overrideView(before))
	next, _ := json.Marshal(overrideView(t))
	if !had {
		prev = []byte("null")
	}
	a.log.Info("admin: tenant override set", slog.String("tenant", id), slog.String("before", string(prev)), slog.String("after", string(next)))
	a.writeTenant(w, r, entryPlanWarnings(a.lim.Snapshot(), id, t))
}

func (a *admin) deleteTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	before, had := a.lim.Overlay().Tenants[id]
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.lim.DeleteOverride(ctx, id); err != nil {
		a.log.Error("admin: tenant override NOT cleared", slog.String("tenant", id), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	prev, _ := json.Marshal(overrideView(before))
	if had {
		a.log.Info("admin: tenant override cleared", slog.String("tenant", id), slog.String("before", string(prev)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": id, "cleared": had})
}

func (a *admin) doReload(w http.ResponseWriter, r *http.Request) {
	if a.reload == nil {
		problem.Write(w, problem.Details{Status: http.StatusConflict, Detail: "serving the embedded example config: there is no file to reload (start with --config)"})
		return
	}
	if err := a.reload(); err != nil {
		problem.Write(w, problem.Details{Status: http.StatusUnprocessableEntity, Detail: "reload refused, the running config stays: " + err.Error()})
		return
	}
	a.log.Info("admin: config reloaded")
	writeJSON(w, http.StatusOK, map[string]any{"reloaded": true})
}

func (a *admin) getConfig(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, policyView(a.lim.Base(), a.lim.Overlay()))
}
