package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/fairgate/fairgate/internal/promreg"
)

// Settings configure one dependency's breaker. The zero value of each
// field means its default.
type Settings struct {
	// ConsecutiveFailures opens the breaker after this many failures in
	// a row. Zero means 5.
	ConsecutiveFailures uint32
	// FailureRatio opens the breaker when failures/calls over Window
	// reach it, with at least MinRequests calls. Zero means 0.5.
	FailureRatio float64
	// MinRequests: see FailureRatio. Zero means 20.
	MinRequests uint32
	// Window is the rolling window the ratio is counted over. Zero means
	// 10 s.
	Window time.Duration
	// Cooldown is how long the breaker stays open before a probe. Zero
	// means 30 s.
	Cooldown time.Duration
}

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
	return s
}

// Check validates s: the ratio in (0, 1], durations not negative.
func (s Settings) Check() error {
	switch {
	case s.FailureRatio < 0 || s.FailureRatio > 1:
		return fmt.Errorf("breaker: failure ratio %v is outside (0, 1]", s.FailureRatio)
	case s.Window < 0 || s.Cooldown < 0:
		return errors.New("breaker: negative window or cooldown")
	}
	return nil
}

// OpenError is a call refused because its dependency's breaker is open
// (or half-open with its probe already out).
type OpenError struct {
	Dependency string
	// RetryAfter is how long until the breaker lets a probe through; at
	// least one second, so it can be sent as Retry-After.
	RetryAfter time.Duration
}

// Error says which dependency is open and when it is tried again.
func (e *OpenError) Error() string {
	return fmt.Sprintf("breaker: dependency %q is failing and its breaker is open: retry in %v", e.Dependency, e.RetryAfter)
}

// ErrUnknown means a dependency is not configured.
var ErrUnknown = errors.New("breaker: unknown dependency")

// Set is the breakers of the configured dependencies.
type Set struct {
	deps map[string]*dep
	m    *metrics
}

// dep is one dependency's breaker and when it last opened.
type dep struct {
	name     string
	cb       *gobreaker.CircuitBreaker[any]
	cooldown time.Duration
	mu       sync.Mutex
	opened   time.Time
}

// New returns breakers for deps by name. reg, if not nil, receives the
// metrics.
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
		st = st.withDefaults()
		d := &dep{name: name, cooldown: st.Cooldown}
		d.cb = gobreaker.NewCircuitBreaker[any](gobreaker.Settings{
			Name:         name,
			MaxRequests:  1,
			BucketPeriod: st.Window / 10,
			Interval:     st.Window,
			Timeout:      st.Cooldown,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				return c.ConsecutiveFailures >= st.ConsecutiveFailures ||
					c.Requests >= st.MinRequests && float64(c.TotalFailures) >= st.FailureRatio*float64(c.Requests)
			},
			IsExcluded: func(err error) bool {
				var ce *CallerError
				return errors.Is(err, context.Canceled) || errors.As(err, &ce)
			},
			OnStateChange: func(name string, from, to gobreaker.State) {
				if to == gobreaker.StateOpen {
					d.mu.Lock()
					d.opened = time.Now()
					d.mu.Unlock()
				}
				m.state.WithLabelValues(name).Set(float64(to))
			},
		})
		m.state.WithLabelValues(name).Set(0)
		s.deps[name] = d
	}
	return s, nil
}

// Do calls f unless name's breaker is open, and counts its error as the
// dependency's failure. An open breaker gives an *OpenError at once.
func (s *Set) Do(ctx context.Context, name string, f func(context.Context) error) error {
	d, ok := s.deps[name]
	if !ok {
		return fmt.Errorf("%w %q: configured are %v", ErrUnknown, name, s.Names())
	}
	_, err := d.cb.Execute(func() (any, error) { return nil, f(ctx) })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		s.m.rejections.WithLabelValues(name).Inc()
		return &OpenError{Dependency: name, RetryAfter: d.retryAfter()}
	}
	return err
}

// retryAfter is the time left of the cooldown, at least one second.
func (d *dep) retryAfter() time.Duration {
	d.mu.Lock()
	left := d.cooldown - time.Since(d.opened)
	d.mu.Unlock()
	return max(left, time.Second).Round(time.Millisecond)
}

// Has reports whether name is a configured dependency.
func (s *Set) Has(name string) bool { _, ok := s.deps[name]; return ok }

// Names returns the dependencies, sorted.
func (s *Set) Names() []string { return slices.Sorted(maps.Keys(s.deps)) }

// States returns each dependency's state: "closed", "half-open" or "open".
func (s *Set) States() map[string]string {
	out := make(map[string]string, len(s.deps))
	for name, d := range s.deps {
		out[name] = d.cb.State().String()
	}
	return out
}

// failure marks a response the dependency failed to give.
type failure struct{ status int }

func (f failure) Error() string { return fmt.Sprintf("status %d", f.status) }

// Transport is an http.RoundTripper through one dependency's breaker: a
// transport error or a 5xx response counts as a failure (the response is
// still returned as it came); while the breaker is open requests fail at
// once with an *OpenError.
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
		if err == nil && resp.StatusCode >= 500 {
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
	state      *prometheus.GaugeVec
	rejections *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fairgate_dependency_breaker_state",
			Help: "Circuit breaker state by dependency: 0 closed, 1 half-open, 2 open.",
		}, []string{"dependency"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_dependency_rejections_total",
			Help: "Calls refused at once because the dependency's breaker was open.",
		}, []string{"dependency"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	promreg.Reuse(reg, &m.state, &err)
	promreg.Reuse(reg, &m.rejections, &err)
	return m, err
}
