package rls

import (
	"math"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/promreg"
)

// MaxStatKeys bounds the distinct descriptor keys the statistics name: a
// detailed_metric or value_to_metric rule names them by values the client
// chooses, so past this many the rest are counted under "overflow".
const MaxStatKeys = 10_000

// The statistics of a rule, by envoyproxy/ratelimit's names.
const (
	statTotal       = "total_hits"
	statOver        = "over_limit"
	statNear        = "near_limit"
	statWithin      = "within_limit"
	statShadow      = "shadow_mode"
	statOverLocal   = "over_limit_with_local_cache"
	overflowStatKey = "overflow"
)

// Sink receives the statistics as envoyproxy/ratelimit names them for
// statsd, such as "ratelimit.service.rate_limit.<domain>.<key>.total_hits".
type Sink interface {
	Add(name string, n uint64)
}

type metrics struct {
	requests     *prometheus.CounterVec
	shadow       *prometheus.CounterVec
	hits         *prometheus.CounterVec
	globalShadow prometheus.Counter
	sink         Sink

	mu   sync.Mutex
	keys map[string]bool // the stat keys named so far
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_requests_total",
			Help: "ShouldRateLimit calls by domain (configured ones; others are \"unknown\") and overall code.",
		}, []string{"domain", "code"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_shadow_over_limit_total",
			Help: "Descriptors in shadow mode that were over their limit (answered OK), by domain.",
		}, []string{"domain"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_rate_limit_hits_total",
			Help: "envoyproxy/ratelimit's per-rule statistics: hits by domain, rule key (domain.key_value… less the domain; request values only where detailed_metric or value_to_metric asks, at most 10,000 keys, then \"overflow\") and stat (total_hits, over_limit, near_limit, within_limit, shadow_mode, over_limit_with_local_cache).",
		}, []string{"domain", "key", "stat"}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_rls_global_shadow_mode_total",
			Help: "Requests over their limit answered OK because of the global shadow mode (SHADOW_MODE).",
		}),
		keys: map[string]bool{},
	}
	if reg == nil {
		return m, nil
	}
	var err error
	promreg.Reuse(reg, &m.requests, &err)
	promreg.Reuse(reg, &m.shadow, &err)
	promreg.Reuse(reg, &m.hits, &err)
	promreg.Reuse(reg, &m.globalShadow, &err)
	return m, err
}

// add counts n hits of stat for a rule's key.
func (m *metrics) add(domain, key, stat string, n int64) {
	if n <= 0 {
		return
	}
	rest := strings.TrimPrefix(key, domain+".")
	m.mu.Lock()
	if !m.keys[key] {
		if len(m.keys) >= MaxStatKeys {
			rest, key = overflowStatKey, domain+"."+overflowStatKey
		} else {
			m.keys[key] = true
		}
	}
	m.mu.Unlock()
	m.hits.WithLabelValues(domain, rest, stat).Add(float64(n))
	if m.sink != nil {
		m.sink.Add("ratelimit.service.rate_limit."+key+"."+stat, uint64(n))
	}
}

// record counts a decided descriptor as envoyproxy/ratelimit counts it:
// all its hits in total_hits; then, over the limit, the hits past the
// limit in over_limit (all of them if it already was) and those between
// the near-limit threshold and the limit in near_limit; within the limit,
// all in within_limit and those past the threshold in near_limit; in
// shadow mode, the over-limit hits in shadow_mode too.
func (m *metrics) record(set *Settings, domain string, r *rule, o *outcome) {
	add := func(stat string, n int64) { m.add(domain, r.stat, stat, n) }
	if o.over && r.shadow {
		m.shadow.WithLabelValues(domain).Inc()
	}
	hits := r.cost
	add(statTotal, hits)
	if o.local {
		add(statOver, hits)
		add(statOverLocal, hits)
		if r.shadow {
			add(statShadow, hits)
		}
		return
	}
	limit := int64(r.lim.RequestsPerUnit)
	ratio := set.NearLimitRatio
	if ratio == 0 {
		ratio = 0.8
	}
	near := int64(math.Floor(float64(float32(limit) * float32(ratio))))
	if !o.over {
		add(statWithin, hits)
		if o.after > near {
			add(statNear, min(hits, o.after-near))
		}
		return
	}
	overHits := hits
	if o.before < limit {
		overHits = o.after - limit
		add(statNear, limit-max(near, o.before))
	}
	add(statOver, overHits)
	if r.shadow {
		add(statShadow, overHits)
	}
}
