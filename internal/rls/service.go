package rls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/promreg"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// Limits of a request, so that nothing a client sends can make a call
// unbounded.
const (
	MaxDescriptors = 64
	MaxEntries     = 32
)

// Service implements envoy.service.ratelimit.v3.RateLimitService. It is
// safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer
	lim *limiter.Limiter
	cfg atomic.Pointer[compiled]
	log *slog.Logger
	m   *metrics
}

// New returns the service deciding through lim (its store, deadline,
// breaker and fallback). reg, if not nil, receives the metrics.
func New(c Config, lim *limiter.Limiter, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Service{lim: lim, log: log, m: m}
	s.SetConfig(c)
	return s, nil
}

// SetConfig replaces the configuration, as a reload does. Calls in flight
// finish with the old one.
func (s *Service) SetConfig(c Config) { s.cfg.Store(compile(c)) }

// check is a descriptor that needs the store.
type check struct {
	i      int // the descriptor's index
	rl     *rlspb.RateLimitResponse_RateLimit
	shadow bool
	k      int // the store check's index: descriptors that name one counter share it
}

// ShouldRateLimit implements the service.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	case len(req.GetDescriptors()) > MaxDescriptors:
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d", len(req.GetDescriptors()), MaxDescriptors)
	}
	cfg := s.cfg.Load()
	label := req.Domain
	if cfg.domains[req.Domain] == nil {
		label = "unknown"
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(req.Descriptors))}
	b, err := s.batch(cfg, req, resp, label)
	if err != nil {
		return nil, err
	}
	if len(b.enforced) > 0 {
		if unavailable, err := s.enforce(ctx, cfg, req.Domain, label, b, resp); unavailable || err != nil {
			if err != nil {
				return nil, err
			}
			return resp, nil
		}
	}
	if len(b.shadow) > 0 {
		s.shadowed(ctx, label, b, resp)
	}
	resp.ResponseHeadersToAdd = headers(resp, b.never, b.retry)
	code := "ok"
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		code = "over_limit"
	}
	s.m.requests.WithLabelValues(label, code).Inc()
	return resp, nil
}

// batch is what a request's descriptors come to: the checks of the
// enforced and of the shadow rules, each with the status it fills.
type batch struct {
	enforced, shadow     []store.Check
	enforcedAt, shadowAt []check
	never                bool          // an enforced descriptor can never pass
	retry                time.Duration // the longest wait of the enforced ones over their limit
}

// matched returns, per descriptor, its entries and the rule it matches,
// and the names of the rules that matching rules replace.
func matched(root *node, req *rlspb.RateLimitRequest) ([][]Entry, []*node, map[string]bool, error) {
	nodes := make([]*node, len(req.Descriptors))
	entries := make([][]Entry, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) == 0 || len(d.GetEntries()) > MaxEntries {
			return nil, nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: want 1 to %d", i, len(d.GetEntries()), MaxEntries)
		}
		for _, e := range d.Entries {
			entries[i] = append(entries[i], Entry{e.GetKey(), e.GetValue()})
		}
		if root != nil {
			nodes[i] = root.match(entries[i])
		}
		if n := nodes[i]; n != nil {
			for _, r := range n.d.Limit.Replaces {
				replaced[r] = true
			}
		}
	}
	return entries, nodes, replaced, nil
}

// batch builds the checks of req's descriptors; those that can never pass
// (no period, a limit of 0, more hits than the limit) are answered
// OVER_LIMIT in resp at once.
func (s *Service) batch(cfg *compiled, req *rlspb.RateLimitRequest, resp *rlspb.RateLimitResponse, label string) (*batch, error) {
	entries, nodes, replaced, err := matched(cfg.domains[req.Domain], req)
	if err != nil {
		return nil, err
	}
	b := &batch{}
	for i, d := range req.Descriptors {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		var rl *RateLimit
		sh := false
		override := ""
		switch n := nodes[i]; {
		case d.GetLimit() != nil:
			// The request's own limit (Envoy's per-route override), as
			// envoyproxy/ratelimit honours it: never in shadow mode, and
			// counted apart from the configured limit (storeKey).
			rl = &RateLimit{RequestsPerUnit: d.Limit.GetRequestsPerUnit(), Unit: Unit(d.Limit.GetUnit())}
			override = fmt.Sprintf("%d/%d", rl.RequestsPerUnit, rl.Unit)
		case n == nil:
			continue
		case n.d.Limit.Name != "" && replaced[n.d.Limit.Name]:
			continue // another matching rule replaces this one
		default:
			rl, sh = n.d.Limit, n.d.Shadow
		}
		if rl.Unlimited {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unit: rl.Unit}
		period := Period(rl.Unit)
		cost := int64(req.GetHitsAddend())
		if h := d.GetHitsAddend(); h != nil {
			cost = int64(min(h.GetValue(), math.MaxUint32))
		} else if cost == 0 {
			cost = 1
		}
		key := storeKey(req.Domain, entries[i], cfg.cfg.TenantKey, override)
		checks := &b.enforced
		if sh {
			checks = &b.shadow
		}
		// The same descriptor twice in one request counts twice, as
		// envoyproxy/ratelimit counts it: one check of the summed cost.
		k := slices.IndexFunc(*checks, func(c store.Check) bool { return c.Key == key })
		if k >= 0 {
			cost += (*checks)[k].Cost
		}
		if period == 0 || rl.RequestsPerUnit == 0 || cost > int64(rl.RequestsPerUnit) {
			// No valid period, a limit of 0 (a blocked value), or more hits
			// than the limit allows at once: over the limit without a store
			// call, and with no time to wait, since waiting never helps.
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			if sh {
				st.Code = rlspb.RateLimitResponse_OK
				s.m.shadow.WithLabelValues(label).Inc()
			} else {
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
				b.never = true
			}
			continue
		}
		if k < 0 {
			k = len(*checks)
			*checks = append(*checks, store.Check{Key: key, Limit: algo.Limit{Limit: int64(rl.RequestsPerUnit), Period: period, Algorithm: cfg.cfg.Algorithm}})
		}
		(*checks)[k].Cost = cost
		if sh {
			b.shadowAt = append(b.shadowAt, check{i, st.CurrentLimit, true, k})
		} else {
			b.enforcedAt = append(b.enforcedAt, check{i, st.CurrentLimit, false, k})
		}
	}
	return b, nil
}

// enforce decides the enforced checks as one batch and fills their
// statuses. unavailable reports a store that did not answer, resp then
// complete (or, failing closed with UNAVAILABLE, the error).
func (s *Service) enforce(ctx context.Context, cfg *compiled, domain, label string, b *batch, resp *rlspb.RateLimitResponse) (unavailable bool, err error) {
	var res store.Result
	reason, err := s.lim.TakeChecks(ctx, b.enforced, cfg.fail[domain], &res)
	if err != nil {
		return false, status.Error(codes.InvalidArgument, err.Error())
	}
	if reason == limiter.ReasonUnavailable {
		s.m.requests.WithLabelValues(label, "unavailable").Inc()
		if cfg.cfg.FailClosed == ClosedUnavailable {
			return true, status.Error(codes.Unavailable, "fairgate: the rate limit store does not answer and this domain fails closed")
		}
		for _, c := range b.enforcedAt {
			st := resp.Statuses[c.i]
			st.Code, st.DurationUntilReset = rlspb.RateLimitResponse_OVER_LIMIT, durationpb.New(limiter.UnavailableRetryAfter)
		}
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{{Key: "Retry-After", Value: strconv.Itoa(int(limiter.UnavailableRetryAfter / time.Second))}}
		return true, nil
	}
	for _, c := range b.enforcedAt {
		d := res.Decisions[c.k]
		fill(resp.Statuses[c.i], d)
		if !d.Allowed {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			b.retry = max(b.retry, d.RetryAfter)
		}
	}
	return false, nil
}

// shadowed decides the shadow rules apart, so that one over its limit
// never holds back the enforced ones in the atomic batch: a rejection is
// counted and answered OK.
func (s *Service) shadowed(ctx context.Context, label string, b *batch, resp *rlspb.RateLimitResponse) {
	var res store.Result
	if _, err := s.lim.TakeChecks(ctx, b.shadow, policy.FailOpen, &res); err != nil || len(res.Decisions) != len(b.shadow) {
		return
	}
	for _, c := range b.shadowAt {
		d := res.Decisions[c.k]
		if !d.Allowed {
			s.m.shadow.WithLabelValues(label).Inc()
			d.Allowed = true
		}
		fill(resp.Statuses[c.i], d)
	}
}

// fill writes a decision into a status. An over-limit status's
// duration_until_reset is when the same request would pass (the exact
// retry-after); an OK status's is when the limit is full again.
func fill(st *rlspb.RateLimitResponse_DescriptorStatus, d algo.Decision) {
	st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
	st.Code, st.DurationUntilReset = rlspb.RateLimitResponse_OK, durationpb.New(d.ResetAfter)
	if !d.Allowed {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	}
}

// headers are the IETF draft's RateLimit-Limit, -Remaining and -Reset of
// the tightest limited descriptor, as the HTTP API writes them
// (RateLimit-Reset: until the limit is whole again, as the descriptor's
// duration_until_reset), and Retry-After (retry, whole seconds rounded up:
// until the request could pass) when the request is over its limit and
// waiting can help (never is false).
func headers(resp *rlspb.RateLimitResponse, never bool, retry time.Duration) []*corepb.HeaderValue {
	var tight *rlspb.RateLimitResponse_DescriptorStatus
	for _, st := range resp.Statuses {
		if st.CurrentLimit == nil || st.DurationUntilReset == nil {
			continue
		}
		over := st.Code == rlspb.RateLimitResponse_OVER_LIMIT
		if tight == nil || over && tight.Code != rlspb.RateLimitResponse_OVER_LIMIT ||
			over == (tight.Code == rlspb.RateLimitResponse_OVER_LIMIT) && st.LimitRemaining < tight.LimitRemaining {
			tight = st
		}
	}
	if tight == nil {
		return nil
	}
	secs := func(d time.Duration) string { return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10) }
	reset := tight.DurationUntilReset.AsDuration()
	h := []*corepb.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(tight.CurrentLimit.RequestsPerUnit), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(tight.LimitRemaining), 10)},
		{Key: "RateLimit-Reset", Value: secs(reset)},
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && !never {
		h = append(h, &corepb.HeaderValue{Key: "Retry-After", Value: secs(max(retry, time.Second))})
	}
	return h
}

type metrics struct {
	requests *prometheus.CounterVec
	shadow   *prometheus.CounterVec
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
	}
	if reg == nil {
		return m, nil
	}
	var err error
	promreg.Reuse(reg, &m.requests, &err)
	promreg.Reuse(reg, &m.shadow, &err)
	return m, err
}
