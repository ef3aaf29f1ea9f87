package app

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fairgate/fairgate/internal/tracing"
)

// modal is a `fairgate serve` flag, or an environment variable of no
// flag, that acts only in some modes. Given in another (on the command
// line, or its environment variable not empty) it stops the start with a
// line naming it and what it needs, rather than be silently ignored: a
// TLS file or a token that protects nothing is worse than a refused start.
type modal struct {
	// flag is "" for a variable with no flag.
	flag, env string
	// needs ends the refusal: what the flag does and what it needs.
	needs string
	// acts reports whether the flag acts in c's mode.
	acts func(c *ServeConfig) bool
	// asks, if not nil, reports whether the flag, given, asks for
	// anything (a boolean given false asks nothing).
	asks func(c *ServeConfig) bool
	// soft marks a variable our own deployment files set for every mode
	// (the container image's listener addresses, the Helm chart's store
	// timeout): from the environment it is only warned about
	// (ServeConfig.Warnings); on the command line it is refused like the
	// others.
	soft bool
}

func proxyMode(c *ServeConfig) bool { return c.Upstream != "" }
func adminOn(c *ServeConfig) bool   { return c.AdminToken != "" }
func grpcOn(c *ServeConfig) bool    { return c.GRPCListen != "" }
func watched(c *ServeConfig) bool   { return c.Config != "" || c.ConfigData != nil }

// envoyConfig reports whether the config is the one made from
// envoyproxy/ratelimit's environment (no config file given).
func envoyConfig(c *ServeConfig) bool { return c.Config == "" && c.ConfigData != nil }

// sharedStore reports whether a store is shared (Redis): the memory store
// answers in-process, with no deadline.
func sharedStore(c *ServeConfig) bool {
	return !strings.HasPrefix(c.Store, "memory://") || c.PerSecondStore != ""
}

// tracingOn reports whether the environment turns tracing on; a bad
// OTEL_* setting counts as on (the start stops on it with its own error).
func tracingOn(c *ServeConfig) bool {
	on, err := tracing.Requested(c.Env.Tracing)
	return on || err != nil
}

const (
	needsAdmin   = "the admin API starts only with an admin token (FAIRGATE_ADMIN_TOKEN or --admin-token-file)"
	needsGRPC    = "it is the gRPC listener's, which is served only with --grpc-listen"
	needsTracing = "tracing is off: OTEL_TRACES_EXPORTER=otlp, an OTEL_EXPORTER_OTLP_ENDPOINT or envoyproxy/ratelimit's TRACING_ENABLED=true turns it on"
)

// modals are the flags that act only in some modes. The others act in
// every mode: --listen, --store, --config, the tokens,
// --tls-cert-file/--tls-key-file, --control-timeout, --drain,
// --shutdown-grace, --read-timeout, --max-connections; --upstream and
// --grpc-listen choose the modes. The internal listener's TLS flags act
// in both modes: without --upstream they are --listen's (ParseServe).
// --per-second-store and --rls-max-calls depend on the config file and
// are checked by Serve.
var modals = []modal{
	{flag: "store-timeout", env: "FAIRGATE_STORE_TIMEOUT", acts: sharedStore, soft: true,
		needs: "it bounds each call to a shared store, and needs a Redis --store; the memory store answers in-process"},
	{flag: "ready-requires-store", env: "FAIRGATE_READY_REQUIRES_STORE", acts: sharedStore,
		needs: "it makes /readyz follow a shared store, and needs a Redis --store; the memory store is never down",
		asks:  func(c *ServeConfig) bool { return c.ReadyRequiresStore }},
	{flag: "upstream-timeout", env: "FAIRGATE_UPSTREAM_TIMEOUT", acts: proxyMode,
		needs: "it bounds the wait for the proxied upstream's response headers, and needs --upstream"},
	{flag: "internal-listen", env: "FAIRGATE_INTERNAL_LISTEN", acts: proxyMode, soft: true,
		needs: "the internal listener exists only with --upstream; without it --listen serves the internal endpoints"},
	{flag: "admin-listen", env: "FAIRGATE_ADMIN_LISTEN", acts: adminOn, soft: true, needs: needsAdmin},
	{flag: "admin-tls-cert-file", env: "FAIRGATE_ADMIN_TLS_CERT_FILE", acts: adminOn, needs: needsAdmin},
	{flag: "admin-tls-key-file", env: "FAIRGATE_ADMIN_TLS_KEY_FILE", acts: adminOn, needs: needsAdmin},
	{flag: "grpc-tls-cert-file", env: "FAIRGATE_GRPC_TLS_CERT_FILE", acts: grpcOn, needs: needsGRPC},
	{flag: "grpc-tls-key-file", env: "FAIRGATE_GRPC_TLS_KEY_FILE", acts: grpcOn, needs: needsGRPC},
	{flag: "grpc-client-ca-file", env: "FAIRGATE_GRPC_CLIENT_CA_FILE", acts: grpcOn, needs: needsGRPC},
	{flag: "grpc-client-san", env: "FAIRGATE_GRPC_CLIENT_SAN", acts: grpcOn, needs: needsGRPC},
	{flag: "config-poll", env: "FAIRGATE_CONFIG_POLL", acts: watched,
		needs: "only a config file (--config, FAIRGATE_CONFIG) is watched for changes; the embedded example is not"},
	{flag: "trace-tenants", env: "FAIRGATE_TRACE_TENANTS", acts: tracingOn, needs: needsTracing,
		asks: func(c *ServeConfig) bool { return c.TraceTenants }},
	{flag: "trust-trace-context", env: "FAIRGATE_TRUST_TRACE_CONTEXT", acts: tracingOn, needs: needsTracing,
		asks: func(c *ServeConfig) bool { return c.TrustTraceContext }},
	{env: "FAIRGATE_RLS_MAX_OVERRIDE_UNIT", acts: envoyConfig,
		needs: "it goes into the config made from envoyproxy/ratelimit's environment (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or CONFIG_TYPE, and no --config); with a config file, set rls.max_override_unit in the file"},
}

// checkModes refuses every modal flag given where it does nothing (one
// line each), and puts in c.Warnings the soft ones set in the environment
// where they do nothing. cmdline holds the flags set on the command line;
// lookup reads the environment.
func checkModes(c *ServeConfig, cmdline map[string]bool, lookup func(string) (string, bool)) error {
	var errs []error
	for _, m := range modals {
		fromEnv := false
		if m.flag == "" || !cmdline[m.flag] {
			v, _ := lookup(m.env)
			if v == "" {
				continue
			}
			fromEnv = true
		}
		if m.acts(c) || m.asks != nil && !m.asks(c) {
			continue
		}
		switch {
		case m.flag == "":
			errs = append(errs, fmt.Errorf("serve: %s does nothing here: %s", m.env, m.needs))
		case fromEnv && m.soft:
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s (--%s) is set but unused: %s", m.env, m.flag, m.needs))
		case fromEnv:
			errs = append(errs, fmt.Errorf("serve: %s (--%s) does nothing here: %s", m.env, m.flag, m.needs))
		default:
			errs = append(errs, fmt.Errorf("serve: --%s does nothing here: %s", m.flag, m.needs))
		}
	}
	return errors.Join(errs...)
}
