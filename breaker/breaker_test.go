package breaker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var errDown = errors.New("down")

// fakeDep is a dependency whose health the test sets.
type fakeDep struct {
	failing atomic.Bool
	calls   atomic.Int64
}

func (f *fakeDep) call(context.Context) error {
	f.calls.Add(1)
	if f.failing.Load() {
		return errDown
	}
	return nil
}

func TestTransitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s, err := New(map[string]Settings{"billing": {ConsecutiveFailures: 3, Cooldown: 10 * time.Second}}, reg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		dep := &fakeDep{}
		state := func(want string) {
			t.Helper()
			if got := s.States()["billing"]; got != want {
				t.Fatalf("state %s, want %s", got, want)
			}
		}
		// closed: calls go through, errors are returned as they are.
		if err := s.Do(ctx, "billing", dep.call); err != nil {
			t.Fatal(err)
		}
		dep.failing.Store(true)
		for range 3 {
			if err := s.Do(ctx, "billing", dep.call); !errors.Is(err, errDown) {
				t.Fatalf("failing call: %v", err)
			}
		}
		// closed -> open after 3 in a row: fail fast, the dependency untouched.
		state("open")
		before := dep.calls.Load()
		time.Sleep(4 * time.Second)
		err = s.Do(ctx, "billing", dep.call)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Dependency != "billing" || oe.RetryAfter != 6*time.Second {
			t.Fatalf("while open: %v, want an OpenError with 6s left of the cooldown", err)
		}
		if dep.calls.Load() != before {
			t.Fatal("an open breaker called the dependency")
		}
		if got := testutil.ToFloat64(s.m.state.WithLabelValues("billing")); got != 2 {
			t.Errorf("state metric %v, want 2 (open)", got)
		}
		if got := testutil.ToFloat64(s.m.rejections.WithLabelValues("billing")); got != 1 {
			t.Errorf("rejections %v, want 1", got)
		}
		// open -> half-open after the cooldown; a failed probe opens it again.
		time.Sleep(6*time.Second + time.Millisecond)
		state("half-open")
		if err := s.Do(ctx, "billing", dep.call); !errors.Is(err, errDown) {
			t.Fatalf("failed probe: %v", err)
		}
		state("open")
		// Half-open again: one probe at a time; its success closes it.
		time.Sleep(10*time.Second + time.Millisecond)
		dep.failing.Store(false)
		probing := make(chan struct{})
		release := make(chan struct{})
		go s.Do(ctx, "billing", func(ctx context.Context) error {
			close(probing)
			<-release
			return nil
		})
		<-probing
		if err := s.Do(ctx, "billing", dep.call); !errors.As(err, &oe) {
			t.Fatalf("a second call while the probe is out: %v, want an OpenError", err)
		}
		close(release)
		synctest.Wait()
		state("closed")
		if err := s.Do(ctx, "billing", dep.call); err != nil {
			t.Fatalf("closed again: %v", err)
		}
	})
}

func TestFailureRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"search": {ConsecutiveFailures: 100, FailureRatio: 0.5, MinRequests: 10, Window: 10 * time.Second}}, nil)
		ctx := context.Background()
		n := 0
		// Alternate: never 100 in a row, but half of the calls fail.
		call := func(i int) {
			s.Do(ctx, "search", func(context.Context) error {
				n++
				if i%2 == 1 {
					return errDown
				}
				return nil
			})
		}
		for i := range 9 {
			call(i)
		}
		if got := s.States()["search"]; got != "closed" {
			t.Fatalf("after 9 calls (under MinRequests): %s", got)
		}
		call(9)
		if got := s.States()["search"]; got != "open" {
			t.Fatalf("5 failures of 10: %s, want open", got)
		}
		// A caller's own cancellation is not the dependency's failure.
		s2, _ := New(map[string]Settings{"x": {ConsecutiveFailures: 1}}, nil)
		s2.Do(ctx, "x", func(context.Context) error { return context.Canceled })
		if got := s2.States()["x"]; got != "closed" {
			t.Fatalf("after a cancelled call: %s, want closed", got)
		}
	})
}

// TestTransportAgainstFakeDependency runs the RoundTripper against a
// dependency that fails with 503 and recovers, on the bubble's clock: the
// cooldown passes exactly, without waiting.
func TestTransportAgainstFakeDependency(t *testing.T) {
	synctest.Test(t, testTransport)
}

// roundTripFunc is a RoundTripper in a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func testTransport(t *testing.T) {
	var failing atomic.Bool
	var hits atomic.Int64
	dep := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		hits.Add(1)
		w := httptest.NewRecorder()
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			w.Write([]byte("ok"))
		}
		return w.Result(), nil
	})
	s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 2, Cooldown: 200 * time.Millisecond}}, nil)
	client := &http.Client{Transport: &Transport{Set: s, Name: "upstream", Base: dep}}
	get := func() (int, error) {
		resp, err := client.Get("http://dependency.test/")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	failing.Store(true)
	for range 2 {
		if code, err := get(); err != nil || code != 503 {
			t.Fatalf("failing dependency: %d %v, want its 503 returned as it came", code, err)
		}
	}
	n := hits.Load()
	_, err := get()
	var oe *OpenError
	if !errors.As(err, &oe) || hits.Load() != n {
		t.Fatalf("open: %v (dependency hit %d more times), want an OpenError without a call", err, hits.Load()-n)
	}
	failing.Store(false)
	time.Sleep(200*time.Millisecond + time.Nanosecond) // the cooldown, exactly
	if code, err := get(); err != nil || code != 200 {
		t.Fatalf("probe after the cooldown: %d %v", code, err)
	}
	if s.States()["upstream"] != "closed" {
		t.Fatalf("after a good probe: %s", s.States()["upstream"])
	}
	if err := s.Do(context.Background(), "nope", nil); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "upstream") {
		t.Fatalf("unknown dependency: %v", err)
	}
	if _, err := New(map[string]Settings{"x": {FailureRatio: 2}}, nil); err == nil {
		t.Fatal("a ratio of 2 was accepted")
	}
}
