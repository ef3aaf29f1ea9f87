package breaker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestShownChangesNothing: Shown is the state the gauge shows, and
// reading it leaves an open breaker open past its cooldown (the gauge
// says half-open from the first call after it); States moves it.
func TestShownChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(map[string]Settings{"billing": {ConsecutiveFailures: 3, Cooldown: 10 * time.Second}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		dep := &fakeDep{}
		dep.failing.Store(true)
		for range 3 {
			s.Do(context.Background(), "billing", dep.call)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		for range 2 {
			if got := s.Shown()["billing"]; got != "open" {
				t.Fatalf("Shown after the cooldown, no call: %q, want open", got)
			}
		}
		if got := testutil.ToFloat64(s.m.state.WithLabelValues("billing")); got != 2 {
			t.Errorf("state metric %v after Shown, want 2 (open)", got)
		}
		if got := s.States()["billing"]; got != "half-open" {
			t.Fatalf("States after the cooldown: %q, want half-open", got)
		}
		if got := s.Shown()["billing"]; got != "half-open" {
			t.Errorf("Shown after States: %q, want half-open", got)
		}
	})
}
