package guard

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestSharedDeadline: calls within a millisecond share one context, which
// ends between timeout and timeout plus a millisecond after each call; a
// caller with a sooner deadline keeps it; a later call gets a new context.
func TestSharedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sharedDeadline{timeout: 100 * time.Millisecond}
		start := time.Now()
		a, cancelA := s.context(context.Background())
		defer cancelA()
		time.Sleep(500 * time.Microsecond)
		b, cancelB := s.context(context.Background())
		defer cancelB()
		if a != b {
			t.Fatal("two calls 0.5 ms apart got two contexts")
		}
		if dl, _ := a.Deadline(); dl.Before(start.Add(100*time.Millisecond+500*time.Microsecond)) || dl.After(start.Add(101*time.Millisecond)) {
			t.Fatalf("deadline %v after the first call, want 100.5–101 ms", dl.Sub(start))
		}
		time.Sleep(time.Millisecond)
		c, cancelC := s.context(context.Background())
		defer cancelC()
		if c == a {
			t.Fatal("a call 1.5 ms later got the first context")
		}
		soon, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		d, cancelD := s.context(soon)
		defer cancelD()
		if dl, _ := d.Deadline(); dl.After(time.Now().Add(10 * time.Millisecond)) {
			t.Fatalf("a caller's 10 ms deadline became %v", time.Until(dl))
		}
		time.Sleep(101 * time.Millisecond)
		if a.Err() != context.DeadlineExceeded {
			t.Fatalf("the shared context after its deadline: %v", a.Err())
		}
	})
}

// TestSharedDeadlineStopsWhenDone: a shared context whose millisecond has
// passed is cancelled (its timer stopped) when its last call returns, not
// left to fire at its deadline; one still in use by a call is not; the
// newest is left to its deadline.
func TestSharedDeadlineStopsWhenDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sharedDeadline{timeout: 100 * time.Millisecond}
		a, doneA := s.context(context.Background())
		a2, doneA2 := s.context(context.Background())
		doneA()
		time.Sleep(2 * time.Millisecond)
		b, doneB := s.context(context.Background()) // a is retired: one call still holds it
		if a.Err() != nil {
			t.Fatalf("a context still in use was ended: %v", a.Err())
		}
		doneA2()
		if a2.Err() != context.Canceled {
			t.Fatalf("a retired context after its last call: %v, want stopped (canceled)", a2.Err())
		}
		doneB()
		time.Sleep(2 * time.Millisecond)
		c, doneC := s.context(context.Background())
		if b.Err() != context.Canceled {
			t.Fatalf("a retired context no call used: %v, want stopped (canceled)", b.Err())
		}
		doneC()
		time.Sleep(50 * time.Millisecond)
		if c.Err() != nil {
			t.Fatalf("the newest context before its deadline: %v", c.Err())
		}
		time.Sleep(52 * time.Millisecond)
		if c.Err() != context.DeadlineExceeded {
			t.Fatalf("the newest context after its deadline: %v", c.Err())
		}
	})
}

// TestSharedDeadlineConcurrent: calls racing the hand-over never get a
// context that is already ended.
func TestSharedDeadlineConcurrent(t *testing.T) {
	s := sharedDeadline{timeout: 100 * time.Millisecond}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				ctx, done := s.context(context.Background())
				if err := ctx.Err(); err != nil {
					t.Errorf("handed an ended context: %v", err)
					done()
					return
				}
				done()
			}
		})
	}
	wg.Wait()
}
