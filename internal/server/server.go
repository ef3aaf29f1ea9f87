// Package server is fairgate's HTTP service: GET /healthz and /readyz,
// POST /v1/take (a limit on any key with the policy in the request, in the
// manner of redis-cell's CL.THROTTLE), POST /v1/check (a tenant decision
// for gateways), GET /v1/me/limits, POST /v1/outbound/acquire and
// /v1/outbound/pause (provider quotas for workers), /metrics, the reverse
// proxy in front of an upstream API, and (admin.go) the admin API on its
// own listener.
//
// Nothing a client sends can crash or stall it: bodies are capped, decoding
// is strict, every store call has a deadline, and errors are problem+json.
package server

import (
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/quota"
)

// Config configures a Server.
type Config struct {
	// Limiter decides every request: /v1/take, /v1/check and the proxy.
	// Required.
	Limiter *limiter.Limiter
	// Headers is the rate-limit header form. "" means draft.
	Headers httplimit.Form
	// Auth verifies the credentials of proxied requests and of
	// /v1/me/limits. Nil means none are accepted (only anonymous routes
	// pass the proxy).
	Auth *auth.Authenticator
	// ClientIP finds the client address behind trusted proxies.
	ClientIP auth.ClientIP
	// Upstream, if set, is the API that requests not addressed to fairgate
	// are proxied to.
	Upstream *url.URL
	// UpstreamTimeout bounds the wait for the upstream's response headers.
	// Zero means 30 s.
	UpstreamTimeout time.Duration
	// Logger receives errors. Nil means silent.
	Logger *slog.Logger
	// Metrics, if not nil, is served at GET /metrics.
	Metrics http.Handler
	// Quotas, if not nil, serves POST /v1/outbound/acquire and
	// /v1/outbound/pause for workers.
	Quotas *quota.Quotas
	// Jobs, if not nil, serves the fair job queue: POST /v1/jobs/{kind}
	// and GET /v1/jobs/{id} for tenants, and lease, ack and nack for
	// workers. JobKinds are its kinds.
	Jobs     fairq.Queue
	JobKinds fairq.Kinds
	// Breakers, if not nil, are the dependencies' circuit breakers: shown
	// by /readyz, and the one named "upstream" guards the proxy.
	Breakers *breaker.Set
	// Dashboard, if not nil, is served at GET /dashboard and
	// /dashboard/data.
	Dashboard http.Handler
	// WorkerToken, if not empty, is the bearer token the worker endpoints
	// (outbound quotas, job leases) require. Empty means they are open to
	// whoever reaches the listener, like /v1/take.
	WorkerToken string
}

// Server serves the decision API and, with an upstream, the proxy. It is
// an http.Handler.
type Server struct {
	lim      *limiter.Limiter
	form     httplimit.Form
	id       atomic.Pointer[identity]
	log      *slog.Logger
	mux      *http.ServeMux
	proxy    http.Handler
	worker   *[sha256.Size]byte // the worker token's hash; nil: none required
	jobs     fairq.Queue
	kinds    fairq.Kinds
	breakers *breaker.Set
}

// MaxBody is the largest request body accepted; larger ones get 413.
const MaxBody = 64 << 10

// New returns a server for c.
func New(c Config) (*Server, error) {
	if c.Limiter == nil {
		return nil, errors.New("server: Config.Limiter is required")
	}
	form, err := httplimit.ParseForm(string(c.Headers))
	if err != nil {
		return nil, err
	}
	s := &Server{lim: c.Limiter, form: form, log: c.Logger, jobs: c.Jobs, kinds: c.JobKinds, breakers: c.Breakers}
	if c.WorkerToken != "" {
		if len(c.WorkerToken) < 16 {
			return nil, errors.New("server: the worker token must be at least 16 characters")
		}
		sum := sha256.Sum256([]byte(c.WorkerToken))
		s.worker = &sum
	}
	s.SetIdentity(c.Auth, c.ClientIP)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/healthz", only("GET", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	}))
	s.mux.HandleFunc("/readyz", only("GET", s.handleReady))
	s.mux.HandleFunc("/v1/take", only("POST", s.handleTake))
	s.mux.HandleFunc("/v1/check", only("POST", s.handleCheck))
	s.mux.HandleFunc("/v1/me/limits", only("GET", s.handleMyLimits))
	if c.Metrics != nil {
		s.mux.Handle("/metrics", only("GET", c.Metrics.ServeHTTP))
	}
	if c.Dashboard != nil {
		s.mux.Handle("/dashboard", c.Dashboard)
		s.mux.Handle("/dashboard/", c.Dashboard)
	}
	if c.Quotas != nil {
		o := &outbound{q: c.Quotas}
		s.mux.HandleFunc("/v1/outbound/acquire", only("POST", s.forWorkers(o.handleAcquire)))
		s.mux.HandleFunc("/v1/outbound/pause", only("POST", s.forWorkers(o.handlePause)))
	}
	if c.Jobs != nil {
		s.mux.HandleFunc("POST /v1/jobs/{kind}", s.handleEnqueue)
		s.mux.HandleFunc("GET /v1/jobs/{id}", s.handleJob)
		s.mux.HandleFunc("POST /v1/jobs/{kind}/lease", s.forWorkers(s.handleLease))
		s.mux.HandleFunc("POST /v1/jobs/{id}/ack", s.forWorkers(s.handleAck))
		s.mux.HandleFunc("POST /v1/jobs/{id}/nack", s.forWorkers(s.handleNack))
	}
	if c.Upstream != nil {
		if s.proxy, err = s.newProxy(c.Upstream, c.UpstreamTimeout); err != nil {
			return nil, err
		}
		s.mux.Handle("/", s.proxy)
	} else {
		s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no such endpoint: " + r.Method + " " + r.URL.Path})
		})
	}
	return s, nil
}

// identity is what the server verifies credentials and finds client
// addresses with; swapped whole on a config reload.
type identity struct {
	auth *auth.Authenticator
	ip   auth.ClientIP
}

// SetIdentity replaces the credentials and trusted proxies, as a config
// reload does. Requests in flight finish with the old ones.
func (s *Server) SetIdentity(a *auth.Authenticator, ip auth.ClientIP) {
	s.id.Store(&identity{auth: a, ip: ip})
}

// clientIP is the request's client address by the trusted proxies in force.
func (s *Server) clientIP(r *http.Request) netip.Addr { return s.id.Load().ip.Of(r) }

// handleReady answers 200 while the store answers, or while no policy
// fails closed (fail-open policies are served by the fallback); else 503.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	up, failClosed := s.lim.StoreUp(), s.lim.HasFailClosed()
	ready := up || !failClosed
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	store := "up"
	if !up {
		store = "down"
	}
	out := map[string]any{"ready": ready, "store": store, "fail_closed_policies": failClosed}
	if s.breakers != nil {
		out["breakers"] = s.breakers.States()
	}
	writeJSON(w, status, out)
}

// forWorkers lets through requests that carry the worker token (any
// request when none is configured) and answers the others 401.
func (s *Server) forWorkers(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.worker != nil && !auth.BearerMatches(r, *s.worker) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate-workers"`)
			problem.Write(w, problem.Details{Status: http.StatusUnauthorized, Detail: "worker requests need Authorization: Bearer <worker token>"})
			return
		}
		h(w, r)
	}
}

// only restricts h to one method (GET also admits HEAD); other methods get
// a 405 problem with Allow.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == "GET" && r.Method == "HEAD") {
			w.Header().Set("Allow", method)
			problem.Write(w, problem.Details{Status: http.StatusMethodNotAllowed, Detail: r.URL.Path + " takes " + method})
			return
		}
		h(w, r)
	}
}

// ServeHTTP serves the API, turning any panic below into a 500 so that one
// request cannot take the process down.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", slog.String("path", r.URL.Path), slog.Any("panic", v))
			problem.Write(w, problem.Details{Status: http.StatusInternalServerError, Detail: "internal error"})
		}
	}()
	s.mux.ServeHTTP(w, r)
}
