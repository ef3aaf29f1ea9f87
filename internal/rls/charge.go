package rls

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"math"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/rlsconfig"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// charges reports whether domain d charges the hits Envoy is told to add
// (Domain.Charge, where [rlsconfig.ChargeProblem] allows it, in a domain
// decided by fairgate's algorithm: a counted domain counts every hit
// already).
func charges(d *Domain) bool {
	return d.Charge && !counts(d) && rlsconfig.ChargeProblem(d.Algorithm, d.Atomic) == ""
}

// charge charges b's hits in full on their counters, whatever they hold,
// as one settlement ([store.Settler]) without an estimate: each counter
// goes down by its hits, past its limit into a debt of at most one burst
// (the rest is not applied, and counted in
// fairgate_settlement_unapplied_units_total). This is the charge Envoy
// sends when a stream ends (apply_on_stream_done), whose answer it
// ignores: refusing it would lose it. The settlement's id is made here,
// one per call, so that the guard's retries of a store call that timed
// out apply it once (on Redis; the memory store applies it without a
// record, guard.Guard.SettleOnce, so charges never fill its id table); the charge goes on when the call's context ends
// (Envoy gave up waiting). A descriptor is over its limit when its
// counter is in debt after the charge, as envoyproxy/ratelimit answers
// a hit past the limit. closed is as for count: a store that does not
// answer after the guard's retries leaves the charge unapplied (the
// guard counts and logs it) and the domain's fail mode answers.
func (s *Service) charge(ctx context.Context, cfg *compiled, dom *Domain, b *batch, rules []rule, a *answer, resp *rlspb.RateLimitResponse) (closed bool, err error) {
	adjs := make([]store.Adjustment, len(b.checks))
	for k, c := range b.checks {
		adjs[k] = store.Adjustment{Key: c.Key, Limit: c.Limit, Delta: min(c.Cost, algo.MaxCount)}
	}
	var res store.SettleResult
	if err := s.guard.SettleOnce(ctx, newChargeID(), adjs, &res); err != nil {
		if errors.Is(err, store.ErrInvalidCheck) {
			return false, status.Error(codes.InvalidArgument, err.Error())
		}
		a.storeErr = true
		if dom.Fail == policy.FailClosed {
			return true, closeAll(cfg, rules, resp)
		}
		return false, nil
	}
	if a.now.IsZero() || res.Now.After(a.now) {
		a.now = res.Now
	}
	for k, is := range b.rules {
		x, lim := res.Settled[k], b.checks[k].Limit
		for _, i := range is {
			st, o, r := resp.Statuses[i], &a.outs[i], &rules[i]
			st.LimitRemaining = uint32(min(max(x.Remaining, 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(x.ResetAfter)
			o.after = int64(r.lim.RequestsPerUnit) - x.Remaining
			o.before = o.after - r.cost
			if x.Remaining >= 0 {
				continue
			}
			o.over = true
			if !r.shadow {
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				a.retry = max(a.retry, owed(lim, x.ResetAfter))
			}
		}
	}
	return false, nil
}

// owed is how long a GCRA or token bucket counter that is full again
// after resetAfter stays in debt: zero when it is not in debt. Such a
// counter refills from empty in burst × emission; a reset further away is
// a debt being paid back at the limit's rate, and the rest of it is the
// time until a check (hits_addend 0) passes: exactly what a take of cost
// 0 waits in the algorithms' arithmetic (algo's gcra and tokenBucket:
// tat − now − tolerance; (0 − tokens) × emission less the part of an
// emission accrued). Not for the window algorithms, whose reset is at
// most a window whatever they count (rlsconfig.ChargeProblem refuses them).
func owed(l algo.Limit, resetAfter time.Duration) time.Duration {
	em, burst, _ := l.Params()
	return max(0, resetAfter-time.Duration(em*burst)*time.Microsecond)
}

// newChargeID returns a random settlement id for one charge: 128 bits,
// 22 bytes of base64url (no scope: the memory store does not record it).
func newChargeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}
