package guard

import (
	"context"
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
