package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/connlimit"
	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/internal/debugsrv"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/rlsxds"
	"github.com/fairgate/fairgate/internal/server"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/internal/tlsfiles"
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

	cfg *config.Config
	raw []byte
	be  Backend
	// perSecond is the per-second store, and secondsGuard its guard, when
	// configured.
	perSecond    Backend
	secondsGuard *guard.Guard
	reg          registry
	reloads      *prometheus.CounterVec
	rtSkipped    *prometheus.GaugeVec // fairgate_rls_runtime_skipped_entries
	board        *dash.Dashboard
	lim          *limiter.Limiter
	quotas       *quota.Quotas
	breakers     *breaker.Set
	jobs         fairq.Queue
	weights      *atomic.Pointer[map[string]int]
	depths       map[string]*queueDepth // by job kind
	rlsSvc       *rls.Service
	// rlsBound bounds the Envoy service's calls in flight, gRPC and /json
	// together, and marks the gRPC listener's idle connections.
	rlsBound *rls.Bound
	// rlsMu guards the two sources of the Envoy service's domains: the
	// config file's and xDS's.
	rlsMu   sync.Mutex
	rlsFile rls.Config
	rlsXDS  []rls.Domain
	// xdsFirst, with xDS and without FORCE_START_WITHOUT_INITIAL_CONFIG,
	// closes when the first xDS config is in force: the gRPC port opens
	// then, as envoyproxy/ratelimit's does.
	xdsFirst chan struct{}
	authn    *auth.Authenticator
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
	if d.cfg.Dashboard {
		d.board = dash.New(dashSource{d}, d.c.AdminToken, d.c.InternalToken)
	}
	if d.cfg.NoPolicy && d.c.Upstream != "" {
		return fmt.Errorf("serve: --upstream needs a policy to decide the proxied requests by: %s has no plans, classes or routes, only the rls section", d.cfg.File)
	}
	if err := d.buildDeciders(); err != nil {
		return err
	}
	return d.buildServer()
}

// buildDeciders builds the limiter, the outbound quotas, the breakers and
// job queues, and the Envoy service.
func (d *daemon) buildDeciders() error {
	var err error
	d.lim, err = limiter.New(limiter.Config{
		Limited:      limitedHook(d.board),
		Store:        d.be.Store,
		Policy:       policyOf(d.cfg),
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
	if d.breakers, d.jobs, d.weights, d.depths, err = backpressure(d.cfg, d.c, d.be.Store, d.be.lazy, d.lim, d.reg); err != nil {
		return err
	}
	d.closers = append(d.closers, d.jobs.Close)
	if d.rlsSvc, err = rls.New(d.cfg.RLS, d.lim.Guard(), d.log, d.reg); err != nil {
		return err
	}
	d.rlsFile = d.cfg.RLS
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

// buildServer builds the authenticator and the HTTP handlers.
func (d *daemon) buildServer() error {
	cfg, c, log := d.cfg, d.c, d.log
	cfg.Auth.Logger = log
	if cfg.Auth.JWT != nil && cfg.Auth.JWT.JWKSURL != "" {
		log.Info("fetching the JWT key set", slog.String("jwks_url", cfg.Auth.JWT.JWKSURL), slog.Int64("timeout_ms", auth.DefaultJWKSTimeout.Milliseconds()))
	}
	backend := apikeys.NewMemory()
	if z := d.be.lazy; z != nil {
		backend = apikeys.Deferred(z.keyBackend)
	}
	var err error
	if d.keys, err = apikeys.New(apikeys.Config{Backend: backend, Logger: log}); err != nil {
		return err
	}
	cfg.Auth.Stored = d.keys
	if d.authn, err = auth.New(d.bg, cfg.Auth); err != nil {
		return err
	}
	sc := server.Config{
		Limiter: d.lim, Headers: limitheader.Form(cfg.Headers), Auth: d.authn, ClientIP: auth.ClientIP{Trusted: cfg.TrustedProxies, Header: cfg.ClientIPHeader},
		UpstreamHeaders: cfg.UpstreamHeaders, ForwardAuth: cfg.ForwardAuth,
		UpstreamTimeout: c.UpstreamTimeout, Logger: log, NoPolicy: cfg.NoPolicy, Metrics: promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}), Tracer: d.tr.Tracer(), TrustTraceContext: c.TrustTraceContext,
		Quotas: d.quotas, WorkerToken: c.WorkerToken, InternalToken: c.InternalToken, ControlTimeout: c.ControlTimeout,
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
			log.Warn("the dashboard's data (/dashboard/data) needs no token, so it shows no tenant IDs: set FAIRGATE_ADMIN_TOKEN or FAIRGATE_INTERNAL_TOKEN to lock it and see them, or dashboard: off in the config")
		}
	}
	if c.WorkerToken == "" && (len(cfg.Providers) > 0 || len(cfg.Queues) > 0) {
		log.Warn("the worker endpoints (/v1/outbound/*, job lease, ack and nack) need no token: set FAIRGATE_WORKER_TOKEN or --worker-token-file unless only trusted workers reach the listener")
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
	if err := d.connect(d.be.lazy, d.c.Store); err != nil {
		return err
	}
	d.goCheck("limiter", func() error { return d.lim.Run(d.bg) })
	d.goCheck("API keys", func() error { d.keys.Run(d.bg); return nil })
	if d.secondsGuard != nil {
		if err := d.connect(d.perSecond.lazy, d.c.PerSecondStore); err != nil {
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
// in-process one); if Redis is down, the daemon starts anyway and keeps
// trying in the background.
func (d *daemon) connect(z *lazyRedis, url string) error {
	if z == nil {
		return nil
	}
	if err := z.connect(); err != nil {
		if !errors.Is(err, redisstore.ErrConnect) {
			return err
		}
		d.log.Warn("store not reachable at start: serving by each policy's fail mode while connecting in the background", slog.String("store", redisstore.RedactURL(url)), slog.String("error", err.Error()))
	}
	d.goCheck("store connection", func() error { z.Run(d.bg); return nil })
	return nil
}

// watch follows the config file (changes on disk and SIGHUP), applying a
// new one only when every part takes it.
func (d *daemon) watch() {
	w := config.NewWatcher(d.cfg.File, d.c.ConfigPoll, d.raw, d.apply, d.log)
	if d.c.Config == "" {
		// A config made from the environment: it stays; its runtime
		// directory is what changes.
		w.Read = func() ([]byte, error) { return d.raw, nil }
	}
	w.Track(d.cfg)
	w.Refused = func() {
		d.reloads.WithLabelValues("refused").Inc()
		if d.cfg.HasRLS && d.cfg.RLSXDS.Address == "" {
			d.rlsSvc.CountConfigLoad(false) // the runtime directory's or file's domains refused
		}
	}
	d.reload = w.Reload
	d.goCheck("config watcher", func() error { return w.Run(d.bg) })
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	d.wg.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-d.bg.Done():
				return
			case <-hup:
				w.Reload()
			}
		}
	})
}

// apply puts a reloaded config in force, or changes nothing and returns
// why (the watcher counts it refused).
func (d *daemon) apply(nc *config.Config) error {
	nc.Auth.Logger, nc.Auth.Previous, nc.Auth.Stored = d.log, d.authn, d.keys
	na, err := auth.New(d.bg, nc.Auth)
	if err == nil {
		err = d.quotas.CheckProviders(nc.Providers)
	}
	if err == nil {
		err = d.checkRLS(nc.RLS.Domains, nil)
	}
	if err == nil {
		_, err = nc.ForwardAuth.Resolve()
	}
	if err == nil && nc.NoPolicy && d.c.Upstream != "" {
		err = errors.New("the proxy needs a policy: the new file has no plans, classes or routes")
	}
	if err == nil {
		err = d.lim.SetPolicy(policyOf(nc))
	}
	if err != nil {
		return err
	}
	// Checked above, so this cannot fail half-way.
	if err := d.quotas.SetProviders(nc.Providers); err != nil {
		return err
	}
	if err := d.setRLS(&nc.RLS, nil); err != nil {
		return err
	}
	reportRuntime(nc, d.rtSkipped, d.log)
	d.weights.Store(&nc.QueueWeights)
	if !maps.Equal(nc.Queues, d.cfg.Queues) || !reflect.DeepEqual(nc.Dependencies, d.cfg.Dependencies) {
		d.log.Warn("queue kinds and dependencies take effect at the next restart")
	}
	d.h.SetNoPolicy(nc.NoPolicy)
	d.h.SetCapacity(nc.UpstreamCapacity)
	// Checked above: it cannot be refused now.
	_ = d.h.SetIdentity(na, auth.ClientIP{Trusted: nc.TrustedProxies, Header: nc.ClientIPHeader}, nc.UpstreamHeaders, nc.ForwardAuth)
	d.authn = na
	d.reloads.WithLabelValues("applied").Inc()
	if nc.HasRLS && nc.RLSXDS.Address == "" {
		d.rlsSvc.CountConfigLoad(true)
	}
	warnDemoKeys(d.log, nc.File, nc.Auth.APIKeys)
	return nil
}

// checkRLS reports a domain both the file and xDS configure. Nil
// arguments are the ones in force.
func (d *daemon) checkRLS(file, xds []rls.Domain) error {
	d.rlsMu.Lock()
	defer d.rlsMu.Unlock()
	if file == nil {
		file = d.rlsFile.Domains
	}
	if xds == nil {
		xds = d.rlsXDS
	}
	for _, x := range xds {
		for _, f := range file {
			if x.Name == f.Name {
				return fmt.Errorf("rls domain %q comes both from the config file and from xDS", x.Name)
			}
		}
	}
	return nil
}

// setRLS puts the Envoy service's domains in force: the file's (nil: the
// ones in force) and xDS's (nil: the ones in force).
func (d *daemon) setRLS(file *rls.Config, xds []rls.Domain) error {
	if err := d.checkRLS(domainsOf(file), xds); err != nil {
		return err
	}
	d.rlsMu.Lock()
	defer d.rlsMu.Unlock()
	if file != nil {
		d.rlsFile = *file
	}
	if xds != nil {
		d.rlsXDS = xds
	}
	c := d.rlsFile
	c.Domains = append(slices.Clip(c.Domains), d.rlsXDS...)
	d.rlsSvc.SetConfig(c)
	return nil
}

// domainsOf is c's domains, nil for a nil c.
func domainsOf(c *rls.Config) []rls.Domain {
	if c == nil {
		return nil
	}
	return c.Domains
}

// followXDS receives the Envoy service's domains from the xDS management
// server of the config, with the rls section's defaults and domains'
// own settings (those of the config at start: the xDS address and these
// take effect at the next restart).
func (d *daemon) followXDS() {
	x, cfg := d.cfg.RLSXDS, d.cfg
	var first sync.Once
	if !d.c.Env.ForceStart {
		d.xdsFirst = make(chan struct{})
	}
	c := &rlsxds.Client{Address: x.Address, NodeID: x.NodeID, Metadata: x.Metadata, Retry: x.Retry, Log: d.log,
		Apply: func(ds []rls.Domain) error {
			cfg.RLSDomainDefaults(ds)
			if ds == nil {
				ds = []rls.Domain{}
			}
			if err := d.setRLS(nil, ds); err != nil {
				d.rlsSvc.CountConfigLoad(false)
				return err
			}
			d.rlsSvc.CountConfigLoad(true)
			if d.xdsFirst != nil {
				first.Do(func() { close(d.xdsFirst) })
			}
			return nil
		},
		Refused: func() { d.rlsSvc.CountConfigLoad(false) }}
	d.log.Info("following the xDS management server for rls domains", slog.String("server", x.Address), slog.String("node_id", x.NodeID))
	d.goCheck("xDS client", func() error { return c.Run(d.bg) })
}

// listen opens the main listener and starts the internal, admin, gRPC and
// debug ones. A listener that cannot open stops the start: nothing half-served.
func (d *daemon) listen() (net.Listener, error) {
	c := d.c
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("serve: listen on %s: %w", c.Listen, err)
	}
	readTimeout := d.readTimeout()
	d.srv = &http.Server{
		Handler:           d.h,
		ReadHeaderTimeout: min(5*time.Second, readTimeout),
		ReadTimeout:       readTimeout,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
	if ln, err = d.bound(ln, d.srv, "main"); err != nil {
		ln.Close()
		return nil, err
	}
	// With an upstream the proxy lifts the write deadline of a proxied
	// response, and the read deadline once the request's body has arrived,
	// so that responses may stream for as long as the upstream sends;
	// headers and bodies keep their deadlines on every path.
	for _, open := range []func(readTimeout time.Duration) error{d.listenInternal, d.listenAdmin, d.listenGRPC, d.listenDebug} {
		if err := open(readTimeout); err != nil {
			ln.Close()
			return nil, err
		}
	}
	return ln, nil
}

// readTimeout bounds the reading of a request on every listener.
func (d *daemon) readTimeout() time.Duration { return cmp.Or(d.c.ReadTimeout, 30*time.Second) }

// bound caps ln's open connections at --max-connections for srv (idle
// ones, then silent ones, then stalled request bodies, reclaimed at the
// cap; package connlimit), with the listener's metrics; a body the
// handler leaves unread is drained for connlimit.DrainGrace at most.
func (d *daemon) bound(ln net.Listener, srv *http.Server, name string) (net.Listener, error) {
	cl, err := d.limitConns(ln, name)
	if err != nil {
		return ln, err
	}
	srv.ConnState = cl.ConnState
	srv.ConnContext = cl.ConnContext
	srv.Handler = cl.Handler(srv.Handler)
	return cl, nil
}

// limitConns caps ln's open connections at --max-connections, with the
// listener's metrics; the server on it says which connections are idle.
func (d *daemon) limitConns(ln net.Listener, name string) (*connlimit.Listener, error) {
	cl := connlimit.New(ln, cmp.Or(d.c.MaxConnections, DefaultMaxConnections))
	labels := prometheus.Labels{"listener": name}
	const reclaimedHelp = "Connections closed to make room for new ones at --max-connections, by listener and state: idle (keep-alive, closed first), silent (no request yet, after 500 ms) or stalled (a request body waited for 2 s in all, arriving under 4 KiB/s)."
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fairgate_connections_open", Help: "Open connections by listener, at most --max-connections.", ConstLabels: labels},
			func() float64 { return float64(cl.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fairgate_connections_idle", Help: "Idle keep-alive connections by listener: the ones closed first at the cap.", ConstLabels: labels},
			func() float64 { return float64(cl.Idle()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fairgate_connections_silent", Help: "Connections without a request yet (or a finished TLS handshake) by listener: closed at the cap, after the idle ones, once silent for 500 ms.", ConstLabels: labels},
			func() float64 { return float64(cl.Silent()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairgate_connections_reclaimed_total", Help: reclaimedHelp, ConstLabels: prometheus.Labels{"listener": name, "state": "idle"}},
			func() float64 { return float64(cl.Reclaimed()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairgate_connections_reclaimed_total", Help: reclaimedHelp, ConstLabels: prometheus.Labels{"listener": name, "state": "silent"}},
			func() float64 { return float64(cl.ReclaimedSilent()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fairgate_connections_reclaimed_total", Help: reclaimedHelp, ConstLabels: prometheus.Labels{"listener": name, "state": "stalled"}},
			func() float64 { return float64(cl.ReclaimedStalled()) }),
	} {
		if err := d.reg.Register(c); err != nil {
			return cl, err
		}
	}
	return cl, nil
}

// listenInternal starts the internal listener of proxy mode.
func (d *daemon) listenInternal(readTimeout time.Duration) error {
	ih := d.h.Internal()
	if ih == nil {
		return nil
	}
	iln, err := net.Listen("tcp", d.c.InternalListen)
	if err != nil {
		return fmt.Errorf("serve: internal listen on %s: %w", d.c.InternalListen, err)
	}
	isrv := &http.Server{Handler: ih, ReadHeaderTimeout: d.srv.ReadHeaderTimeout, ReadTimeout: readTimeout, WriteTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: d.srv.ErrorLog}
	if iln, err = d.bound(iln, isrv, "internal"); err != nil {
		iln.Close()
		return err
	}
	d.servers = append(d.servers, isrv)
	if d.c.InternalToken == "" && !loopback(iln.Addr()) {
		d.log.Warn("the internal listener is not on loopback and needs no token: set FAIRGATE_INTERNAL_TOKEN or --internal-token-file", slog.String("listen", iln.Addr().String()))
	}
	d.log.Info("internal listener", slog.String("listen", iln.Addr().String()))
	d.goCheck("internal listener", func() error { return serveOn(isrv, iln, d.tls.internal) })
	return nil
}

// listenAdmin starts the admin API, when it has a token.
func (d *daemon) listenAdmin(readTimeout time.Duration) error {
	if d.c.AdminToken == "" {
		d.log.Warn("admin API not started: set FAIRGATE_ADMIN_TOKEN or --admin-token-file to enable it")
		return nil
	}
	ah, err := server.NewAdmin(server.AdminConfig{Limiter: d.lim, Token: d.c.AdminToken, Reload: d.reload, Logger: d.log, Timeout: d.c.ControlTimeout, Keys: d.keys})
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", d.c.AdminListen)
	if err != nil {
		return fmt.Errorf("serve: admin listen on %s: %w", d.c.AdminListen, err)
	}
	asrv := &http.Server{Handler: ah, ReadHeaderTimeout: d.srv.ReadHeaderTimeout, ReadTimeout: min(10*time.Second, readTimeout), WriteTimeout: 10 * time.Second, ErrorLog: d.srv.ErrorLog}
	if aln, err = d.bound(aln, asrv, "admin"); err != nil {
		aln.Close()
		return err
	}
	d.servers = append(d.servers, asrv)
	d.log.Info("admin API", slog.String("listen", aln.Addr().String()))
	d.goCheck("admin listener", func() error { return serveOn(asrv, aln, d.tls.admin) })
	return nil
}

// DebugWriteTimeout bounds the writing of a debug listener's response:
// CPU profiles and traces (/debug/pprof/profile?seconds=N) of up to
// about this long.
const DebugWriteTimeout = 2 * time.Minute

// listenDebug starts the debug listener (package debugsrv), when asked:
// behind the internal token if set, its connections bounded as the other
// listeners'. It serves plain HTTP.
func (d *daemon) listenDebug(readTimeout time.Duration) error {
	if d.c.DebugListen == "" {
		return nil
	}
	h, err := debugsrv.New(debugsrv.Config{RLConfig: d.rlsSvc.Dump, Stats: d.reg, Token: d.c.InternalToken})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", d.c.DebugListen)
	if err != nil {
		return fmt.Errorf("serve: debug listen on %s: %w", d.c.DebugListen, err)
	}
	dsrv := &http.Server{Handler: h, ReadHeaderTimeout: d.srv.ReadHeaderTimeout, ReadTimeout: min(10*time.Second, readTimeout), WriteTimeout: DebugWriteTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, ErrorLog: d.srv.ErrorLog}
	if ln, err = d.bound(ln, dsrv, "debug"); err != nil {
		ln.Close()
		return err
	}
	d.servers = append(d.servers, dsrv)
	if !loopback(ln.Addr()) {
		d.log.Warn("the debug listener (the rate limit config, metrics and Go's profiler) is reachable from the network: bind it to loopback (DEBUG_HOST=127.0.0.1, or --debug-listen 127.0.0.1:6070) or firewall its port; see docs/rls.md", slog.String("listen", ln.Addr().String()), slog.Bool("token", d.c.InternalToken != ""))
	}
	d.log.Info("debug listener", slog.String("listen", ln.Addr().String()), slog.Bool("token", d.c.InternalToken != ""))
	d.goCheck("debug listener", func() error { return serveOn(dsrv, ln, nil) })
	return nil
}

// GRPCIdleTimeout is how long a gRPC connection with no call in flight
// stays open before the server sends it away (GOAWAY), as the HTTP
// listeners' idle keep-alive connections close.
const GRPCIdleTimeout = 2 * time.Minute

// listenGRPC starts Envoy's rate limit service, when asked: its calls in
// flight bounded by --rls-max-calls, each within the read timeout, its
// connections by --max-connections (idle ones reclaimed at the bound) and
// GRPCIdleTimeout.
func (d *daemon) listenGRPC(readTimeout time.Duration) error {
	if d.c.GRPCListen == "" {
		return nil
	}
	// The handshake (TLS and HTTP/2's preface) within the header deadline
	// of the HTTP listeners.
	opts := []grpc.ServerOption{grpc.ConnectionTimeout(min(5*time.Second, readTimeout))}
	if d.tls.grpc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(d.tls.grpc)))
	}
	// envoyproxy/ratelimit's GRPC_MAX_CONNECTION_AGE(_GRACE), if set:
	// clients reconnect now and then, so that a new instance gets its
	// share.
	e := d.c.Env
	opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: GRPCIdleTimeout, MaxConnectionAge: e.GRPCMaxConnAge, MaxConnectionAgeGrace: e.GRPCMaxConnAgeGrace}))
	if t := d.tr.Tracer(); t != nil {
		opts = append(opts, grpc.UnaryInterceptor(tracing.UnaryServer(t, d.c.TrustTraceContext)))
	}
	d.grpc = rls.NewServer(d.rlsSvc, d.rlsBound, opts...)
	open := func() (net.Listener, error) {
		ln, err := net.Listen("tcp", d.c.GRPCListen)
		if err != nil {
			return nil, fmt.Errorf("serve: grpc listen on %s: %w", d.c.GRPCListen, err)
		}
		cl, err := d.limitConns(ln, "grpc")
		if err != nil {
			ln.Close()
			return nil, err
		}
		gln := d.rlsBound.Listener(cl)
		d.log.Info("envoy rate limit service", slog.String("grpc_listen", gln.Addr().String()), slog.Int("file_domains", len(d.cfg.RLS.Domains)), slog.Bool("xds", d.cfg.RLSXDS.Address != ""))
		return gln, nil
	}
	serve := func(gln net.Listener) error {
		if err := d.grpc.Serve(gln); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	}
	if d.xdsFirst != nil {
		// As envoyproxy/ratelimit: no port (Envoy applies its
		// failure_mode_deny) rather than OK to everything before any
		// config is in.
		d.log.Info("the rate limit service's gRPC port opens once the first xDS config is in force (FORCE_START_WITHOUT_INITIAL_CONFIG=true: at once)", slog.String("grpc_listen", d.c.GRPCListen))
		d.goCheck("grpc listener", func() error {
			select {
			case <-d.xdsFirst:
			case <-d.bg.Done():
				return nil
			}
			gln, err := open()
			if err != nil {
				return err
			}
			return serve(gln)
		})
		return nil
	}
	gln, err := open()
	if err != nil {
		return err
	}
	d.goCheck("grpc listener", func() error { return serve(gln) })
	if len(d.cfg.RLS.Domains) == 0 && d.cfg.RLSXDS.Address == "" {
		d.log.Warn("the rate limit service has no domains: every descriptor is answered OK (add an rls section to the config)")
	}
	return nil
}

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

// listenerTLS is each listener's TLS configuration; nil for plain.
type listenerTLS struct{ main, internal, admin, grpc *tls.Config }

// loadTLS reads every listener's TLS files, so that a bad one stops the
// start.
func loadTLS(c ServeConfig) (listenerTLS, error) {
	var out listenerTLS
	for _, l := range []struct {
		name string
		f    TLSFiles
		to   **tls.Config
	}{{"", c.TLS, &out.main}, {"internal ", c.InternalTLS, &out.internal}, {"admin ", c.AdminTLS, &out.admin}, {"grpc ", c.GRPCTLS, &out.grpc}} {
		if !l.f.on() {
			if l.f.ClientCA != "" || l.f.ClientSAN != "" {
				return out, fmt.Errorf("serve: the %slistener's client CA (and client SAN) need a certificate and key of its own or --tls-cert-file/--tls-key-file", l.name)
			}
			continue
		}
		files, err := tlsfiles.Load(l.f.Cert, l.f.Key, l.f.ClientCA, l.f.ClientSAN)
		if err != nil {
			return out, fmt.Errorf("serve: %slistener: %w", l.name, err)
		}
		*l.to = files.Config()
	}
	return out, nil
}

// serveOn serves srv on ln, over TLS when cfg is not nil.
func serveOn(srv *http.Server, ln net.Listener, cfg *tls.Config) error {
	if cfg == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = cfg
	return srv.ServeTLS(ln, "", "")
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
