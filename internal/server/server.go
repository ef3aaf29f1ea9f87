package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/gateway"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/quota"
)

// Config configures a Server.
type Config struct {
	// Limiter decides every request: /v1/take, /v1/check and the proxy.
	// Required.
	Limiter *limiter.Limiter
	// Registerer, if not nil, receives the proxy's and the forward-auth
	// endpoint's metrics.
	Registerer prometheus.Registerer
	// Tracer, if not nil, traces each request on the public and internal
	// listeners (a server span) and passes the trace to the upstream. Nil
	// means off.
	Tracer trace.Tracer
	// TrustTraceContext makes a request's traceparent the parent of its
	// server span (and its sampled flag the sampling decision of a
	// parent-based sampler), for callers whose trace context is the
	// operator's own, as in a service mesh. False, the default, starts a
	// new trace linked to the caller's: a client cannot force sampling or
	// choose fairgate's trace IDs.
	TrustTraceContext bool
	// RLSJSON, if not nil, serves envoyproxy/ratelimit's /json endpoint
	// (with /healthcheck, 500 while RLSReady fails) on the internal
	// surface.
	RLSJSON http.HandlerFunc
	// Headers is the rate-limit header form. "" means draft.
	Headers limitheader.Form
	// Auth verifies the credentials of proxied requests and of
	// /v1/me/limits. Nil means none are accepted (only anonymous routes
	// pass the proxy).
	Auth *auth.Authenticator
	// ClientIP finds the client address behind trusted proxies.
	ClientIP auth.ClientIP
	// UpstreamHeaders name the headers the proxy passes the verified
	// tenant and plan in (and /v1/authz answers them in).
	UpstreamHeaders config.UpstreamHeaders
	// ForwardAuth configures /v1/authz.
	ForwardAuth config.ForwardAuth
	// Upstream, if set, is the API that requests not addressed to fairgate
	// are proxied to.
	Upstream *url.URL
	// UpstreamTimeout bounds the wait for the upstream's response headers.
	// Zero means 30 s.
	UpstreamTimeout time.Duration
	// Capacity, if not nil, shares the upstream's concurrency fairly
	// between tenants: the proxy's requests pass its gate after their
	// limits. SetCapacity changes it on a reload.
	Capacity *config.UpstreamCapacity
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
	// InternalToken, if not empty, is the bearer token every endpoint of
	// the internal surface requires except /healthz and /readyz (probes):
	// the decision API, outbound quotas, worker job endpoints and
	// /metrics. The dashboard checks its own tokens (the admin and this
	// one; package dash). Empty means whoever reaches the internal
	// listener may call them.
	InternalToken string
	// SettleKey signs the settlement handles /v1/check answers for
	// measured-cost requests (settle.go): give every instance the same
	// one, at least MinSettleKey bytes, so that a handle settles on any
	// of them. Empty means a random key of this instance's own: its
	// handles settle only on it.
	SettleKey []byte
	// ControlTimeout bounds each store call that is not a decision: the
	// job queue's and /v1/me/limits' reads. Zero means
	// DefaultControlTimeout.
	ControlTimeout time.Duration
	// StoreWarning, if not nil, says what is wrong with the store's
	// settings (such as an eviction policy that resets limits), for
	// /readyz's details; "" when nothing is.
	StoreWarning func() string
	// NoPolicy says the config has no policy (only the Envoy service's
	// settings): /v1/check, /v1/authz and /v1/me/limits answer 404 saying
	// so. SetNoPolicy changes it on a reload.
	NoPolicy bool
	// StoreConnected, if not nil, reports whether the store has been
	// reached at all (a Redis down at start is connected in the
	// background); /readyz reports the store down until it has.
	StoreConnected func() bool
	// ReadyRequiresStore makes /readyz answer 503 while the store is down
	// (or not yet reached). False, the default, keeps /readyz at 200 then,
	// reporting the store down in its body: the instance still answers by
	// each policy's fail mode (the fallback, or 503 with Retry-After), and
	// a shared store's outage would otherwise take every instance out of
	// its load balancer at once (docs/deploy.md, Probes on Kubernetes).
	ReadyRequiresStore bool
	// RLSReady, if not nil, reports whether the Envoy rate limit service
	// can answer as configured (rls.Service.Ready): an error makes /readyz
	// answer 503 with it in the body's "rls".
	RLSReady func() error
}

// Server serves the decision API and, with an upstream, the proxy. It is
// an http.Handler.
//
// Without an upstream it is a decision service and serves everything on
// one handler. With an upstream, what a tenant's client may call (the
// proxy, GET /v1/me/limits, the tenant job endpoints and /healthz) is
// served by the Server itself, for the public listener, and everything
// that charges or reads any tenant's limits (/v1/take, /v1/check,
// /v1/outbound/*, the worker job endpoints, /metrics, /readyz and the
// dashboard) only by Internal, for a listener only the operator's own
// services reach.
type Server struct {
	lim         *limiter.Limiter
	metrics     *serverMetrics
	internal    http.Handler // nil without an upstream: one surface
	form        limitheader.Form
	id          atomic.Pointer[identity]
	swapMu      sync.RWMutex  // held by Swap
	swapGen     atomic.Uint64 // odd while a Swap runs
	log         *slog.Logger
	mux         *http.ServeMux
	proxy       http.Handler
	worker      *[sha256.Size]byte // the worker token's hash; nil: none required
	itoken      *[sha256.Size]byte // the internal token's hash; nil: none required
	settleKey   []byte             // signs settlement handles (settle.go)
	ctlWait     time.Duration      // ControlTimeout
	draining    atomic.Bool
	authzWarned atomic.Bool // /v1/authz without a gateway was logged
	noPolicy    atomic.Bool
	warning     func() string // StoreWarning
	conn        func() bool   // StoreConnected
	needStore   bool          // ReadyRequiresStore
	rlsReady    func() error  // RLSReady
	jobs        fairq.Queue
	kinds       fairq.Kinds
	breakers    *breaker.Set
	tracer      trace.Tracer // nil: off
	trustTrace  bool         // Config.TrustTraceContext
	handler     http.Handler // the public surface: mux, traced
	capacity    gateHolder   // the proxy's upstream capacity gate
}

// New returns a server for c.
func New(c Config) (*Server, error) {
	if c.Limiter == nil {
		return nil, errors.New("server: Config.Limiter is required")
	}
	form, err := limitheader.ParseForm(string(c.Headers))
	if err != nil {
		return nil, err
	}
	s := &Server{lim: c.Limiter, form: form, log: c.Logger, jobs: c.Jobs, kinds: c.JobKinds, breakers: c.Breakers, ctlWait: c.ControlTimeout, warning: c.StoreWarning, conn: c.StoreConnected, needStore: c.ReadyRequiresStore, rlsReady: c.RLSReady, tracer: c.Tracer, trustTrace: c.TrustTraceContext}
	if s.ctlWait <= 0 {
		s.ctlWait = DefaultControlTimeout
	}
	if s.worker, err = tokenHash("worker", c.WorkerToken); err != nil {
		return nil, err
	}
	if s.itoken, err = tokenHash("internal", c.InternalToken); err != nil {
		return nil, err
	}
	if s.settleKey, err = settleKey(c.SettleKey); err != nil {
		return nil, err
	}
	if s.metrics, err = newServerMetrics(c.Registerer, &s.capacity); err != nil {
		return nil, err
	}
	if err := registerHealth(c.Registerer, s); err != nil {
		return nil, err
	}
	if err := s.SetIdentity(c.Auth, c.ClientIP, c.UpstreamHeaders, c.ForwardAuth); err != nil {
		return nil, err
	}
	s.SetCapacity(c.Capacity)
	s.noPolicy.Store(c.NoPolicy)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// pub is the public surface, in reach of tenants' clients; in is the
	// internal one. Without an upstream they are the same mux.
	pub, in := http.NewServeMux(), http.NewServeMux()
	if c.Upstream == nil {
		in = pub
	}
	healthz := only("GET", handleHealthz)
	pub.HandleFunc("/healthz", healthz)
	pub.HandleFunc("/v1/me/limits", only("GET", s.needsPolicy(s.handleMyLimits)))
	if c.Jobs != nil {
		pub.HandleFunc("POST /v1/jobs/{kind}", s.needsPolicy(s.handleEnqueue))
		pub.HandleFunc("GET /v1/jobs/{id}", s.handleJob)
	}
	if in != pub {
		in.HandleFunc("/healthz", healthz)
	}
	in.HandleFunc("/readyz", only("GET", s.handleReady))
	in.HandleFunc("/openapi.json", only("GET", serveOpenAPI))
	in.HandleFunc("/v1/take", only("POST", s.forInternal(s.handleTake)))
	in.HandleFunc("/v1/check", only("POST", s.forInternal(s.needsPolicy(s.handleCheck))))
	in.HandleFunc("/v1/settle", only("POST", s.forInternal(s.needsPolicy(s.handleSettle))))
	in.HandleFunc("/v1/concurrency/acquire", only("POST", s.forInternal(s.needsPolicy(s.handleSlotAcquire))))
	in.HandleFunc("/v1/concurrency/release", only("POST", s.forInternal(s.needsPolicy(s.handleSlotRelease))))
	// Forward auth: the gateway forwards the client's own credential in
	// Authorization, so the internal token cannot guard it; what a caller
	// can charge is its own credential's tenant, or its own address.
	in.HandleFunc(gateway.AuthzPath, s.needsPolicy(s.handleAuthz))
	in.HandleFunc(gateway.AuthzPath+"/", s.needsPolicy(s.handleAuthz)) // Envoy's ext_authz appends the original path
	s.operatorRoutes(in, c)
	var public *http.ServeMux // proxy mode: the paths served on the main listener instead
	if c.Upstream != nil {
		public = pub
	}
	in.HandleFunc("/", notFound(elsewhere(c.Dashboard != nil, public)))
	if c.Upstream != nil {
		if s.proxy, err = s.newProxy(c.Upstream, c.UpstreamTimeout); err != nil {
			return nil, err
		}
		pub.Handle("/", s.proxy)
		s.internal = s.recovering(s.traced(plainTargets(in)))
	}
	s.mux = pub
	s.handler = s.traced(plainTargets(pub))
	if c.Upstream != nil {
		s.handler = s.closeUnauthorized(s.handler)
	}
	return s, nil
}

// control returns r's context bounded by the control timeout.
func (s *Server) control(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.ctlWait)
}

// SetNoPolicy says whether the config in force has a policy (see
// Config.NoPolicy), as a reload does.
func (s *Server) SetNoPolicy(none bool) { s.noPolicy.Store(none) }

// operatorRoutes adds the internal surface's endpoints for operators and
// workers: metrics, envoyproxy/ratelimit's /json, the dashboard, outbound
// quotas and the worker job endpoints.
func (s *Server) operatorRoutes(in *http.ServeMux, c Config) {
	if c.Metrics != nil {
		in.Handle("/metrics", only("GET", s.forInternal(c.Metrics.ServeHTTP)))
	}
	if c.RLSJSON != nil {
		// envoyproxy/ratelimit's HTTP endpoints, for its clients and probes.
		in.HandleFunc("/json", s.forInternal(c.RLSJSON))
		in.HandleFunc("/healthcheck", only("GET", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			// As that service's: 500 while its health fails (here, while
			// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED finds no domain).
			if s.rlsReady != nil {
				if err := s.rlsReady(); err != nil {
					w.WriteHeader(http.StatusInternalServerError)
					w.Write([]byte(err.Error()))
					return
				}
			}
			w.Write([]byte("OK"))
		}))
	}
	if c.Dashboard != nil {
		// The page carries no data; the data needs the admin or the
		// internal token, which the page asks for (package dash).
		in.Handle("/dashboard", c.Dashboard)
		in.Handle("/dashboard/", c.Dashboard)
	}
	if c.Quotas != nil {
		o := &outbound{q: c.Quotas}
		in.HandleFunc("/v1/outbound/acquire", only("POST", s.forInternal(s.forWorkers(o.handleAcquire))))
		in.HandleFunc("/v1/outbound/pause", only("POST", s.forInternal(s.forWorkers(o.handlePause))))
	}
	if c.Jobs != nil {
		in.HandleFunc("POST /v1/jobs/{kind}/lease", s.forInternal(s.forWorkers(s.handleLease)))
		in.HandleFunc("POST /v1/jobs/{id}/ack", s.forInternal(s.forWorkers(s.handleAck)))
		in.HandleFunc("POST /v1/jobs/{id}/nack", s.forInternal(s.forWorkers(s.handleNack)))
	}
}

// Internal is the handler of the internal listener in proxy mode, or nil
// without an upstream (then the Server itself serves everything).
func (s *Server) Internal() http.Handler { return s.internal }

// ServeHTTP serves the public surface (everything, without an upstream),
// turning any panic below into a 500 so that one request cannot take the
// process down.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer s.recoverPanic(w, r)
	s.handler.ServeHTTP(w, r)
}
