package rls

import (
	"context"
	"slices"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// counter is one store counter of a request: the descriptors that name it
// (the same descriptor twice counts twice, in order) and what they add.
type counter struct {
	big   int64 // the counter's ceiling: see ceiling
	cost  int64 // the sum of its descriptors' hits as charged
	rules []int
}

// ceiling is the store limit a counted window is kept under: as high as a
// fixed window of the unit's period allows, so that the store admits (and
// counts) every hit and the service compares the count with the
// configured limit, as envoyproxy/ratelimit compares its INCRBY's answer.
// A count that reaches it stays there: the limits it could decide are
// refused when the config is read (a limit over the ceiling is invalid for
// a fixed window).
func ceiling(period time.Duration) int64 { return min(algo.MaxCount, int64(period/time.Microsecond)) }

// count decides a domain the way envoyproxy/ratelimit counts: per
// descriptor, a fixed window aligned to the unit since the epoch; every
// hit is added to its window, those of rejected requests too (unless
// StopIncrementWhenOverLimit says otherwise, as that setting does there);
// a descriptor is over its limit when its window's count after the hits
// is above the limit. hits_addend 0 reads the count without adding. The
// windows are one store batch (one Redis script call per slot). closed
// reports a fail-closed domain whose store did not answer: resp is then
// complete, or err is the UNAVAILABLE status.
func (s *Service) count(ctx context.Context, cfg *compiled, dom *Domain, rules []rule, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	a.now = s.now()
	local := s.local.Load()
	t := windows(rules, a, resp, local)
	if len(t.checks) > 0 {
		fail := policy.FailOpen
		if dom != nil {
			fail = dom.Fail
		}
		if closed, err := s.countWindows(ctx, cfg, fail, rules, t, a, resp); closed || err != nil {
			return closed, err
		}
	}
	for i := range rules {
		r, o := &rules[i], &a.outs[i]
		if r.lim == nil || Period(r.lim.Unit) == 0 {
			continue
		}
		st := resp.Statuses[i]
		st.CurrentLimit, st.DurationUntilReset = current(r.lim), untilReset(r.lim.Unit, a.now)
		if !o.over {
			st.LimitRemaining = uint32(int64(r.lim.RequestsPerUnit) - o.after)
			continue
		}
		if !o.local {
			local.add(r.key, a.now.Add(st.DurationUntilReset.AsDuration()))
		}
		if !r.shadow {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	return false, nil
}

// tally is the store windows a request's descriptors count in.
type tally struct {
	checks   []store.Check
	counters []counter // one per check
	anyLocal bool      // a descriptor was answered by the local cache
}

// windows gathers the windows of the descriptors that have a limit: one
// check per store key. A descriptor over its limit in the local cache, or
// with a limit in a unit of no length, is answered at once.
func windows(rules []rule, a *answer, resp *rlspb.RateLimitResponse, local *localCache) *tally {
	t := &tally{checks: make([]store.Check, 0, len(rules))}
	for i := range rules {
		r := &rules[i]
		if r.lim == nil {
			continue
		}
		period := Period(r.lim.Unit)
		if period == 0 {
			// A request's own limit in a unit with no length: never passes.
			a.outs[i].over, a.never = true, true
			resp.Statuses[i].Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.Statuses[i].CurrentLimit = current(r.lim)
			continue
		}
		if local.over(r.key, a.now) {
			a.outs[i].over, a.outs[i].local, t.anyLocal = true, true, true
			continue
		}
		k := slices.IndexFunc(t.checks, func(c store.Check) bool { return c.Key == r.key })
		if k < 0 {
			k = len(t.checks)
			big := ceiling(period)
			t.checks = append(t.checks, store.Check{Key: r.key, Limit: algo.Limit{Limit: big, Period: period, Algorithm: algo.FixedWindow}})
			t.counters = append(t.counters, counter{big: big})
		}
		t.counters[k].rules = append(t.counters[k].rules, i)
	}
	return t
}

// countWindows adds the hits to the windows (after reading them, for
// StopIncrementWhenOverLimit) and sets each descriptor's counts before
// and after its hits, in request order, and whether it is over its limit.
func (s *Service) countWindows(ctx context.Context, cfg *compiled, fail policy.FailMode, rules []rule, t *tally, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	set := &cfg.cfg.Settings
	if set.StopIncrementWhenOverLimit && !t.anyLocal {
		if closed, err := s.peek(ctx, cfg, fail, rules, t.checks, t.counters, a, resp); closed || err != nil {
			return closed, err
		}
	}
	for k := range t.checks {
		c := &t.counters[k]
		c.cost = 0
		for _, i := range c.rules {
			c.cost += charged(set, rules, i, t.anyLocal, a)
		}
		t.checks[k].Cost = min(c.cost, c.big)
	}
	var res store.Result
	if closed, err := s.takeCounted(ctx, cfg, fail, t.checks, &res, rules, a, resp); closed || err != nil {
		return closed, err
	}
	if !res.Now.IsZero() {
		a.now = res.Now
	}
	for k, c := range t.counters {
		d := res.Decisions[k]
		n := c.big - d.Remaining // the count before the batch's hits…
		if d.Allowed {
			n -= t.checks[k].Cost // …unless they were added
		}
		for _, i := range c.rules {
			n += charged(set, rules, i, t.anyLocal, a)
			o := &a.outs[i]
			o.after, o.before = n, n-rules[i].cost
			o.over = n > int64(rules[i].lim.RequestsPerUnit)
		}
	}
	return false, nil
}

// charged is what descriptor i adds to its window: its hits, unless
// StopIncrementWhenOverLimit holds them back (envoyproxy/ratelimit's rule:
// nothing when a key is over its limit in the local cache; when some
// descriptors would go over their limit, only those add their hits).
func charged(set *Settings, rules []rule, i int, anyLocal bool, a *answer) int64 {
	if !set.StopIncrementWhenOverLimit {
		return rules[i].cost
	}
	switch {
	case anyLocal:
		return 0
	case !a.anyNear || a.outs[i].near:
		return rules[i].cost
	}
	return 0
}

// peek reads the windows' counts without adding to them, for
// StopIncrementWhenOverLimit: which descriptors the hits would put over
// their limit.
func (s *Service) peek(ctx context.Context, cfg *compiled, fail policy.FailMode, rules []rule, checks []store.Check, counters []counter, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	for k := range checks {
		checks[k].Cost = 0
	}
	var res store.Result
	if closed, err := s.takeCounted(ctx, cfg, fail, checks, &res, rules, a, resp); closed || err != nil {
		return closed, err
	}
	for k, c := range counters {
		n := c.big - res.Decisions[k].Remaining
		for _, i := range c.rules {
			if n+rules[i].cost > int64(rules[i].lim.RequestsPerUnit) {
				a.outs[i].near, a.anyNear = true, true
			}
		}
	}
	return false, nil
}

// takeCounted decides counted windows: those of one second on the
// per-second store when there is one, the others on the main store; res
// then holds the decisions in the order of checks, and the later clock.
func (s *Service) takeCounted(ctx context.Context, cfg *compiled, fail policy.FailMode, checks []store.Check, res *store.Result, rules []rule, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	if s.perSecond == nil {
		return s.takeOrClose(ctx, s.guard, cfg, fail, checks, res, rules, a, resp)
	}
	var parts [2][]store.Check // main, per second
	var at [2][]int
	for i, c := range checks {
		j := 0
		if c.Limit.Period == time.Second {
			j = 1
		}
		parts[j], at[j] = append(parts[j], c), append(at[j], i)
	}
	res.Allowed, res.Decisions = true, make([]algo.Decision, len(checks))
	for j, g := range []*guard.Guard{s.guard, s.perSecond} {
		if len(parts[j]) == 0 {
			continue
		}
		var r store.Result
		if closed, err := s.takeOrClose(ctx, g, cfg, fail, parts[j], &r, rules, a, resp); closed || err != nil {
			return closed, err
		}
		for k, i := range at[j] {
			res.Decisions[i] = r.Decisions[k]
		}
		res.Allowed = res.Allowed && r.Allowed
		if r.Now.After(res.Now) {
			res.Now = r.Now
		}
	}
	return false, nil
}

// takeOrClose decides checks through g (its deadline, breakers, fail mode
// and fallback). closed reports a fail-closed domain whose store
// did not answer: resp then says OVER_LIMIT, or err is UNAVAILABLE, as
// configured.
func (s *Service) takeOrClose(ctx context.Context, g *guard.Guard, cfg *compiled, fail policy.FailMode, checks []store.Check, res *store.Result, rules []rule, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	outcome, err := g.Take(ctx, checks, fail, res)
	if err != nil {
		return false, status.Error(codes.InvalidArgument, err.Error())
	}
	if outcome != guard.Decided {
		a.storeErr = true
	}
	if outcome != guard.Unavailable {
		return false, nil
	}
	return true, closeAll(cfg, rules, resp)
}

// closeAll answers a fail-closed domain whose store did not answer: resp
// says OVER_LIMIT, or the error is UNAVAILABLE, as configured.
func closeAll(cfg *compiled, rules []rule, resp *rlspb.RateLimitResponse) error {
	if cfg.cfg.FailClosed == ClosedUnavailable {
		return status.Error(codes.Unavailable, "fairgate: the rate limit store does not answer and this domain fails closed")
	}
	for i := range rules {
		if rules[i].lim != nil {
			st := resp.Statuses[i]
			st.Code, st.CurrentLimit, st.DurationUntilReset = rlspb.RateLimitResponse_OVER_LIMIT, current(rules[i].lim), durationpb.New(guard.UnavailableRetryAfter)
		}
	}
	resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	resp.ResponseHeadersToAdd = retryAfter(guard.UnavailableRetryAfter)
	return nil
}

// current is a rule's limit as a status reports it.
func current(l *RateLimit) *rlspb.RateLimitResponse_RateLimit {
	return &rlspb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit}
}
