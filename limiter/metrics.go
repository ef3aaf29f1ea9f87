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
	decisions    *prometheus.CounterVec
	shadow       *prometheus.CounterVec
	storeErrors  prometheus.Counter
	protoErrors  prometheus.Counter
	storeSeconds prometheus.Histogram
	failures     *prometheus.CounterVec
	breaker      prometheus.Gauge
	nearHits     prometheus.Counter
	leaseTakes   prometheus.Counter
	slowed       prometheus.Counter
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
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_store_errors_total",
			Help: "Store calls that failed or timed out.",
		}),
		protoErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_store_protocol_errors_total",
			Help: "Store replies of the wrong shape (store.ErrProtocol): a bug, never an outage; each is logged as an error.",
		}),
		storeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fairgate_store_call_seconds",
			Help:    "Duration of store calls (the part of a decision that waits); with tracing on, a sampled call's trace ID is its bucket's exemplar.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_store_failure_decisions_total",
			Help: "Decisions made without the store, by fail mode: open (the fallback decided) or closed (503).",
		}, []string{"fail_mode"}),
		nearHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_near_cache_hits_total",
			Help: "Requests answered as limited from the near cache of rejected keys, without a store call.",
		}),
		leaseTakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_lease_takes_total",
			Help: "Leases taken from the store for classes that lease units to instances.",
		}),
		slowed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_slowed_down_total",
			Help: "Near-cache rejections held for their class's slow_down before being answered.",
		}),
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fairgate_store_breaker_state",
			Help: "The store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
	}
	// A second limiter on the same registry shares the first one's
	// collectors (see [Config].Registerer), so that its decisions are
	// counted too.
	err := errors.Join(
		promshare.Register(reg, &m.decisions),
		promshare.Register(reg, &m.shadow),
		promshare.Register(reg, &m.storeErrors),
		promshare.Register(reg, &m.protoErrors),
		promshare.Register(reg, &m.storeSeconds),
		promshare.Register(reg, &m.failures),
		promshare.Register(reg, &m.breaker),
		promshare.Register(reg, &m.nearHits),
		promshare.Register(reg, &m.leaseTakes),
		promshare.Register(reg, &m.slowed),
	)
	if err != nil {
		return nil, fmt.Errorf("limiter: metrics: %w", err)
	}
	return m, nil
}
