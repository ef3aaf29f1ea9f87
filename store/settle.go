package store

import (
	"context"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Settler settles charges already admitted: a request whose true cost is
// known only when its answer ends (tokens, rows, bytes) was taken at an
// estimate, and the difference is charged or refunded on the same keys
// afterwards. Every [Store] is one.
type Settler interface {
	// Settle applies adjs, the adjustments of settlement id, as one atomic
	// step per failure domain (one for the memory store and a standalone
	// Redis; one per hash slot on Redis Cluster), and writes the answer to
	// res. Each adjustment is applied with [algo.Limit.Settle] at the
	// store's clock.
	//
	// It applies each domain's part exactly once per id: the store records
	// id in the same atomic step, for [SettleIDLifetime], and a call with an
	// id it holds applies nothing there and reports the adjustments
	// Repeated. So a caller that gets an error (a timeout: the settlement
	// may or may not have run) retries with the same id and the same
	// adjustments, within the lifetime, and each part is applied once. An
	// id names one settlement: reusing it for other adjustments applies
	// nothing in the domains it was applied in.
	//
	// The error wraps [ErrInvalidCheck] for a bad call (before any I/O),
	// and [ErrUnavailable] when a domain could not be reached: the parts
	// of the others were applied (and recorded) all the same.
	Settle(ctx context.Context, id string, adjs []Adjustment, res *SettleResult) error
}

// UnrecordedSettler is a [Settler] that can also apply a settlement
// without recording its id: an in-process store, whose call never fails
// after it applied, so that a caller that makes each settlement at most
// once itself (it holds the settlement, and repeats only a call that
// failed) needs no record of it. The memory store is one; Redis is not (a
// call that timed out may have run, and only the id record makes its
// retry safe).
//
// It keeps the id table, bounded as it must be, for the settlements that
// need it: those a client can replay (the HTTP API's handles). The
// in-process fronts (the proxy, the middleware, the Go API, Envoy's
// stream-done charges) settle unrecorded, so no number of their
// settlements can fill the table and refuse another tenant's.
type UnrecordedSettler interface {
	// SettleUnrecorded applies adjs as Settle does, as one atomic step,
	// without an id: each call applies.
	SettleUnrecorded(ctx context.Context, adjs []Adjustment, res *SettleResult) error
}

// Adjustment is one key's part of a settlement: the take on Key under
// Limit is to be charged Delta units more (or, negative, fewer).
type Adjustment struct {
	// Key names the state, as the take's [Check] did.
	Key string
	// Limit is the limit the key was taken under.
	Limit algo.Limit
	// Delta is the true cost minus the cost taken: positive charges more
	// (and may put the key in debt, at most one burst), negative refunds
	// (at most what makes the key full). Between -algo.MaxCount and
	// algo.MaxCount; zero applies nothing (the id is recorded all the same).
	Delta int64
	// TakenAt is when the take being settled was decided: the take's
	// [Result.Now]. The window algorithms refund only a take of the
	// window in force (sliding window: or the one before; sliding log:
	// the entries logged since TakenAt). Required for a refund under a
	// window algorithm; GCRA and token bucket do not read it.
	TakenAt time.Time
}

// TakenUs is TakenAt in µs since the epoch; 0 for a time before it (the
// zero time).
func (a *Adjustment) TakenUs() int64 { return max(0, a.TakenAt.UnixMicro()) }

// SettleResult is the answer to one Settle. Reuse one across calls to
// avoid allocating: [Settler.Settle] overwrites it.
type SettleResult struct {
	// Settled holds one answer per adjustment, in the order given.
	Settled []Settled
	// Now is the store's clock when it settled (for a settlement over
	// several cluster slots, the latest of them).
	Now time.Time
}

// Settled is the answer for one adjustment.
type Settled struct {
	// Applied is the units this call moved: the Delta asked, cut by the
	// debt bound or at full (see [algo.Limit.Settle]); zero when Repeated.
	Applied int64
	// Remaining is the key's capacity after, signed: negative is a debt.
	Remaining int64
	// ResetAfter is the time until the key is full again.
	ResetAfter time.Duration
	// Repeated reports that the settlement id had been applied in this
	// adjustment's failure domain already: nothing was applied now, and
	// Remaining and ResetAfter are the key's as it stands.
	Repeated bool
}

// Bounds of a settlement.
const (
	// MaxSettleID is the longest settlement id, in bytes. Ids are chosen
	// by fairgate (one per settled request), never by a client.
	MaxSettleID = 64
	// SettleIDLifetime is how long a store remembers a settlement id: the
	// window within which a retry with the same id applies nothing
	// twice. A retry later than this applies again. Each id costs, for
	// that long, one Redis key per slot the settlement touches (about 130
	// bytes of Redis memory with a 31-byte id), or an entry of the memory
	// store's bounded id table (about 85 bytes); see bench/RESULTS.md. At
	// 1,000 settlements a second that is about 16 MB of Redis.
	SettleIDLifetime = 2 * time.Minute
)

// ValidateSettle reports whether a Settle can be done as asked. The error
// wraps [ErrInvalidCheck] and, where it applies, [algo.ErrInvalidLimit] or
// [ErrDuplicateCheck].
func ValidateSettle(id string, adjs []Adjustment) error {
	if id == "" || len(id) > MaxSettleID {
		return fmt.Errorf("%w: settlement id of %d bytes: want 1 to %d", ErrInvalidCheck, len(id), MaxSettleID)
	}
	return ValidateAdjustments(adjs)
}

// ValidateAdjustments is [ValidateSettle] without the id: what
// [UnrecordedSettler.SettleUnrecorded] checks.
func ValidateAdjustments(adjs []Adjustment) error {
	switch {
	case len(adjs) == 0 || len(adjs) > MaxBatch:
		return fmt.Errorf("%w: %d adjustments in one settlement: want 1 to %d", ErrInvalidCheck, len(adjs), MaxBatch)
	}
	for i := range adjs {
		a := &adjs[i]
		switch {
		case a.Key == "":
			return fmt.Errorf("%w: adjustment %d: empty key", ErrInvalidCheck, i)
		case a.Delta < -algo.MaxCount || a.Delta > algo.MaxCount:
			return fmt.Errorf("%w: adjustment %d (key %q): delta %d is outside ±%d", ErrInvalidCheck, i, truncate(a.Key), a.Delta, algo.MaxCount)
		case a.Delta < 0 && a.Limit.Algorithm.Windowed() && a.TakenAt.IsZero():
			return fmt.Errorf("%w: adjustment %d (key %q): a refund under %v needs the take's time (TakenAt, the take's Result.Now)", ErrInvalidCheck, i, truncate(a.Key), a.Limit.Algorithm)
		}
		if err := a.Limit.Validate(); err != nil {
			return fmt.Errorf("%w: adjustment %d (key %q): %w", ErrInvalidCheck, i, truncate(a.Key), err)
		}
		for j := range i {
			if adjs[j].Key == a.Key && adjs[j].Limit.Algorithm == a.Limit.Algorithm {
				return fmt.Errorf("%w: adjustments %d and %d (key %q, %v)", ErrDuplicateCheck, j, i, truncate(a.Key), a.Limit.Algorithm)
			}
		}
	}
	return nil
}

// Checks returns the checks that name adjs' keys and limits (cost 0): what
// a caller that keeps breakers per failure domain ([Sharded.Shard]) looks
// up a settlement's domains with.
func Checks(adjs []Adjustment) []Check {
	cs := make([]Check, len(adjs))
	for i, a := range adjs {
		cs[i] = Check{Key: a.Key, Limit: a.Limit}
	}
	return cs
}

// NewSettled converts an [algo.Settlement] to the answer for one
// adjustment.
func NewSettled(s algo.Settlement, repeated bool) Settled {
	return Settled{Applied: s.Applied, Remaining: s.Remaining, ResetAfter: time.Duration(s.ResetUs) * time.Microsecond, Repeated: repeated}
}
