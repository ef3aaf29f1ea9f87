package guard

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// TestTakeOutcomes: the one fail-mode switch, as a direct Take sees it: a
// store that answers decides; one that is out is unavailable for fail
// closed, and for fail open decided by the fallback at the instance's
// share (2 instances, headroom 1: half of each limit), or admitted in
// full without a fallback. Invalid checks are an error, never an outcome.
func TestTakeOutcomes(t *testing.T) {
	lim := algo.Limit{Limit: 10, Period: time.Minute, Burst: 10}
	checks := []store.Check{{Key: "k", Limit: lim, Cost: 1}}
	cases := []struct {
		name      string
		st        store.Store
		fallback  store.Store
		fail      policy.FailMode
		want      Outcome
		remaining int64 // after the first take
	}{
		{"up", memstore.New(memstore.Config{}), nil, policy.FailClosed, Decided, 9},
		{"down, closed", storetest.Down{}, memstore.New(memstore.Config{}), policy.FailClosed, Unavailable, -1},
		{"down, open, fallback", storetest.Down{}, memstore.New(memstore.Config{}), policy.FailOpen, Degraded, 4},
		{"down, open, no fallback", storetest.Down{}, nil, policy.FailOpen, Degraded, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := New(Config{Store: c.st, Fallback: c.fallback, Instances: 2, FallbackHeadroom: 1, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			var res store.Result
			o, err := g.Take(context.Background(), checks, c.fail, &res)
			if err != nil || o != c.want {
				t.Fatalf("Take = %v, %v; want %v", o, err, c.want)
			}
			if c.remaining >= 0 && (!res.Allowed || len(res.Decisions) != 1 || res.Decisions[0].Remaining != c.remaining) {
				t.Fatalf("Take = %+v, want allowed with %d remaining", res, c.remaining)
			}
			if _, err := g.Take(context.Background(), []store.Check{{Key: "k", Limit: lim, Cost: 11}}, c.fail, &res); !errors.Is(err, store.ErrInvalidCheck) {
				t.Fatalf("a cost over the burst: %v, want ErrInvalidCheck", err)
			}
		})
	}
}

// holdCounter is a store that is out and counts the holds that reach it.
type holdCounter struct {
	storetest.Down
	holds atomic.Int64
}

func (h *holdCounter) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	h.holds.Add(1)
	return h.Down.Hold(ctx, key, lim, d)
}

// TestHoldGoesThroughTheBreaker: a hold is a store call like a take, so
// once the store has failed enough the breaker refuses holds without
// sending them (quota's pauses, during an outage).
func TestHoldGoesThroughTheBreaker(t *testing.T) {
	st := &holdCounter{}
	g, err := New(Config{Store: st, Timeout: time.Second, NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for range 50 {
		last = g.Hold(context.Background(), "k", algo.Limit{Limit: 1, Period: time.Second}, time.Second)
	}
	if n := st.holds.Load(); n >= 50 || !errors.Is(last, store.ErrUnavailable) || !strings.Contains(last.Error(), "breaker open") {
		t.Errorf("50 holds on a store that is out: %d reached it, last error %v; want the breaker to refuse the rest", n, last)
	}
}

// TestCallerCancelIsNoStoreFailure: a call whose caller gave up (a daemon
// stopping, a client gone) is not a store failure: it is neither logged
// nor counted, and Probe makes no call once its context is done (a failed
// start logged a stray "store call failed: context canceled").
func TestCallerCancelIsNoStoreFailure(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second} {
		var logs strings.Builder
		reg := prometheus.NewRegistry()
		g, err := New(Config{Store: memstore.New(memstore.Config{}), Timeout: timeout, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		g.Probe(ctx, time.Now())
		var res store.Result
		if err := g.Call(ctx, time.Now(), []store.Check{{Key: "k", Limit: algo.Limit{Limit: 1, Period: time.Second, Burst: 1}, Cost: 1}}, &res); !errors.Is(err, context.Canceled) {
			t.Errorf("timeout %v: Call on a canceled context = %v, want context.Canceled", timeout, err)
		}
		if logs.Len() > 0 {
			t.Errorf("timeout %v: logged %q, want nothing", timeout, logs.String())
		}
		if n := testutil.ToFloat64(g.m.storeErrors); n != 0 {
			t.Errorf("timeout %v: %v store errors counted, want 0", timeout, n)
		}
	}
}
