package limiter

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/promshare"
)

// metrics are the limiter's Prometheus metrics. Labels are policy, class
// and reason names from the config: never a tenant ID.
type metrics struct {
	decisions  *prometheus.CounterVec
	shadow     *prometheus.CounterVec
	grantTakes prometheus.Counter
	slowed     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_decisions_total",
			Help: "Decisions by policy (the tightest layer, or the class), plan and outcome.",
		}, []string{"policy", "plan", "outcome"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_shadow_rejections_total",
			Help: "Would-be rejections of shadow layers, by policy; nothing was enforced.",
		}, []string{"policy"}),
		grantTakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_lease_takes_total",
			Help: "Leases taken from the store for classes that lease units to instances.",
		}),
		slowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_slowed_down_total",
			Help: "Near-cache rejections held for their class's slow_down before being answered.",
		}),
	}
	// A second limiter on the same registry shares the first one's
	// collectors (see [Config].Registerer), so that its decisions are
	// counted too.
	err := errors.Join(
		promshare.Register(reg, &m.decisions),
		promshare.Register(reg, &m.shadow),
		promshare.Register(reg, &m.grantTakes),
		promshare.Register(reg, &m.slowed),
	)
	if err != nil {
		return nil, fmt.Errorf("limiter: metrics: %w", err)
	}
	return m, nil
}
