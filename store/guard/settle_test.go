package guard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// lossy is a store whose first fails settlements run and then fail as a
// timeout does: applied, but the caller never hears so.
type lossy struct {
	*memstore.Store
	fails atomic.Int64
	calls atomic.Int64
}

func (l *lossy) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	l.calls.Add(1)
	err := l.Store.Settle(ctx, id, adjs, res)
	if err == nil && l.fails.Add(-1) >= 0 {
		return store.ErrUnavailable
	}
	return err
}

// Local hides the memory store's Local, so that the guard treats it as a
// remote store: breakers and deadlines.
func (l *lossy) Local() bool { return false }

// TestSettleRetriesOnce: a settlement whose calls time out after they ran
// is retried with the same id and applied exactly once; one whose store
// stays out fails after SettleAttempts calls, is counted and logged (its
// first call ran, so the refund is applied once all the same); an invalid
// one is not sent.
func TestSettleRetriesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := algo.Limit{Limit: 100, Period: time.Hour}
		var logs bytes.Buffer
		for _, tc := range []struct {
			name                     string
			fails                    int64
			wantErr                  error
			calls, applied, failed   int64
			retries, remaining       int64
			wantRepeated, wantLogged bool
		}{
			{name: "answers", fails: 0, calls: 1, applied: 1, remaining: 93},
			{name: "times out once after applying", fails: 1, calls: 2, applied: 1, retries: 1, remaining: 93, wantRepeated: true},
			{name: "times out twice", fails: 2, calls: 3, applied: 1, retries: 2, remaining: 93, wantRepeated: true},
			{name: "stays out", fails: 10, wantErr: store.ErrUnavailable, calls: SettleAttempts, failed: 1, retries: SettleAttempts - 1, remaining: 93, wantLogged: true},
		} {
			st := &lossy{Store: memstore.New(memstore.Config{})}
			st.fails.Store(tc.fails)
			logs.Reset()
			g, err := New(Config{Store: st, Timeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			var res store.Result
			if err := st.Take(context.Background(), []store.Check{{Key: "k", Limit: lim, Cost: 10}}, &res); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the client went away: the settlement is due all the same
			start := time.Now()
			var sres store.SettleResult
			err = g.Settle(ctx, "id-1", []store.Adjustment{{Key: "k", Limit: lim, Delta: -3}}, &sres)
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("%s: Settle = %v, want %v", tc.name, err, tc.wantErr)
			}
			if took := time.Since(start); took > 2*SettleBackoff*SettleAttempts {
				t.Errorf("%s: Settle took %v", tc.name, took)
			}
			if err == nil && sres.Settled[0].Repeated != tc.wantRepeated {
				t.Errorf("%s: settled %+v, want repeated %v", tc.name, sres.Settled[0], tc.wantRepeated)
			}
			s := g.Stats()
			if st.calls.Load() != tc.calls || s.SettlementsApplied != tc.applied || s.SettlementsFailed != tc.failed || s.SettlementRetries != tc.retries {
				t.Errorf("%s: %d calls, stats %+v; want %d calls, %d applied, %d failed, %d retries", tc.name, st.calls.Load(), s, tc.calls, tc.applied, tc.failed, tc.retries)
			}
			if err := st.Take(context.Background(), []store.Check{{Key: "k", Limit: lim}}, &res); err != nil || res.Decisions[0].Remaining != tc.remaining {
				t.Errorf("%s: remaining %d after the settlement, want %d (applied exactly once)", tc.name, res.Decisions[0].Remaining, tc.remaining)
			}
			if logged := strings.Contains(logs.String(), "settlement failed") && strings.Contains(logs.String(), "settlement_id=id-1"); logged != tc.wantLogged {
				t.Errorf("%s: logged %v, want %v: %s", tc.name, logged, tc.wantLogged, logs.String())
			}
		}
		st := &lossy{Store: memstore.New(memstore.Config{})}
		g, _ := New(Config{Store: st, Timeout: time.Second})
		var sres store.SettleResult
		err := g.Settle(context.Background(), "", []store.Adjustment{{Key: "k", Limit: lim, Delta: 1}}, &sres)
		if !errors.Is(err, store.ErrInvalidCheck) || st.calls.Load() != 0 || g.Stats().SettlementsFailed != 1 {
			t.Errorf("invalid settlement: %v, %d calls, %+v; want ErrInvalidCheck, no call, counted failed", err, st.calls.Load(), g.Stats())
		}
	})
}

// TestSettleCountsUnapplied: units a charge could not apply (the debt
// bound) are counted.
func TestSettleCountsUnapplied(t *testing.T) {
	g, err := New(Config{Store: memstore.New(memstore.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Limit: 10, Period: time.Hour}
	var sres store.SettleResult
	if err := g.Settle(context.Background(), "x", []store.Adjustment{{Key: "k", Limit: lim, Delta: 25}}, &sres); err != nil {
		t.Fatal(err)
	}
	if got := sres.Settled[0]; got.Applied != 20 || got.Remaining != -10 {
		t.Fatalf("settle +25 on a fresh key with burst 10 = %+v, want 20 applied, remaining -10", got)
	}
	if s := g.Stats(); s.SettlementUnappliedUnits != 5 || s.SettlementsApplied != 1 {
		t.Fatalf("stats %+v, want 5 unapplied units in 1 applied settlement", s)
	}
}

// TestSettleBoundWithinIDLifetime: the longest Settle (every attempt at
// its deadline, every backoff) ends well within the time a store
// remembers the id, so that no retry of it can apply twice.
func TestSettleBoundWithinIDLifetime(t *testing.T) {
	const deadline = 10 * time.Second // far above any configured store timeout
	longest := time.Duration(SettleAttempts) * deadline
	for i, w := 1, SettleBackoff; i < SettleAttempts; i, w = i+1, 2*w {
		longest += w
	}
	if longest*2 > store.SettleIDLifetime {
		t.Fatalf("Settle may take %v, over half the id lifetime %v", longest, store.SettleIDLifetime)
	}
}
