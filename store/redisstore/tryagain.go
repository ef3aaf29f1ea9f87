package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/store"
)

// A slot migration (Redis Cluster resharding: the slot IMPORTING on its
// new master and MIGRATING on its old one while MIGRATE moves its keys a
// few at a time) answers a script call of the slot in one of three ways
// besides running it. MOVED and ASK the client follows itself: rueidis
// sends the call where it is told, with ASKING before it after an ASK,
// and when the new master answers NOSCRIPT, Lua.Exec sends the script's
// text (EVAL), redirected the same way. TRYAGAIN it passes on: at once
// for a script not marked retryable (a refund, concurrency slots), after
// its retry rule for the others (retryDelay: 3 tries within 6 ms).
// Redis answers TRYAGAIN to a call of several keys (a batch, a merged
// call, a settlement with its id record, a refund, two concurrency slot
// keys) unless they are all on the old master or all on the new one; for
// a key not yet written, that lasts until the slot's last key has moved.
// Nothing ran, so the store tries again, paced by tryAgain, within the
// call's deadline and tryAgainWait.

// tryAgainWait bounds how long a call waits out TRYAGAIN replies when its
// context allows longer, or has no deadline.
const tryAgainWait = time.Second

// tryAgain paces the tries of a call that Redis answered TRYAGAIN: 1 ms
// apart, then twice as long each time up to 8 ms. The zero value is ready.
type tryAgain struct {
	until time.Time // the last moment to try: the deadline or tryAgainWait
	wait  time.Duration
}

// next waits before the next try and reports whether to make it: false,
// at once, when the wait would end past ctx's deadline or tryAgainWait
// after the first TRYAGAIN, or when ctx ends meanwhile.
func (ta *tryAgain) next(ctx context.Context) bool {
	now := time.Now()
	if ta.wait == 0 {
		ta.until, ta.wait = now.Add(tryAgainWait), time.Millisecond
		if d, ok := ctx.Deadline(); ok && d.Before(ta.until) {
			ta.until = d
		}
	} else {
		ta.wait = min(2*ta.wait, 8*time.Millisecond)
	}
	if now.Add(ta.wait).After(ta.until) {
		return false
	}
	t := time.NewTimer(ta.wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// isTryAgain reports whether err is Redis's TRYAGAIN reply.
func isTryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsTryAgain()
}

// migrating is the error of a call whose TRYAGAIN replies (err is the
// last) outlasted its deadline: store.ErrMoving, which no breaker counts
// (the store answers; a slot is moving), and a timeout (or ctx's
// cancellation, when that ended it).
func migrating(ctx context.Context, err error) error {
	cause := context.DeadlineExceeded
	if errors.Is(ctx.Err(), context.Canceled) {
		cause = context.Canceled
	}
	return fmt.Errorf("redisstore: Redis answered TRYAGAIN until the call's deadline (at most %v): its keys were split between two masters while their slot migrated (if no resharding is under way, a stopped one holds the slot: `redis-cli --cluster fix` finishes it): %w: %w: %w", tryAgainWait, store.ErrMoving, cause, err)
}

// exec runs sc on keys and args, and again while Redis answers TRYAGAIN
// (see tryAgain), and returns the reply's array.
func (s *Store) exec(ctx context.Context, sc *rueidis.Lua, keys, args []string) ([]rueidis.RedisMessage, error) {
	var ta tryAgain
	for {
		msgs, err := sc.Exec(ctx, s.c, keys, args).ToArray()
		if !isTryAgain(err) {
			return msgs, err
		}
		if !ta.next(ctx) {
			return nil, migrating(ctx, err)
		}
	}
}
