package guard

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/promshare"
)

// metrics are the guard's Prometheus metrics: none has a label that a
// tenant sets.
type metrics struct {
	storeErrors  prometheus.Counter
	protoErrors  prometheus.Counter
	storeSeconds prometheus.Histogram
	failures     *prometheus.CounterVec
	breaker      prometheus.Gauge
	nearHits     prometheus.Counter

	settlements     *prometheus.CounterVec
	settleRetries   prometheus.Counter
	settleUnapplied prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
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
		breaker: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fairgate_store_breaker_state",
			Help: "The store's circuit breaker: 0 closed, 1 half-open, 2 open.",
		}),
		settlements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_settlements_total",
			Help: "Settlements of measured costs (Guard.Settle), by result: applied (the store answered, after retries if any) or failed (not applied: invalid, or the store unavailable after the last attempt; each is logged).",
		}, []string{"result"}),
		settleRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_settlement_retries_total",
			Help: "Settlement calls retried with the same id after the store was unavailable or slow (the id makes a retry apply nothing twice).",
		}),
		settleUnapplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_settlement_unapplied_units_total",
			Help: "Units of settlement charges not applied because the key's debt reached its bound (one burst).",
		}),
	}
	// A second guard on the same registry shares the first one's
	// collectors (see [Config].Registerer), so that its calls are counted
	// too.
	err := errors.Join(
		promshare.Register(reg, &m.storeErrors),
		promshare.Register(reg, &m.protoErrors),
		promshare.Register(reg, &m.storeSeconds),
		promshare.Register(reg, &m.failures),
		promshare.Register(reg, &m.breaker),
		promshare.Register(reg, &m.nearHits),
		promshare.Register(reg, &m.settlements),
		promshare.Register(reg, &m.settleRetries),
		promshare.Register(reg, &m.settleUnapplied),
	)
	if err != nil {
		return nil, fmt.Errorf("guard: metrics: %w", err)
	}
	return m, nil
}

// Stats are the numbers the guard's metrics export, read as values. Counts
// are since the guard was made; guards that share a Registerer share them.
type Stats struct {
	// FailOpen and FailClosed count the decisions made without the store,
	// by fail mode (fairgate_store_failure_decisions_total).
	FailOpen, FailClosed int64
	// StoreCalls are the durations of store calls
	// (fairgate_store_call_seconds).
	StoreCalls Histogram
	// SettlementsApplied and SettlementsFailed count settlements by
	// result, SettlementRetries their retried calls, and
	// SettlementUnappliedUnits the units of charges the debt bound cut
	// (fairgate_settlements_total, fairgate_settlement_retries_total,
	// fairgate_settlement_unapplied_units_total).
	SettlementsApplied, SettlementsFailed, SettlementRetries, SettlementUnappliedUnits int64
	// Breaker is the store's circuit breaker as
	// fairgate_store_breaker_state shows it: "closed", "half-open" or
	// "open".
	Breaker string
}

// Histogram is a histogram's buckets: Cumulative[i] observations took at
// most Bounds[i] (ascending); Count is every observation, the ones past
// the last bound included.
type Histogram struct {
	Bounds     []time.Duration
	Cumulative []uint64
	Count      uint64
}

// Stats reads the guard's counters.
func (g *Guard) Stats() Stats {
	s := Stats{Breaker: "closed"}
	promshare.Collect(g.m.failures, func(m *dto.Metric) {
		if promshare.Label(m, "fail_mode") == "open" {
			s.FailOpen += int64(m.GetCounter().GetValue())
		} else {
			s.FailClosed += int64(m.GetCounter().GetValue())
		}
	})
	promshare.Collect(g.m.storeSeconds, func(m *dto.Metric) {
		h := m.GetHistogram()
		for _, b := range h.GetBucket() {
			s.StoreCalls.Bounds = append(s.StoreCalls.Bounds, time.Duration(math.Round(b.GetUpperBound()*float64(time.Second))))
			s.StoreCalls.Cumulative = append(s.StoreCalls.Cumulative, b.GetCumulativeCount())
		}
		s.StoreCalls.Count = h.GetSampleCount()
	})
	promshare.Collect(g.m.settlements, func(m *dto.Metric) {
		if promshare.Label(m, "result") == "applied" {
			s.SettlementsApplied += int64(m.GetCounter().GetValue())
		} else {
			s.SettlementsFailed += int64(m.GetCounter().GetValue())
		}
	})
	promshare.Collect(g.m.settleRetries, func(m *dto.Metric) { s.SettlementRetries = int64(m.GetCounter().GetValue()) })
	promshare.Collect(g.m.settleUnapplied, func(m *dto.Metric) { s.SettlementUnappliedUnits = int64(m.GetCounter().GetValue()) })
	promshare.Collect(g.m.breaker, func(m *dto.Metric) {
		switch m.GetGauge().GetValue() {
		case 1:
			s.Breaker = "half-open"
		case 2:
			s.Breaker = "open"
		}
	})
	return s
}
