package rls

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store/guard"
)

// Limits of a request, so that nothing a client sends can make a call
// unbounded: at most MaxDescriptors descriptors of 1 to MaxEntries
// entries each, in a message of at most MaxMessage bytes. A request past
// them is refused with InvalidArgument. The length of a key or a value is
// bounded only by the message: store keys are hashed, and statistics
// names are bounded (MaxStatName).
const (
	MaxDescriptors = 64
	MaxEntries     = 32
)

// Service implements envoy.service.ratelimit.v3.RateLimitService. It is
// safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	// guard is the store that decides, guarded: its deadline, breakers,
	// fallback and fail mode.
	guard *guard.Guard
	// perSecond, if not nil, decides the counted windows of a second
	// (envoyproxy/ratelimit's REDIS_PERSECOND) on a store of its own.
	perSecond *guard.Guard
	cfg       atomic.Pointer[compiled]
	log       *slog.Logger
	m         *metrics
	local     atomic.Pointer[localCache]
	now       func() time.Time

	healthMu sync.Mutex
	draining atomic.Bool    // Drain was called
	health   *health.Server // of the gRPC server; nil until NewServer
}

// New returns the service deciding through g (its store, deadline,
// breakers, fallback and near cache). reg, if not nil, receives the
// metrics.
func New(c Config, g *guard.Guard, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Service{guard: g, log: log, m: m, now: time.Now}
	s.SetConfig(c)
	return s, nil
}

// SetConfig replaces the configuration, as a reload does. Calls in flight
// finish with the old one. The local cache keeps its entries (they name
// windows, which a new config does not change) unless its size changes.
func (s *Service) SetConfig(c Config) {
	if n := c.Settings.LocalCacheEntries; s.local.Load() == nil || s.local.Load().max != n {
		s.local.Store(newLocalCache(n))
	}
	s.cfg.Store(compile(c))
	s.setHealth(nil)
}

// ErrNoDomain is Ready's answer while no domain is loaded and the
// settings require one.
var ErrNoDomain = errors.New("rls: no domain is loaded and HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED is true: every descriptor would be answered OK; check the runtime directory (the log and fairgate_rls_runtime_skipped_entries say what it left out) or the xDS server")

// ErrDraining is Ready's answer once Drain was called.
var ErrDraining = errors.New("rls: draining: the instance is shutting down")

// Drain marks the service as shutting down: gRPC health answers
// NOT_SERVING from now on, so that Envoy and Kubernetes' gRPC probes move
// to other instances while calls in flight (and new ones, until the
// listener closes) are still answered.
func (s *Service) Drain() {
	s.draining.Store(true)
	s.setHealth(nil)
}

// Ready reports whether the service can answer as configured: nil,
// ErrDraining once Drain was called, or ErrNoDomain when
// Settings.RequireDomains is set and the config in force has no domain.
func (s *Service) Ready() error {
	if s.draining.Load() {
		return ErrDraining
	}
	c := s.cfg.Load()
	if c.cfg.Settings.RequireDomains && len(c.domains) == 0 {
		return ErrNoDomain
	}
	return nil
}

// setHealth sets the gRPC health statuses (of h, or of the one already
// set when h is nil) from Ready.
func (s *Service) setHealth(h *health.Server) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if h != nil {
		s.health = h
	}
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if s.Ready() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, st)
}

// SetPerSecond makes g, on a store of its own, decide the counted
// windows of one second (envoyproxy/ratelimit's REDIS_PERSECOND: the
// busiest keys on a Redis of their own). Domains decided by fairgate's
// algorithms keep every limit on the main store, so that a batch stays
// atomic. Set it before serving.
func (s *Service) SetPerSecond(g *guard.Guard) { s.perSecond = g }

// SetStatsSink sends the service's statistics to sink (statsd) too: the
// per-rule ones, the service-level ones (Stat*) and, when sink is a
// GaugeSink and the local cache is on, the local cache's gauges. Set it
// before serving.
func (s *Service) SetStatsSink(sink Sink) {
	s.m.sink = sink
	if g, ok := sink.(GaugeSink); ok {
		g.Gauges(func(set func(string, uint64)) {
			if c := s.local.Load(); c.max > 0 {
				c.gauges(set)
			}
		})
	}
}

// CountConfigLoad counts a config put in force (ok) or refused, as
// envoyproxy/ratelimit's config_load_success and config_load_error: the
// caller knows when a reload or an xDS update was refused.
func (s *Service) CountConfigLoad(ok bool) {
	if ok {
		s.m.service(StatConfigLoadSuccess, 1)
	} else {
		s.m.service(StatConfigLoadError, 1)
	}
}

// rule is what one request descriptor comes to.
type rule struct {
	lim       *RateLimit // nil: no limit applies
	unlimited bool
	shadow    bool
	quota     bool
	meta      *structpb.Struct
	key       string // the store key
	stat      string // the statistics' name: domain.key_value…
	cost      int64  // hits; 0 only checks
	// told: the hits are a hits_addend Envoy was told to add (the
	// descriptor's own, or the request's when not 0), not the default
	// one hit: in a domain that charges, a charge (see charges).
	told bool
}

// answer is a request's decided descriptors, as the two ways of deciding
// leave it for finish.
type answer struct {
	outs  []outcome
	retry time.Duration // the longest wait of the descriptors over their limit (fairgate's algorithms)
	never bool          // a descriptor can never pass: waiting does not help
	// anyNear: some descriptor's hits would put it over its limit
	// (StopIncrementWhenOverLimit's first read).
	anyNear bool
	now     time.Time // the store's clock
	// storeErr: the store did not answer (the fail mode or the fallback
	// decided).
	storeErr bool
}

// outcome is a decided descriptor: its status, and what the statistics
// and the overall code need.
type outcome struct {
	over   bool // over its limit (a shadow rule's status still says OK)
	before int64
	after  int64
	local  bool // answered by the local cache
	near   bool // its hits would put it over its limit (StopIncrementWhenOverLimit)
}

// ShouldRateLimit implements the service.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	cfg := s.cfg.Load()
	dom := cfg.dom[req.GetDomain()]
	label := req.GetDomain()
	if dom == nil {
		label = "unknown"
	}
	var err error
	switch {
	case req.GetDomain() == "":
		err = status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		err = status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		err = status.Errorf(codes.InvalidArgument, "%d descriptors in one request: at most %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	s.m.service(StatTotalRequests, 1)
	var rules []rule
	if err == nil {
		if dom == nil {
			s.m.domainNotFound(req.GetDomain(), len(req.GetDescriptors()))
		}
		rules, err = s.rules(cfg, req)
	}
	if err != nil {
		s.m.requests.WithLabelValues(label, "invalid").Inc()
		s.m.service(StatServiceError, 1)
		return nil, err
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(rules))}
	a := &answer{outs: make([]outcome, len(rules))}
	for i := range rules {
		resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if rules[i].unlimited {
			resp.Statuses[i].LimitRemaining = math.MaxUint32
		}
	}
	var closed bool
	if dom == nil || counts(dom) {
		closed, err = s.count(ctx, cfg, dom, rules, a, resp)
	} else {
		closed, err = s.decide(ctx, cfg, dom, rules, a, resp)
	}
	if a.storeErr {
		s.m.service(StatRedisError, 1)
	}
	if closed || err != nil {
		if status.Code(err) == codes.InvalidArgument {
			s.m.service(StatServiceError, 1)
		}
		s.m.requests.WithLabelValues(label, "unavailable").Inc()
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
	s.finish(cfg, dom, req, rules, a, resp)
	code := "ok"
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		code = "over_limit"
	}
	s.m.requests.WithLabelValues(label, code).Inc()
	return resp, nil
}

// rules matches req's descriptors against the domain's rules: the limit
// each one is decided by, after replaces, with its store key and cost.
func (s *Service) rules(cfg *compiled, req *rlspb.RateLimitRequest) ([]rule, error) {
	root := cfg.domains[req.Domain]
	rules := make([]rule, len(req.Descriptors))
	var replaced map[string]bool // made when a rule replaces another
	entries := make([]Entry, 0, 4)
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) == 0 || len(d.GetEntries()) > MaxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: want 1 to %d", i, len(d.GetEntries()), MaxEntries)
		}
		entries = entries[:0]
		for _, e := range d.Entries {
			entries = append(entries, Entry{e.GetKey(), e.GetValue()})
		}
		r := &rules[i]
		r.cost, r.told = int64(max(req.GetHitsAddend(), 1)), req.GetHitsAddend() > 0
		if h := d.GetHitsAddend(); h != nil {
			// A descriptor's own hits_addend may be 0: a check that counts
			// nothing, as in the token-quota pattern.
			r.cost, r.told = int64(min(h.GetValue(), math.MaxUint32)), true
		}
		if root == nil {
			continue // an unknown domain: no limit applies, not even a request's own
		}
		if o := d.GetLimit(); o != nil {
			// The request's own limit (Envoy's per-route override): never in
			// shadow or quota mode, and counted apart from the configured
			// limit, so that a caller's override can never change the state
			// of the configured limit, nor one override another's. Its
			// counter lives as long as its unit: a unit past the settings'
			// longest is refused rather than shortened, which would enforce
			// a limit nobody asked for.
			u, most := Unit(o.GetUnit()), maxOverride(&cfg.cfg.Settings)
			if Period(u) > Period(most) {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has its own limit per %s, longer than max_override_unit (%s): its counter would live that long; use a shorter unit, or raise rls.max_override_unit (FAIRGATE_RLS_MAX_OVERRIDE_UNIT)", i, unitName(u), unitName(most))
			}
			r.lim = &RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u}
			r.key = storeKey(req.Domain, entries, cfg.cfg.TenantKey, fmt.Sprintf("%d/%d", o.GetRequestsPerUnit(), o.GetUnit()))
			r.stat = overrideStat(req.Domain, entries)
			continue
		}
		h := root.match(entries)
		if h.n == nil {
			continue
		}
		x := h.n.d
		for _, name := range x.Limit.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		if x.Limit.Unlimited {
			r.unlimited = true
			continue
		}
		r.lim, r.shadow, r.quota, r.meta, r.stat = x.Limit, x.Shadow, x.QuotaMode || cfg.cfg.Settings.Quota, x.Metadata, h.stat
		for j, p := range h.share {
			if p != "" {
				entries[j].Value = p // every value the wildcard matches: one counter
			}
		}
		r.key = storeKey(req.Domain, entries, cfg.cfg.TenantKey, "")
	}
	for i := range rules {
		if l := rules[i].lim; l != nil && l.Name != "" && replaced[l.Name] {
			rules[i].lim = nil // another matching rule replaces this one
		}
	}
	return rules, nil
}

// overrideStat names the statistics of a request's own limit as
// envoyproxy/ratelimit does: the domain and the descriptor's entries
// (bounded as statName bounds it).
func overrideStat(domain string, entries []Entry) string {
	var buf [MaxStatName]byte
	b := prefixHash{head: buf[:]}
	b.str(domain)
	for _, e := range entries {
		b.char('.')
		b.str(e.Key)
		if e.Value != "" {
			b.char('_')
			b.str(e.Value)
		}
	}
	return b.statName()
}

// finish sets what every domain answers the same way: the overall code
// (a quota descriptor over its limit makes the request over the limit
// only when every quota descriptor is), the statistics, the headers, the
// global shadow mode and the dynamic metadata.
func (s *Service) finish(cfg *compiled, dom *Domain, req *rlspb.RateLimitRequest, rules []rule, a *answer, resp *rlspb.RateLimitResponse) {
	set := &cfg.cfg.Settings
	outs := a.outs
	failed, quotas, quotaFailed := 0, 0, 0
	for i := range rules {
		r, o := &rules[i], &outs[i]
		if r.lim == nil {
			continue
		}
		s.m.record(set, req.Domain, r, o)
		if r.quota {
			quotas++
		}
		if !o.over || r.shadow {
			continue
		}
		if r.quota {
			quotaFailed++
		} else {
			failed++
		}
	}
	resp.OverallCode = rlspb.RateLimitResponse_OK
	if failed > 0 || quotas > 0 && quotas == quotaFailed {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if set.Headers.Enabled {
		resp.ResponseHeadersToAdd = headers(set.Headers, rules, resp, a, dom != nil && !counts(dom))
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && set.Shadow {
		resp.OverallCode = rlspb.RateLimitResponse_OK
		s.m.globalShadow.Inc()
		s.m.service(StatGlobalShadowMode, 1)
	}
	if set.DynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, rules, resp)
	}
}

// unitName is a unit as the config writes it, such as "day".
func unitName(u Unit) string { return strings.ToLower(u.String()) }

// unitSeconds is a unit's length in seconds.
func unitSeconds(u Unit) int64 { return int64(Period(u) / time.Second) }

// untilReset is envoyproxy/ratelimit's duration_until_reset: whole
// seconds to the end of the unit's window (windows aligned to the epoch).
func untilReset(u Unit, now time.Time) *durationpb.Duration {
	n := unitSeconds(u)
	if n == 0 {
		return nil
	}
	return &durationpb.Duration{Seconds: n - now.Unix()%n}
}

// headers are the response headers of LIMIT_RESPONSE_HEADERS_ENABLED: the
// limit, remaining and reset of the descriptor closest to its limit (the
// last over its limit, if any, as envoyproxy/ratelimit picks it); for a
// domain decided by fairgate's algorithms, also Retry-After (whole seconds
// rounded up: until the request could pass) when the request is over its
// limit and waiting can help.
func headers(h Headers, rules []rule, resp *rlspb.RateLimitResponse, a *answer, exact bool) []*corepb.HeaderValue {
	var pick *rlspb.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for i, st := range resp.Statuses {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if rules[i].lim != nil && !rules[i].quota && st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return nil
	}
	reset := "0"
	if d := untilReset(pick.CurrentLimit.Unit, a.now); d != nil {
		reset = strconv.FormatInt(d.Seconds, 10)
	}
	if exact && pick.DurationUntilReset != nil {
		reset = strconv.FormatInt(algo.CeilSeconds(pick.DurationUntilReset.AsDuration()), 10)
	}
	out := []*corepb.HeaderValue{
		{Key: cmp.Or(h.Limit, "RateLimit-Limit"), Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: cmp.Or(h.Remaining, "RateLimit-Remaining"), Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: cmp.Or(h.Reset, "RateLimit-Reset"), Value: reset},
	}
	if exact && resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && !a.never {
		out = append(out, retryAfter(max(a.retry, time.Second))...)
	}
	return out
}

// dynamicMetadata is RESPONSE_DYNAMIC_METADATA's struct: the domain, the
// request's descriptors and hits_addend, and the metadata of the rules of
// the descriptors that passed, merged.
func dynamicMetadata(req *rlspb.RateLimitRequest, rules []rule, resp *rlspb.RateLimitResponse) *structpb.Struct {
	f := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.Domain)}
	var ds []*structpb.Value
	for _, d := range req.Descriptors {
		df := map[string]*structpb.Value{}
		var es []*structpb.Value
		for _, e := range d.Entries {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: es})
		if l := d.GetLimit(); l != nil {
			df["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	f["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range rules {
		if rules[i].lim != nil && rules[i].meta != nil && resp.Statuses[i].Code == rlspb.RateLimitResponse_OK {
			mergeStruct(passed, rules[i].meta)
		}
	}
	if len(passed.Fields) > 0 {
		f["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: f}
}

// mergeStruct adds src's fields to dst: a field dst already has is kept,
// but two structs under one name are merged.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		old, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value) // the config's own stays as it is
		case old.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(old.GetStructValue(), v.GetStructValue())
		}
	}
}
