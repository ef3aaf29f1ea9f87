package rls

import (
	"context"
	"math"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// batch is the store checks of some of a request's descriptors, with the
// descriptors each check decides (the same descriptor twice is one check
// of the summed hits).
type batch struct {
	checks []store.Check
	rules  [][]int
}

func (b *batch) add(key string, lim algo.Limit, cost int64, i int) {
	for k := range b.checks {
		if b.checks[k].Key == key {
			b.checks[k].Cost += cost
			b.rules[k] = append(b.rules[k], i)
			return
		}
	}
	b.checks = append(b.checks, store.Check{Key: key, Limit: lim, Cost: cost})
	b.rules = append(b.rules, []int{i})
}

// decide decides a domain by fairgate's algorithm: a hit over the limit is
// not counted; with Atomic, the enforced descriptors are one
// all-or-nothing batch (none is charged when one is over its limit);
// without it, those that passed are charged even when another is over.
// Shadow rules are decided apart, so that one over its limit never holds
// back an enforced one. In a domain that charges (see charges), the hits
// Envoy was told to add are charged apart, in full (see charge), and a
// check (hits_addend 0) is over its limit while its counter is in debt.
// closed is as for count.
func (s *Service) decide(ctx context.Context, cfg *compiled, dom *Domain, rules []rule, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	var enforced, shadow, charged batch
	charging := charges(dom)
	for i := range rules {
		r := &rules[i]
		if r.lim == nil {
			continue
		}
		resp.Statuses[i].CurrentLimit = current(r.lim)
		period := Period(r.lim.Unit)
		lim := algo.Limit{Limit: int64(r.lim.RequestsPerUnit), Period: period, Algorithm: dom.Algorithm}
		invalid := period == 0 || r.lim.RequestsPerUnit == 0 || lim.Validate() != nil
		if charging && r.told && r.cost > 0 && !invalid {
			charged.add(r.key, lim, r.cost, i)
			continue
		}
		b := &enforced
		if r.shadow {
			b = &shadow
		}
		sum := r.cost
		for k := range b.checks {
			if b.checks[k].Key == r.key {
				sum += b.checks[k].Cost
			}
		}
		if invalid || sum > lim.Limit {
			// No period, a limit of 0 (a blocked value) or one no store
			// takes, or more hits than the limit allows at once: over the
			// limit without a store call, and with no time to wait, since
			// waiting never helps.
			overAtOnce(r, a, resp, i, sum-r.cost)
			continue
		}
		b.add(r.key, lim, r.cost, i)
	}
	if len(enforced.checks) > 0 {
		var res store.Result
		if closed, err := s.takeOrClose(ctx, s.guard, cfg, dom.Fail, enforced.checks, &res, rules, a, resp); closed || err != nil {
			return closed, err
		}
		a.now = res.Now
		if !res.Allowed && !dom.Atomic {
			// Not all-or-nothing: charge the descriptors that passed.
			s.chargePassed(ctx, dom, &enforced, &res)
		}
		s.fill(rules, &enforced, &res, charging, a, resp)
	}
	if len(shadow.checks) > 0 {
		var res store.Result
		if _, err := s.guard.Take(ctx, shadow.checks, policy.FailOpen, &res); err == nil && len(res.Decisions) == len(shadow.checks) {
			s.fill(rules, &shadow, &res, charging, a, resp)
		}
	}
	if len(charged.checks) > 0 {
		if closed, err := s.charge(ctx, cfg, dom, &charged, rules, a, resp); closed || err != nil {
			return closed, err
		}
	}
	if a.now.IsZero() {
		a.now = s.now()
	}
	return false, nil
}

// overAtOnce answers rule i over its limit without a store call, before
// hits counted already in its batch: waiting never helps.
func overAtOnce(r *rule, a *answer, resp *rlspb.RateLimitResponse, i int, before int64) {
	a.outs[i].over, a.outs[i].before, a.outs[i].after = true, before, before+r.cost
	if !r.shadow {
		resp.Statuses[i].Code, a.never = rlspb.RateLimitResponse_OVER_LIMIT, true
	}
}

// chargePassed charges, after a rejected batch, the checks that would have
// passed, and puts their decisions in res.
func (s *Service) chargePassed(ctx context.Context, dom *Domain, b *batch, res *store.Result) {
	var again []store.Check
	var at []int
	for k, d := range res.Decisions {
		if d.Allowed && b.checks[k].Cost > 0 {
			again, at = append(again, b.checks[k]), append(at, k)
		}
	}
	if len(again) == 0 {
		return
	}
	var res2 store.Result
	if o, err := s.guard.Take(ctx, again, dom.Fail, &res2); err != nil || o == guard.Unavailable || len(res2.Decisions) != len(again) {
		return
	}
	for j, k := range at {
		res.Decisions[k] = res2.Decisions[j]
	}
}

// fill writes a batch's decisions into the statuses of its descriptors.
// A status's duration_until_reset is until the limit is
// full again (as RateLimit-Reset over HTTP), over the limit or not; the
// exact wait goes to Retry-After. A shadow rule over its limit is
// answered OK. With checkDebt (a domain that charges), a check (cost 0)
// whose counter is in debt is over its limit until the debt is paid.
func (s *Service) fill(rules []rule, b *batch, res *store.Result, checkDebt bool, a *answer, resp *rlspb.RateLimitResponse) {
	for k, is := range b.rules {
		d := res.Decisions[k]
		if checkDebt && d.Allowed && b.checks[k].Cost == 0 {
			if w := owed(b.checks[k].Limit, d.ResetAfter); w > 0 {
				d.Allowed, d.RetryAfter = false, w
			}
		}
		for _, i := range is {
			st, o, r := resp.Statuses[i], &a.outs[i], &rules[i]
			st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(d.ResetAfter)
			used := int64(r.lim.RequestsPerUnit) - max(d.Remaining, 0)
			if d.Allowed {
				o.before, o.after = used-r.cost, used
				continue
			}
			o.over, o.before, o.after = true, used, used+r.cost
			if !r.shadow {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				a.retry = max(a.retry, d.RetryAfter)
			}
		}
	}
}

// retryAfter is a Retry-After header of d, as every front writes it.
func retryAfter(d time.Duration) []*corepb.HeaderValue {
	return []*corepb.HeaderValue{{Key: "Retry-After", Value: limitheader.RetryAfter(d)}}
}
