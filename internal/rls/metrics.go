package rls

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxStatKeys bounds the distinct descriptor keys the statistics name: a
// detailed_metric or value_to_metric rule, and a descriptor with its own
// limit, name them by values the client chooses, so past this many the
// rest are counted under "overflow".
const MaxStatKeys = 10_000

// MaxStatName bounds a statistics key (domain.key_value…) in bytes: a
// longer one, named by values the client chose, becomes its first bytes
// (cut between characters), '#' and 24 characters of the SHA-256 of the
// whole key, so that two long keys stay apart. With MaxStatKeys, it bounds
// the names the statistics hold at (MaxStatKeys + one overflow key per
// domain) × MaxStatName bytes, and so the /metrics scrape and each statsd
// flush.
const MaxStatName = 256

// statHashChars is the length of a long key's hash in its name.
const statHashChars = 24

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

// GaugeSink is a Sink that also takes gauges, set by gen at each flush:
// the local cache's (ratelimit.localcache.*) go to it.
type GaugeSink interface {
	Sink
	Gauges(gen func(set func(name string, v uint64)))
}

// The service-level statistics, by envoyproxy/ratelimit's names (its
// ServiceStats, under "ratelimit.service.").
const (
	// StatConfigLoadSuccess counts configs put in force: the one at start
	// and each applied reload of the runtime directory (or config file) or
	// xDS update.
	StatConfigLoadSuccess = "ratelimit.service.config_load_success"
	// StatConfigLoadError counts configs refused: a reload or an xDS
	// update that was not put in force.
	StatConfigLoadError = "ratelimit.service.config_load_error"
	// StatRedisError counts calls whose store did not answer (the domain's
	// fail mode then answered).
	StatRedisError = "ratelimit.service.call.should_rate_limit.redis_error"
	// StatServiceError counts calls refused as invalid (InvalidArgument).
	StatServiceError = "ratelimit.service.call.should_rate_limit.service_error"
	// StatGlobalShadowMode counts answers turned OK by SHADOW_MODE.
	StatGlobalShadowMode = "ratelimit.service.global_shadow_mode"
	// StatTotalRequests counts ShouldRateLimit calls, as the gRPC server's
	// reporter there does (ratelimit_server.ShouldRateLimit.total_requests).
	StatTotalRequests = "ratelimit_server.ShouldRateLimit.total_requests"
)

// maxNotFoundDomains bounds the unknown domains named by
// ratelimit.service.rate_limit.<domain>.domain_not_found, since the client
// chooses them; past it they are counted under the domain "overflow".
const maxNotFoundDomains = 1000

type metrics struct {
	requests     *prometheus.CounterVec
	shadow       *prometheus.CounterVec
	hits         *prometheus.CounterVec
	globalShadow prometheus.Counter
	sink         Sink

	mu       sync.Mutex
	keys     map[string]*ruleStats // the stat keys named so far
	notFound map[string]string     // unknown domain -> its domain_not_found name
}

// ruleStats are one rule key's counters, by stat, made when first used.
type ruleStats struct {
	domain, rest string // the labels
	statsd       string // the key in statsd names
	c            [numStats]atomic.Pointer[prometheus.Counter]
}

// The stats' indexes in ruleStats.
const (
	iTotal = iota
	iOver
	iNear
	iWithin
	iShadow
	iOverLocal
	numStats
)

var statNames = [numStats]string{statTotal, statOver, statNear, statWithin, statShadow, statOverLocal}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_requests_total",
			Help: "ShouldRateLimit calls by domain (configured ones; others are \"unknown\") and overall code: ok, over_limit, unavailable, or invalid (refused with InvalidArgument).",
		}, []string{"domain", "code"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_shadow_over_limit_total",
			Help: "Descriptors in shadow mode that were over their limit (answered OK), by domain.",
		}, []string{"domain"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_rate_limit_hits_total",
			Help: "envoyproxy/ratelimit's per-rule statistics: hits by domain, rule key (domain.key_value… less the domain; request values only where detailed_metric or value_to_metric asks or a descriptor has its own limit; at most 10,000 keys, then \"overflow\"; a key past 256 bytes is cut and ends in '#' and a hash) and stat (total_hits, over_limit, near_limit, within_limit, shadow_mode, over_limit_with_local_cache).",
		}, []string{"domain", "key", "stat"}),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fairgate_rls_global_shadow_mode_total",
			Help: "Requests over their limit answered OK because of the global shadow mode (SHADOW_MODE).",
		}),
		keys:     map[string]*ruleStats{},
		notFound: map[string]string{},
	}
	if reg == nil {
		return m, nil
	}
	// The service is built once per registry: a collector already there
	// is an error.
	for _, c := range []prometheus.Collector{m.requests, m.shadow, m.hits, m.globalShadow} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls: metrics: %w", err)
		}
	}
	return m, nil
}

// stats returns the counters of a rule key (domain.key_value…, bounded
// by statName), or past MaxStatKeys keys, the domain's overflow ones.
func (m *metrics) stats(domain, key string) *ruleStats {
	key = statName(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs := m.keys[key]; rs != nil {
		return rs
	}
	if len(m.keys) >= MaxStatKeys {
		key = statName(domain + "." + overflowStatKey)
		if rs := m.keys[key]; rs != nil {
			return rs
		}
	}
	rs := &ruleStats{domain: domain, rest: strings.TrimPrefix(key, domain+"."), statsd: statsdName(key)}
	m.keys[key] = rs
	return rs
}

// statName is key if it is at most MaxStatName bytes; else its first
// bytes, cut between characters, '#' and statHashChars characters of the
// SHA-256 of the whole key (see prefixHash.statName): a new string, so
// that the key's own bytes are not kept.
func statName(key string) string {
	if len(key) <= MaxStatName {
		return key
	}
	var buf [MaxStatName]byte
	p := prefixHash{head: buf[:]}
	p.str(key)
	return p.statName()
}

// ipv4 is a dotted IPv4 address in a statistics key.
var ipv4 = regexp.MustCompile(`[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}`)

// statsdName is a statistics key as envoyproxy/ratelimit puts it in a
// statsd name: ':' and '|' (the line format's separators) as '_', the
// dots of an IPv4 address too ("remote_address_10_0_0_1"); and, so that
// a value cannot start a line of its own, control characters as '_'.
func statsdName(key string) string {
	key = strings.Map(func(r rune) rune {
		if r == ':' || r == '|' || r < ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, key)
	return ipv4.ReplaceAllStringFunc(key, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// add counts n hits of stat i.
func (m *metrics) add(rs *ruleStats, i int, n int64) {
	if n <= 0 {
		return
	}
	c := rs.c[i].Load()
	if c == nil {
		// Two racing first uses get the same child counter of the vector.
		ctr := m.hits.WithLabelValues(rs.domain, rs.rest, statNames[i])
		c = &ctr
		rs.c[i].Store(c)
	}
	(*c).Add(float64(n))
	if m.sink != nil {
		m.sink.Add("ratelimit.service.rate_limit."+rs.statsd+"."+statNames[i], uint64(n))
	}
}

// record counts a decided descriptor as envoyproxy/ratelimit counts it:
// all its hits in total_hits; then, over the limit, the hits past the
// limit in over_limit (all of them if it already was) and those between
// the near-limit threshold and the limit in near_limit; within the limit,
// all in within_limit and those past the threshold in near_limit; in
// shadow mode, the over-limit hits in shadow_mode too.
func (m *metrics) record(set *Settings, domain string, r *rule, o *outcome) {
	rs := m.stats(domain, r.stat)
	add := func(i int, n int64) { m.add(rs, i, n) }
	if o.over && r.shadow {
		m.shadow.WithLabelValues(domain).Inc()
	}
	hits := r.cost
	add(iTotal, hits)
	if o.local {
		add(iOver, hits)
		add(iOverLocal, hits)
		if r.shadow {
			add(iShadow, hits)
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
		add(iWithin, hits)
		if o.after > near {
			add(iNear, min(hits, o.after-near))
		}
		return
	}
	overHits := hits
	if o.before < limit {
		overHits = o.after - limit
		add(iNear, limit-max(near, o.before))
	}
	add(iOver, overHits)
	if r.shadow {
		add(iShadow, overHits)
	}
}

// service counts one of the service-level statistics (Stat*) in statsd.
func (m *metrics) service(name string, n uint64) {
	if m.sink != nil && n > 0 {
		m.sink.Add(name, n)
	}
}

// domainNotFound counts n descriptors of an unknown domain, as
// envoyproxy/ratelimit does (one per descriptor looked up).
func (m *metrics) domainNotFound(domain string, n int) {
	if m.sink == nil || n <= 0 {
		return
	}
	key := statName(domain)
	m.mu.Lock()
	name, ok := m.notFound[key]
	if !ok {
		if len(m.notFound) >= maxNotFoundDomains {
			name = "ratelimit.service.rate_limit." + overflowStatKey + ".domain_not_found"
		} else {
			name = "ratelimit.service.rate_limit." + statsdName(key) + ".domain_not_found"
			m.notFound[key] = name
		}
	}
	m.mu.Unlock()
	m.sink.Add(name, uint64(n))
}
