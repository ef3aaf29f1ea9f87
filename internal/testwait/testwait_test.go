package testwait

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message and ends the
// goroutine, as a test's does.
type recorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.msg = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(r)
}

// run calls f with a recorder and returns what it failed with ("" if
// it did not).
func run(f func(t testing.TB)) string {
	r := &recorder{}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		f(r)
	}()
	return r.msg
}

func TestEventuallyReturnsOnceTrue(t *testing.T) {
	calls := 0
	msg := run(func(r testing.TB) {
		Eventually(r, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	})
	if msg != "" || calls != 3 {
		t.Fatalf("failed with %q after %d calls; want no failure after 3", msg, calls)
	}
}

func TestTookSaysHowLong(t *testing.T) {
	start := time.Now()
	var took time.Duration
	msg := run(func(r testing.TB) {
		took = Took(r, time.Minute, "20 ms to pass", func() bool { return time.Since(start) >= 20*time.Millisecond })
	})
	if msg != "" || took < 20*time.Millisecond || took > time.Since(start) {
		t.Fatalf("failed with %q, took %v; want no failure, at least 20ms", msg, took)
	}
}

func TestEventuallyFailsAfterTimeout(t *testing.T) {
	start := time.Now()
	msg := run(func(r testing.TB) {
		Eventually(r, 30*time.Millisecond, "the impossible", func() bool { return false })
	})
	if want := "testwait: the impossible: not within 30ms"; msg != want {
		t.Fatalf("failed with %q, want %q", msg, want)
	}
	if since := time.Since(start); since < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the timeout", since)
	}
}

func TestEventuallyNilSaysWhy(t *testing.T) {
	msg := run(func(r testing.TB) {
		n := 0
		EventuallyNil(r, 20*time.Millisecond, "the count to reach 1000", func() error {
			n++
			return errors.New("count " + fmt.Sprint(n))
		})
	})
	if !strings.HasPrefix(msg, "testwait: the count to reach 1000: not within 20ms: count ") {
		t.Fatalf("failed with %q; want what, the timeout and the last error", msg)
	}
}

// TestEventuallyChecksOnceMoreAtTheDeadline: a condition that becomes
// true while the last pause runs is seen.
func TestEventuallyChecksOnceMoreAtTheDeadline(t *testing.T) {
	start := time.Now()
	msg := run(func(r testing.TB) {
		Eventually(r, 40*time.Millisecond, "the deadline", func() bool { return time.Since(start) >= 40*time.Millisecond })
	})
	if msg != "" {
		t.Fatalf("failed with %q", msg)
	}
}
