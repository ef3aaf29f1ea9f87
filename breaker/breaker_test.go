package breaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
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

// as returns ctx with the party of a tenant, or of an anonymous address.
func as(id string, anon bool) context.Context {
	return WithParty(context.Background(), Party{ID: id, Anonymous: anon})
}

func fail(context.Context) error { return errDown }
func ok(context.Context) error   { return nil }

// TestOnePartyMovesOnlyItsOwnBreaker: a tenant whose calls fail (today
// five of them opened the one breaker for every tenant) opens its own
// breaker only: its calls are refused, with Caller set; every other
// party's go through, and the shared breaker stays closed.
func TestOnePartyMovesOnlyItsOwnBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s, _ := New(map[string]Settings{"upstream": {Cooldown: 30 * time.Second}}, reg)
		for range 50 {
			s.Do(as("mallory", false), "upstream", fail)
		}
		var oe *OpenError
		if err := s.Do(as("mallory", false), "upstream", ok); !errors.As(err, &oe) || !oe.Caller || oe.RetryAfter != 30*time.Second {
			t.Fatalf("the failing tenant's next call: %v, want its own breaker's OpenError with 30s left", err)
		}
		for _, p := range []context.Context{as("victim", false), as("192.0.2.7", true), context.Background()} {
			if err := s.Do(p, "upstream", ok); err != nil {
				t.Fatalf("another party's call: %v", err)
			}
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("shared breaker %s after one tenant's failures, want closed", got)
		}
		if got := testutil.ToFloat64(s.m.partyTrips.WithLabelValues("upstream")); got != 1 {
			t.Errorf("party trips %v, want 1", got)
		}
		// Its cooldown over, one probe: a success closes its breaker.
		time.Sleep(30*time.Second + time.Millisecond)
		if err := s.Do(as("mallory", false), "upstream", ok); err != nil {
			t.Fatalf("the tenant's probe after its cooldown: %v", err)
		}
		if err := s.Do(as("mallory", false), "upstream", ok); err != nil {
			t.Fatalf("after a good probe: %v", err)
		}
	})
}

// TestQuorumOpensTheSharedBreaker: the shared breaker opens when at
// least half of the parties that called in the window, and at least
// MinParties, had their own breakers open in it.
func TestQuorumOpensTheSharedBreaker(t *testing.T) {
	for _, tc := range []struct {
		name            string
		failing, steady []string
		want            string
	}{
		{"two of two", []string{"a", "b"}, nil, "open"},
		{"two of three", []string{"a", "b"}, []string{"c"}, "open"},
		{"two of five", []string{"a", "b"}, []string{"c", "d", "e"}, "closed"},
		{"three of five", []string{"a", "b", "c"}, []string{"d", "e"}, "open"},
		{"one alone", []string{"a"}, nil, "closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 3}}, nil)
				for _, p := range tc.steady {
					s.Do(as(p, false), "upstream", ok)
				}
				for _, p := range tc.failing {
					for range 3 {
						s.Do(as(p, false), "upstream", fail)
					}
				}
				if got := s.States()["upstream"]; got != tc.want {
					t.Fatalf("shared breaker %s, want %s", got, tc.want)
				}
				if tc.want == "open" {
					var oe *OpenError
					if err := s.Do(as("newcomer", false), "upstream", ok); !errors.As(err, &oe) || oe.Caller {
						t.Fatalf("a newcomer while the shared breaker is open: %v", err)
					}
				}
			})
		})
	}
}

// TestAnonymousClientsDoNotVote: anonymous clients' failures open their
// own breakers only. An address is too cheap to come by to be a vote: an
// attacker's tenant and two of its addresses once made two votes of a
// quorum, opening the shared breaker beside a steady tenant.
func TestAnonymousClientsDoNotVote(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 2}}, nil)
		s.Do(as("victim", false), "upstream", ok)
		for i := range 200 {
			ip := fmt.Sprintf("198.51.100.%d", i)
			for range 2 {
				s.Do(as(ip, true), "upstream", fail)
			}
		}
		for range 2 {
			s.Do(as("mallory", false), "upstream", fail)
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("shared breaker %s after one tenant and 200 anonymous addresses failed beside a steady tenant, want closed", got)
		}
		if err := s.Do(as("victim", false), "upstream", ok); err != nil {
			t.Fatalf("the steady tenant: %v", err)
		}
		// A second tenant failing makes the quorum (2 of 2 tenants).
		for range 2 {
			s.Do(as("victim", false), "upstream", fail)
		}
		if got := s.States()["upstream"]; got != "open" {
			t.Fatalf("shared breaker %s with both tenants failing, want open", got)
		}
	})
}

// TestHalfOpenProbePerParty: a half-open shared breaker lets one probe
// per party through, so a party cannot hold the way back by keeping its
// probe out (a body trickled for 30 s, which then counts for nothing):
// another party's probe goes through beside it and its success closes
// the breaker.
func TestHalfOpenProbePerParty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 1, Cooldown: 10 * time.Second}}, nil)
		s.Do(context.Background(), "upstream", fail)
		time.Sleep(10*time.Second + time.Millisecond)
		release := make(chan struct{})
		held := make(chan struct{})
		go s.Do(as("mallory", false), "upstream", func(context.Context) error {
			close(held)
			<-release
			return &CallerError{Err: errors.New("the body came too slowly")}
		})
		<-held
		var oe *OpenError
		if err := s.Do(as("mallory", false), "upstream", ok); !errors.As(err, &oe) {
			t.Fatalf("a second probe of the same party: %v, want refused", err)
		}
		if err := s.Do(as("bob", false), "upstream", ok); err != nil {
			t.Fatalf("another party's probe beside the held one: %v", err)
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("after another party's good probe: %s, want closed", got)
		}
		close(release)
		synctest.Wait()
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("after the held probe ended: %s, want closed", got)
		}
	})
}

// TestPartiesAreBounded: the parties a dependency remembers are bounded,
// whatever number of addresses a client uses.
func TestPartiesAreBounded(t *testing.T) {
	s, _ := New(map[string]Settings{"upstream": {}}, nil)
	for i := range 3 * maxAnonymous {
		s.Do(as(fmt.Sprintf("2001:db8:%x::/64", i), true), "upstream", fail)
	}
	d := s.deps["upstream"]
	d.mu.Lock()
	n := len(d.ps.anonymous)
	d.mu.Unlock()
	if n > maxAnonymous {
		t.Fatalf("%d anonymous parties remembered, want at most %d", n, maxAnonymous)
	}
}

// TestHalfOpenNeedsSeveralParties: once open, the shared breaker's probe
// failing for one party does not open it again (one client cannot hold it
// open); failures of MinParties parties do; a success closes it.
func TestHalfOpenNeedsSeveralParties(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 1, Cooldown: 10 * time.Second}}, nil)
		s.Do(context.Background(), "upstream", fail) // fairgate's own call: counted as it comes
		if got := s.States()["upstream"]; got != "open" {
			t.Fatalf("%s, want open", got)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		s.Do(as("mallory", false), "upstream", fail)
		if got := s.States()["upstream"]; got != "half-open" {
			t.Fatalf("after one party's failed probe: %s, want still half-open", got)
		}
		s.Do(as("bob", false), "upstream", fail)
		if got := s.States()["upstream"]; got != "open" {
			t.Fatalf("after two parties' failed probes: %s, want open", got)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		if err := s.Do(as("carol", false), "upstream", ok); err != nil || s.States()["upstream"] != "closed" {
			t.Fatalf("a good probe: %v, %s; want closed", err, s.States()["upstream"])
		}
	})
}

// TestUnreachableAndUncounted: a dial error is the dependency's failure
// whoever's call it was, unless this process ran out of its own
// resources (EMFILE: a tenant holding streams open can cause it); a call
// marked Uncounted (a CORS preflight) is counted for nothing.
func TestUnreachableAndUncounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 3}}, nil)
		for range 10 {
			s.Do(Uncounted(as("192.0.2.1", true)), "upstream", fail)
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("after uncounted failures: %s", got)
		}
		if err := s.Do(as("192.0.2.1", true), "upstream", ok); err != nil {
			t.Fatalf("the uncounted caller's own breaker: %v", err)
		}
		// This process out of descriptors (or memory, or ports): not the
		// dependency's failure, whoever's call hit it.
		for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EADDRNOTAVAIL} {
			local := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}
			for range 5 {
				s.Do(as("acme", false), "upstream", func(context.Context) error { return local })
			}
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("after this process's own descriptors ran out: %s, want closed", got)
		}
		dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		for range 3 {
			s.Do(as("acme", false), "upstream", func(context.Context) error { return dial })
		}
		if got := s.States()["upstream"]; got != "open" {
			t.Fatalf("after 3 refused connections: %s, want open", got)
		}
	})
}

// TestFailureStatuses: by default a 500 is a request's own failure, not
// the dependency's; a dependency may count it.
func TestFailureStatuses(t *testing.T) {
	answer := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		w := httptest.NewRecorder()
		w.WriteHeader(http.StatusInternalServerError)
		return w.Result(), nil
	})
	for _, tc := range []struct {
		statuses []int
		want     string
	}{{nil, "closed"}, {[]int{500, 502}, "open"}} {
		s, _ := New(map[string]Settings{"api": {ConsecutiveFailures: 2, FailureStatuses: tc.statuses}}, nil)
		c := &http.Client{Transport: &Transport{Set: s, Name: "api", Base: answer}}
		for range 3 {
			if resp, err := c.Get("http://api.test/"); err == nil {
				resp.Body.Close()
			}
		}
		if got := s.States()["api"]; got != tc.want {
			t.Errorf("statuses %v, three 500s: %s, want %s", tc.statuses, got, tc.want)
		}
	}
	if _, err := New(map[string]Settings{"x": {MinParties: 1}}, nil); err == nil {
		t.Error("min_parties 1 was accepted")
	}
	if _, err := New(map[string]Settings{"x": {FailureStatuses: []int{99}}}, nil); err == nil {
		t.Error("failure status 99 was accepted")
	}
}

// TestAnonymousCannotHoldHalfOpen: anonymous calls hold no place in a
// half-open shared breaker. A slot per address once let 64 addresses,
// each trickling a body, keep every tenant out of a recovered upstream
// (0 of 70 answers over 68 s): now a tenant's probe goes through beside
// any number of held anonymous calls, and anonymous callers get through
// by chance, a sixteenth of them.
func TestAnonymousCannotHoldHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := New(map[string]Settings{"upstream": {ConsecutiveFailures: 1, Cooldown: 10 * time.Second}}, nil)
		s.Do(context.Background(), "upstream", fail)
		time.Sleep(10*time.Second + time.Millisecond)
		release := make(chan struct{})
		var held atomic.Int64
		for i := range 2000 {
			go s.Do(as(fmt.Sprintf("2001:db8:%x::/64", i), true), "upstream", func(context.Context) error {
				held.Add(1)
				<-release
				return &CallerError{Err: errors.New("the body came too slowly")}
			})
		}
		synctest.Wait()
		if n := held.Load(); n == 0 || n > 400 {
			t.Fatalf("%d of 2000 anonymous calls let through half-open, want some, about 1 in 16", n)
		}
		if err := s.Do(as("acme", false), "upstream", ok); err != nil {
			t.Fatalf("a tenant's probe beside %d held anonymous calls: %v", held.Load(), err)
		}
		if got := s.States()["upstream"]; got != "closed" {
			t.Fatalf("after the tenant's good probe: %s, want closed", got)
		}
		close(release)
		synctest.Wait()
	})
}
