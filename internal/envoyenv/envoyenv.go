// Package envoyenv reads envoyproxy/ratelimit's environment variables, so
// that an operator can swap that service's container image for fairgate's
// and keep the environment: the Redis connection, the listeners, the
// runtime directory of config files and the service's settings map onto
// fairgate's store URL, listen addresses and a config file made from
// them. docs/rls.md has the table.
package envoyenv

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Lookup is os.LookupEnv's shape.
type Lookup func(name string) (string, bool)

// Result is what the environment asks for. Empty fields were not set.
type Result struct {
	// Store is the store URL made from the REDIS_* variables.
	Store string
	// PerSecondStore is the store URL of the per-second limits
	// (REDIS_PERSECOND and its REDIS_PERSECOND_* variables), or "".
	PerSecondStore string
	// StoreTimeout is REDIS_TIMEOUT.
	StoreTimeout time.Duration
	// GRPCListen is GRPC_HOST:GRPC_PORT; Listen is HOST:PORT (the HTTP
	// listener of /json and /healthcheck).
	GRPCListen, Listen string
	// DebugListen is DEBUG_HOST:DEBUG_PORT (defaults 0.0.0.0 and 6070, as
	// there, for the one not set): the debug listener of /rlconfig,
	// /stats and /debug/pprof/.
	DebugListen string
	// Config is a config file made from the runtime directory and the
	// service's settings, when the environment names a runtime directory
	// (RUNTIME_ROOT or RUNTIME_SUBDIRECTORY); nil otherwise.
	Config []byte
	// LogLevel (debug, info, warn, error) and LogFormat (text, json).
	LogLevel, LogFormat string
	// GRPCCert, GRPCKey and GRPCClientCA are the gRPC listener's TLS
	// (GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT, _KEY,
	// GRPC_CLIENT_TLS_CACERT).
	GRPCCert, GRPCKey, GRPCClientCA string
	// ForceStart is FORCE_START_WITHOUT_INITIAL_CONFIG: with xDS, serve
	// gRPC before the first config arrives (answering OK to everything
	// until then) instead of opening the port once it is in.
	ForceStart bool
	// Tracing holds, with TRACING_ENABLED=true, the OTEL_* variables that
	// say what that service's TRACING_* ones say, for those the environment
	// does not set (tracing.FromEnv's defaults): an OTLP exporter over
	// TRACING_EXPORTER_PROTOCOL (http: http/protobuf; grpc),
	// TRACING_SERVICE_NAME (default RateLimit), TRACING_SERVICE_NAMESPACE
	// and _INSTANCE_ID as resource attributes, TRACING_SAMPLING_RATE as a
	// parent-based trace ID ratio. The endpoint is OTEL_EXPORTER_OTLP_*'s,
	// as there.
	Tracing map[string]string
	// GRPCClientSAN is the name a client certificate must carry
	// (GRPC_CLIENT_TLS_SAN; empty: any of the client CA's).
	GRPCClientSAN string
	// GRPCMaxConnAge and GRPCMaxConnAgeGrace are GRPC_MAX_CONNECTION_AGE
	// and _GRACE: zero when not set.
	GRPCMaxConnAge, GRPCMaxConnAgeGrace time.Duration
	// Used are the variables read; Unsupported those set that fairgate
	// does not support, each with why.
	Used, Unsupported []string
}

// unsupported are the variables fairgate does not act on, with why.
var unsupported = map[string]string{
	"MEMCACHE_HOST_PORT":                        "memcache is not supported",
	"MEMCACHE_SRV":                              "memcache is not supported",
	"REDIS_PIPELINE_WINDOW":                     "concurrent calls are merged into shared script calls instead",
	"REDIS_PIPELINE_LIMIT":                      "concurrent calls are merged into shared script calls instead",
	"EXPIRATION_JITTER_MAX_SECONDS":             "keys expire with their window",
	"USE_PROMETHEUS":                            "Prometheus metrics are always on the internal listener's /metrics",
	"GRPC_UDS":                                  "the gRPC service listens on TCP",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":            "the xDS client connects in plain text",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":           "the xDS client connects in plain text",
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "the xDS client sends no extra headers",
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":           "the xDS client reconnects after CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"PROMETHEUS_ADDR":                           "Prometheus metrics are always on the internal listener's /metrics",
	"PROMETHEUS_MAPPER_YAML":                    "fairgate's Prometheus metrics have their own names (docs/rls.md)",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":        "concurrent calls are merged into shared script calls instead",
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":              "the client multiplexes one connection per node",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":      "the store has its own deadline and circuit breaker",
	"REDIS_STARTUP_MAX_ELAPSED_TIME":            "fairgate starts with Redis down and keeps trying",
	"MEMCACHE_TLS":                              "memcache is not supported",
}

// Read reads the environment through look.
func Read(look Lookup) (Result, error) {
	var r Result
	get := func(name string) (string, bool) {
		v, ok := look(name)
		if ok {
			r.Used = append(r.Used, name)
		}
		return v, ok
	}
	if v, ok := get("BACKEND_TYPE"); ok && !strings.EqualFold(v, "redis") {
		return r, fmt.Errorf("BACKEND_TYPE=%q: fairgate stores its counters in Redis (or in memory); memcache is not supported", v)
	}
	for name, why := range unsupported {
		if v, ok := look(name); ok && v != "" && v != "false" {
			r.Unsupported = append(r.Unsupported, name+" ("+why+")")
		}
	}
	slices.Sort(r.Unsupported)
	var err error
	if r.Store, err = redisURL(get, "REDIS_"); err != nil {
		return r, err
	}
	if boolVar(get, "REDIS_PERSECOND") {
		if r.PerSecondStore, err = redisURL(get, "REDIS_PERSECOND_"); err != nil {
			return r, err
		}
		if r.PerSecondStore == "" {
			return r, fmt.Errorf("REDIS_PERSECOND=true needs REDIS_PERSECOND_URL")
		}
	}
	if v, ok := get("REDIS_TIMEOUT"); ok {
		if r.StoreTimeout, err = time.ParseDuration(v); err != nil || r.StoreTimeout <= 0 {
			return r, fmt.Errorf("REDIS_TIMEOUT=%q: want a positive duration such as 50ms", v)
		}
	}
	if r.GRPCListen, err = hostPort(get, "GRPC_HOST", "GRPC_PORT", "0.0.0.0", "8081"); err != nil {
		return r, err
	}
	if r.Listen, err = hostPort(get, "HOST", "PORT", "0.0.0.0", "8080"); err != nil {
		return r, err
	}
	if r.DebugListen, err = hostPort(get, "DEBUG_HOST", "DEBUG_PORT", "0.0.0.0", "6070"); err != nil {
		return r, err
	}
	if boolVar(get, "GRPC_SERVER_USE_TLS") {
		r.GRPCCert, _ = get("GRPC_SERVER_TLS_CERT")
		r.GRPCKey, _ = get("GRPC_SERVER_TLS_KEY")
		r.GRPCClientCA, _ = get("GRPC_CLIENT_TLS_CACERT")
		r.GRPCClientSAN, _ = get("GRPC_CLIENT_TLS_SAN")
		if r.GRPCCert == "" || r.GRPCKey == "" {
			return r, fmt.Errorf("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"GRPC_MAX_CONNECTION_AGE", &r.GRPCMaxConnAge}, {"GRPC_MAX_CONNECTION_AGE_GRACE", &r.GRPCMaxConnAgeGrace}} {
		if v, ok := get(d.name); ok && v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
				return r, fmt.Errorf("%s=%q: want a positive duration such as 24h", d.name, v)
			}
		}
	}
	if v, ok := get("LOG_LEVEL"); ok {
		r.LogLevel = strings.ToLower(v)
		if r.LogLevel == "warning" {
			r.LogLevel = "warn"
		}
		switch r.LogLevel {
		case "trace":
			r.LogLevel = "debug"
		case "fatal", "panic":
			r.LogLevel = "error"
		}
	}
	if v, ok := get("LOG_FORMAT"); ok {
		r.LogFormat = strings.ToLower(v)
	}
	r.ForceStart = boolVar(get, "FORCE_START_WITHOUT_INITIAL_CONFIG")
	if r.Tracing, err = tracingVars(get); err != nil {
		return r, err
	}
	r.Config, err = config(get)
	return r, err
}

// hostPort joins a host and a port variable; "" when neither is set.
func hostPort(get Lookup, hostVar, portVar, defHost, defPort string) (string, error) {
	h, hok := get(hostVar)
	p, pok := get(portVar)
	if !hok && !pok {
		return "", nil
	}
	if !hok {
		h = defHost
	}
	if !pok {
		p = defPort
	}
	if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: want a port number", portVar, p)
	}
	return net.JoinHostPort(h, p), nil
}

// redisURL makes a store URL from the variables starting with p
// ("REDIS_", or "REDIS_PERSECOND_" for the per-second Redis): SOCKET_TYPE
// (tcp, unix), TYPE (single, cluster, sentinel), URL, AUTH
// ([user:]password), SENTINEL_AUTH, TLS; and the shared REDIS_TLS_* files
// and CACHE_KEY_PREFIX.
func redisURL(get Lookup, p string) (string, error) {
	addr, ok := get(p + "URL")
	if !ok {
		return "", nil
	}
	socket, _ := get(p + "SOCKET_TYPE")
	typ, _ := get(p + "TYPE")
	auth, _ := get(p + "AUTH")
	useTLS := boolVar(get, p+"TLS")
	q := url.Values{}
	if kp, ok := get("CACHE_KEY_PREFIX"); ok && kp != "" {
		q.Set("key_prefix", kp)
	}
	// The TLS files are the two Redis's alike, as there.
	tlsFiles := url.Values{}
	for name, param := range map[string]string{"REDIS_TLS_CACERT": "tls_ca_file", "REDIS_TLS_CLIENT_CERT": "tls_cert_file", "REDIS_TLS_CLIENT_KEY": "tls_key_file"} {
		if v, ok := get(name); ok && v != "" {
			tlsFiles.Set(param, v)
		}
	}
	if boolVar(get, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
		tlsFiles.Set("skip_hostname_verify", "true")
	}
	switch {
	case useTLS:
		for k, v := range tlsFiles {
			q[k] = v
		}
	case len(tlsFiles) > 0 && p == "REDIS_":
		return "", fmt.Errorf("REDIS_TLS_* files are set but REDIS_TLS is not true")
	}
	user := ""
	if auth != "" {
		u, p, found := strings.Cut(auth, ":")
		if !found {
			u, p = "", auth
		}
		user = url.UserPassword(u, p).String() + "@"
	}
	s := "s"
	if !useTLS {
		s = ""
	}
	var out string
	switch t := strings.ToLower(typ); {
	case strings.EqualFold(socket, "unix") || socket == "" && strings.HasPrefix(addr, "/"):
		if useTLS || t == "cluster" || t == "sentinel" {
			return "", fmt.Errorf("%sSOCKET_TYPE=unix goes with %sTYPE=single and no %sTLS", p, p, p)
		}
		out = "unix://" + user + filepath.Clean(addr)
	case t == "" || t == "single":
		out = "redis" + s + "://" + user + addr
	case t == "cluster":
		out = "redis" + s + "-cluster://" + user + addr
	case t == "sentinel":
		parts := strings.Split(addr, ",")
		if len(parts) < 2 {
			return "", fmt.Errorf("%sURL=%q: with REDIS_TYPE=sentinel, want <master name>,<sentinel host:port>,…", p, addr)
		}
		if sa, ok := get(p + "SENTINEL_AUTH"); ok && sa != "" {
			su, sp, found := strings.Cut(sa, ":")
			if found {
				q.Set("sentinel_username", su)
			} else {
				sp = sa
			}
			q.Set("sentinel_password", sp)
		}
		out = "redis" + s + "-sentinel://" + user + strings.Join(parts[1:], ",") + "/" + parts[0]
	default:
		return "", fmt.Errorf("%sTYPE=%q: want single, cluster or sentinel", p, typ)
	}
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out, nil
}

// settings adds the service's settings to the rls section: the switches,
// the response headers and statsd; and FAIRGATE_RLS_MAX_OVERRIDE_UNIT,
// fairgate's own bound on a request's own limit (checked with the rest of
// the config made).
func settings(get Lookup, rls map[string]any) error {
	set := func(key, name string, conv func(string) (any, error)) error {
		v, ok := get(name)
		if !ok || v == "" {
			return nil
		}
		x, err := conv(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", name, v, err)
		}
		rls[key] = x
		return nil
	}
	toBool := func(v string) (any, error) { return strconv.ParseBool(v) }
	toFloat := func(v string) (any, error) { return strconv.ParseFloat(v, 64) }
	toInt := func(v string) (any, error) { return strconv.Atoi(v) }
	toString := func(v string) (any, error) { return v, nil }
	for _, s := range []struct {
		key, name string
		conv      func(string) (any, error)
	}{
		{"ignore_dot_files", "RUNTIME_IGNOREDOTFILES", toBool},
		{"merge_domains", "MERGE_DOMAIN_CONFIG", toBool},
		{"stop_increment_when_over_limit", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", toBool},
		{"near_limit_ratio", "NEAR_LIMIT_RATIO", toFloat},
		{"shadow_mode", "SHADOW_MODE", toBool},
		{"healthy_with_at_least_one_config_loaded", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", toBool},
		{"quota_mode", "QUOTA_MODE", toBool},
		{"dynamic_metadata", "RESPONSE_DYNAMIC_METADATA", toBool},
		{"local_cache_bytes", "LOCAL_CACHE_SIZE_IN_BYTES", toInt},
		// fairgate's own: that service has no bound on a request's own limit.
		{"max_override_unit", "FAIRGATE_RLS_MAX_OVERRIDE_UNIT", toString},
	} {
		if err := set(s.key, s.name, s.conv); err != nil {
			return err
		}
	}
	if boolVar(get, "LIMIT_RESPONSE_HEADERS_ENABLED") {
		h := map[string]any{"enabled": true}
		for key, name := range map[string]string{"limit": "LIMIT_LIMIT_HEADER", "remaining": "LIMIT_REMAINING_HEADER", "reset": "LIMIT_RESET_HEADER"} {
			if v, ok := get(name); ok && v != "" {
				h[key] = v
			}
		}
		rls["response_headers"] = h
	}
	st, err := statsdSettings(get)
	if err != nil || st == nil {
		return err
	}
	rls["statsd"] = st
	return nil
}

// statsdSettings is the rls.statsd section: with USE_STATSD=true, statsd
// over STATSD_PROTOCOL (tcp by default, as gostats there); with
// USE_DOG_STATSD=true, DogStatsD over UDP (datadog-go's), with the
// mogrifiers of USE_DOG_STATSD_MOGRIFIERS; EXTRA_TAGS (k1:v1,k2:v2) on
// every stat. Nil when neither is on, or with DISABLE_STATS=true.
func statsdSettings(get Lookup) (map[string]any, error) {
	on := map[string]bool{}
	for _, name := range []string{"USE_STATSD", "USE_DOG_STATSD"} {
		if v, ok := get(name); ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want true or false", name, v)
			}
			on[name] = b
		}
	}
	if boolVar(get, "DISABLE_STATS") || !on["USE_STATSD"] && !on["USE_DOG_STATSD"] {
		return nil, nil
	}
	if on["USE_STATSD"] && on["USE_DOG_STATSD"] {
		return nil, fmt.Errorf("USE_STATSD=true and USE_DOG_STATSD=true: set one of them (envoyproxy/ratelimit refuses both too)")
	}
	addr, err := hostPort(get, "STATSD_HOST", "STATSD_PORT", "localhost", "8125")
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "localhost:8125"
	}
	st := map[string]any{"address": addr, "protocol": "tcp"}
	if f, ok := get("STATS_FLUSH_INTERVAL"); ok && f != "" {
		st["flush_interval"] = f
	}
	if p, ok := get("STATSD_PROTOCOL"); ok && p != "" && on["USE_STATSD"] {
		switch p {
		case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
			st["protocol"] = p
		default:
			return nil, fmt.Errorf("STATSD_PROTOCOL=%q: want tcp or udp", p)
		}
	}
	if v, ok := get("EXTRA_TAGS"); ok && v != "" {
		tags, err := tagMap("EXTRA_TAGS", v)
		if err != nil {
			return nil, err
		}
		st["tags"] = tags
	}
	if on["USE_DOG_STATSD"] {
		st["protocol"], st["dogstatsd"] = "udp", true
		if v, ok := get("USE_DOG_STATSD_MOGRIFIERS"); ok && v != "" {
			var ms []map[string]any
			for _, name := range strings.Split(v, ",") {
				m, err := mogrifier(get, name)
				if err != nil {
					return nil, err
				}
				ms = append(ms, m)
			}
			st["mogrifiers"] = ms
		}
	}
	return st, nil
}

// tagMap reads a map variable as envconfig does: k1:v1,k2:v2.
func tagMap(name, v string) (map[string]string, error) {
	tags := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, fmt.Errorf("%s=%q: %q is not key:value; want k1:v1,k2:v2", name, v, kv)
		}
		tags[k] = val
	}
	return tags, nil
}

// mogrifier reads DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS.
func mogrifier(get Lookup, name string) (map[string]any, error) {
	p := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
	pattern, _ := get(p + "PATTERN")
	statName, _ := get(p + "NAME")
	if pattern == "" || statName == "" {
		return nil, fmt.Errorf("USE_DOG_STATSD_MOGRIFIERS names %q: set %sPATTERN and %sNAME", name, p, p)
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, fmt.Errorf("%sPATTERN=%q: %v", p, pattern, err)
	}
	m := map[string]any{"pattern": pattern, "name": statName}
	if v, ok := get(p + "TAGS"); ok && v != "" {
		tags, err := tagMap(p+"TAGS", v)
		if err != nil {
			return nil, err
		}
		for k, val := range tags {
			if k == "" || val == "" {
				return nil, fmt.Errorf("%sTAGS=%q: a tag with no key or no value", p, v)
			}
		}
		m["tags"] = tags
	}
	return m, nil
}

// xds is the rls.xds section of CONFIG_GRPC_XDS_*.
func xds(get Lookup) (map[string]any, error) {
	x := map[string]any{"address": "localhost:18000"}
	if v, ok := get("CONFIG_GRPC_XDS_SERVER_URL"); ok && v != "" {
		x["address"] = v
	}
	if v, ok := get("CONFIG_GRPC_XDS_NODE_ID"); ok && v != "" {
		x["node_id"] = v
	}
	if v, ok := get("CONFIG_GRPC_XDS_NODE_METADATA"); ok && v != "" {
		md := map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				md[k] = val
			}
		}
		x["node_metadata"] = md
	}
	if v, ok := get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"); ok && v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=%q: want a duration such as 3s", v)
		}
		x["retry"] = v
	}
	return x, nil
}

func boolVar(get Lookup, name string) bool {
	v, _ := get(name)
	b, _ := strconv.ParseBool(v)
	return b
}

// config makes the config file of a runtime directory: the directory
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY (defaults
// /srv/runtime_data/current, "", config) and the service's settings.
func config(get Lookup) ([]byte, error) {
	root, rok := get("RUNTIME_ROOT")
	sub, sok := get("RUNTIME_SUBDIRECTORY")
	rls := map[string]any{}
	switch ct, _ := get("CONFIG_TYPE"); strings.ToUpper(ct) {
	case "", "FILE":
		if !rok && !sok {
			return nil, nil
		}
		if !rok {
			root = "/srv/runtime_data/current"
		}
		app, ok := get("RUNTIME_APPDIRECTORY")
		if !ok {
			app = "config"
		}
		rls["runtime_dir"] = filepath.Join(root, sub, app)
	case "GRPC_XDS_SOTW":
		x, err := xds(get)
		if err != nil {
			return nil, err
		}
		rls["xds"] = x
	default:
		return nil, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", ct)
	}
	if err := settings(get, rls); err != nil {
		return nil, err
	}
	return yaml.Marshal(map[string]any{"rls": rls})
}

// tracingVars turns envoyproxy/ratelimit's TRACING_* variables into
// OTEL_* ones (Result.Tracing); nil unless TRACING_ENABLED=true.
func tracingVars(get Lookup) (map[string]string, error) {
	if !boolVar(get, "TRACING_ENABLED") {
		return nil, nil
	}
	out := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "RateLimit"}
	switch p, _ := get("TRACING_EXPORTER_PROTOCOL"); p {
	case "", "http":
		out["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
	case "grpc":
		out["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "grpc"
	default:
		return nil, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", p)
	}
	if v, ok := get("TRACING_SERVICE_NAME"); ok && v != "" {
		out["OTEL_SERVICE_NAME"] = v
	}
	var attrs []string
	for _, a := range []struct{ env, attr string }{{"TRACING_SERVICE_NAMESPACE", "service.namespace"}, {"TRACING_SERVICE_INSTANCE_ID", "service.instance.id"}} {
		if v, ok := get(a.env); ok && v != "" {
			if strings.ContainsAny(v, ",=") {
				return nil, fmt.Errorf("%s=%q: a name without ',' or '='", a.env, v)
			}
			attrs = append(attrs, a.attr+"="+v)
		}
	}
	if len(attrs) > 0 {
		out["OTEL_RESOURCE_ATTRIBUTES"] = strings.Join(attrs, ",")
	}
	if v, ok := get("TRACING_SAMPLING_RATE"); ok && v != "" {
		if r, err := strconv.ParseFloat(v, 64); err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("TRACING_SAMPLING_RATE=%q: want a number from 0 to 1", v)
		}
		out["OTEL_TRACES_SAMPLER"], out["OTEL_TRACES_SAMPLER_ARG"] = "parentbased_traceidratio", v
	}
	return out, nil
}
