package app

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/internal/envoyenv"
	"github.com/fairgate/fairgate/internal/rls"
)

// DefaultMaxConnections is the open connections an HTTP listener holds at
// most unless --max-connections says otherwise: at some 25 KB each, about
// 100 MB, under DefaultMemoryLimit with room for the rest.
const DefaultMaxConnections = 4096

// ServeConfig is what `fairgate serve` runs.
type ServeConfig struct {
	Listen       string
	Store        string
	StoreTimeout time.Duration
	// PerSecondStore, if set, is the store of the Envoy service's counted
	// windows of one second (envoyproxy/ratelimit's REDIS_PERSECOND).
	PerSecondStore string
	// Config is the config file; empty means the embedded example, or
	// ConfigData.
	Config string
	// ConfigData, when Config is empty, is a config made from
	// envoyproxy/ratelimit's environment (package envoyenv).
	ConfigData []byte
	// Env is what envoyproxy/ratelimit's environment asked for.
	Env envoyenv.Result
	// ConfigPoll is how often the config file is looked at for changes.
	ConfigPoll time.Duration
	// Upstream, if set, is the API to proxy to.
	Upstream string
	// UpstreamTimeout bounds the wait for the upstream's response headers.
	UpstreamTimeout time.Duration
	// AdminListen is the admin API's address; AdminToken its bearer token
	// (without one the admin API does not start).
	AdminListen, AdminToken string
	// WorkerToken, if set, is the bearer token /v1/outbound/* require.
	WorkerToken string
	// InternalListen is the internal listener's address in proxy mode
	// (with Upstream): the decision API, outbound quotas, worker job
	// endpoints, /metrics, /readyz and the dashboard. Without Upstream
	// everything is served on Listen and this is unused.
	InternalListen string
	// InternalToken, if set, is the bearer token the internal endpoints
	// require (all but /healthz, /readyz and the dashboard's page);
	// /dashboard/data accepts it or the admin token.
	InternalToken string
	// SettleToken, if set, is the secret every instance signs and checks
	// settlement handles with (/v1/check, /v1/settle). Empty means a
	// random one per instance: a handle settles only where it was made.
	SettleToken string
	// ControlTimeout bounds each store call that is not a decision: admin
	// reads and writes, job queue calls, /v1/me/limits. Zero means
	// server.DefaultControlTimeout.
	ControlTimeout time.Duration
	// Drain is how long /readyz fails before the listeners close, while
	// requests are still served (load balancers take the instance out).
	// Zero means none.
	Drain time.Duration
	// ReadyRequiresStore makes /readyz answer 503 while the shared store
	// is down (server.Config.ReadyRequiresStore). False, the default:
	// /readyz reports the store in its body and stays 200, so that a
	// Redis outage does not take every instance out of its Service.
	ReadyRequiresStore bool
	// ShutdownGrace is how long requests in flight get to finish once the
	// listeners close. Zero means 25 s.
	ShutdownGrace time.Duration
	// ReadTimeout bounds the reading of a request's headers and body on
	// every listener, the proxy's included. Zero means 30 s.
	ReadTimeout time.Duration
	// MaxConnections bounds the open connections of each HTTP listener
	// (main, internal, admin); at the bound the connection idle the
	// longest, else the one silent the longest past connlimit.SilentGrace,
	// else the one whose request body stalls the most (connlimit.BodyGrace),
	// is closed to make room. Zero means DefaultMaxConnections.
	MaxConnections int
	// RLSMaxCalls bounds the Envoy rate limit service's calls in flight,
	// gRPC (any method) and /json together (rls.Limits.MaxCalls). Zero
	// means rls.DefaultMaxCalls.
	RLSMaxCalls int
	// TraceTenants puts tenant IDs on decision spans (tracing is set up by
	// the OTEL_* environment; see package tracing).
	TraceTenants bool
	// TrustTraceContext makes a caller's traceparent the parent of
	// fairgate's server spans (for a service mesh); false starts a new
	// trace linked to the caller's (server.Config.TrustTraceContext).
	TrustTraceContext bool
	// GRPCListen, if set, is the address of the Envoy rate limit service
	// (gRPC, with the standard health service).
	GRPCListen string
	// DebugListen, if set, is the debug listener's address (package
	// debugsrv: /rlconfig, /stats, /debug/pprof/), as envoyproxy/ratelimit's
	// DEBUG_HOST:DEBUG_PORT; behind InternalToken when set. Empty means
	// none.
	DebugListen string
	// TLS is each listener's TLS: a certificate and key (reloaded when
	// they change), and for the internal and gRPC listeners a client CA
	// that callers must present a certificate of. Empty means plain.
	// Without Upstream, TLS is what ParseServe read for the internal
	// listener (--listen serves the internal endpoints then), with its
	// client CA, and InternalTLS is unused.
	TLS, InternalTLS, AdminTLS, GRPCTLS TLSFiles
	// LogFormat is the logs' format: "json" (JSON lines, the default) or
	// "text" (log/slog's key=value lines). LogLevel is the least level
	// logged: "debug", "info" (the default), "warn" or "error".
	LogFormat, LogLevel string
	// Warnings are what ParseServe found set but unused without stopping
	// the start (a listener address the container image sets for every
	// mode); Serve logs them.
	Warnings []string
}

// TLSFiles are one listener's TLS files, and the name its clients'
// certificates must carry (ClientSAN, with ClientCA; empty: any).
type TLSFiles struct{ Cert, Key, ClientCA, ClientSAN string }

// on reports whether the listener serves TLS.
func (f TLSFiles) on() bool { return f.Cert != "" || f.Key != "" }

// loopbackDefault is addr with 127.0.0.1 for an empty host (":6070").
func loopbackDefault(addr string) (string, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q: want host:port, such as 127.0.0.1:6070: %w", addr, err)
	}
	if h == "" {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, p), nil
}

// env returns the environment value for name, or def.
func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// ParseServe reads `fairgate serve` flags, with FAIRGATE_* environment
// variables as their defaults. Asked for help (-h, --help), it writes the
// flags with their defaults to help and returns flag.ErrHelp; it writes
// nothing else: a problem is its error.
func ParseServe(args []string, help io.Writer) (ServeConfig, error) {
	fs := flag.NewFlagSet("fairgate serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var c ServeConfig
	// envoyproxy/ratelimit's environment, where set, gives the defaults
	// that FAIRGATE_* variables and flags do not.
	e, err := envoyenv.Read(os.LookupEnv)
	if err != nil {
		return c, fmt.Errorf("serve: envoyproxy/ratelimit environment: %w", err)
	}
	c.Env, c.ConfigData = e, e.Config
	defListen := "127.0.0.1:8080"
	if e.Config != nil {
		defListen = "0.0.0.0:8080" // in that service's place: its HTTP port
	}
	fs.StringVar(&c.Listen, "listen", env("FAIRGATE_LISTEN", cmp.Or(e.Listen, defListen)), "address of the decision API (FAIRGATE_LISTEN)")
	fs.StringVar(&c.Store, "store", env("FAIRGATE_STORE", cmp.Or(e.Store, "memory://")), "memory://, redis://HOST:PORT[/DB], rediss://…, redis-cluster://H:P,H:P or redis-sentinel://H:P,H:P/MASTER (FAIRGATE_STORE)")
	fs.StringVar(&c.PerSecondStore, "per-second-store", env("FAIRGATE_PER_SECOND_STORE", e.PerSecondStore), "a second Redis for the Envoy service's counted windows of one second (FAIRGATE_PER_SECOND_STORE; envoyproxy/ratelimit's REDIS_PERSECOND; default: the store)")
	fs.StringVar(&c.Config, "config", env("FAIRGATE_CONFIG", ""), "the config file, reloaded when it changes and on SIGHUP (FAIRGATE_CONFIG; default: the embedded examples/fairgate.yaml)")
	poll := env("FAIRGATE_CONFIG_POLL", "1s")
	fs.Func("config-poll", "how often the config file is looked at for changes (FAIRGATE_CONFIG_POLL, default 1s)", func(v string) error { poll = v; return nil })
	fs.StringVar(&c.Upstream, "upstream", env("FAIRGATE_UPSTREAM", ""), "proxy requests to this API, such as http://127.0.0.1:9000 (FAIRGATE_UPSTREAM)")
	upTimeout := env("FAIRGATE_UPSTREAM_TIMEOUT", "30s")
	fs.Func("upstream-timeout", "wait for the upstream's response headers (FAIRGATE_UPSTREAM_TIMEOUT, default 30s)", func(v string) error { upTimeout = v; return nil })
	fs.StringVar(&c.InternalListen, "internal-listen", env("FAIRGATE_INTERNAL_LISTEN", "127.0.0.1:8090"), "with --upstream, address of the internal listener: /v1/take, /v1/check, /v1/outbound/*, worker job endpoints, /metrics, /readyz, /dashboard (FAIRGATE_INTERNAL_LISTEN)")
	internalFile := ""
	fs.StringVar(&internalFile, "internal-token-file", "", "file holding the bearer token the decision API, outbound, worker and /metrics endpoints require, and /dashboard/data accepts as it does the admin token (or FAIRGATE_INTERNAL_TOKEN); without one whoever reaches their listener may call them, and the dashboard's data shows no tenant IDs unless an admin token is set")
	controlTimeout := env("FAIRGATE_CONTROL_TIMEOUT", "2s")
	fs.Func("control-timeout", "deadline of each store call that is not a decision: admin writes, job queue calls, /v1/me/limits (FAIRGATE_CONTROL_TIMEOUT, default 2s)", func(v string) error { controlTimeout = v; return nil })
	drain := env("FAIRGATE_DRAIN", "5s")
	fs.Func("drain", "on SIGTERM, how long /readyz fails while requests are still served, before the listeners close (FAIRGATE_DRAIN, default 5s; 0 for none)", func(v string) error { drain = v; return nil })
	grace := env("FAIRGATE_SHUTDOWN_GRACE", "25s")
	fs.Func("shutdown-grace", "then how long requests in flight get to finish (FAIRGATE_SHUTDOWN_GRACE, default 25s)", func(v string) error { grace = v; return nil })
	readTimeout := env("FAIRGATE_READ_TIMEOUT", "30s")
	fs.Func("read-timeout", "deadline to read a request's headers and body, on every listener (FAIRGATE_READ_TIMEOUT, default 30s)", func(v string) error { readTimeout = v; return nil })
	maxConns := env("FAIRGATE_MAX_CONNECTIONS", strconv.Itoa(DefaultMaxConnections))
	fs.Func("max-connections", "open connections each listener (HTTP and gRPC) holds at most; at the bound the one idle the longest, else the one silent (no request yet) the longest past 500 ms, is closed to make room (FAIRGATE_MAX_CONNECTIONS, default "+strconv.Itoa(DefaultMaxConnections)+")", func(v string) error { maxConns = v; return nil })
	maxCalls := env("FAIRGATE_RLS_MAX_CALLS", "")
	fs.Func("rls-max-calls", "calls the Envoy rate limit service holds in flight at once, gRPC (any method) and /json together, each counted before its message is read; past it a call is refused (gRPC RESOURCE_EXHAUSTED, /json 503) (FAIRGATE_RLS_MAX_CALLS, default "+strconv.Itoa(rls.DefaultMaxCalls)+")", func(v string) error { maxCalls = v; return nil })
	fs.StringVar(&c.GRPCListen, "grpc-listen", env("FAIRGATE_GRPC_LISTEN", e.GRPCListen), "serve Envoy's rate limit service (gRPC) here, such as 127.0.0.1:8082 (FAIRGATE_GRPC_LISTEN; default: not served)")
	fs.StringVar(&c.DebugListen, "debug-listen", env("FAIRGATE_DEBUG_LISTEN", ""), "serve the debug listener here: /rlconfig (the Envoy rate limit domains in force), /stats (Prometheus metrics) and Go's profiler /debug/pprof/, behind the internal token if set; a port alone (:6070) is on 127.0.0.1 (FAIRGATE_DEBUG_LISTEN; default: envoyproxy/ratelimit's DEBUG_HOST:DEBUG_PORT if either is set, else not served)")
	fs.StringVar(&c.AdminListen, "admin-listen", env("FAIRGATE_ADMIN_LISTEN", "127.0.0.1:8081"), "address of the admin API (FAIRGATE_ADMIN_LISTEN)")
	tokenFile := ""
	fs.StringVar(&tokenFile, "admin-token-file", "", "file holding the admin API's bearer token (or FAIRGATE_ADMIN_TOKEN); without a token the admin API does not start")
	settleFile := ""
	fs.StringVar(&settleFile, "settle-token-file", "", "file holding the secret the settlement handles of measured costs are signed with (or FAIRGATE_SETTLE_TOKEN): give every instance the same one so that /v1/settle takes a handle on any of them; without one each instance makes its own, and a handle settles only on the instance that answered it (docs/cost.md)")
	workerFile := ""
	fs.StringVar(&workerFile, "worker-token-file", "", "file holding the bearer token /v1/outbound/* require (or FAIRGATE_WORKER_TOKEN); without one they are open to whoever reaches --listen")
	tlsFlags(fs, &c)
	var envErrs []error
	boolEnv := func(name string) bool {
		on, err := envBool(name)
		if err != nil {
			envErrs = append(envErrs, err)
		}
		return on
	}
	fs.BoolVar(&c.TraceTenants, "trace-tenants", boolEnv("FAIRGATE_TRACE_TENANTS"), "with tracing on (OTEL_TRACES_EXPORTER=otlp or an OTEL_EXPORTER_OTLP_ENDPOINT), put tenant IDs on decision spans (FAIRGATE_TRACE_TENANTS=true; off by default)")
	fs.BoolVar(&c.ReadyRequiresStore, "ready-requires-store", boolEnv("FAIRGATE_READY_REQUIRES_STORE"), "make /readyz answer 503 while the Redis store is down, taking the instance out of its load balancer (FAIRGATE_READY_REQUIRES_STORE=true); off by default: /readyz reports the store in its body and stays 200, since every instance shares the outage and still answers by each policy's fail mode")
	fs.BoolVar(&c.TrustTraceContext, "trust-trace-context", boolEnv("FAIRGATE_TRUST_TRACE_CONTEXT"), "with tracing on, make a caller's traceparent the parent of fairgate's spans and let its sampled flag decide a parent-based sampler, as a service mesh wants (FAIRGATE_TRUST_TRACE_CONTEXT=true); off by default: a new trace, linked to the caller's")
	timeout := env("FAIRGATE_STORE_TIMEOUT", "100ms")
	if e.StoreTimeout > 0 {
		timeout = env("FAIRGATE_STORE_TIMEOUT", e.StoreTimeout.String())
	}
	fs.Func("store-timeout", "deadline of each store call (FAIRGATE_STORE_TIMEOUT, default 100ms)", func(v string) error { timeout = v; return nil })
	fs.StringVar(&c.LogFormat, "log-format", env("FAIRGATE_LOG_FORMAT", envoyLogFormat(e)), "the format of the logs on stderr: json (JSON lines) or text (key=value lines) (FAIRGATE_LOG_FORMAT; default json, or text where envoyproxy/ratelimit's LOG_FORMAT is set and not json, as that service does)")
	fs.StringVar(&c.LogLevel, "log-level", env("FAIRGATE_LOG_LEVEL", cmp.Or(e.LogLevel, "info")), "the least level logged: debug, info, warn or error (FAIRGATE_LOG_LEVEL; default info, or envoyproxy/ratelimit's LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(help)
			fs.PrintDefaults()
			return c, err
		}
		return c, fmt.Errorf("serve: %w", err)
	}
	cmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { cmdline[f.Name] = true })
	if err := c.logFlags(cmdline); err != nil {
		return c, err
	}
	if c.Config != "" && e.Config != nil {
		return c, fmt.Errorf("serve: both a config file (%s, from --config or FAIRGATE_CONFIG) and envoyproxy/ratelimit's environment (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or CONFIG_TYPE) say where the config is: fairgate would follow one and ignore the other. For the runtime directory set FAIRGATE_CONFIG= (fairgate's container image sets it to its starting file); for the file, unset those variables and put the domains in its rls section", c.Config)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := errors.Join(envErrs...); err != nil {
		return c, err
	}
	if c.DebugListen != "" {
		// Ours (a flag or FAIRGATE_DEBUG_LISTEN): a port alone is on
		// loopback, unlike net.Listen's every interface.
		if c.DebugListen, err = loopbackDefault(c.DebugListen); err != nil {
			return c, fmt.Errorf("serve: --debug-listen (FAIRGATE_DEBUG_LISTEN): %w", err)
		}
	}
	c.envoyDefaults(e)
	if c.MaxConnections, err = strconv.Atoi(maxConns); err != nil || c.MaxConnections < 1 {
		return c, fmt.Errorf("serve: max connections %q: want a positive number such as %d", maxConns, DefaultMaxConnections)
	}
	if maxCalls != "" {
		if c.RLSMaxCalls, err = strconv.Atoi(maxCalls); err != nil || c.RLSMaxCalls < 1 {
			return c, fmt.Errorf("serve: rls max calls %q: want a positive number such as %d", maxCalls, rls.DefaultMaxCalls)
		}
	}
	if err := c.durations(timeout, poll, upTimeout, controlTimeout, drain, grace, readTimeout); err != nil {
		return c, err
	}
	if c.Upstream == "" && c.InternalTLS.on() && c.TLS.on() {
		return c, errors.New("serve: --tls-cert-file and --internal-tls-cert-file (or their key files, or FAIRGATE_*TLS_* variables) both name --listen's certificate without --upstream, where --listen serves the internal endpoints: give one")
	}
	// A listener without a certificate of its own takes the main one's.
	for _, l := range []*TLSFiles{&c.InternalTLS, &c.AdminTLS, &c.GRPCTLS} {
		if !l.on() {
			l.Cert, l.Key = c.TLS.Cert, c.TLS.Key
		}
	}
	if c.TLS.ClientCA != "" || c.AdminTLS.ClientCA != "" {
		return c, errors.New("serve: client certificates (mTLS) are for the internal and gRPC listeners: --internal-client-ca-file, --grpc-client-ca-file")
	}
	if c.Upstream == "" {
		// A decision service: --listen serves the internal endpoints, so
		// it takes the internal listener's TLS (its certificate, else the
		// main one, and its client CA).
		if c.InternalTLS.ClientCA != "" && !c.InternalTLS.on() {
			return c, errors.New("serve: --internal-client-ca-file needs a certificate for --listen (without --upstream, the internal listener): --internal-tls-cert-file and --internal-tls-key-file, or --tls-cert-file and --tls-key-file")
		}
		c.TLS, c.InternalTLS = c.InternalTLS, TLSFiles{}
	}
	if c.InternalToken, err = token("internal", "FAIRGATE_INTERNAL_TOKEN", internalFile); err != nil {
		return c, err
	}
	if c.AdminToken, err = token("admin", "FAIRGATE_ADMIN_TOKEN", tokenFile); err != nil {
		return c, err
	}
	if c.WorkerToken, err = token("worker", "FAIRGATE_WORKER_TOKEN", workerFile); err != nil {
		return c, err
	}
	if c.SettleToken, err = token("settle", "FAIRGATE_SETTLE_TOKEN", settleFile); err != nil {
		return c, err
	}
	return c, checkModes(&c, cmdline, os.LookupEnv)
}

// envoyLogFormat is the log format envoyproxy/ratelimit's LOG_FORMAT asks
// for: unset, json (fairgate's default); set to anything else, text, as
// that service treats every value but json.
func envoyLogFormat(e envoyenv.Result) string {
	if e.LogFormat == "" || e.LogFormat == "json" {
		return "json"
	}
	return "text"
}

// logFlags checks --log-format and --log-level, naming where a bad value
// came from (the flag, its FAIRGATE_* variable, or envoyproxy/ratelimit's
// LOG_LEVEL); cmdline holds the flags given on the command line.
func (c *ServeConfig) logFlags(cmdline map[string]bool) error {
	from := func(flagName, envName, envoyName string) string {
		_, ours := os.LookupEnv(envName)
		switch {
		case cmdline[flagName]:
			return "--" + flagName
		case ours:
			return envName
		}
		return envoyName
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		return fmt.Errorf("serve: log format %q (%s): want json or text", c.LogFormat, from("log-format", "FAIRGATE_LOG_FORMAT", "LOG_FORMAT"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("serve: log level %q (%s): want debug, info, warn or error", c.LogLevel, from("log-level", "FAIRGATE_LOG_LEVEL", "LOG_LEVEL"))
	}
	return nil
}

// envoyDefaults completes c, once its flags are parsed, with what
// envoyproxy/ratelimit's environment asks and neither a flag nor a
// FAIRGATE_* variable set: in that service's place, its gRPC port; its debug
// listener (DEBUG_HOST:DEBUG_PORT); its gRPC TLS files.
func (c *ServeConfig) envoyDefaults(e envoyenv.Result) {
	if e.Config != nil && c.GRPCListen == "" {
		c.GRPCListen = "0.0.0.0:8081"
	}
	if c.DebugListen == "" {
		c.DebugListen = e.DebugListen // that service's default host is 0.0.0.0
	}
	if e.GRPCCert != "" && c.GRPCTLS.Cert == "" {
		c.GRPCTLS = TLSFiles{Cert: e.GRPCCert, Key: e.GRPCKey, ClientCA: cmp.Or(c.GRPCTLS.ClientCA, e.GRPCClientCA), ClientSAN: cmp.Or(c.GRPCTLS.ClientSAN, e.GRPCClientSAN)}
	}
}

// durations parses serve's duration flags into c.
func (c *ServeConfig) durations(timeout, poll, upTimeout, controlTimeout, drain, grace, readTimeout string) error {
	for _, f := range []struct {
		what, v, example string
		dst              *time.Duration
		zeroOK           bool
	}{
		{"store timeout", timeout, "50ms", &c.StoreTimeout, false},
		{"config poll", poll, "1s", &c.ConfigPoll, false},
		{"upstream timeout", upTimeout, "30s", &c.UpstreamTimeout, false},
		{"control timeout", controlTimeout, "2s", &c.ControlTimeout, false},
		{"drain", drain, "5s", &c.Drain, true},
		{"shutdown grace", grace, "25s", &c.ShutdownGrace, false},
		{"read timeout", readTimeout, "30s", &c.ReadTimeout, false},
	} {
		d, err := time.ParseDuration(f.v)
		switch {
		case err != nil || d < 0 || d == 0 && !f.zeroOK:
			if f.zeroOK {
				return fmt.Errorf("serve: %s %q: want a duration such as %s, or 0", f.what, f.v, f.example)
			}
			return fmt.Errorf("serve: %s %q: want a positive duration such as %s", f.what, f.v, f.example)
		}
		*f.dst = d
	}
	return nil
}

// tlsFlags defines each listener's TLS flags, with FAIRGATE_* environment
// variables as their defaults.
func tlsFlags(fs *flag.FlagSet, c *ServeConfig) {
	for _, l := range []struct {
		name, env, what string
		f               *TLSFiles
		mtls            bool
	}{
		{"", "", "every listener (unless one has its own)", &c.TLS, false},
		{"internal-", "INTERNAL_", "the internal listener", &c.InternalTLS, true},
		{"admin-", "ADMIN_", "the admin listener", &c.AdminTLS, false},
		{"grpc-", "GRPC_", "the gRPC listener", &c.GRPCTLS, true},
	} {
		e := "FAIRGATE_" + l.env + "TLS_"
		fs.StringVar(&l.f.Cert, l.name+"tls-cert-file", env(e+"CERT_FILE", ""), "PEM certificate (chain) of "+l.what+", reloaded when it changes ("+e+"CERT_FILE)")
		fs.StringVar(&l.f.Key, l.name+"tls-key-file", env(e+"KEY_FILE", ""), "its PEM key ("+e+"KEY_FILE)")
		if l.mtls {
			ce := "FAIRGATE_" + l.env + "CLIENT_CA_FILE"
			fs.StringVar(&l.f.ClientCA, l.name+"client-ca-file", env(ce, ""), "PEM CA whose client certificate "+l.what+" requires (mTLS; "+ce+")")
			se := "FAIRGATE_" + l.env + "CLIENT_SAN"
			fs.StringVar(&l.f.ClientSAN, l.name+"client-san", env(se, ""), "a DNS name (exact but for case; a wildcard in the certificate does not match) or IP the client certificate of "+l.what+" must carry, with its client CA; empty: any of the CA's ("+se+")")
		}
	}
}

// envBool reads the boolean environment variable name: unset or empty is
// false; otherwise what strconv.ParseBool takes (true, false, 1, 0, t, f,
// in any of their cases it accepts), and anything else is an error naming
// the variable, rather than a switch silently left off.
func envBool(name string) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return false, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("serve: %s=%q: want true or false (or 1, 0, t, f, TRUE, FALSE)", name, v)
	}
	return on, nil
}

// token reads a bearer token from file, or else from the environment
// variable envName.
func token(what, envName, file string) (string, error) {
	tok, from := os.Getenv(envName), envName
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("serve: %s token file: %w", what, err)
		}
		tok, from = strings.TrimSpace(string(b)), "--"+what+"-token-file "+file
	}
	if tok != "" && len(tok) < MinToken {
		return "", fmt.Errorf("serve: the %s token (from %s) is %d characters: it must be at least %d; make one with openssl rand -hex 16 and give it in %s or a file named by --%s-token-file", what, from, len(tok), MinToken, envName, what)
	}
	return tok, nil
}

// MinToken is the fewest characters an admin, internal or worker token
// may have: 16 (openssl rand -hex 16 makes 32).
const MinToken = 16
