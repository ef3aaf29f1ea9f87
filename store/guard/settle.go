package guard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fairgate/fairgate/store"
)

// Bounds of [Guard.Settle]'s retries.
const (
	// SettleAttempts is how many store calls Settle makes for one
	// settlement at most: the first and two retries.
	SettleAttempts = 3
	// SettleBackoff is the wait before the first retry; each later one
	// waits twice the one before.
	SettleBackoff = 50 * time.Millisecond
	// SettleMoving is how long a settlement goes on trying while its keys'
	// slot migrates (store.ErrMoving: a Redis Cluster resharding, during
	// which a settlement's new id record cannot be written until the
	// slot's last key has moved), past SettleAttempts, a try every
	// SettleBackoff × 4; at most settleMovingMax settlements of a guard
	// wait so at once (the others fail as before).
	SettleMoving    = 30 * time.Second
	settleMovingMax = 1024
)

// Settle applies settlement id's adjustments (see [store.Settler]) under
// the deadline and through the breakers of their failure domains, as
// [Guard.Call] makes a take, and retries it with the same id when the
// store is unavailable or the call timed out, up to SettleAttempts calls
// in all with SettleBackoff doubling between them: the store applies each
// domain's part once whatever the retries (its id record), so a call that
// timed out after it ran costs nothing twice. It goes on when ctx ends
// (the settlement of an answer whose client went away is due all the
// same); its whole time is bounded by the attempts, each within the store
// deadline, well within store.SettleIDLifetime.
//
// Each settlement is counted once in fairgate_settlements_total, by
// result: applied (the store answered; a retry that found the id applied
// counts as applied) or failed (invalid, a protocol error, or unavailable
// after the last attempt); every retry in fairgate_settlement_retries_total;
// units a charge could not apply (the debt bound) in
// fairgate_settlement_unapplied_units_total. A failed settlement is logged
// with its id and the error, at most once a second, with the count of
// those failed since the last line. The error is the last call's: the
// caller reports it, the settlement is not to be applied by other means.
func (g *Guard) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	return g.settle(ctx, true, id, adjs, res)
}

// SettleOnce is Settle for a settlement that no client can replay and
// that its caller makes once (it holds the settlement, as the proxy, the
// middleware, the Go API and Envoy's stream-done charges do; an HTTP
// handle is not such a settlement): on an in-process store
// ([store.UnrecordedSettler]) it is applied without recording id, so that
// these settlements never fill the store's bounded id table, whose room
// the replayable ones need; on any other store it is Settle, the id
// making the retries of a call that timed out apply once.
func (g *Guard) SettleOnce(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	_, ok := g.store.(store.UnrecordedSettler)
	return g.settle(ctx, !ok, id, adjs, res)
}

// settle is Settle; recorded false applies through
// store.UnrecordedSettler.
func (g *Guard) settle(ctx context.Context, recorded bool, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateSettle(id, adjs); err != nil {
		g.settleFailed(id, err)
		return err
	}
	ctx = context.WithoutCancel(ctx)
	checks := store.Checks(adjs)
	var err error
	wait := SettleBackoff
	for attempt := range SettleAttempts {
		if attempt > 0 {
			g.m.settleRetries.Inc()
			time.Sleep(wait)
			wait *= 2
		}
		err = g.settleCall(ctx, checks, recorded, id, adjs, res)
		if err == nil || !retryable(err) {
			break
		}
	}
	if errors.Is(err, store.ErrMoving) && g.settleMoving.Add(1) <= settleMovingMax {
		// Its slot is migrating: wait the move out, rather than lose a
		// charge that may be owed (its id keeps the retries from applying
		// twice).
		until := time.Now().Add(SettleMoving)
		for errors.Is(err, store.ErrMoving) && time.Now().Before(until) {
			g.m.settleRetries.Inc()
			time.Sleep(4 * SettleBackoff)
			err = g.settleCall(ctx, checks, recorded, id, adjs, res)
		}
		g.settleMoving.Add(-1)
	} else if errors.Is(err, store.ErrMoving) {
		g.settleMoving.Add(-1)
	}
	if err != nil {
		g.settleFailed(id, err)
		return err
	}
	g.m.settlements.WithLabelValues("applied").Inc()
	var unapplied int64
	for i, s := range res.Settled {
		if d := adjs[i].Delta; d > 0 && !s.Repeated {
			unapplied += d - s.Applied
		}
	}
	if unapplied > 0 {
		g.m.settleUnapplied.Add(float64(unapplied))
	}
	return nil
}

// settleCall is one store call of a settlement.
func (g *Guard) settleCall(ctx context.Context, checks []store.Check, recorded bool, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	sctx, cancel := g.storeContext(ctx)
	defer cancel()
	start := time.Now()
	err := g.breaker(checks, func() error {
		if !recorded {
			return g.store.(store.UnrecordedSettler).SettleUnrecorded(sctx, adjs, res)
		}
		return g.store.Settle(sctx, id, adjs, res)
	})
	if !refused(err) {
		g.observeStore(sctx, time.Since(start).Seconds())
	}
	if err != nil && !errors.Is(err, store.ErrInvalidCheck) {
		g.m.storeErrors.Inc()
		if errors.Is(err, store.ErrProtocol) {
			g.m.protoErrors.Inc()
		}
	}
	return err
}

// retryable reports whether a settlement call that failed with err may
// be tried again: the store was out or slow. An invalid call or a reply
// of the wrong shape would fail the same way again.
func retryable(err error) bool {
	if errors.Is(err, store.ErrInvalidCheck) || errors.Is(err, store.ErrProtocol) {
		return false
	}
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// settleFailed counts and logs a settlement that failed for good.
func (g *Guard) settleFailed(id string, err error) {
	g.m.settlements.WithLabelValues("failed").Inc()
	n := g.settleFailures.Add(1)
	if sec := g.now().Unix(); g.lastSettleLog.Swap(sec) != sec {
		g.settleFailures.Add(-n)
		g.log.Error("settlement failed: its charge or refund is not applied",
			slog.String("settlement_id", id), slog.Int64("failed_since_last_log", n), slog.String("error", err.Error()))
	}
}
