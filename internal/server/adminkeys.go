package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/apikeys"
)

// maxKeyTTLSeconds is the longest ttl_seconds a stored key takes: 10 years.
const maxKeyTTLSeconds = 10 * 366 * 24 * 3600

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

type keyBody struct {
	Tenant     string  `json:"tenant"`
	Plan       string  `json:"plan"`
	Label      *string `json:"label"`
	ExpiresAt  *string `json:"expires_at"`
	TTLSeconds *int64  `json:"ttl_seconds"`
}

// createKey serves POST /admin/keys.
func (a *admin) createKey(w http.ResponseWriter, r *http.Request) {
	var b keyBody
	if !decodeJSON(w, r, &b) {
		return
	}
	rec := apikeys.Record{Tenant: b.Tenant, Plan: b.Plan}
	if b.Label != nil {
		rec.Label = *b.Label
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
	if rec.Plan != "" && !a.lim.Snapshot().KnownPlan(rec.Plan) {
		problem.BadRequest(w, fmt.Sprintf("plan: %q is not a plan of the policy in force", rec.Plan))
		return
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
	writeJSON(w, http.StatusCreated, createdKey{Secret: key, Key: apikeys.Key{Record: rec}})
}

// createdKey is POST /admin/keys's answer: the record and, this once, the
// key.
type createdKey struct {
	Secret string `json:"key"`
	apikeys.Key
}

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
	out := map[string]any{"keys": keys, "total": a.keys.Len()}
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

type keyPatch struct {
	Label      *string `json:"label"`
	ExpiresAt  *string `json:"expires_at"`
	TTLSeconds *int64  `json:"ttl_seconds"`
	ExpireNow  bool    `json:"expire_now"`
	NoExpiry   bool    `json:"no_expiry"`
}

// patchKey serves PATCH /admin/keys/{id}: a new label, or a new expiry
// (a time, a TTL, now, or none). Rotation is a new key for the tenant and
// an expiry on the old one that gives its clients time to switch.
func (a *admin) patchKey(w http.ResponseWriter, r *http.Request) {
	id, ok := keyID(w, r)
	if !ok {
		return
	}
	var b keyPatch
	if !decodeJSON(w, r, &b) {
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

// patched returns the label and expiry cur gets from b.
func patched(cur apikeys.Record, b keyPatch) (string, time.Time, error) {
	label, exp := cur.Label, cur.Expires
	if b.Label != nil {
		label = *b.Label
	}
	n := 0
	for _, set := range []bool{b.ExpiresAt != nil, b.TTLSeconds != nil, b.ExpireNow, b.NoExpiry} {
		if set {
			n++
		}
	}
	if n > 1 {
		return "", time.Time{}, errors.New("expires_at, ttl_seconds, expire_now, no_expiry: give one")
	}
	switch {
	case b.ExpireNow:
		exp = time.Now()
	case b.NoExpiry:
		exp = time.Time{}
	case n == 1:
		t, err := expiry(b.ExpiresAt, b.TTLSeconds, maxKeyTTLSeconds)
		if err != nil {
			return "", time.Time{}, err
		}
		exp = t
	}
	return label, exp.UTC(), nil
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
