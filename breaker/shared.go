package breaker

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// maxProbes bounds the tenants' probes a half-open shared breaker lets
// through at once (one per tenant).
const maxProbes = 1024

// anonProbeOdds is the chance an anonymous call is let through a
// half-open shared breaker: 1 in anonProbeOdds, drawn afresh for each
// call, so that no number of addresses holding calls open can keep the
// others out (a slot per address once let 64 trickled bodies hold every
// slot), while the upstream sees a sixteenth of the anonymous traffic
// until a success closes the breaker.
const anonProbeOdds = 16

// shared is a dependency's shared breaker. It is not a gobreaker: a
// gobreaker's half-open state lets one call through at a time and opens
// again on any failure, so one party could hold it (a probe whose body
// trickles for 30 s, then counts for nothing, taken again at once) or
// open it again (a probe that fails on purpose). Here a half-open breaker
// lets one probe per tenant through (up to maxProbes), and an anonymous
// call with odds of 1 in anonProbeOdds, holding no place; the first
// success closes it, and it opens again only on a failure no party caused
// or on failed probes of MinParties tenants.
type shared struct {
	st Settings // with defaults

	mu      sync.Mutex
	state   gobreaker.State
	gen     uint64 // bumped at each change of state: late outcomes are ignored
	opened  time.Time
	buckets [10]bucket // the closed state's rolling window
	start   time.Time  // when buckets[0]'s period began
	consec  uint32     // failures in a row, closed
	probes  map[string]bool
	failed  map[string]bool // tenants whose probes failed while half-open
	change  func(gobreaker.State)
}

// bucket counts one tenth of the window.
type bucket struct{ requests, failures uint32 }

// outcome is what a call tells the shared breaker.
type outcome int

const (
	success  outcome = iota
	nothing          // the caller's own doing, or one party's failure without a quorum
	counted          // the dependency failed, by the closed state's rule
	quorum           // a quorum of tenants failed: open at once
	probeBad         // a tenant's probe failed while half-open (voter given)
)

// ticket is an admitted call: its generation, and its probe key while
// half-open.
type ticket struct {
	gen   uint64
	probe string
}

func newShared(st Settings, change func(gobreaker.State)) *shared {
	return &shared{st: st, change: change}
}

// allow admits a call with probe key k (one per tenant; "" for
// fairgate's own calls; anon for an anonymous client's, which hold no
// place) or refuses it.
func (s *shared) allow(k string, anon bool, now time.Time) (ticket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == gobreaker.StateOpen {
		if now.Sub(s.opened) < s.st.Cooldown {
			return ticket{}, false
		}
		s.set(gobreaker.StateHalfOpen, now)
	}
	if s.state == gobreaker.StateHalfOpen {
		if anon {
			if rand.IntN(anonProbeOdds) != 0 {
				return ticket{}, false
			}
			return ticket{gen: s.gen, probe: anonTicket}, true
		}
		if s.probes[k] || len(s.probes) >= maxProbes {
			return ticket{}, false
		}
		s.probes[k] = true
		return ticket{gen: s.gen, probe: k}, true
	}
	return ticket{gen: s.gen, probe: closedTicket}, true
}

// closedTicket is the probe key of a call admitted while closed;
// anonTicket of an anonymous call admitted while half-open.
const (
	closedTicket = "\x00closed"
	anonTicket   = "\x00anonymous"
)

// done reports an admitted call's outcome; voter names the tenant of a
// probeBad.
func (s *shared) done(t ticket, o outcome, voter string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.gen != s.gen {
		return // admitted under another state: says nothing of this one
	}
	switch s.state {
	case gobreaker.StateClosed:
		switch o {
		case success:
			s.add(now, false)
			s.consec = 0
		case counted:
			s.add(now, true)
			s.consec++
			if s.trips() {
				s.set(gobreaker.StateOpen, now)
			}
		case quorum:
			s.set(gobreaker.StateOpen, now)
		}
	case gobreaker.StateHalfOpen:
		delete(s.probes, t.probe)
		switch o {
		case success:
			s.set(gobreaker.StateClosed, now)
		case counted, quorum:
			s.set(gobreaker.StateOpen, now)
		case probeBad:
			s.failed[voter] = true
			if len(s.failed) >= s.st.MinParties {
				s.set(gobreaker.StateOpen, now)
			}
		}
	}
}

// set moves to state st at now. Called with mu held.
func (s *shared) set(st gobreaker.State, now time.Time) {
	s.state = st
	s.gen++
	s.probes, s.failed = nil, nil
	switch st {
	case gobreaker.StateOpen:
		s.opened = now
	case gobreaker.StateHalfOpen:
		s.probes, s.failed = map[string]bool{}, map[string]bool{}
	case gobreaker.StateClosed:
		s.buckets, s.start, s.consec = [10]bucket{}, now, 0
	}
	if s.change != nil {
		s.change(st)
	}
}

// add counts a call in the rolling window at now. Called with mu held.
func (s *shared) add(now time.Time, failed bool) {
	s.roll(now)
	b := &s.buckets[len(s.buckets)-1]
	b.requests++
	if failed {
		b.failures++
	}
}

// roll drops the buckets older than the window. Called with mu held.
func (s *shared) roll(now time.Time) {
	period := s.st.Window / time.Duration(len(s.buckets))
	if s.start.IsZero() {
		s.start = now
	}
	for n := 0; now.Sub(s.start) >= period && n <= len(s.buckets); n++ {
		copy(s.buckets[:], s.buckets[1:])
		s.buckets[len(s.buckets)-1] = bucket{}
		s.start = s.start.Add(period)
	}
	if now.Sub(s.start) >= period { // idle past the window: begin again
		s.start = now
	}
}

// trips is the dependency's own rule: failures in a row, or the ratio
// over the window. Called with mu held.
func (s *shared) trips() bool {
	if s.consec >= s.st.ConsecutiveFailures {
		return true
	}
	var req, fail uint32
	for _, b := range s.buckets {
		req += b.requests
		fail += b.failures
	}
	return req >= s.st.MinRequests && float64(fail) >= s.st.FailureRatio*float64(req)
}

// now returns the state at now, moving open to half-open once the
// cooldown is over.
func (s *shared) now(now time.Time) gobreaker.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == gobreaker.StateOpen && now.Sub(s.opened) >= s.st.Cooldown {
		s.set(gobreaker.StateHalfOpen, now)
	}
	return s.state
}

// last returns the state last entered, changing nothing.
func (s *shared) last() gobreaker.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// left is the time left of the cooldown at now.
func (s *shared) left(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Cooldown - now.Sub(s.opened)
}
