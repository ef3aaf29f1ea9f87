package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/server"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/internal/tracing"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store/guard"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// Serve runs the service until ctx ends, then shuts down gracefully. ready,
// if not nil, receives the listening address once it accepts connections.
// The config is validated before anything starts: a bad file never starts
// the server. It is reloaded when it changes on disk and on SIGHUP.
//
// Its life is caddy's: build every part (validating as it goes, starting
// nothing), start the listeners and loops, wait, stop.
func Serve(ctx context.Context, c ServeConfig, log *slog.Logger, ready func(addr string)) error {
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && debug.SetMemoryLimit(-1) == math.MaxInt64 {
		// A soft limit under the documented 512 MiB: the garbage collector
		// works harder before the process grows past it.
		debug.SetMemoryLimit(DefaultMemoryLimit)
	}
	bg, cancel := context.WithCancel(ctx)
	d := &daemon{c: c, log: log, bg: bg, fatal: make(chan error, 1)}
	defer func() { cancel(); d.stopListeners(); d.wg.Wait(); d.close() }()
	if err := d.build(); err != nil {
		return err
	}
	if err := d.start(ready); err != nil {
		return err
	}
	return d.wait(ctx)
}

// daemon is one `fairgate serve`: its parts, built, then started and
// stopped.
type daemon struct {
	c   ServeConfig
	log *slog.Logger
	// bg ends the background loops; wg waits for them; fatal carries the
	// first error of any of them (a listener that stops serving, a loop
	// that gives up).
	bg    context.Context
	wg    sync.WaitGroup
	fatal chan error

	// cfg is the config the daemon started with: the fixedAtStart
	// settings are its; live is the graph in force, swapped whole on
	// each reload and xDS update, one at a time (swapMu).
	cfg    *config.Config
	raw    []byte
	live   atomic.Pointer[graph]
	swapMu sync.Mutex
	be     Backend
	// perSecond is the per-second store, and secondsGuard its guard, when
	// configured.
	perSecond    Backend
	secondsGuard *guard.Guard
	reg          registry
	reloads      *prometheus.CounterVec
	// restartPending is fairgate_config_restart_pending.
	restartPending *prometheus.GaugeVec
	rtSkipped      *prometheus.GaugeVec // fairgate_rls_runtime_skipped_entries
	board          *dash.Dashboard
	lim            *limiter.Limiter
	quotas         *quota.Quotas
	breakers       *breaker.Set
	jobs           fairq.Queue
	depths         map[string]*queueDepth // by job kind
	rlsSvc         *rls.Service
	// rlsBound bounds the Envoy service's calls in flight, gRPC and /json
	// together, and marks the gRPC listener's idle connections.
	rlsBound *rls.Bound
	// xdsFirst, with xDS and without FORCE_START_WITHOUT_INITIAL_CONFIG,
	// closes when the first xDS config is in force: the gRPC port opens
	// then, as envoyproxy/ratelimit's does.
	xdsFirst chan struct{}
	keys     *apikeys.Set // the stored API keys
	tr       tracing.Tracing
	h        *server.Server
	reload   func() error

	tls     listenerTLS    // each listener's TLS; nil: plain
	srv     *http.Server   // the main listener's
	errc    chan error     // its Serve's end
	servers []*http.Server // the others: internal, admin, debug
	grpc    *grpc.Server
	closers []func() error
}

// goCheck runs f in the background; its error, unless the daemon is
// stopping, stops the daemon.
func (d *daemon) goCheck(what string, f func() error) {
	d.wg.Go(func() {
		if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) && d.bg.Err() == nil {
			select {
			case d.fatal <- fmt.Errorf("serve: %s: %w", what, err):
			default:
			}
		}
	})
}

// stopListeners closes whatever still listens: after a failed start, the
// listeners that did open; after wait, nothing is left.
func (d *daemon) stopListeners() {
	for _, x := range d.servers {
		x.Close()
	}
	if d.grpc != nil {
		d.grpc.Stop()
	}
}

// close releases what build opened, in reverse.
func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// build validates the config and builds every part; it starts nothing but
// the JWKS fetch of the authenticator.
func (d *daemon) build() error {
	var err error
	if e := d.c.Env; len(e.Used) > 0 {
		d.log.Info("read envoyproxy/ratelimit's environment", slog.Any("variables", e.Used), slog.String("store", redisstore.RedactURL(d.c.Store)), slog.String("per_second_store", redisstore.RedactURL(d.c.PerSecondStore)), slog.String("grpc_listen", d.c.GRPCListen))
		if len(e.Unsupported) > 0 {
			d.log.Warn("envoyproxy/ratelimit variables fairgate does not support (see docs/rls.md)", slog.Any("variables", e.Unsupported))
		}
	}
	for _, w := range d.c.Warnings {
		d.log.Warn("set but unused in this mode", slog.String("detail", w))
	}
	if d.cfg, d.raw, err = LoadConfig(d.c.Config, d.c.ConfigData); err != nil {
		return err
	}
	if d.c.PerSecondStore != "" && d.c.GRPCListen == "" && !d.cfg.HasRLS {
		return fmt.Errorf("serve: --per-second-store (FAIRGATE_PER_SECOND_STORE) does nothing here: it is the Envoy rate limit service's store for windows of one second, and needs --grpc-listen or an rls section in %s", d.cfg.File)
	}
	if d.be, err = OpenBackend(d.c.Store, d.c.StoreTimeout, d.log); err != nil {
		return err
	}
	if d.be.lazy != nil {
		d.be.lazy.caches = true
	}
	if d.tls, err = loadTLS(d.c); err != nil {
		return err
	}
	d.closers = append(d.closers, d.be.Store.Close)
	if d.tr, err = tracing.FromEnv(d.bg, d.c.Env.Tracing); err != nil {
		return err
	}
	if d.tr.Provider != nil {
		tracing.LogErrors(d.log)
		d.log.Info("tracing on", slog.String("exporter", d.tr.Exporter), slog.Bool("tenant_ids", d.c.TraceTenants), slog.Bool("trust_trace_context", d.c.TrustTraceContext))
		d.closers = append(d.closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return d.tr.Shutdown(ctx) // the spans still queued
		})
	}
	d.reg = newRegistry()
	d.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairgate_config_reloads_total", Help: "Config file reloads by result (applied, refused)."}, []string{"result"})
	d.reg.MustRegister(d.reloads, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if z := d.be.lazy; z != nil {
		if err := z.register(d.reg); err != nil {
			return err
		}
	}
	if d.cfg.Dashboard {
		d.board = dash.New(dashSource{d}, d.c.AdminToken, d.c.InternalToken)
	}
	if d.restartPending, err = newRestartPending(d.reg); err != nil {
		return err
	}
	if d.cfg.Auth.JWT != nil && d.cfg.Auth.JWT.JWKSURL != "" {
		d.log.Info("fetching the JWT key set", slog.String("jwks_url", d.cfg.Auth.JWT.JWKSURL), slog.Int64("timeout_ms", auth.DefaultJWKSTimeout.Milliseconds()))
	}
	backend := apikeys.NewMemory()
	if z := d.be.lazy; z != nil {
		backend = apikeys.Deferred(z.keyBackend)
	}
	if d.keys, err = apikeys.New(apikeys.Config{Backend: backend, Logger: d.log}); err != nil {
		return err
	}
	// The graph of the config, as a reload builds it: the parts below
	// start with it.
	g, err := d.buildGraph(d.cfg, nil)
	if err != nil {
		return err
	}
	d.live.Store(g)
	if err := d.buildDeciders(g); err != nil {
		return err
	}
	return d.buildServer(g)
}

// buildDeciders builds the limiter, the outbound quotas, the breakers and
// job queues, and the Envoy service, in the state of g.
func (d *daemon) buildDeciders(g *graph) error {
	var err error
	d.lim, err = limiter.New(limiter.Config{
		Limited:      limitedHook(d.board),
		Store:        d.be.Store,
		Policy:       g.policy,
		Control:      d.be.Control,
		Timeout:      d.be.Timeout,
		Fallback:     memstore.New(memstore.Config{MaxKeys: 100_000, MaxBytes: 32 << 20}),
		Instances:    d.cfg.Instances,
		Logger:       d.log,
		Registerer:   d.reg,
		Tracer:       d.tr.Tracer(),
		TraceTenants: d.c.TraceTenants,
	})
	if err != nil {
		return err
	}
	qtimeout := time.Duration(0) // quota's own default: workers wait for providers anyway
	if d.be.Timeout < 0 {
		qtimeout = -1
	}
	if d.quotas, err = quota.New(quota.Config{Store: d.be.Store, Providers: d.cfg.Providers, Timeout: qtimeout, Registerer: d.reg}); err != nil {
		return err
	}
	weights := func() map[string]int { return d.live.Load().cfg.QueueWeights }
	if d.breakers, d.jobs, d.depths, err = backpressure(d.cfg, d.c, d.be.Store, d.be.lazy, d.lim, weights, d.reg); err != nil {
		return err
	}
	d.closers = append(d.closers, d.jobs.Close)
	if d.rlsSvc, err = rls.New(g.rls, d.lim.Guard(), d.log, d.reg); err != nil {
		return err
	}
	if d.rtSkipped, err = newRuntimeSkipped(d.reg); err != nil {
		return err
	}
	reportRuntime(d.cfg, d.rtSkipped, d.log)
	if d.c.RLSMaxCalls != 0 && d.c.GRPCListen == "" && !d.cfg.HasRLS {
		return fmt.Errorf("serve: --rls-max-calls (FAIRGATE_RLS_MAX_CALLS) does nothing here: it bounds the Envoy rate limit service's calls in flight, and needs --grpc-listen or an rls section in %s", d.cfg.File)
	}
	d.rlsBound = rls.NewBound(rls.Limits{MaxCalls: d.c.RLSMaxCalls, CallTimeout: d.readTimeout()})
	if err := d.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fairgate_rls_calls_in_flight", Help: "The Envoy rate limit service's calls in flight (gRPC of any method, and /json), at most --rls-max-calls."},
		func() float64 { return float64(d.rlsBound.InFlight()) })); err != nil {
		return err
	}
	if err := d.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairgate_rls_calls_refused_total", Help: "Envoy rate limit service calls refused at --rls-max-calls (gRPC RESOURCE_EXHAUSTED, /json 503)."},
		func() float64 { return float64(d.rlsBound.Refused()) })); err != nil {
		return err
	}
	if err := d.buildPerSecond(); err != nil {
		return err
	}
	if s := d.cfg.Statsd; s.Address != "" {
		proto := s.Protocol
		if proto == "" {
			proto = "udp"
		}
		sink, err := statsd.New(statsd.Config{Address: s.Address, Protocol: proto, Interval: s.FlushInterval,
			Tags: s.Tags, DogStatsD: s.DogStatsD, Mogrifiers: s.Mogrifiers, Log: d.log})
		if err != nil {
			return fmt.Errorf("serve: statsd %s: %w", s.Address, err)
		}
		if err := d.reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairgate_statsd_dropped_total", Help: "statsd lines dropped because the send queue (4 MiB) was full: the statsd server was down or slow."},
			func() float64 { return float64(sink.Dropped()) })); err != nil {
			return err
		}
		d.rlsSvc.SetStatsSink(sink)
		d.closers = append(d.closers, sink.Close)
		if d.cfg.HasRLS && d.cfg.RLSXDS.Address == "" {
			d.rlsSvc.CountConfigLoad(true) // the config in force at start
		}
	}
	return nil
}

// buildPerSecond opens the per-second store, when configured, with a
// guard of its own (its metrics prefixed per_second_), for the Envoy
// service's counted windows of one second.
func (d *daemon) buildPerSecond() error {
	if d.c.PerSecondStore == "" {
		return nil
	}
	var err error
	if d.perSecond, err = OpenBackend(d.c.PerSecondStore, d.c.StoreTimeout, d.log); err != nil {
		return fmt.Errorf("serve: per-second store: %w", err)
	}
	d.closers = append(d.closers, d.perSecond.Store.Close)
	if z := d.perSecond.lazy; z != nil {
		if err := z.register(prometheus.WrapRegistererWithPrefix("per_second_", d.reg)); err != nil {
			return err
		}
	}
	d.secondsGuard, err = guard.New(guard.Config{
		Store: d.perSecond.Store, Timeout: d.perSecond.Timeout,
		Fallback: memstore.New(memstore.Config{MaxKeys: 100_000, MaxBytes: 32 << 20}), Instances: d.cfg.Instances, Tracer: d.tr.Tracer(),
		Logger: d.log, Registerer: prometheus.WrapRegistererWithPrefix("per_second_", d.reg),
	})
	if err != nil {
		return err
	}
	d.rlsSvc.SetPerSecond(d.secondsGuard)
	return nil
}

// buildServer builds the HTTP handlers, in the state of g.
func (d *daemon) buildServer(g *graph) error {
	cfg, c, log := g.cfg, d.c, d.log
	var err error
	sc := server.Config{
		Limiter: d.lim, Headers: limitheader.Form(cfg.Headers), Auth: g.authn, ClientIP: g.ip,
		UpstreamHeaders: cfg.UpstreamHeaders, ForwardAuth: cfg.ForwardAuth,
		UpstreamTimeout: c.UpstreamTimeout, Logger: log, NoPolicy: cfg.NoPolicy, Metrics: promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}), Tracer: d.tr.Tracer(), TrustTraceContext: c.TrustTraceContext,
		Quotas: d.quotas, WorkerToken: c.WorkerToken, InternalToken: c.InternalToken, SettleKey: []byte(c.SettleToken), ControlTimeout: c.ControlTimeout,
		Jobs: d.jobs, JobKinds: cfg.Queues, Breakers: d.breakers, Registerer: d.reg,
		Capacity: cfg.UpstreamCapacity, ReadyRequiresStore: c.ReadyRequiresStore,
	}
	if cfg.UpstreamCapacity != nil && c.Upstream == "" {
		log.Warn("upstream_capacity shares a proxied upstream's concurrency: it does nothing without --upstream")
	}
	if cfg.HasRLS {
		sc.RLSJSON = d.rlsBound.JSON(d.rlsSvc.ServeJSON)
	}
	sc.RLSReady = d.rlsSvc.Ready
	if z := d.be.lazy; z != nil {
		sc.StoreWarning = z.Warning
		sc.StoreConnected = func() bool { return z.conn.Load() != nil }
	}
	if d.board != nil {
		sc.Dashboard = d.board
		if c.AdminToken == "" && c.InternalToken == "" {
			exposed(log, "the dashboard's data (/dashboard/data) needs no token, so it shows no tenant IDs: set FAIRGATE_ADMIN_TOKEN or FAIRGATE_INTERNAL_TOKEN to lock it and see them, or dashboard: off in the config")
		}
	}
	if c.WorkerToken == "" && (len(cfg.Providers) > 0 || len(cfg.Queues) > 0) {
		exposed(log, "the worker endpoints (/v1/outbound/*, job lease, ack and nack) need no token: set FAIRGATE_WORKER_TOKEN or --worker-token-file unless only trusted workers reach the listener")
	}
	if c.Upstream != "" {
		if sc.Upstream, err = url.Parse(c.Upstream); err != nil {
			return fmt.Errorf("serve: upstream %q: %w", c.Upstream, err)
		}
	}
	d.h, err = server.New(sc)
	return err
}

// start connects the store, starts the loops (limiter, dashboard, config
// watcher) and every listener, and reports the main one to ready.
func (d *daemon) start(ready func(addr string)) error {
	if err := d.connect(d.be.lazy, d.c.Store, storeSetting); err != nil {
		return err
	}
	d.goCheck("limiter", func() error { return d.lim.Run(d.bg) })
	d.goCheck("API keys", func() error { d.keys.Run(d.bg); return nil })
	if d.secondsGuard != nil {
		if err := d.connect(d.perSecond.lazy, d.c.PerSecondStore, perSecondSetting); err != nil {
			return err
		}
		d.goCheck("per-second store probe", func() error { return d.secondsGuard.Run(d.bg) })
	}
	if d.board != nil {
		d.goCheck("dashboard", func() error { return d.board.Run(d.bg) })
	}
	if d.cfg.RLSXDS.Address != "" {
		d.followXDS()
	}
	if d.c.Config != "" || d.c.ConfigData != nil {
		d.watch()
	}
	d.log.Info("policy loaded", slog.String("config", d.cfg.File), slog.Int("plans", len(d.cfg.Policy.Plans)), slog.Int("routes", len(d.cfg.Policy.Routes)), slog.String("headers", d.cfg.Headers))
	warnDemoKeys(d.log, d.cfg.File, d.cfg.Auth.APIKeys)
	ln, err := d.listen()
	if err != nil {
		return err
	}
	d.log.Info("serving", slog.String("listen", ln.Addr().String()), slog.String("store", redisstore.RedactURL(d.c.Store)), slog.String("upstream", d.c.Upstream))
	if ready != nil {
		ready(ln.Addr().String())
	}
	d.errc = make(chan error, 1)
	go func() { d.errc <- serveOn(d.srv, ln, d.tls.main) }()
	return nil
}

// connect makes one try now to connect a Redis store (z nil: an
// in-process one), the one setting names; if Redis is down, the daemon
// starts anyway and keeps trying in the background, but if Redis refuses
// the settings (redisstore.ErrRefused: a password, the ACL user, the
// database number, the sentinel master name), it does not start.
func (d *daemon) connect(z *lazyRedis, url, setting string) error {
	if z == nil {
		return nil
	}
	if err := z.connect(); err != nil {
		z.failed(err)
		if !errors.Is(err, redisstore.ErrConnect) {
			return fmt.Errorf("serve: %s: %w", setting, err)
		}
		d.log.Warn("store not reachable at start: serving by each policy's fail mode while connecting in the background", slog.String("store", redisstore.RedactURL(url)), slog.String("error", err.Error()))
	}
	d.goCheck("store connection", func() error { z.Run(d.bg); return nil })
	return nil
}

// The settings that name the stores, in messages.
const (
	storeSetting     = "--store (FAIRGATE_STORE)"
	perSecondSetting = "--per-second-store (FAIRGATE_PER_SECOND_STORE)"
)

// wait serves until ctx ends or a part fails, then drains (/readyz fails
// while requests are still served) and stops: every listener closes and
// requests in flight get the shutdown grace to finish.
func (d *daemon) wait(ctx context.Context) error {
	if d.grpc != nil {
		defer d.grpc.GracefulStop()
	}
	select {
	case err := <-d.errc:
		return err
	case err := <-d.fatal:
		d.log.Error("a part of the service failed; shutting down", slog.String("error", err.Error()))
		d.srv.Close()
		return err
	case <-ctx.Done():
	}
	if d.c.Drain > 0 {
		d.log.Info("draining: /readyz fails while requests are still served", slog.Int64("drain_ms", d.c.Drain.Milliseconds()))
		d.h.Drain()
		if d.rlsSvc != nil {
			d.rlsSvc.Drain() // gRPC health NOT_SERVING too
		}
		select {
		case <-time.After(d.c.Drain):
		case err := <-d.errc:
			return err
		}
	}
	grace := cmp.Or(d.c.ShutdownGrace, 25*time.Second)
	d.log.Info("shutting down", slog.Int64("grace_ms", grace.Milliseconds()))
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, x := range d.servers {
		x.Shutdown(sctx)
	}
	if err := d.srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("serve: shutdown: %w", err)
	}
	if err := <-d.errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// policyOf is the config's policy, or for a config without one (only the
// Envoy service) a stand-in the limiter compiles and nothing decides by:
// the HTTP decision API answers 404 then (server.Config.NoPolicy).
func policyOf(c *config.Config) policy.Policy {
	if !c.NoPolicy {
		return c.Policy
	}
	return policy.Policy{
		DefaultPlan: "none", DefaultClass: "none",
		Plans:   map[string]policy.Plan{"none": {Rules: []policy.Rule{{Name: "none", Limit: algo.PerSecond(1)}}}},
		Classes: map[string]policy.Class{"none": {}},
	}
}

// limitedHook is the limiter's Limited hook for the dashboard, or nil.
func limitedHook(b *dash.Dashboard) func(string) {
	if b == nil {
		return nil
	}
	return b.Limited
}

// DefaultMemoryLimit is the Go runtime's soft memory limit `fairgate serve`
// sets when GOMEMLIMIT is not in the environment.
const DefaultMemoryLimit = 384 << 20

// Logger returns the daemon's logger on w: JSON lines, or text for format
// "text"; at level (debug, info, warn, error; "" is info), as
// ServeConfig's LogFormat and LogLevel (checked by ParseServe) ask.
func Logger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil || level == "" {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// EnvConfigName names a config made from envoyproxy/ratelimit's
// environment in messages.
const EnvConfigName = "envoyproxy-ratelimit-environment.yaml"

// LoadConfig reads the config file at path, or else data (a config made
// from the environment), or else the embedded example, and returns it with
// its raw content.
func LoadConfig(path string, data []byte) (*config.Config, []byte, error) {
	if path == "" && data != nil {
		c, err := config.Parse(EnvConfigName, data)
		return c, data, err
	}
	if path == "" {
		data := examples.Config()
		c, err := config.Parse(examples.ConfigName, data)
		return c, data, err
	}
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	c, err := config.Parse(path, data)
	return c, data, err
}
