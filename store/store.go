package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Check is one limit to decide in a batch: take Cost units from Key under
// Limit.
type Check struct {
	// Key names the state. Any bytes; not empty.
	Key string
	// Limit is the limit the key is decided by.
	Limit algo.Limit
	// Cost is the number of units to take, 0 to peek. At most the burst.
	Cost int64
}

// Result is the answer to one batch. Reuse a Result across calls to avoid
// allocating: [Store.Take] overwrites it.
type Result struct {
	// Allowed reports whether the whole batch was admitted and charged.
	Allowed bool
	// Decisions holds one decision per check, in the order of the checks.
	Decisions []algo.Decision
	// Now is the store's clock when it decided (for Redis, the server's
	// TIME; for a batch over several cluster slots, the latest of them).
	Now time.Time
}

// RetryAfter returns how long the caller must wait before the same batch is
// admitted, given no other traffic: zero when allowed, else the longest
// retry-after among the rejecting checks.
func (r *Result) RetryAfter() time.Duration {
	var d time.Duration
	for _, x := range r.Decisions {
		d = max(d, x.RetryAfter)
	}
	return d
}

// Tightest returns the index of the decision closest to exhaustion: a
// rejecting one with the longest retry-after if any, else the one with the
// least remaining: the one the next request exhausts first (ties: the first).
// It returns -1 for an empty result.
func (r *Result) Tightest() int {
	best := -1
	for i, d := range r.Decisions {
		if best < 0 {
			best = i
			continue
		}
		b := r.Decisions[best]
		switch {
		case !d.Allowed && (b.Allowed || d.RetryAfter > b.RetryAfter):
			best = i
		case d.Allowed == b.Allowed && d.Allowed && d.Remaining < b.Remaining:
			best = i
		}
	}
	return best
}

// Store decides batches of checks atomically, settles charges already
// admitted ([Settler]), holds keys ([Holder]) and keeps concurrency slots
// ([Slots]). Implementations are safe for concurrent use.
type Store interface {
	// Take decides checks as one atomic, all-or-nothing step and writes the
	// answer to res. An error means nothing was decided (and, for Redis,
	// nothing stays charged, except as documented in redisstore when a
	// refund after a partial cross-slot failure fails too). Invalid checks
	// give an error wrapping [ErrInvalidCheck] before any I/O.
	Take(ctx context.Context, checks []Check, res *Result) error
	Settler
	Holder
	Slots
	// Close releases the store's resources. It is idempotent.
	Close() error
}

// Errors common to all backends.
var (
	// ErrInvalidCheck means a batch cannot be decided as given: empty,
	// an empty key, an invalid limit, a bad cost, or a duplicate check.
	ErrInvalidCheck = errors.New("store: invalid check")
	// ErrDuplicateCheck means a batch names the same key under the same
	// algorithm twice. It wraps ErrInvalidCheck.
	ErrDuplicateCheck = fmt.Errorf("%w: the same key and algorithm twice in one batch", ErrInvalidCheck)
	// ErrUnavailable means the backend could not decide: unreachable,
	// timed out, or answering errors. The limiter applies the fail mode.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrMoving means the keys of a call were moving between the backend's
	// servers (a Redis Cluster slot migrating) for as long as the call
	// could wait: the backend answers, it is not out. It wraps with
	// ErrUnavailable (the limiter applies the fail mode) but no breaker
	// counts it, and a settlement waits longer for it (guard.SettleMoving).
	ErrMoving = errors.New("store: keys moving between servers")
	// ErrProtocol means the backend answered in a shape it never should:
	// a bug (a script and its parser out of step) or a server that is not
	// what it claims. It is not ErrUnavailable, so that it is never
	// mistaken for an outage: the limiter logs it as an error, counts it in
	// fairgate_store_protocol_errors_total, then applies the fail mode.
	ErrProtocol = errors.New("store: protocol error: the backend's reply has the wrong shape")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store: closed")
)

// MaxBatch is the most checks one batch may hold.
const MaxBatch = 64

// Validate reports whether checks form a batch a store can decide. The
// error wraps [ErrInvalidCheck] and, where it applies, the algo sentinel
// ([algo.ErrInvalidLimit], [algo.ErrCostExceedsBurst], [algo.ErrNegativeCost]).
// It does not allocate when the batch is valid.
func Validate(checks []Check) error {
	if len(checks) == 0 {
		return fmt.Errorf("%w: empty batch", ErrInvalidCheck)
	}
	if len(checks) > MaxBatch {
		return fmt.Errorf("%w: %d checks, at most %d", ErrInvalidCheck, len(checks), MaxBatch)
	}
	for i := range checks {
		c := &checks[i]
		if c.Key == "" {
			return fmt.Errorf("%w: check %d: empty key", ErrInvalidCheck, i)
		}
		if err := c.Limit.Validate(); err != nil {
			return fmt.Errorf("%w: check %d (key %q): %w", ErrInvalidCheck, i, truncate(c.Key), err)
		}
		if err := c.Limit.CheckCost(c.Cost); err != nil {
			return fmt.Errorf("%w: check %d (key %q): %w", ErrInvalidCheck, i, truncate(c.Key), err)
		}
		for j := range i {
			if checks[j].Key == c.Key && checks[j].Limit.Algorithm == c.Limit.Algorithm {
				return fmt.Errorf("%w: checks %d and %d (key %q, %v)", ErrDuplicateCheck, j, i, truncate(c.Key), c.Limit.Algorithm)
			}
		}
	}
	return nil
}

// truncate shortens a key for an error message.
func truncate(key string) string {
	if len(key) > 64 {
		return key[:64] + "…"
	}
	return key
}

// Holder holds a key: makes it admit nothing for a while, as an
// upstream's Retry-After asks (see [algo.Limit.Hold]). Every [Store] is
// one.
type Holder interface {
	// Hold makes key, decided by lim (GCRA only), admit nothing for d
	// from the store's clock and admit a unit cost once d has passed,
	// given no other traffic. It never shortens a longer hold, nor frees
	// capacity the key has already spent; d <= 0 changes nothing. The
	// error wraps [ErrInvalidCheck] for a bad key, limit or duration,
	// [algo.ErrHoldUnsupported] for another algorithm, and [ErrUnavailable]
	// when the backend could not be reached.
	Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error
}

// Local is a Store that decides in this process, without I/O (the memory
// store): a deadline per call would be pure cost, so the limiter sets none
// unless asked.
type Local interface {
	// Local reports whether the store decides in this process.
	Local() bool
}

// Resetter is a Store that can forget a key: an operator's "give this
// tenant a fresh start". Both of fairgate's stores implement it.
type Resetter interface {
	// Reset forgets key's state under every algorithm: the key is full
	// again. A key never seen is no error. The error wraps ErrUnavailable
	// when the backend could not be reached.
	Reset(ctx context.Context, key string) error
}

// ValidateHold reports whether a Hold can be done as asked.
func ValidateHold(key string, lim algo.Limit, d time.Duration) error {
	if key == "" {
		return fmt.Errorf("%w: hold: empty key", ErrInvalidCheck)
	}
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("%w: hold of key %q: %w", ErrInvalidCheck, truncate(key), err)
	}
	if lim.Algorithm != algo.GCRA {
		return fmt.Errorf("%w: hold of key %q: %w, not %v", ErrInvalidCheck, truncate(key), algo.ErrHoldUnsupported, lim.Algorithm)
	}
	if d > algo.MaxPeriod {
		return fmt.Errorf("%w: hold of key %q: %v is longer than %v", ErrInvalidCheck, truncate(key), d, algo.MaxPeriod)
	}
	return nil
}

// Sharded is a Store whose keys fall in independent failure domains: the
// hash slots of a Redis Cluster, of which one lost master takes away only
// its own. A caller that keeps a circuit breaker (package limiter) keeps
// one per domain, so that the keys of the healthy masters are decided as
// usual while one master is out.
type Sharded interface {
	Store
	// Shard returns the failure domain of c's key: the same for keys
	// that always fail together, such as one slot's.
	Shard(c Check) int
}

// Prober is a store served by several servers whose keys fail apart (a
// Redis Cluster's masters). ProbeKeys returns one key on each, as far as
// the store knows them (none yet: nil), so that a caller that probes an
// idle store (package guard) peeks at every server, not at one.
type Prober interface {
	ProbeKeys() []string
}
