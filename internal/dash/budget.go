package dash

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/limitview"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// Budgets is what a [Source] implements for the dashboard to show a
// tenant's budgets (GET /dashboard/tenant): the tenant's effective limits,
// each layer in its unit with its remaining and reset, read by a cost-0
// peek that changes nothing ([limiter.Limiter.Effective]).
type Budgets interface {
	Effective(ctx context.Context, tenant string) (limiter.TenantLimits, error)
}

// budgetTimeout bounds the store calls of one look-up.
const budgetTimeout = 2 * time.Second

// Budget is what GET /dashboard/tenant answers: a tenant's plan and
// layers, as /v1/me/limits shows them.
type Budget struct {
	Tenant string            `json:"tenant"`
	Plan   string            `json:"plan"`
	Layers []limitview.Layer `json:"layers"`
}

// serveBudget answers GET /dashboard/tenant?id=<tenant>. Tenant IDs and
// their numbers are shown only to a caller with a token, as the limited
// tenants are.
func (d *Dashboard) serveBudget(w http.ResponseWriter, r *http.Request) {
	if !d.AuthRequired() {
		problem.Write(w, problem.Details{Status: http.StatusForbidden, Detail: "tenant budgets are shown only with a token: set FAIRGATE_ADMIN_TOKEN or FAIRGATE_INTERNAL_TOKEN"})
		return
	}
	if !d.authorized(r) {
		d.unauthorized(w)
		return
	}
	b, ok := d.src.(Budgets)
	if !ok {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "this dashboard has no tenant budgets to show"})
		return
	}
	id := r.URL.Query().Get("id")
	if id == "" {
		problem.BadRequest(w, "id: required: the tenant whose budget to show (?id=acme)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), budgetTimeout)
	defer cancel()
	tl, err := b.Effective(ctx, id)
	switch {
	case errors.Is(err, policy.ErrBadTenant):
		problem.BadRequest(w, "id: "+err.Error())
		return
	case err != nil:
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: "the tenant's budget cannot be read right now: " + err.Error()})
		return
	}
	writeJSON(w, "the tenant's budget", Budget{Tenant: tl.Tenant, Plan: tl.Plan, Layers: limitview.Layers(tl.Layers)})
}
