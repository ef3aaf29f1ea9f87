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
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limiter"
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
}

// NewAdmin returns the admin API handler:
//
//	GET    /admin/tenants/{id}   the tenant's effective limits and run-time entry
//	PUT    /admin/tenants/{id}   set its plan and overrides, with an optional expiry
//	DELETE /admin/tenants/{id}   clear its run-time entry
//	POST   /admin/reload         reload the config file
//	GET    /admin/config         the policy in force: the file's and the run-time overlay
//
// Every request needs Authorization: Bearer <token>.
func NewAdmin(c AdminConfig) (http.Handler, error) {
	if c.Limiter == nil {
		return nil, errors.New("server: AdminConfig.Limiter is required")
	}
	if len(c.Token) < 16 {
		return nil, errors.New("server: the admin token must be at least 16 characters")
	}
	a := &admin{lim: c.Limiter, token: sha256.Sum256([]byte(c.Token)), reload: c.Reload, log: c.Logger, timeout: cmp.Or(c.Timeout, DefaultControlTimeout)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/tenants/{id}", a.getTenant)
	mux.HandleFunc("PUT /admin/tenants/{id}", a.putTenant)
	mux.HandleFunc("DELETE /admin/tenants/{id}", a.deleteTenant)
	mux.HandleFunc("POST /admin/reload", a.doReload)
	mux.HandleFunc("GET /admin/config", a.getConfig)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate-admin"`)
			problem.Write(w, problem.Details{Status: http.StatusUnauthorized, Detail: "admin requests need Authorization: Bearer <admin token>"})
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// authorized reports whether r carries the admin token.
func (a *admin) authorized(r *http.Request) bool { return auth.BearerMatches(r, a.token) }

func (a *admin) getTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	tl, err := a.lim.Effective(ctx, id)
	if err != nil {
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	entry, ok := a.lim.Overlay().Tenants[id]
	out := map[string]any{"effective": tl}
	if ok {
		out["override"] = entry
	}
	writeJSON(w, http.StatusOK, out)
}

// tenantBody is the body of PUT /admin/tenants/{id}.
type tenantBody struct {
	Plan       string                          `json:"plan"`
	Limit      int64                           `json:"limit"`
	Burst      int64                           `json:"burst"`
	Limits     map[string]limiter.RuleOverride `json:"limits"`
	Shares     map[string]float64              `json:"shares"`
	ExpiresAt  *time.Time                      `json:"expires_at"`
	TTLSeconds *int64                          `json:"ttl_seconds"`
}

func (a *admin) putTenant(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b tenantBody
	if !decodeJSON(w, r, &b) {
		return
	}
	t := limiter.Tenant{Plan: b.Plan, Limit: b.Limit, Burst: b.Burst, Rules: b.Limits, Shares: b.Shares}
	switch {
	case b.ExpiresAt != nil && b.TTLSeconds != nil:
		problem.BadRequest(w, "expires_at, ttl_seconds: give one, not both")
		return
	case b.ExpiresAt != nil:
		t.Expires = *b.ExpiresAt
	case b.TTLSeconds != nil:
		if *b.TTLSeconds < 1 {
			problem.BadRequest(w, fmt.Sprintf("ttl_seconds: %d: want at least 1", *b.TTLSeconds))
			return
		}
		t.Expires = time.Now().Add(time.Duration(*b.TTLSeconds) * time.Second)
	}
	before, had := a.lim.Overlay().Tenants[id]
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.lim.PutOverride(ctx, id, t); err != nil {
		var ps limiter.Problems
		switch {
		case errors.As(err, &ps):
			problem.BadRequest(w, ps.Error())
		case errors.Is(err, limiter.ErrControlUnavailable):
			a.log.Error("admin: tenant override NOT set", slog.String("tenant", id), slog.String("error", err.Error()))
			w.Header().Set("Retry-After", "5")
			problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
		default:
			problem.BadRequest(w, err.Error())
		}
		return
	}
	prev, _ := json.Marshal(before)
	next, _ := json.Marshal(t)
	if !had {
		prev = []byte("null")
	}
	a.log.Info("admin: tenant override set", slog.String("tenant", id), slog.String("before", string(prev)), slog.String("after", string(next)))
	a.getTenant(w, r)
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
	prev, _ := json.Marshal(before)
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
	p := a.lim.Base()
	loc := "UTC"
	if p.Location != nil {
		loc = p.Location.String()
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"timezone": loc, "default_plan": p.DefaultPlan, "default_class": p.DefaultClass,
		"plans": p.Plans, "classes": p.Classes, "routes": p.Routes, "anonymous": p.Anonymous, "tenants": p.Tenants,
		"overlay": a.lim.Overlay(),
	})
}
