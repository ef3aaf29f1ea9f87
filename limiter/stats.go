package limiter

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/promshare"
	"github.com/fairgate/fairgate/store/guard"
)

// Stats are the numbers the limiter's metrics export, read as values: for
// a program's own display of them (the daemon's dashboard) without reading
// its metrics by name. Counts are since the limiter was made; limiters
// that share a Registerer share them (see [Config].Registerer).
type Stats struct {
	// Decisions counts decisions by policy and outcome, over every plan
	// (fairgate_decisions_total).
	Decisions map[PolicyOutcome]int64
	// FailOpen and FailClosed count the decisions made without the store,
	// by fail mode (fairgate_store_failure_decisions_total).
	FailOpen, FailClosed int64
	// StoreCalls are the durations of store calls
	// (fairgate_store_call_seconds).
	StoreCalls Histogram
	// Breaker is the store's circuit breaker as
	// fairgate_store_breaker_state shows it: "closed", "half-open" or
	// "open".
	Breaker string
}

// PolicyOutcome is what decisions are counted by: the policy that decided
// (the tightest layer, or the class) and the outcome.
type PolicyOutcome struct {
	Policy  string
	Outcome Reason
}

// Histogram is a histogram's buckets: see [guard.Histogram].
type Histogram = guard.Histogram

// Stats reads the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{Decisions: map[PolicyOutcome]int64{}}
	promshare.Collect(l.m.decisions, func(m *dto.Metric) {
		k := PolicyOutcome{Policy: promshare.Label(m, "policy"), Outcome: Reason(promshare.Label(m, "outcome"))}
		s.Decisions[k] += int64(m.GetCounter().GetValue())
	})
	g := l.guard.Stats()
	s.FailOpen, s.FailClosed, s.StoreCalls, s.Breaker = g.FailOpen, g.FailClosed, g.StoreCalls, g.Breaker
	return s
}
