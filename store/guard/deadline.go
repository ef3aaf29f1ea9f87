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
// A shared context whose millisecond has passed is stopped (its timer
// removed) once its last call returns. Without that, each would fire at
// its deadline: on an instance serving a few hundred calls a second (one
// of many small ones) nearly every call made a context of its own, and
// its timer woke the process once more, 100 ms later, for nothing. Only
// the newest context is left to fire, once, when the instance goes idle.
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
	cancel context.CancelFunc
	made   time.Time
	// refs counts the calls using ctx, with the bits retired (a newer
	// context is handed out) and stopped (cancel was called: no call may
	// take it any more).
	refs    atomic.Int64
	release context.CancelFunc // d.done, made once
}

const (
	retired = 1 << 61
	stopped = 1 << 62
)

// grain is how long one shared context is handed out.
const grain = time.Millisecond

// context returns the context for a store call that ctx asks for, and the
// function to call when the store call returns. It reads the real clock,
// as a context's deadline does, never the guard's.
func (s *sharedDeadline) context(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	for {
		d := s.cur.Load()
		if d == nil || now.Sub(d.made) >= grain {
			n := &deadlineCtx{made: now}
			n.ctx, n.cancel = context.WithDeadline(context.Background(), now.Add(s.timeout+grain))
			n.release = n.done
			if !s.cur.CompareAndSwap(d, n) {
				n.cancel()
				continue
			}
			if d != nil {
				d.retire()
			}
			d = n
		}
		if dl, ok := ctx.Deadline(); ok {
			if shared, _ := d.ctx.Deadline(); dl.Before(shared) {
				return context.WithTimeout(ctx, s.timeout)
			}
		}
		if d.take() {
			return d.ctx, d.release
		}
		// d was retired and stopped meanwhile: a newer one is current.
	}
}

// take counts a call in, unless d is stopped.
func (d *deadlineCtx) take() bool {
	for {
		r := d.refs.Load()
		if r&stopped != 0 {
			return false
		}
		if d.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// done counts a call out, and stops d if it was its last and d is retired.
func (d *deadlineCtx) done() {
	if d.refs.Add(-1) == retired {
		d.stop()
	}
}

// retire marks d no longer handed out, and stops it if no call uses it.
func (d *deadlineCtx) retire() {
	if d.refs.Or(retired) == 0 {
		d.stop()
	}
}

// stop cancels d once, when it is retired and unused.
func (d *deadlineCtx) stop() {
	if d.refs.CompareAndSwap(retired, retired|stopped) {
		d.cancel()
	}
}

func noCancel() {}
