package guard

import (
	"context"
	"sync/atomic"
	"time"
)

// sharedDeadline hands the store calls that start within one millisecond
// one context that ends timeout (plus at most that millisecond) after the
// first of them: a store call then costs no timer and no context of its
// own. A call whose caller's context has values the store call needs
// (a trace), or a deadline sooner than the shared one, gets its own.
//
// The shared context ignores the caller's cancellation: a store call whose
// HTTP client went away runs on to the store's deadline, which is bounded,
// and is charged as a batch already sent would be in any case.
type sharedDeadline struct {
	timeout time.Duration
	cur     atomic.Pointer[deadlineCtx]
}

// deadlineCtx is one shared context and when it was made.
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc // kept for vet: its timer ends it
	made   time.Time
}

// grain is how long one shared context is handed out.
const grain = time.Millisecond

// context returns the context for a store call that ctx asks for. It
// reads the real clock, as a context's deadline does, never the guard's.
func (s *sharedDeadline) context(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	d := s.cur.Load()
	if d == nil || now.Sub(d.made) >= grain {
		n := &deadlineCtx{made: now}
		n.ctx, n.cancel = context.WithDeadline(context.Background(), now.Add(s.timeout+grain))
		if s.cur.CompareAndSwap(d, n) {
			d = n
		} else {
			n.cancel()
			d = s.cur.Load()
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		if shared, _ := d.ctx.Deadline(); dl.Before(shared) {
			return context.WithTimeout(ctx, s.timeout)
		}
	}
	return d.ctx, noCancel
}

func noCancel() {}
