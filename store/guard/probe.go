package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// IdleProbe is how long the guard goes without a store call that
// succeeded before it probes the store: traffic that reaches the store
// proves it answers and stands in for the probe, and an idle instance
// probes once in IdleProbe. A Redis that goes away (refusing
// connections, or answering errors) is seen without traffic within about
// IdleProbe + 1.25 s: the first probe that fails is followed by one every
// probeTick until 5 in a row open the breaker.
const IdleProbe = 10 * time.Second

const (
	// probeTick is how often Run looks whether a probe is due, and the
	// pace of the probes after one failed.
	probeTick = 250 * time.Millisecond
	// probeOutEvery is the pace of the probes while a breaker is not
	// closed: its recovery is seen within it of the cooldown's end.
	probeOutEvery = time.Second
	// answeredGrain is how stale the time of the last store call that
	// succeeded may be: decisions write it at most once per grain, so that
	// the hot path mostly reads it.
	answeredGrain = 100 * time.Millisecond
)

// probeCheck is the peek Probe sends through the breaker, so that an
// outage (and the recovery) is seen without traffic.
var probeCheck = []store.Check{{Key: "fg:probe", Limit: algo.Limit{Limit: 1, Period: time.Second}}}

// probeState is what decides when a probe is due.
type probeState struct {
	// lastOK is when a store call last succeeded (Unix ns, from the
	// callers' clock), to within answeredGrain.
	lastOK atomic.Int64

	mu     sync.Mutex // one probe at a time
	last   time.Time  // when the last probe was sent
	failed bool       // the last probe failed
	next   int        // which server a store.Prober's next probe peeks at
}

// answered notes a store call that succeeded at now.
func (p *probeState) answered(now time.Time) {
	if n := now.UnixNano(); n-p.lastOK.Load() >= int64(answeredGrain) {
		p.lastOK.Store(n)
	}
}

// Probe probes the store if a probe is due: a peek at one key through the
// breaker (for a [store.Prober], a Redis Cluster, a key on each of its
// servers in turn, so that an idle instance costs the store one call per
// probe however many masters there are, and looks at each within
// servers × IdleProbe), and at a key of each failure domain whose breaker
// is not closed, so that an outage and its recovery are seen without traffic. A
// probe is due when no store call has succeeded for [IdleProbe] (traffic
// stands in for it), 250 ms after a probe that failed, and every second
// while a breaker is not closed. Call it every 250 ms or so, as
// [Guard.Run] does.
func (g *Guard) Probe(ctx context.Context, now time.Time) {
	if ctx.Err() != nil {
		return // stopping: nothing to learn
	}
	p := &g.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	if !g.probeDue(now) {
		return
	}
	p.last = now
	var res store.Result
	check := probeCheck
	if pr, ok := g.store.(store.Prober); ok { // a key on each server in turn (a Cluster's masters)
		if keys := pr.ProbeKeys(); len(keys) > 0 {
			check = []store.Check{{Key: keys[p.next%len(keys)], Limit: probeCheck[0].Limit}}
		}
	}
	err := g.Call(ctx, now, check, &res)
	p.failed = err != nil && ctx.Err() == nil
	if !p.failed {
		p.next++ // a failed server is probed again until its breaker opens
	}
	for _, c := range g.cb.toProbe() {
		_ = g.Call(ctx, now, []store.Check{c}, &res)
	}
}

// probeDue reports whether a probe is due at now (see Probe); p.mu held.
func (g *Guard) probeDue(now time.Time) bool {
	p := &g.probe
	switch {
	case !g.cb.allClosed():
		return now.Sub(p.last) >= probeOutEvery
	case p.failed:
		return true
	}
	return now.UnixNano()-p.lastOK.Load() >= int64(IdleProbe)
}

// Run probes the store whenever a probe is due (see [Guard.Probe]),
// looking every 250 ms, until ctx ends; a limiter's Run runs it for the
// limiter's guard. It returns nil when ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(probeTick)
	defer t.Stop()
	for {
		g.Probe(ctx, g.now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
