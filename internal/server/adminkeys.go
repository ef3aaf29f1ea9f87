package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/policy"
)

// keyRoutes adds the stored API keys' endpoints:
//
//	POST   /admin/keys        make a key for a tenant: the key is in this answer only
//	GET    /admin/keys        list keys (?tenant=, ?after=, ?limit=), without the keys
//	GET    /admin/keys/{id}   one key's record
//	PATCH  /admin/keys/{id}   change its label or expiry (expire it now, or later)
//	DELETE /admin/keys/{id}   revoke it
func (a *admin) keyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /admin/keys", a.createKey)
	mux.HandleFunc("GET /admin/keys", a.listKeys)
	mux.HandleFunc("GET /admin/keys/{id}", a.getKey)
	mux.HandleFunc("PATCH /admin/keys/{id}", a.patchKey)
	mux.HandleFunc("DELETE /admin/keys/{id}", a.revokeKey)
}

// createKey serves POST /admin/keys.
func (a *admin) createKey(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if !readJSON(w, r, &b, nil) {
		return
	}
	rec := apikeys.Record{Tenant: b.Tenant, Plan: b.Plan}
	if b.Label.ok {
		rec.Label = b.Label.v
	}
	var err error
	if rec.Expires, err = expiry(b.ExpiresAt, b.TTLSeconds, maxKeyTTLSeconds); err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	if !rec.Expires.IsZero() && !rec.Expires.After(time.Now()) {
		problem.BadRequest(w, "expires_at: already past; a new key must be usable")
		return
	}
	var warnings []string
	if rec.Plan != "" {
		snap := a.lim.Snapshot()
		if !snap.KnownPlan(rec.Plan) {
			problem.BadRequest(w, fmt.Sprintf("plan: %q is not a plan of the policy in force: want one of %s (or omit plan)", rec.Plan, strings.Join(snap.PlanNames(), ", ")))
			return
		}
		var conflict string
		if conflict, warnings = keyPlanUse(snap, rec.Tenant, rec.Plan, time.Now()); conflict != "" {
			problem.Write(w, problem.Details{Status: http.StatusConflict, Detail: conflict})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	key, rec, err := a.keys.Create(ctx, rec)
	if err != nil {
		a.keyFailed(w, err, "admin: API key NOT created", slog.String("tenant", b.Tenant))
		return
	}
	a.log.Info("admin: API key created", slog.String("id", rec.ID), slog.String("tenant", rec.Tenant), slog.String("plan", rec.Plan), slog.String("label", rec.Label))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "/admin/keys/"+rec.ID)
	writeJSON(w, http.StatusCreated, createdKey{Secret: key, Key: apikeys.Key{Record: rec}, Warnings: warnings})
}

// createdKey is POST /admin/keys's answer: the record and, this once, the
// key; and what stands in the way of the key's plan for a time.
type createdKey struct {
	Secret string `json:"key"`
	apikeys.Key
	Warnings []string `json:"warnings,omitempty"`
}

// keyPlanUse says whether a key for tenant that names plan (a plan of
// snap) would be decided by its plan, by the order of policy.PlanSource: a
// tenant's entry decides before any credential's plan. conflict, if not
// empty, says which entry puts the tenant on another plan for as long as
// the policy stays (the key is refused: an admin said two different
// things); warnings say which run-time entry does so only until it
// expires (the key is made: its plan applies from then). A run-time entry
// ends (by expiry, or by DELETE /admin/tenants/{id}), so the file's entry
// beneath it is judged too, whatever the run-time entry says: a file entry
// that contradicts the key is refused as it is without a run-time entry.
func keyPlanUse(snap *policy.Snapshot, tenant, plan string, now time.Time) (conflict string, warnings []string) {
	st := snap.Standing(tenant, plan, now)
	under := ""
	if st.Source == policy.PlanFromRuntime {
		if st.Plan != plan {
			if st.Expires.IsZero() {
				return fmt.Sprintf("plan: tenant %q has a run-time entry (PUT /admin/tenants/%s) that puts it on plan %q, and a tenant's entry decides its plan before any key's, so this key's plan %q would not apply: %s, or change the entry or remove it (DELETE /admin/tenants/%s)",
					tenant, tenant, st.Plan, plan, omitPlan, tenant), nil
			}
			warnings = append(warnings, fmt.Sprintf("plan: until %s tenant %q is on plan %q by its run-time entry (PUT /admin/tenants/%s), which decides before any key's plan; this key's plan %q applies from then",
				st.Expires.UTC().Format(time.RFC3339), tenant, st.Plan, tenant, plan))
		}
		st = snap.FileStanding(tenant, plan)
		under = fmt.Sprintf(" once its run-time entry (PUT /admin/tenants/%s) ends (by expiry or DELETE)", tenant)
	}
	if st.Plan == plan || st.Source != policy.PlanFromFile {
		return "", warnings // a known plan of a tenant without a file entry is its credential's
	}
	return fmt.Sprintf("plan: tenant %q has an entry in the config file (tenants.%s) that puts it on plan %q%s, and a tenant's entry decides its plan before any key's, so this key's plan %q would never apply: %s, or change or remove the tenant's entry",
		tenant, tenant, st.Plan, under, plan, omitPlan), nil
}

// omitPlan is the 409's advice to make the key without a plan, saying what
// such a key does.
const omitPlan = "omit plan (the key then names no plan, and the tenant's plan comes from its entry while the entry stands, the default plan's once it is gone)"

// keyFailed answers a key write that did not happen: 404 for an unknown
// ID, 400 for a refused field or a full store, 503 (logged) for a store
// that did not answer.
func (a *admin) keyFailed(w http.ResponseWriter, err error, msg string, who slog.Attr) {
	switch {
	case errors.Is(err, apikeys.ErrNotFound):
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no API key has this ID"})
	case errors.Is(err, apikeys.ErrFull), errors.Is(err, apikeys.ErrBadRecord):
		problem.BadRequest(w, err.Error())
	default:
		a.log.Error(msg, who, slog.String("error", err.Error()))
		w.Header().Set("Retry-After", "5")
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: "the control store did not take the write, which was not applied: " + err.Error()})
	}
}

// listKeys serves GET /admin/keys.
func (a *admin) listKeys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := apikeys.ListOptions{Tenant: q.Get("tenant"), After: q.Get("after")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			problem.BadRequest(w, fmt.Sprintf("limit: %q is not a number from 1 to 1000", s))
			return
		}
		o.Limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	keys, next, err := a.keys.List(ctx, o)
	if err != nil {
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
		return
	}
	out := map[string]any{"keys": keys, "total": a.keys.Count(o.Tenant)}
	if keys == nil {
		out["keys"] = []apikeys.Key{}
	}
	if next != "" {
		out["next"] = next
	}
	writeJSON(w, http.StatusOK, out)
}

// keyID returns the request's key ID, or answers 404 and returns false.
func keyID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !apikeys.ValidID(id) {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: fmt.Sprintf("no API key has this ID: an ID is %d lowercase hex digits", apikeys.IDLen)})
		return "", false
	}
	return id, true
}

// getKey serves GET /admin/keys/{id}.
func (a *admin) getKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	k, found, err := a.keys.Get(ctx, id)
	switch {
	case err != nil:
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: err.Error()})
	case !found:
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no API key has this ID"})
	default:
		writeJSON(w, http.StatusOK, k)
	}
}

// patchKey serves PATCH /admin/keys/{id}: a new label, or a new expiry
// (a time, a TTL, now, or none). Rotation is a new key for the tenant and
// an expiry on the old one that gives its clients time to switch.
func (a *admin) patchKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	var b keyPatchBody
	if !readJSON(w, r, &b, nil) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	cur, found, err := a.keys.Get(ctx, id)
	if err == nil && !found {
		err = apikeys.ErrNotFound
	}
	if err != nil {
		a.keyFailed(w, err, "admin: API key NOT changed", slog.String("id", id))
		return
	}
	label, exp, err := patched(cur.Record, b)
	if err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	rec, err := a.keys.Update(ctx, id, label, exp)
	if err != nil {
		a.keyFailed(w, err, "admin: API key NOT changed", slog.String("id", id))
		return
	}
	a.log.Info("admin: API key changed", slog.String("id", id), slog.String("tenant", rec.Tenant), slog.String("label", rec.Label), slog.Time("expires", rec.Expires))
	a.getKey(w, r)
}

// revokeKey serves DELETE /admin/keys/{id}.
func (a *admin) revokeKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	if err := a.keys.Revoke(ctx, id); err != nil {
		a.keyFailed(w, err, "admin: API key NOT revoked", slog.String("id", id))
		return
	}
	a.log.Info("admin: API key revoked", slog.String("id", id))
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "revoked": true})
}
