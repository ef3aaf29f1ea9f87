package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
)

// Settings configure one dependency's breaker. The zero value of each
// field means its default.
type Settings struct {
	// ConsecutiveFailures opens a breaker after this many failures in a
	// row. Zero means 5.
	ConsecutiveFailures uint32
	// FailureRatio opens a breaker when failures/calls over Window reach
	// it, with at least MinRequests calls. Zero means 0.5.
	FailureRatio float64
	// MinRequests: see FailureRatio. Zero means 20.
	MinRequests uint32
	// Window is the rolling window the ratio is counted over, and the
	// time within which the parties' breakers must open to make a quorum.
	// Zero means 10 s.
	Window time.Duration
	// Cooldown is how long a breaker stays open before a probe. Zero
	// means 30 s.
	Cooldown time.Duration
	// FailureStatuses are the response statuses a [Transport] counts as
	// the dependency's failure. Empty means 502, 503 and 504: a 500 or a
	// 501 is more often one request's fault than the dependency's.
	FailureStatuses []int
	// MinParties is the fewest parties whose own breakers must open
	// within Window for the shared breaker to open (with at least half of
	// the parties that called the dependency in that window). Zero means
	// 2; it is never less, so that no one party is a quorum.
	MinParties int
}

// DefaultFailureStatuses are the statuses counted as failures when
// Settings.FailureStatuses is empty.
var DefaultFailureStatuses = []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// withDefaults fills in the zero fields.
func (s Settings) withDefaults() Settings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 5
	}
	if s.FailureRatio == 0 {
		s.FailureRatio = 0.5
	}
	if s.MinRequests == 0 {
		s.MinRequests = 20
	}
	if s.Window == 0 {
		s.Window = 10 * time.Second
	}
	if s.Cooldown == 0 {
		s.Cooldown = 30 * time.Second
	}
	if len(s.FailureStatuses) == 0 {
		s.FailureStatuses = DefaultFailureStatuses
	}
	if s.MinParties == 0 {
		s.MinParties = 2
	}
	return s
}

// Check validates s: the ratio in (0, 1], durations not negative,
// statuses that are HTTP statuses, and a quorum of at least 2 parties.
func (s Settings) Check() error {
	switch {
	case s.FailureRatio < 0 || s.FailureRatio > 1:
		return fmt.Errorf("breaker: failure ratio %v is outside (0, 1]", s.FailureRatio)
	case s.Window < 0 || s.Cooldown < 0:
		return errors.New("breaker: negative window or cooldown")
	case s.MinParties == 1 || s.MinParties < 0 || s.MinParties > 1000:
		return fmt.Errorf("breaker: min_parties %d is outside 2..1000: one party's failures never open the breaker for everyone", s.MinParties)
	}
	for _, code := range s.FailureStatuses {
		if code < 100 || code > 599 {
			return fmt.Errorf("breaker: failure status %d is not an HTTP status", code)
		}
	}
	return nil
}

// OpenError is a call refused because a breaker is open (or half-open
// with its probes already out): the dependency's, or the caller's own.
type OpenError struct {
	Dependency string
	// RetryAfter is how long until the breaker lets a probe through; at
	// least one second, so it can be sent as Retry-After.
	RetryAfter time.Duration
	// Caller reports that the caller's own breaker refused it: the
	// dependency failed this party's recent calls, and only its calls
	// wait; others go through.
	Caller bool
}

// Error says which dependency is open and when it is tried again.
func (e *OpenError) Error() string {
	if e.Caller {
		return fmt.Sprintf("breaker: dependency %q failed this caller's recent calls and its breaker for this caller is open: retry in %v", e.Dependency, e.RetryAfter)
	}
	return fmt.Sprintf("breaker: dependency %q is failing and its breaker is open: retry in %v", e.Dependency, e.RetryAfter)
}

// ErrUnknown means a dependency is not configured.
var ErrUnknown = errors.New("breaker: unknown dependency")

// Set is the breakers of the configured dependencies.
type Set struct {
	deps map[string]*dep
	m    *metrics
}

// dep is one dependency's shared breaker and its parties' own.
type dep struct {
	name string
	st   Settings // with defaults
	sh   *shared
	m    *metrics

	// Lock order: mu (the parties) may be held while a party's breaker's
	// state is read; no breaker calls back into it (state changes only
	// store atomics), so a breaker's lock is never held while mu is taken.
	mu sync.Mutex
	ps parties
}

// The outcomes a breaker is told: a failure that counts, and a call that
// says nothing of the dependency (neither success nor failure).
var (
	errCounted  = errors.New("breaker: the dependency failed")
	errExcluded = errors.New("breaker: not the dependency's doing")
)

// New returns breakers for deps by name. reg, if not nil, receives the
// metrics; it must not hold them already (another Set's): a Set is one
// registry's breakers, so New refuses a second on the same registry
// rather than mix two Sets' states in one gauge.
func New(deps map[string]Settings, reg prometheus.Registerer) (*Set, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Set{deps: map[string]*dep{}, m: m}
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		st := deps[name]
		if err := st.Check(); err != nil {
			return nil, fmt.Errorf("dependency %q: %w", name, err)
		}
		d := &dep{name: name, st: st.withDefaults(), m: m, ps: parties{tenants: map[string]*party{}, anonymous: map[string]*party{}}}
		gauge := m.state.WithLabelValues(name)
		d.sh = newShared(d.st, func(to gobreaker.State) { gauge.Set(float64(to)) })
		gauge.Set(0)
		s.deps[name] = d
	}
	return s, nil
}

// settings are gobreaker's settings for one of d's breakers.
func (d *dep) settings(name string, probes uint32, trip func(gobreaker.Counts) bool, change func(string, gobreaker.State, gobreaker.State)) gobreaker.Settings {
	return gobreaker.Settings{
		Name:          name,
		MaxRequests:   probes,
		BucketPeriod:  d.st.Window / 10,
		Interval:      d.st.Window,
		Timeout:       d.st.Cooldown,
		ReadyToTrip:   trip,
		IsExcluded:    func(err error) bool { return err == errExcluded },
		OnStateChange: change,
	}
}

// tripsOn is the dependency's own rule: failures in a row, or the ratio.
func (d *dep) tripsOn(c gobreaker.Counts) bool {
	return c.ConsecutiveFailures >= d.st.ConsecutiveFailures ||
		c.Requests >= d.st.MinRequests && float64(c.TotalFailures) >= d.st.FailureRatio*float64(c.Requests)
}

// Do calls f unless a breaker refuses it: the dependency's shared one,
// or, for a call made for a party (WithParty), that party's own. An open
// breaker gives an *OpenError at once. f's error is judged: nil is a
// success; the caller's own doing (a cancellation, a *CallerError) is
// nothing; a failure to reach the dependency at all (a dial error) counts
// against the shared breaker; any other failure counts against the
// party's own breaker, and against the shared one only when a quorum of
// parties fails (or the call has no party). A call marked Uncounted
// counts for nothing.
func (s *Set) Do(ctx context.Context, name string, f func(context.Context) error) error {
	d, ok := s.deps[name]
	if !ok {
		return fmt.Errorf("%w %q: configured are %v", ErrUnknown, name, s.Names())
	}
	p, hasParty := PartyFrom(ctx)
	var e *party
	var pdone func(error)
	if hasParty {
		d.mu.Lock()
		e = d.ps.get(p, time.Now(), d.st.Window)
		pcb := e.cb
		d.mu.Unlock()
		if pcb != nil {
			var err error
			if pdone, err = pcb.Allow(); err != nil {
				s.m.partyRejections.WithLabelValues(name).Inc()
				return &OpenError{Dependency: name, RetryAfter: d.partyRetryAfter(e), Caller: true}
			}
		}
	}
	key := "" // fairgate's own calls probe one at a time
	if hasParty {
		key = "t:" + p.ID
		if p.Anonymous {
			key = "a:" + p.ID
		}
	}
	tk, ok := d.sh.allow(key, hasParty && p.Anonymous, time.Now())
	if !ok {
		if pdone != nil {
			pdone(errExcluded)
		}
		s.m.rejections.WithLabelValues(name).Inc()
		return &OpenError{Dependency: name, RetryAfter: d.retryAfter()}
	}
	ferr := f(ctx)
	d.report(ctx, p, hasParty, e, pdone, tk, ferr)
	return ferr
}

// report tells the breakers how a call admitted with tk went.
func (d *dep) report(ctx context.Context, p Party, hasParty bool, e *party, pdone func(error), tk ticket, ferr error) {
	party := func(err error) {
		if pdone != nil {
			pdone(err)
		}
	}
	now := time.Now()
	switch {
	case uncounted(ctx) || isCallers(ferr) || exhausted(ferr):
		party(errExcluded)
		d.sh.done(tk, nothing, "", now)
	case ferr == nil:
		party(nil)
		d.sh.done(tk, success, "", now)
	case unreachable(ferr) || !hasParty:
		// Nothing of the call reached the dependency, or the call is
		// fairgate's own: the dependency's failure, as it comes.
		party(errExcluded)
		d.sh.done(tk, counted, "", now)
	default:
		if pdone == nil {
			pdone = d.partyBreaker(e)
		}
		pdone(errCounted)
		d.sh.done(tk, d.judge(p, e, tk, now), "t:"+p.ID, now)
	}
}

// judge says what one party's failure is to the shared breaker. Only
// tenants vote: an anonymous client's address is too cheap to come by
// to be a party of a quorum (one actor on two addresses would be two
// votes), so anonymous failures move only their own breakers. While the
// shared breaker is half-open, a tenant's failed probe is its vote, and
// MinParties of them open it again; while it is closed, a tenant whose own
// breaker opened makes a quorum when at least half of the tenants active
// in the window, and MinParties of them, did.
func (d *dep) judge(p Party, e *party, tk ticket, now time.Time) outcome {
	if p.Anonymous {
		return nothing
	}
	if tk.probe != closedTicket {
		return probeBad
	}
	if !e.trippedWithin(now, d.st.Window) {
		return nothing
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ps.quorum(now, d.st.Window, d.st.MinParties) {
		return quorum
	}
	return nothing
}

// partyBreaker makes e's own breaker (on its first failure) and returns
// the done of a call admitted by it.
func (d *dep) partyBreaker(e *party) func(error) {
	d.mu.Lock()
	if e.cb == nil {
		e.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](d.settings(d.name, 1, d.tripsOn, func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				e.tripped.Store(time.Now().UnixNano())
				d.m.partyTrips.WithLabelValues(d.name).Inc()
			}
		}))
	}
	cb := e.cb
	d.mu.Unlock()
	done, err := cb.Allow()
	if err != nil {
		return func(error) {}
	}
	return done
}

// isCallers reports a failure of the caller's own making.
func isCallers(err error) bool {
	var ce *CallerError
	return errors.Is(err, context.Canceled) || errors.As(err, &ce)
}

// exhausted reports a failure of this process's own resources (file
// descriptors, memory, buffers, local ports) before anything reached the
// dependency: not the dependency's failure, and one a single tenant can
// cause (the attacker review held enough streams open to exhaust the
// descriptors, and its EMFILE dial errors opened the shared breaker for
// every tenant), so it counts for nothing.
func exhausted(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// unreachable reports a failure to reach the dependency at all: no
// connection could be made, so no request of anyone's was read.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// retryAfter is the time left of the shared cooldown, at least one
// second.
func (d *dep) retryAfter() time.Duration {
	return max(d.sh.left(time.Now()), time.Second).Round(time.Millisecond)
}

// partyRetryAfter is the time left of e's cooldown, at least one second.
func (d *dep) partyRetryAfter(e *party) time.Duration { return d.left(e.tripped.Load()) }

// left is the time left of a cooldown begun at opened (Unix ns), at
// least one second.
func (d *dep) left(opened int64) time.Duration {
	left := d.st.Cooldown - time.Since(time.Unix(0, opened))
	return max(left, time.Second).Round(time.Millisecond)
}

// Has reports whether name is a configured dependency.
func (s *Set) Has(name string) bool { _, ok := s.deps[name]; return ok }

// Names returns the dependencies, sorted.
func (s *Set) Names() []string { return slices.Sorted(maps.Keys(s.deps)) }

// States returns each dependency's state: "closed", "half-open" or "open".
// An open breaker whose cooldown is over is half-open from then on.
func (s *Set) States() map[string]string {
	out := make(map[string]string, len(s.deps))
	for name, d := range s.deps {
		out[name] = d.sh.now(time.Now()).String()
	}
	return out
}

// Shown returns each dependency's state as fairgate_dependency_breaker_state
// shows it: the state last entered ("closed", "half-open" or "open"), an
// open breaker staying open past its cooldown until a call or [Set.States]
// moves it. Reading it changes nothing.
func (s *Set) Shown() map[string]string {
	out := make(map[string]string, len(s.deps))
	for name, d := range s.deps {
		out[name] = d.sh.last().String()
	}
	return out
}

// failure marks a response the dependency failed to give.
type failure struct{ status int }

func (f failure) Error() string { return fmt.Sprintf("status %d", f.status) }

// Transport is an http.RoundTripper through one dependency's breakers:
// a transport error, or a response whose status is one of the
// dependency's FailureStatuses (502, 503 and 504 by default), is a
// failure (the response is still returned as it came), judged as [Set.Do]
// judges it, for the party of the request's context; while a breaker that
// applies is open, requests fail at once with an *OpenError.
type Transport struct {
	Set  *Set
	Name string
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	var resp *http.Response
	var body *callerBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &callerBody{ReadCloser: req.Body}
		r2 := *req
		r2.Body = body
		req = &r2
	}
	err := t.Set.Do(req.Context(), t.Name, func(context.Context) error {
		var err error
		resp, err = base.RoundTrip(req)
		if err != nil && body != nil {
			if berr := body.failed(); berr != nil {
				return &CallerError{Err: berr}
			}
		}
		if err == nil && t.Set.failing(t.Name, resp.StatusCode) {
			return failure{resp.StatusCode}
		}
		return err
	})
	var f failure
	if errors.As(err, &f) {
		return resp, nil
	}
	if err != nil && req.Body != nil {
		var oe *OpenError
		if errors.As(err, &oe) {
			req.Body.Close()
		}
	}
	return resp, err
}

// failing reports whether status is one of name's failure statuses.
func (s *Set) failing(name string, status int) bool {
	d, ok := s.deps[name]
	return ok && slices.Contains(d.st.FailureStatuses, status)
}

// CallerError is a call that failed because the caller's own request body
// could not be read (a malformed chunk, a client that went away or was too
// slow): the caller's fault, never counted as the dependency's failure.
type CallerError struct{ Err error }

// Error says the caller's own body failed, and how.
func (e *CallerError) Error() string { return "reading the request body: " + e.Err.Error() }

// Unwrap returns the body's read error.
func (e *CallerError) Unwrap() error { return e.Err }

// callerBody is a request body that remembers its first read error other
// than io.EOF.
type callerBody struct {
	io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *callerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *callerBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

type metrics struct {
	state           *prometheus.GaugeVec
	rejections      *prometheus.CounterVec
	partyTrips      *prometheus.CounterVec
	partyRejections *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fairgate_dependency_breaker_state",
			Help: "Circuit breaker state by dependency: 0 closed, 1 half-open (from the first call after the cooldown), 2 open.",
		}, []string{"dependency"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_dependency_rejections_total",
			Help: "Calls refused at once because the dependency's breaker was open.",
		}, []string{"dependency"}),
		partyTrips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_dependency_party_trips_total",
			Help: "Times a party's own breaker opened (the dependency failed that tenant's or client's calls); its calls alone are refused.",
		}, []string{"dependency"}),
		partyRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_dependency_party_rejections_total",
			Help: "Calls refused at once because the caller's own breaker was open.",
		}, []string{"dependency"}),
	}
	if reg == nil {
		return m, nil
	}
	// One Set holds every dependency; a second Set on the same registry
	// would share its state gauge by name, so it is refused (New says so).
	for _, c := range []prometheus.Collector{m.state, m.rejections, m.partyTrips, m.partyRejections} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("breaker: metrics: %w: one Set holds every dependency; give a second Set a registerer of its own (prometheus.WrapRegistererWithPrefix)", err)
		}
	}
	return m, nil
}
