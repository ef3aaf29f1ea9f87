package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// fallbackChecks are checks sized for the fallback: each limit and burst
// times the instance's share (at least 1, and at least the cost), so that
// the instances together admit about the policy's limits while the store
// is out.
func (l *Limiter) fallbackChecks(checks []store.Check) []store.Check {
	out := slices.Clone(checks)
	if l.share >= 1 {
		return out
	}
	for i := range out {
		lim := &out[i].Limit
		lim.Limit = max(1, int64(math.Ceil(float64(lim.Limit)*l.share)))
		if lim.Burst != 0 {
			lim.Burst = max(out[i].Cost, int64(math.Ceil(float64(lim.Burst)*l.share)))
		}
		if lim.Algorithm.Windowed() {
			lim.Burst = 0
			lim.Limit = max(lim.Limit, out[i].Cost)
		} else if lim.Burst == 0 && lim.Limit < out[i].Cost {
			lim.Burst = out[i].Cost
		}
		if lim.Period/time.Microsecond < time.Duration(lim.Limit) || lim.Validate() != nil {
			out[i].Limit = checks[i].Limit // cannot shrink it validly: keep the policy's
		}
	}
	return out
}

// failMode is the one place where a store failure meets res's fail mode:
// it counts the failure under the mode and, for fail closed, returns the
// unavailable decision (ok true). For fail open (ok false) the caller
// decides without the store: rate layers on the fallback, slots skipped.
func (l *Limiter) failMode(res policy.Resolution, now time.Time) (unavailable Decision, ok bool) {
	if res.Fail == policy.FailClosed {
		l.m.failures.WithLabelValues("closed").Inc()
		return Decision{Reason: ReasonUnavailable, RetryAfter: UnavailableRetryAfter, Tightest: -1, Resolution: res, Now: now}, true
	}
	l.m.failures.WithLabelValues("open").Inc()
	return Decision{}, false
}

// decideLocally decides checks on the fallback, sized for this instance,
// because the store failed and the fail mode is open. It returns the sized
// checks, and false when there is no fallback or it failed too (the caller
// then admits unlimited).
func (l *Limiter) decideLocally(ctx context.Context, checks []store.Check, res *store.Result) ([]store.Check, bool) {
	if l.fallback == nil {
		return nil, false
	}
	sized := l.fallbackChecks(checks)
	return sized, l.fallback.Take(ctx, sized, res) == nil
}

// storeContext is the one place a store call's deadline is set: the
// store deadline, on a context shared by the calls of the same
// millisecond (deadline.go), or on ctx itself when the call's span needs
// ctx's values (tracing on) or ctx ends sooner. An in-process store gets
// none.
func (l *Limiter) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	switch {
	case l.timeout <= 0 || l.local:
		return ctx, noCancel
	case l.tracer != nil:
		return context.WithTimeout(ctx, l.timeout)
	}
	return l.deadline.context(ctx)
}

// storeCall runs f, one call of the store about checks, through the
// breakers of their domains (an in-process store has none). A breaker
// that refuses is store.ErrUnavailable.
func (l *Limiter) storeCall(checks []store.Check, f func() error) error {
	if l.local {
		return f()
	}
	err := l.cb.call(checks, f)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w: breaker open: %w", store.ErrUnavailable, err)
	}
	return err
}

// take runs one store call under the limiter's deadline (an in-process
// store never waits: it runs without one, and without the timer one costs).
func (l *Limiter) take(ctx context.Context, now time.Time, checks []store.Check, res *store.Result) error {
	ctx, cancel := l.storeContext(ctx)
	defer cancel()
	var end func(*store.Result, error)
	if l.tracer != nil {
		ctx, end = l.storeSpan(ctx, checks)
	}
	start := time.Now()
	err := l.storeCall(checks, func() error { return l.store.Take(ctx, checks, res) })
	if end != nil {
		end(res, err)
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return err
	}
	l.observeStore(ctx, time.Since(start).Seconds())
	if err != nil {
		l.m.storeErrors.Inc()
		if errors.Is(err, store.ErrProtocol) {
			// Never an outage: loud, every time, and counted apart.
			l.m.protoErrors.Inc()
			if sec := now.Unix(); l.lastProto.Swap(sec) != sec { // once a second at most
				l.log.Error("store protocol error: a reply of the wrong shape (a bug, not an outage); deciding by the fail mode", slog.String("error", err.Error()))
			}
		} else {
			l.logRare(now, "store call failed", err)
		}
	}
	return err
}

// sampler lets through at most sampleRate calls per second.
type sampler struct {
	sec atomic.Int64
	n   atomic.Int64
}

const sampleRate = 10

func (s *sampler) allow(now int64) bool {
	if s.sec.Load() != now {
		s.sec.Store(now)
		s.n.Store(0)
	}
	return s.n.Add(1) <= sampleRate
}

func (l *Limiter) logRare(now time.Time, msg string, err error) {
	if sec := now.Unix(); l.lastLog.Swap(sec) != sec {
		l.log.Warn(msg, slog.String("error", err.Error()))
	}
}

// appendChecks appends the store checks of res to cs.
func appendChecks(cs []store.Check, res policy.Resolution) []store.Check {
	for _, l := range res.Layers {
		cs = append(cs, store.Check{Key: l.Key, Limit: l.Limit, Cost: res.Cost})
	}
	return cs
}

// checksOf returns the store checks of res.
func checksOf(res policy.Resolution) []store.Check {
	return appendChecks(make([]store.Check, 0, len(res.Layers)), res)
}

// scratch is what one decision's store call needs for up to four layers,
// pooled.
type scratch struct {
	checks    [4]store.Check
	res       store.Result
	decisions [4]algo.Decision
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}
