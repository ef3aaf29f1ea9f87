package quota

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/promshare"
)

// metrics are the quotas' Prometheus metrics, labelled by provider name
// (from the config, so bounded), never by tenant.
type metrics struct {
	wait     *prometheus.HistogramVec
	requeues *prometheus.CounterVec
	pauses   *prometheus.CounterVec
	// tenantPauses counts the pauses of one tenant's calls.
	tenantPauses *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_outbound_wait_seconds",
			Help:    "How long acquired outbound calls waited for their provider, by provider.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"provider"}),
		requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_outbound_requeues_total",
			Help: "Outbound acquires that gave up at their wait limit (the job is to be re-queued), by provider.",
		}, []string{"provider"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_outbound_pauses_total",
			Help: "Pauses of a provider for every tenant (the operator's, or a quorum of tenants asked to wait), by provider.",
		}, []string{"provider"}),
		tenantPauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_outbound_tenant_pauses_total",
			Help: "Pauses of one tenant's calls to a provider (its Retry-After to a call made for that tenant), by provider.",
		}, []string{"provider"}),
	}
	// A second Quotas on the same registry shares the first one's
	// collectors (see [Config].Registerer).
	err := errors.Join(
		promshare.Register(reg, &m.wait),
		promshare.Register(reg, &m.requeues),
		promshare.Register(reg, &m.pauses),
		promshare.Register(reg, &m.tenantPauses),
	)
	if err != nil {
		return nil, fmt.Errorf("quota: metrics: %w", err)
	}
	return m, nil
}
