// Package testwait waits, in a test, for something another goroutine or
// process makes true: one poll loop with a deadline, so that tests neither
// sleep a fixed time and hope nor hand-roll the loop.
//
// The timeout bounds a failing test only: a passing test waits exactly as
// long as the condition takes. Choose it generously (seconds, not
// milliseconds): a loaded 2-core machine under -race is slow, and a tight
// timeout is a flaky test.
package testwait

import (
	"testing"
	"time"
)

// maxInterval is the longest pause between two polls.
const maxInterval = 50 * time.Millisecond

// Eventually calls cond until it returns true, first at once, then at
// intervals growing from 1 ms to 50 ms, and fails t with what (the
// condition awaited, "the server to listen") when cond is still false
// after timeout. Call it from the test's goroutine (it calls t.Fatalf).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyNil(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// Took is [Eventually], and returns how long cond took to hold (to
// within the polls' interval), for a test that reports it.
func Took(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	Eventually(t, timeout, what, cond)
	return time.Since(start)
}

// EventuallyNil is [Eventually] for a condition that says why it does not
// hold yet: it polls until cond returns nil, and fails t with what and
// cond's last error.
func EventuallyNil(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			if err == errNotYet {
				t.Fatalf("testwait: %s: not within %v", what, timeout)
			}
			t.Fatalf("testwait: %s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(min(interval, time.Until(deadline)))
		interval = min(2*interval, maxInterval)
	}
}

// errNotYet is the error Eventually's condition stands for while false.
var errNotYet = notYet{}

type notYet struct{}

func (notYet) Error() string { return "not yet" }
