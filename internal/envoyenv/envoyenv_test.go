package envoyenv

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	cfgpkg "github.com/fairgate/fairgate/internal/config"
)

func lookup(env map[string]string) Lookup {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestRedisURL: every Redis form of envoyproxy/ratelimit's environment
// becomes the store URL that connects to the same Redis the same way.
func TestRedisURL(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, ""},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "redis://redis:6379"},
		{map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/var/run/redis.sock", "REDIS_AUTH": "pw"}, "unix://:pw@/var/run/redis.sock"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_AUTH": "user:p@ss", "CACHE_KEY_PREFIX": "rl_"}, "redis://user:p%40ss@r:6379?key_prefix=rl_"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "CLUSTER", "REDIS_URL": "a:7000,b:7001"}, "redis-cluster://a:7000,b:7001"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_SENTINEL_AUTH": "spw"}, "redis-sentinel://s1:26379,s2:26379/mymaster?sentinel_password=spw"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6380", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca.pem", "REDIS_TLS_CLIENT_CERT": "/c.pem", "REDIS_TLS_CLIENT_KEY": "/k.pem", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"},
			"rediss://r:6380?skip_hostname_verify=true&tls_ca_file=%2Fca.pem&tls_cert_file=%2Fc.pem&tls_key_file=%2Fk.pem"},
	} {
		r, err := Read(lookup(tc.env))
		if err != nil || r.Store != tc.want {
			t.Errorf("%v: %q %v, want %q", tc.env, r.Store, err, tc.want)
		}
	}
	r, err := Read(lookup(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/ca",
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TYPE": "cluster", "REDIS_PERSECOND_URL": "b:1,b:2", "REDIS_PERSECOND_AUTH": "pw"}))
	if err != nil || r.Store != "rediss://a:1?tls_ca_file=%2Fca" || r.PerSecondStore != "redis-cluster://:pw@b:1,b:2" {
		t.Errorf("the per-second Redis: %q %q %v", r.Store, r.PerSecondStore, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_PERSECOND": "true"}, "REDIS_PERSECOND=true needs REDIS_PERSECOND_URL"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, "want <master name>,<sentinel host:port>"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "ring", "REDIS_URL": "a:1"}, `REDIS_TYPE="ring"`},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "a:1", "REDIS_TLS_CACERT": "/ca"}, "REDIS_TLS is not true"},
		{map[string]string{"GRPC_PORT": "eighty"}, `GRPC_PORT="eighty": want a port number`},
		{map[string]string{"REDIS_TIMEOUT": "soon"}, `REDIS_TIMEOUT="soon"`},
		{map[string]string{"RUNTIME_ROOT": "/d", "NEAR_LIMIT_RATIO": "most"}, `NEAR_LIMIT_RATIO="most"`},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, "want FILE or GRPC_XDS_SOTW"},
		{map[string]string{"BACKEND_TYPE": "memcache"}, "memcache is not supported"},
		{map[string]string{"GRPC_MAX_CONNECTION_AGE": "forever"}, `GRPC_MAX_CONNECTION_AGE="forever"`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c"}, "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
	} {
		if _, err := Read(lookup(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
}

// TestConfig: the runtime directory and the settings make an rls config;
// listeners, log settings and unsupported variables are reported.
func TestConfig(t *testing.T) {
	r, err := Read(lookup(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
		"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "NEAR_LIMIT_RATIO": "0.9", "SHADOW_MODE": "false", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "LOCAL_CACHE_SIZE_IN_BYTES": "1024",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_REMAINING_HEADER": "X-Left", "USE_STATSD": "true", "STATSD_HOST": "statsd", "STATSD_PORT": "9125",
		"GRPC_PORT": "8081", "PORT": "8080", "DEBUG_PORT": "16070", "GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "10m", "LOG_LEVEL": "WARNING", "LOG_FORMAT": "json", "BACKEND_TYPE": "redis", "TRACING_ENABLED": "true",
		"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour",
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"runtime_dir: /data/ratelimit/config", "ignore_dot_files: true", "stop_increment_when_over_limit: true", "near_limit_ratio: 0.9", "shadow_mode: false", "healthy_with_at_least_one_config_loaded: true", "local_cache_bytes: 1024", "remaining: X-Left", "address: statsd:9125", "max_override_unit: hour"} {
		if !strings.Contains(string(r.Config), want) {
			t.Errorf("config:\n%s\nwant %q in it", r.Config, want)
		}
	}
	if r.GRPCListen != "0.0.0.0:8081" || r.Listen != "0.0.0.0:8080" || r.LogLevel != "warn" || r.LogFormat != "json" || r.GRPCMaxConnAge != time.Hour || r.GRPCMaxConnAgeGrace != 10*time.Minute || r.DebugListen != "0.0.0.0:16070" {
		t.Errorf("%+v", r)
	}
	if len(r.Unsupported) != 0 {
		t.Errorf("unsupported %v", r.Unsupported)
	}
	if r.Tracing["OTEL_TRACES_EXPORTER"] != "otlp" || r.Tracing["OTEL_SERVICE_NAME"] != "RateLimit" || r.Tracing["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] != "http/protobuf" {
		t.Errorf("TRACING_ENABLED=true: %v", r.Tracing)
	}
}

// TestXDSConfig: CONFIG_TYPE=GRPC_XDS_SOTW follows the management server
// the CONFIG_GRPC_XDS_* variables name.
func TestXDSConfig(t *testing.T) {
	r, err := Read(lookup(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "xds:18000", "CONFIG_GRPC_XDS_NODE_ID": "rl-1", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,team=edge"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"address: xds:18000", "node_id: rl-1", "zone: a", "team: edge"} {
		if !strings.Contains(string(r.Config), want) {
			t.Errorf("config:\n%s\nwant %q in it", r.Config, want)
		}
	}
}

// TestTracingVars: envoyproxy/ratelimit's TRACING_* variables become the
// OTEL_* ones that say the same; bad values are refused by name.
func TestTracingVars(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want map[string]string
		err  string
	}{
		{map[string]string{"TRACING_ENABLED": "false", "TRACING_SERVICE_NAME": "x"}, nil, ""},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "rl", "TRACING_SERVICE_NAMESPACE": "edge",
			"TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "0.25"},
			map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "rl",
				"OTEL_RESOURCE_ATTRIBUTES": "service.namespace=edge,service.instance.id=pod-1", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, ""},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, nil, `TRACING_EXPORTER_PROTOCOL="zipkin"`},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "2"}, nil, `TRACING_SAMPLING_RATE="2"`},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAMESPACE": "a=b"}, nil, `TRACING_SERVICE_NAMESPACE="a=b"`},
	} {
		r, err := Read(lookup(tc.env))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || !maps.Equal(r.Tracing, tc.want) {
			t.Errorf("%v: %v %v, want %v", tc.env, r.Tracing, err, tc.want)
		}
	}
}

// TestStatsdVars: envoyproxy/ratelimit's statsd variables make the
// rls.statsd section that sends what it sends: TCP by default
// (STATSD_PROTOCOL, gostats's default) or UDP; DogStatsD over UDP with
// its mogrifiers; EXTRA_TAGS on both. The section decodes as a config
// file's; bad values are refused by name.
func TestStatsdVars(t *testing.T) {
	xds := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
	with := func(kv ...string) map[string]string {
		env := maps.Clone(xds)
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	type mog struct {
		pattern, name string
		tags          map[string]string
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want cfgpkg.Statsd
		mogs []mog
		err  string
	}{
		{name: "off", env: with("STATSD_HOST", "s")},
		{name: "statsd, tcp by default", env: with("USE_STATSD", "true", "STATSD_HOST", "s", "STATSD_PORT", "9125"),
			want: cfgpkg.Statsd{Address: "s:9125", Protocol: "tcp"}},
		{name: "statsd over udp, tags", env: with("USE_STATSD", "true", "STATSD_PROTOCOL", "udp", "EXTRA_TAGS", "env:prod,ver:1.2", "STATS_FLUSH_INTERVAL", "5s"),
			want: cfgpkg.Statsd{Address: "localhost:8125", Protocol: "udp", FlushInterval: 5 * time.Second, Tags: map[string]string{"env": "prod", "ver": "1.2"}}},
		{name: "disabled", env: with("USE_STATSD", "true", "DISABLE_STATS", "true")},
		{name: "dogstatsd with mogrifiers", env: with("USE_DOG_STATSD", "true", "STATSD_PROTOCOL", "tcp", "EXTRA_TAGS", "env:prod",
			"USE_DOG_STATSD_MOGRIFIERS", "hits,domain",
			"DOG_STATSD_MOGRIFIER_HITS_PATTERN", `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, "DOG_STATSD_MOGRIFIER_HITS_NAME", "ratelimit.service.rate_limit.$3", "DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2",
			"DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN", `^some\.metric\.(.*)$`, "DOG_STATSD_MOGRIFIER_DOMAIN_NAME", "some.metric"),
			want: cfgpkg.Statsd{Address: "localhost:8125", Protocol: "udp", DogStatsD: true, Tags: map[string]string{"env": "prod"}},
			mogs: []mog{{`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, "ratelimit.service.rate_limit.$3", map[string]string{"domain": "$1", "descriptor": "$2"}}, {`^some\.metric\.(.*)$`, "some.metric", nil}}},
		{name: "both sinks", env: with("USE_STATSD", "true", "USE_DOG_STATSD", "true"), err: "set one of them"},
		{name: "bad protocol", env: with("USE_STATSD", "true", "STATSD_PROTOCOL", "sctp"), err: `STATSD_PROTOCOL="sctp"`},
		{name: "bad tags", env: with("USE_STATSD", "true", "EXTRA_TAGS", "env=prod"), err: `EXTRA_TAGS="env=prod"`},
		{name: "bad tag key", env: with("USE_STATSD", "true", "EXTRA_TAGS", "a|b:c"), err: `tag key "a|b"`},
		{name: "mogrifier without pattern", env: with("USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "x", "DOG_STATSD_MOGRIFIER_X_NAME", "n"), err: "DOG_STATSD_MOGRIFIER_X_PATTERN"},
		{name: "bad mogrifier pattern", env: with("USE_DOG_STATSD", "true", "USE_DOG_STATSD_MOGRIFIERS", "x", "DOG_STATSD_MOGRIFIER_X_NAME", "n", "DOG_STATSD_MOGRIFIER_X_PATTERN", "("), err: `DOG_STATSD_MOGRIFIER_X_PATTERN="("`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Read(lookup(tc.env))
			if err == nil {
				var c *cfgpkg.Config
				if c, err = cfgpkg.Parse("env", r.Config); err == nil {
					var got []mog
					for _, m := range c.Statsd.Mogrifiers {
						got = append(got, mog{m.Pattern.String(), m.Name, m.Tags})
					}
					c.Statsd.Mogrifiers = nil
					if d := cmp.Diff(tc.want, c.Statsd); d != "" {
						t.Errorf("rls.statsd (-want +got):\n%s\n%s", d, r.Config)
					}
					if d := cmp.Diff(tc.mogs, got, cmp.AllowUnexported(mog{})); d != "" {
						t.Errorf("mogrifiers (-want +got):\n%s", d)
					}
				}
			}
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("%v, want an error containing %q", err, tc.err)
			}
			for _, u := range r.Unsupported {
				if strings.Contains(u, "STATSD") || strings.Contains(u, "EXTRA_TAGS") {
					t.Errorf("unsupported %s", u)
				}
			}
		})
	}
}
