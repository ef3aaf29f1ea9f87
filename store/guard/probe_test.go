package guard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// switchable is a memory store that can be taken down (every call then
// fails, as a Redis refusing connections does) and counts the probes
// that reach it.
type switchable struct {
	*memstore.Store
	down   atomic.Bool
	probes atomic.Int64
}

func (s *switchable) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if checks[0].Key == probeCheck[0].Key {
		s.probes.Add(1)
	}
	if s.down.Load() {
		return store.ErrUnavailable
	}
	return s.Store.Take(ctx, checks, res)
}

// Local: not an in-process store, so that the guard uses its breakers.
func (s *switchable) Local() bool { return false }

// TestProbeCadence: Probe sends a probe only when one is due. Idle, once
// in IdleProbe; a store call that succeeded (traffic) stands in for it,
// a failed one does not; after a probe that failed, at every call (Run's
// 250 ms) until 5 failures in a row open the breaker; while the breaker
// is open, once a second (refused by it for the cooldown, so the store
// sees none). The steps give the clock; nothing waits.
func TestProbeCadence(t *testing.T) {
	st := &switchable{Store: memstore.New(memstore.Config{})}
	g, err := New(Config{Store: st, Timeout: time.Second, BreakerCooldown: time.Hour, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	traffic := []store.Check{{Key: "tenant", Limit: algo.PerSecond(100), Cost: 1}}
	ctx := context.Background()
	steps := []struct {
		at     time.Duration
		do     string // "probe", "traffic", "down"
		probes int64  // probes that reached the store after the step
		up     bool   // Guard.Up after the step
	}{
		{0, "probe", 1, true}, // nothing proven yet
		{time.Second, "probe", 1, true},
		{9 * time.Second, "traffic", 1, true},
		{10 * time.Second, "probe", 1, true},   // 1 s after the traffic
		{18 * time.Second, "probe", 1, true},   // 9 s after it
		{19 * time.Second, "probe", 2, true},   // 10 s: due
		{20 * time.Second, "down", 2, true},    // the store goes away
		{22 * time.Second, "traffic", 2, true}, // a failed call proves nothing
		{28 * time.Second, "probe", 2, true},   // 9 s since the last proof
		{29 * time.Second, "probe", 3, true},   // due: fails
		{29250 * time.Millisecond, "probe", 4, true},
		{29500 * time.Millisecond, "probe", 5, true},
		{29750 * time.Millisecond, "probe", 6, false}, // 5 in a row, with the traffic's: open
		{30 * time.Second, "probe", 6, false},         // refused by the breaker: never sent
		{30500 * time.Millisecond, "probe", 6, false},
		{31 * time.Second, "probe", 6, false},
	}
	var res store.Result
	for i, s := range steps {
		now := t0.Add(s.at)
		switch s.do {
		case "probe":
			g.Probe(ctx, now)
		case "traffic":
			g.Call(ctx, now, traffic, &res)
		case "down":
			st.down.Store(true)
		}
		if got := st.probes.Load(); got != s.probes || g.Up() != s.up {
			t.Fatalf("step %d: %s at +%v: %d probes sent, up %v; want %d, %v", i, s.do, s.at, got, g.Up(), s.probes, s.up)
		}
	}
}
