package app

import (
	"context"
	"errors"

	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/limiter"
)

// dashSource is the dashboard's Source: the numbers the daemon's metrics
// export, read as values from the same counters (the main limiter's
// Stats, the dependency breakers as their gauge shows them, the queue
// depths as fairgate_queue_depth reads them, the upstream gate's), never
// from the registry by metric name. It is read once the daemon is built.
type dashSource struct{ d *daemon }

// Read reads the numbers of the moment.
func (s dashSource) Read() dash.Reading {
	d := s.d
	r := dash.Reading{Queues: make(map[string]float64, len(d.depths))}
	if d.lim != nil {
		r.Limiter = d.lim.Stats()
	}
	if d.breakers != nil {
		r.Breakers = d.breakers.Shown()
	}
	for kind, q := range d.depths {
		r.Queues[kind] = q.value()
	}
	if d.h == nil {
		return r
	}
	if u, ok := d.h.Upstream(); ok {
		r.Upstream = &dash.Upstream{Limit: float64(u.Limit), Waiting: float64(u.Waiting), InFlight: map[string]float64{}, ShedTotal: float64(u.Shed)}
		for class, n := range u.InFlight {
			r.Upstream.InFlight[class] = float64(n)
		}
	}
	return r
}

// Effective is tenant's effective limits for the dashboard's budget
// look-up, as GET /admin/tenants/{id} shows them: its entry's plan, else
// the default plan.
func (s dashSource) Effective(ctx context.Context, tenant string) (limiter.TenantLimits, error) {
	if s.d.lim == nil {
		return limiter.TenantLimits{}, errors.New("app: no limiter")
	}
	return s.d.lim.Effective(ctx, tenant, "")
}

var (
	_ dash.Source  = dashSource{}
	_ dash.Budgets = dashSource{}
)
