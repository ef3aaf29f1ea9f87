package app

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/fairgate/fairgate/internal/connlimit"
	"github.com/fairgate/fairgate/internal/debugsrv"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/server"
	"github.com/fairgate/fairgate/internal/tlsfiles"
	"github.com/fairgate/fairgate/internal/tracing"
)

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
		exposed(d.log, "the internal listener is not on loopback and needs no token: set FAIRGATE_INTERNAL_TOKEN or --internal-token-file", slog.String("listen", iln.Addr().String()))
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
		exposed(d.log, "the debug listener (the rate limit config, metrics and Go's profiler) is reachable from the network: bind it to loopback (DEBUG_HOST=127.0.0.1, or --debug-listen 127.0.0.1:6070) or firewall its port; see docs/rls.md", slog.String("listen", ln.Addr().String()), slog.Bool("token", d.c.InternalToken != ""))
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

// loopback reports whether a is a loopback address.
func loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
