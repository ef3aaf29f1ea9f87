package guard

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/fairgate/fairgate/store"
)

// breakers are the store's circuit breakers: one per failure domain of a
// store.Sharded (a Redis Cluster slot), else one. A lost cluster master
// opens the breakers of its own slots only; the other masters' keys are
// decided by the store as usual. Each breaker opens after 5 failures in a
// row that are not timeouts (the store refused, closed, or answered an
// error), or when half of at least 20 calls in 10 s failed, timeouts
// included; it stays open for the cooldown, then lets one probe through.
//
// Timeouts count only toward the ratio because under CPU contention a
// call can pass its deadline while the store is healthy: the reply waits
// for this process to be scheduled. Measured on 2 cores with /v1/check at
// 1,024 connections (bench/RESULTS.md), about 0.8% of calls passed the
// 50 ms deadline, some in runs of 5; the breaker opened and the fallback
// decided every request for 2 s at a time. A store that is really down
// either refuses at once (5 in a row) or times out most calls (the ratio).
type breakers struct {
	sharded  store.Sharded // nil: one domain
	cooldown time.Duration
	onChange func(shard int, from, to gobreaker.State)

	m      sync.Map // int -> *domain: read on every call, without a lock
	mu     sync.Mutex
	probes map[int]store.Check // a key of each domain that failed, to probe it with

	notClosed atomic.Int64 // breakers open or half-open
}

// domain is one failure domain's breaker and its run of failures that
// were not timeouts.
type domain struct {
	cb   *gobreaker.TwoStepCircuitBreaker[struct{}]
	hard atomic.Int32
}

// note counts err in d's run of hard failures: a success ends it, a
// timeout leaves it as it is. Called before the breaker hears of err.
func (d *domain) note(err error) {
	switch {
	case err == nil:
		d.hard.Store(0)
	case excluded(err), errors.Is(err, context.DeadlineExceeded):
	default:
		d.hard.Add(1)
	}
}

// excluded reports whether err says nothing about the store: a caller that
// went away, a batch that is invalid, or a call not made.
func excluded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, store.ErrInvalidCheck) || errors.Is(err, errAborted) ||
		errors.Is(err, store.ErrMoving) // a slot migrating: the store answers
}

// errAborted is what a domain's breaker is told when its call did not
// happen (another domain of the batch refused): excluded, not a failure.
var errAborted = errors.New("guard: call not made")

func newBreakers(st store.Store, cooldown time.Duration, onChange func(shard int, from, to gobreaker.State)) *breakers {
	b := &breakers{cooldown: cooldown, onChange: onChange, probes: map[int]store.Check{}}
	b.sharded, _ = st.(store.Sharded)
	return b
}

func (b *breakers) get(shard int) *domain {
	if d, ok := b.m.Load(shard); ok {
		return d.(*domain)
	}
	d := &domain{}
	d.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests: 1, // one probe at a time while half-open
		Interval:    10 * time.Second,
		Timeout:     b.cooldown,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			return d.hard.Load() >= 5 || n.Requests >= 20 && 2*n.TotalFailures >= n.Requests
		},
		IsExcluded: excluded,
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch {
			case from == gobreaker.StateClosed:
				b.notClosed.Add(1)
			case to == gobreaker.StateClosed:
				b.notClosed.Add(-1)
			}
			b.onChange(shard, from, to)
		},
	})
	actual, _ := b.m.LoadOrStore(shard, d) // a racing caller's breaker wins
	return actual.(*domain)
}

// shards returns the failure domains of checks, without repeats.
func (b *breakers) shards(checks []store.Check, buf []int) []int {
	if b.sharded == nil {
		return append(buf, 0)
	}
	for _, c := range checks {
		if s := b.sharded.Shard(c); !slices.Contains(buf, s) {
			buf = append(buf, s)
		}
	}
	return buf
}

// call runs f through the breakers of checks' domains: refused at once
// (gobreaker.ErrOpenState or ErrTooManyRequests) when any is open, and
// f's error counted against each.
func (b *breakers) call(checks []store.Check, f func() error) error {
	var buf [4]int
	shards := b.shards(checks, buf[:0])
	var dbuf [4]func(error)
	var domBuf [4]*domain
	dones, doms := dbuf[:0], domBuf[:0]
	for _, s := range shards {
		d := b.get(s)
		done, err := d.cb.Allow()
		if err != nil {
			for _, done := range dones {
				done(errAborted)
			}
			return err
		}
		dones, doms = append(dones, done), append(doms, d)
	}
	err := f()
	for i, done := range dones {
		doms[i].note(err)
		done(err)
	}
	if err != nil && b.sharded != nil && !errors.Is(err, context.Canceled) {
		b.mu.Lock()
		for _, c := range checks {
			if s := b.sharded.Shard(c); b.probes[s].Key == "" {
				b.probes[s] = store.Check{Key: c.Key, Limit: c.Limit} // a peek
			}
		}
		b.mu.Unlock()
	}
	return err
}

// toProbe returns a peek for each domain whose breaker is not closed, so
// that Probe finds its recovery without traffic; a closed domain's is
// forgotten.
func (b *breakers) toProbe() []store.Check {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []store.Check
	for s, c := range b.probes {
		if cb, ok := b.m.Load(s); !ok || cb.(*domain).cb.State() == gobreaker.StateClosed {
			delete(b.probes, s)
			continue
		}
		out = append(out, c)
	}
	return out
}

// allClosed reports whether every domain's breaker is closed.
func (b *breakers) allClosed() bool { return b.notClosed.Load() == 0 }

// logChange is the guard's breaker log and metric.
func (g *Guard) logChange(shard int, from, to gobreaker.State) {
	g.m.breaker.Set(float64(max(to, g.worstBreaker())))
	switch to {
	case gobreaker.StateOpen:
		g.log.Error("store out: breaker open, deciding by fail mode", slog.Int("shard", shard), slog.String("from", from.String()))
	case gobreaker.StateClosed:
		g.log.Info("store recovered: breaker closed", slog.Int("shard", shard))
	}
}

// worstBreaker is closed (0) when every breaker is, else open (2).
func (g *Guard) worstBreaker() gobreaker.State {
	if g.cb == nil || g.cb.allClosed() {
		return gobreaker.StateClosed
	}
	return gobreaker.StateOpen
}
