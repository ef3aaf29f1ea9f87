package dropin_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/internal/kubetest"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rlsxds/xdstest"
	"github.com/fairgate/fairgate/internal/testcerts"
)

// The units, as the responses name them.
const (
	second = rlspb.RateLimitResponse_RateLimit_SECOND
	minute = rlspb.RateLimitResponse_RateLimit_MINUTE
	hour   = rlspb.RateLimitResponse_RateLimit_HOUR
	ok     = rlspb.RateLimitResponse_OK
	over   = rlspb.RateLimitResponse_OVER_LIMIT
)

// password is the Redis password of those cases.
const password = "password123"

// request is a RateLimitRequest of domain with hits and one descriptor per
// element of ds, each "k=v,k2=v2".
func request(domain string, hits uint32, ds ...string) *rlspb.RateLimitRequest {
	r := &rlspb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range ds {
		desc := &commonpb.RateLimitDescriptor{}
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			desc.Entries = append(desc.Entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

// status is a descriptor's expected status, its time to the reset taken
// (whole seconds) from got, as those cases take it.
func status(code rlspb.RateLimitResponse_Code, n uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, left uint32, got *rlspb.RateLimitResponse_DescriptorStatus) *rlspb.RateLimitResponse_DescriptorStatus {
	return &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: n, Unit: unit},
		LimitRemaining:     left,
		DurationUntilReset: &durationpb.Duration{Seconds: got.GetDurationUntilReset().GetSeconds()},
	}
}

// same fails the test unless got equals want as protocol buffers.
func same(t *testing.T, what string, want, got *rlspb.RateLimitResponse) {
	t.Helper()
	if !proto.Equal(want, got) {
		t.Errorf("%s:\n got  %v\n want %v", what, got, want)
	}
}

// nth is the i-th status of r (nil when missing, so that same reports it).
func nth(r *rlspb.RateLimitResponse, i int) *rlspb.RateLimitResponse_DescriptorStatus {
	if i < len(r.GetStatuses()) {
		return r.Statuses[i]
	}
	return nil
}

// cacheKey is getCacheKey there: the keys of the local cache's cases end
// in _local.
func cacheKey(k string, local bool) string {
	if local {
		return k + "_local"
	}
	return k
}

// startRedis starts a redis-server for the test.
func startRedis(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	redistest.Need(t)
	s, err := redistest.Start(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// startIn starts tg with s in the working directory dir makes (a new
// runtime tree when dir is nil), and says whether s turns the local cache
// on.
func (tg target) startIn(t *testing.T, dir func(t *testing.T) string, s env) (*service, bool) {
	t.Helper()
	wd := ""
	if dir != nil {
		wd = dir(t)
	}
	return tg.start(t, wd, s), s["LOCAL_CACHE_SIZE_IN_BYTES"] != "" && s["LOCAL_CACHE_SIZE_IN_BYTES"] != "0"
}

// testBasic is testBasicBaseConfig there: a domain without config, a per
// second limit, going over a per minute limit, two limits in one call,
// the time to the reset ticking down, and the statistics at each step.
// dir, when not nil, makes the working directory.
func testBasic(tg target, s env, dir func(t *testing.T) string) func(t *testing.T) {
	return func(t *testing.T) {
		sv, local := tg.startIn(t, dir, s)
		ifLocal := func(v int64) int64 {
			if local {
				return v
			}
			return 0
		}
		const hits, misses = "ratelimit.localcache.hitCount", "ratelimit.localcache.missCount"
		stat := func(domain, key, what string) string {
			return "ratelimit.service.rate_limit." + domain + "." + cacheKey(key, local) + "." + what
		}

		r := sv.call("foo", cacheKey("hello", local)+"=world")
		same(t, "a domain without config", &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}}}, r)
		sv.expect("after the domain without config", map[string]int64{hits: 0, misses: 0})

		r = sv.call("basic", cacheKey("key1", local)+"=foo")
		same(t, "key1", &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{status(ok, 50, second, 49, nth(r, 0))}}, r)
		sv.expect("after key1", map[string]int64{stat("basic", "key1", "total_hits"): 1, hits: 0, misses: ifLocal(1)})

		// A random value, over a limit of 20 a minute.
		freshMinute()
		v := strconv.FormatUint(rand.Uint64(), 10)
		for i := range 25 {
			r = sv.call("another", cacheKey("key2", local)+"="+v)
			code, left := ok, uint32(20-(i+1))
			if i >= 20 {
				code, left = over, 0
			}
			same(t, "key2, call "+strconv.Itoa(i+1), &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{status(code, 20, minute, left, nth(r, 0))}}, r)
		}
		sv.expect("after 25 calls of key2", map[string]int64{
			stat("another", "key2", "total_hits"): 25, stat("another", "key2", "over_limit"): 5,
			stat("another", "key2", "over_limit_with_local_cache"): ifLocal(4), hits: ifLocal(4), misses: ifLocal(22),
		})

		// Two limits in one call: key3's 10 an hour runs out first.
		v = strconv.FormatUint(rand.Uint64(), 10)
		for i := range 15 {
			r = sv.call("another", cacheKey("key2", local)+"="+v, cacheKey("key3", local)+"="+v)
			code, left1, left2 := ok, uint32(20-(i+1)), uint32(10-(i+1))
			if i >= 10 {
				code, left2 = over, 0
				// The keys stop counting once the call is over a limit.
				if s["STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"] == "true" {
					left1 = 10
				}
			}
			same(t, "key2 and key3, call "+strconv.Itoa(i+1), &rlspb.RateLimitResponse{OverallCode: code, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{
				status(ok, 20, minute, left1, nth(r, 0)), status(code, 10, hour, left2, nth(r, 1)),
			}}, r)
		}
		sv.expect("after 15 calls of key2 and key3", map[string]int64{
			stat("another", "key2", "total_hits"): 40, stat("another", "key2", "over_limit"): 5,
			stat("another", "key2", "over_limit_with_local_cache"): ifLocal(4),
			stat("another", "key3", "total_hits"):                  15, stat("another", "key3", "over_limit"): 5,
			stat("another", "key3", "over_limit_with_local_cache"): ifLocal(4), hits: ifLocal(8), misses: ifLocal(48),
		})

		// The time to the reset ticks down (there after 2 s; whole
		// seconds drop after 1).
		r1 := sv.call("another", cacheKey("key4", local)+"=durTest")
		time.Sleep(1100 * time.Millisecond)
		r2 := sv.call("another", cacheKey("key4", local)+"=durTest")
		if a, b := nth(r1, 0).GetDurationUntilReset().GetSeconds(), nth(r2, 0).GetDurationUntilReset().GetSeconds(); b >= a {
			t.Errorf("the time to the reset did not tick down: %ds then %ds", a, b)
		}
	}
}

// freshMinute waits for the next minute when fewer than 5 s of this one
// are left: the calls that follow count in windows of a minute and an
// hour aligned to the clock (Redis's, on this machine), over about a
// second, and a window ending among them would start their count again
// (the original cases share this flake).
func freshMinute() {
	if left := time.Minute - time.Duration(time.Now().UnixNano())%time.Minute; left < 5*time.Second {
		time.Sleep(left + 50*time.Millisecond)
	}
}

// waitForLoad waits (at most 60 s; there 120) until config_load_success
// passes before, and returns it.
func (sv *service) waitForLoad(before int64) int64 {
	sv.t.Helper()
	const name = "ratelimit.service.config_load_success"
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n := sv.stats.value(name); n > before {
			return n
		}
	}
	sv.t.Fatalf("config_load_success stayed at %d for 60s", before)
	return 0
}

// testReload is testConfigReload there: a domain added (reload) is served
// after the load it causes, and its removal is loaded again.
func testReload(tg target, s env, dir func(t *testing.T) string, reload, restore func(t *testing.T, sv *service)) func(t *testing.T) {
	return func(t *testing.T) {
		sv, local := tg.startIn(t, dir, s)
		r := sv.call("reload", cacheKey("block", local)+"=foo")
		same(t, "the domain before it is loaded", &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{Code: ok}}}, r)
		time.Sleep(300 * time.Millisecond) // the start's load flushed
		before := sv.stats.value("ratelimit.service.config_load_success")
		reload(t, sv)
		after := sv.waitForLoad(before)
		r = sv.call("reload", cacheKey("key1", local)+"=foo")
		same(t, "the domain loaded", &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{status(ok, 50, second, 49, nth(r, 0))}}, r)
		restore(t, sv)
		sv.waitForLoad(after)
	}
}

// reloadFile and restoreFile are reloadNewConfigFile and restoreConfigFile
// there: reload.yaml copied into the config directory, then removed.
func reloadFile(t *testing.T, sv *service) {
	b, err := os.ReadFile(filepath.Join(sv.dir, "runtime/current/ratelimit/reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sv.dir, "runtime/current/ratelimit/config/reload.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func restoreFile(t *testing.T, sv *service) {
	if err := os.Remove(filepath.Join(sv.dir, "runtime/current/ratelimit/config/reload.yaml")); err != nil {
		t.Fatal(err)
	}
}

// variants runs test's four variants of those cases: with and without a
// per-second Redis, with and without the local cache.
func variants(t *testing.T, s func(perSecond bool, localCache int) env, test func(env) func(*testing.T)) {
	for _, v := range []struct {
		name       string
		perSecond  bool
		localCache int
	}{{"WithoutPerSecondRedis", false, 0}, {"WithPerSecondRedis", true, 0}, {"WithoutPerSecondRedisWithLocalCache", false, 1000}, {"WithPerSecondRedisWithLocalCache", true, 1000}} {
		t.Run(v.name, test(s(v.perSecond, v.localCache)))
	}
}

// limit is one descriptor of an xDS config.
func limit(key string, unit confpb.RateLimitUnit, n uint32) *confpb.RateLimitDescriptor {
	return &confpb.RateLimitDescriptor{Key: key, RateLimit: &confpb.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}
}

// xdsBasic is the runtime tree's basic and another domains, as xDS
// resources (initialXdsBasicConfig there).
func xdsBasic() []*confpb.RateLimitConfig {
	return []*confpb.RateLimitConfig{
		{Name: "basic", Domain: "basic", Descriptors: []*confpb.RateLimitDescriptor{
			limit("key1", confpb.RateLimitUnit_SECOND, 50), limit("key1_local", confpb.RateLimitUnit_SECOND, 50), limit("one_per_minute", confpb.RateLimitUnit_MINUTE, 1),
		}},
		{Name: "another", Domain: "another", Descriptors: []*confpb.RateLimitDescriptor{
			limit("key2", confpb.RateLimitUnit_MINUTE, 20), limit("key3", confpb.RateLimitUnit_HOUR, 10),
			limit("key2_local", confpb.RateLimitUnit_MINUTE, 20), limit("key3_local", confpb.RateLimitUnit_HOUR, 10),
			limit("key4", confpb.RateLimitUnit_DAY, 20), limit("key4_local", confpb.RateLimitUnit_DAY, 20),
		}},
	}
}

// startXDS is startXdsSotwServer there: a management server holding
// xdsBasic for the node init-test-node, and the settings that use it.
func startXDS(t *testing.T) (*xdstest.Server, env) {
	t.Helper()
	x, err := xdstest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.Stop)
	if err := x.Set("init-test-node", "1", xdsBasic()...); err != nil {
		t.Fatal(err)
	}
	return x, env{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": "init-test-node", "CONFIG_GRPC_XDS_SERVER_URL": localhost(x.Addr)}
}

// TestEnvoyRatelimitCases runs those cases against each target.
func TestEnvoyRatelimitCases(t *testing.T) {
	for _, tg := range targets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Run("BasicConfig", func(t *testing.T) {
				t.Parallel()
				r1, r2 := localhost(startRedis(t).Addr), localhost(startRedis(t).Addr)
				s := func(perSecond bool, localCache int) env { return redisSettings(r1, r2, perSecond, localCache) }
				variants(t, s, func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
				t.Run("WithoutPerSecondRedisWithCachePrefix", testBasic(tg, s(false, 0).with("CACHE_KEY_PREFIX", "prefix:"), nil))
				stop := func(perSecond bool, localCache int) env {
					return s(perSecond, localCache).with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
				}
				t.Run("WithoutPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", testBasic(tg, stop(false, 0), nil))
				t.Run("WithPerSecondRedisWithstopCacheKeyIncrementWhenOverlimitConfig", testBasic(tg, stop(true, 0), nil))
				t.Run("WithoutPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", testBasic(tg, stop(false, 1000), nil))
				t.Run("WithPerSecondRedisWithLocalCacheAndstopCacheKeyIncrementWhenOverlimitConfig", testBasic(tg, stop(true, 1000), nil))
			})
			t.Run("XdsProviderBasicConfig", func(t *testing.T) {
				t.Parallel()
				r1, r2 := localhost(startRedis(t).Addr), localhost(startRedis(t).Addr)
				_, xds := startXDS(t)
				variants(t, func(perSecond bool, localCache int) env {
					return redisSettings(r1, r2, perSecond, localCache).with(flat(xds)...)
				}, func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
			})
			t.Run("BasicConfig_ExtraTags", func(t *testing.T) {
				t.Parallel()
				testExtraTags(t, tg, localhost(startRedis(t).Addr))
			})
			t.Run("BasicTLSConfig", func(t *testing.T) {
				t.Parallel()
				testTLS(t, tg)
			})
			t.Run("BasicAuthConfig", func(t *testing.T) {
				t.Parallel()
				r1, r2 := localhost(startRedis(t, "--requirepass", password).Addr), localhost(startRedis(t, "--requirepass", password).Addr)
				variants(t, func(perSecond bool, localCache int) env {
					return redisSettings(r1, r2, perSecond, localCache).with("REDIS_AUTH", password, "REDIS_PERSECOND_AUTH", password)
				}, func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
			})
			t.Run("BasicAuthConfigWithRedisCluster", func(t *testing.T) {
				t.Parallel()
				urls := [2]string{}
				for i := range urls {
					c, err := redistest.StartClusterAuth(3, 0, password)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(c.Close)
					var addrs []string
					for _, a := range c.Addrs() {
						addrs = append(addrs, localhost(a))
					}
					urls[i] = strings.Join(addrs, ",")
				}
				variants(t, func(perSecond bool, localCache int) env {
					return redisSettings(urls[0], urls[1], perSecond, localCache).with("REDIS_TYPE", "cluster", "REDIS_PERSECOND_TYPE", "cluster",
						"REDIS_AUTH", password, "REDIS_PERSECOND_AUTH", password, "REDIS_PIPELINE_WINDOW", "150us", "REDIS_PERSECOND_PIPELINE_WINDOW", "150us")
				}, func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
			})
			t.Run("BasicAuthConfigWithRedisSentinel", func(t *testing.T) {
				t.Parallel()
				urls := [2]string{}
				for i := range urls {
					ss, err := redistest.StartSentinelsAuth(5*time.Second, "", password)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(ss.Close)
					addrs := []string{redistest.MasterName}
					for _, a := range ss.Addrs() {
						addrs = append(addrs, localhost(a))
					}
					urls[i] = strings.Join(addrs, ",")
				}
				variants(t, func(perSecond bool, localCache int) env {
					return redisSettings(urls[0], urls[1], perSecond, localCache).with("REDIS_TYPE", "sentinel", "REDIS_PERSECOND_TYPE", "sentinel",
						"REDIS_AUTH", password, "REDIS_PERSECOND_AUTH", password)
				}, func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
			})
			t.Run("BasicReloadConfig", func(t *testing.T) {
				t.Parallel()
				s := redisSettings(localhost(startRedis(t).Addr), "localhost:1", false, 0).with("RUNTIME_WATCH_ROOT", "false")
				t.Run("BasicWithoutWatchRoot", testBasic(tg, s, nil))
				t.Run("ReloadWithoutWatchRoot", testReload(tg, s, nil, reloadFile, restoreFile))
			})
			t.Run("XdsProviderBasicConfigReload", func(t *testing.T) {
				t.Parallel()
				x, xds := startXDS(t)
				s := redisSettings(localhost(startRedis(t).Addr), "localhost:1", false, 0).with(flat(xds)...)
				set := func(version string, extra ...*confpb.RateLimitConfig) func(t *testing.T, sv *service) {
					return func(t *testing.T, sv *service) {
						if err := x.Set("init-test-node", version, append(xdsBasic(), extra...)...); err != nil {
							t.Fatal(err)
						}
					}
				}
				reload := &confpb.RateLimitConfig{Name: "reload", Domain: "reload", Descriptors: []*confpb.RateLimitDescriptor{
					limit("key1", confpb.RateLimitUnit_SECOND, 50), limit("block", confpb.RateLimitUnit_SECOND, 0), limit("one_per_minute", confpb.RateLimitUnit_MINUTE, 1),
				}}
				t.Run("ReloadConfigWithXdsServer", testReload(tg, s, nil, set("2", reload), set("3")))
			})
			t.Run("ShareThreshold", func(t *testing.T) {
				t.Parallel()
				testShareThreshold(t, tg, redisSettings(localhost(startRedis(t).Addr), localhost(startRedis(t).Addr), false, 0))
			})
			t.Run("ReloadGRPCServerCerts", func(t *testing.T) {
				t.Parallel()
				testReloadServerCerts(t, tg, redisSettings(localhost(startRedis(t).Addr), "localhost:1", false, 0))
			})
			t.Run("ConfigMapLayout", func(t *testing.T) {
				t.Parallel()
				testConfigMap(t, tg, redisSettings(localhost(startRedis(t).Addr), "localhost:1", false, 0))
			})
			if !tg.peer {
				t.Run("Memcache", func(t *testing.T) { t.Parallel(); testMemcacheRefused(t, tg) })
			}
		})
	}
}

// flat is e as key, value, key, value….
func flat(e env) []string {
	var kv []string
	for k, v := range e {
		kv = append(kv, k, v)
	}
	return kv
}

// testExtraTags is TestBasicConfig_ExtraTags there: EXTRA_TAGS are on the
// rule's statistics and on the config loads.
func testExtraTags(t *testing.T, tg target, redis string) {
	s := redisSettings(redis, "localhost:1", false, 0).with("EXTRA_TAGS", "foo:bar,a:b")
	sv := tg.start(t, "", s)
	sv.call("basic", "key1=foo")
	sv.expect("with EXTRA_TAGS", map[string]int64{
		"ratelimit.service.rate_limit.basic.key1.total_hits.__a=b.__foo=bar": 1,
		"ratelimit.service.config_load_success.__a=b.__foo=bar":              1,
	})
}

// tlsRedis starts a redis-server asking for the password, speaking TLS
// with the certificates of dir on the port it returns (requiring client
// certificates when authClients), and plain on its own for the readiness
// check.
func tlsRedis(t *testing.T, dir string, authClients bool) string {
	t.Helper()
	port := freePort(t)
	auth := "no"
	if authClients {
		auth = "yes"
	}
	startRedis(t, "--requirepass", password, "--tls-port", port, "--tls-cert-file", dir+"/server.crt", "--tls-key-file", dir+"/server.key",
		"--tls-ca-cert-file", dir+"/ca.crt", "--tls-auth-clients", auth)
	return "localhost:" + port
}

// testTLS is TestBasicTLSConfig there (Redis over TLS with a password; a
// client certificate where Redis asks for one), and Test_mTLS: the gRPC
// listener over TLS, asking for a client certificate of the CA that names
// GRPC_CLIENT_TLS_SAN.
func testTLS(t *testing.T, tg target) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "dropin"); err != nil {
		t.Fatal(err)
	}
	r1, r2, verifying := tlsRedis(t, dir, false), tlsRedis(t, dir, false), tlsRedis(t, dir, true)
	tlsSettings := func(main string, perSecond bool, localCache int) env {
		return redisSettings(main, r2, perSecond, localCache).with("REDIS_TLS", "true", "REDIS_PERSECOND_TLS", "true", "REDIS_TLS_CACERT", dir+"/ca.crt",
			"REDIS_AUTH", password, "REDIS_PERSECOND_AUTH", password)
	}
	t.Run("RedisTLS", func(t *testing.T) {
		variants(t, func(perSecond bool, localCache int) env { return tlsSettings(r1, perSecond, localCache) },
			func(s env) func(*testing.T) { return testBasic(tg, s, nil) })
	})
	t.Run("WithoutPerSecondRedisTLSWithClientCert", testBasic(tg, tlsSettings(verifying, false, 0).with(
		"REDIS_TLS_CLIENT_CERT", dir+"/client.crt", "REDIS_TLS_CLIENT_KEY", dir+"/client.key"), nil))
	t.Run("mTLS", func(t *testing.T) {
		s := tlsSettings(r1, false, 0).with("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", dir+"/server.crt", "GRPC_SERVER_TLS_KEY", dir+"/server.key",
			"GRPC_CLIENT_TLS_CACERT", dir+"/ca.crt", "GRPC_CLIENT_TLS_SAN", "envoy.test")
		sv := tg.start(t, "", s)
		roots := x509.NewCertPool()
		ca, _ := os.ReadFile(dir + "/ca.crt")
		roots.AppendCertsFromPEM(ca)
		callWith := func(cert string) error {
			cfg := &tls.Config{RootCAs: roots, ServerName: "localhost"}
			if cert != "" {
				pair, err := tls.LoadX509KeyPair(dir+"/"+cert+".crt", dir+"/"+cert+".key")
				if err != nil {
					t.Fatal(err)
				}
				cfg.Certificates = []tls.Certificate{pair}
			}
			conn, err := grpc.NewClient(sv.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("basic", 1, "key1=mtls"))
			return err
		}
		if err := callWith("client"); err != nil {
			t.Errorf("a client certificate of the CA naming GRPC_CLIENT_TLS_SAN: %v", err)
		}
		if err := callWith("other-client"); err == nil {
			t.Error("a client certificate of the CA naming another name was served")
		}
		if err := callWith(""); err == nil {
			t.Error("a client without a certificate was served")
		}
	})
}

// testReloadServerCerts is TestReloadGRPCServerCerts there: the gRPC
// listener's certificate and key replaced on disk (renamed over) are
// served within 10 s, and the old chain no more.
func testReloadServerCerts(t *testing.T, tg target, s env) {
	first, second := t.TempDir(), t.TempDir()
	if err := testcerts.Write(first, "one"); err != nil {
		t.Fatal(err)
	}
	// The new files have the old ones' sizes and modification time, as
	// there (and as a Kubernetes Secret swapped through ..data): only
	// their content and inode tell them apart.
	size := func(p string) int64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for i := 0; ; i++ {
		if err := testcerts.Write(second, "two"); err != nil {
			t.Fatal(err)
		}
		if size(first+"/server.crt") == size(second+"/server.crt") && size(first+"/server.key") == size(second+"/server.key") {
			break
		}
		if i == 50 {
			t.Fatal("no second certificate of the first's size in 50 tries")
		}
	}
	fi, _ := os.Stat(first + "/server.crt")
	for _, f := range []string{"server.crt", "server.key"} {
		if err := os.Chtimes(filepath.Join(second, f), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(first, f), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	pool := func(dir string) *tls.Config {
		p := x509.NewCertPool()
		b, _ := os.ReadFile(dir + "/ca.crt")
		p.AppendCertsFromPEM(b)
		return &tls.Config{RootCAs: p}
	}
	sv := tg.start(t, "", s.with("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", first+"/server.crt", "GRPC_SERVER_TLS_KEY", first+"/server.key"))
	addr := localhost(sv.grpcAddr)
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(pool(first)); err != nil {
		t.Fatalf("WithInitialCert: %v", err)
	}
	if dial(pool(second)) == nil {
		t.Fatal("WithNewCertFail: the new CA verified the first certificate")
	}
	for _, f := range []string{"server.crt", "server.key"} {
		if err := os.Rename(filepath.Join(second, f), filepath.Join(first, f)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for i := 0; i < 10; i++ {
		if err = dial(pool(second)); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("WithNewCertOK: the new certificate not served within 10s: %v", err)
	}
	if dial(pool(first)) == nil {
		t.Error("WithInitialCertFail: the first certificate is still served")
	}
}

// testShareThreshold is TestShareThreshold there: the values that match
// files/* share one counter; those of files_no_share/* count apart.
func testShareThreshold(t *testing.T, tg target, s env) {
	sv := tg.start(t, "", s)
	const domain = "share-threshold-test"
	freshMinute() // an hour's end among the calls would restart the shared count
	for i := range 10 {
		if r := sv.call(domain, "files=files/a.pdf"); r.OverallCode != ok && r.OverallCode != over {
			t.Fatalf("call %d: %v", i+1, r.OverallCode)
		}
	}
	r := sv.call(domain, "files=files/b.csv")
	same(t, "another value of files/*", &rlspb.RateLimitResponse{OverallCode: over, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{status(over, 10, hour, 0, nth(r, 0))}}, r)
	base := time.Now().UnixNano()
	for range 10 {
		v := "files_no_share/" + strconv.FormatInt(base, 10) + "-" + strconv.FormatUint(rand.Uint64(), 10)
		r := sv.call(domain, "files_no_share="+v)
		same(t, "a value of files_no_share/*", &rlspb.RateLimitResponse{OverallCode: ok, Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{status(ok, 10, hour, 9, nth(r, 0))}}, r)
	}
}

// testConfigMap runs the basic case and the reload case with the runtime
// directory as Kubernetes mounts a ConfigMap there (files that are links
// into ..data, RUNTIME_IGNOREDOTFILES=true, RUNTIME_WATCH_ROOT=false),
// the reload being kubelet's swap of ..data.
func testConfigMap(t *testing.T, tg target, s env) {
	s = s.with("RUNTIME_IGNOREDOTFILES", "true", "RUNTIME_WATCH_ROOT", "false")
	files := func(reload bool) map[string]string {
		out := map[string]string{}
		for _, f := range []string{"basic.yaml", "another.yaml", "share_threshold.yaml"} {
			b, err := os.ReadFile("testdata/runtime/current/ratelimit/config/" + f)
			if err != nil {
				t.Fatal(err)
			}
			out[f] = string(b)
		}
		if reload {
			b, err := os.ReadFile("testdata/runtime/current/ratelimit/reload.yaml")
			if err != nil {
				t.Fatal(err)
			}
			out["reload.yaml"] = string(b)
		}
		return out
	}
	var v *kubetest.Volume
	mount := func(t *testing.T) string {
		dir := t.TempDir()
		v = kubetest.NewVolume(t, filepath.Join(dir, "runtime/current/ratelimit/config"), files(false))
		return dir
	}
	t.Run("Basic", testBasic(tg, s, mount))
	t.Run("Reload", testReload(tg, s, mount,
		func(t *testing.T, sv *service) { v.Write(files(true)) },
		func(t *testing.T, sv *service) { v.Write(files(false)) }))
}

// testMemcacheRefused: fairgate has no memcache backend (docs/rls.md, "Out
// of scope"), a deliberate difference; started with one, it stops at once
// and says why, rather than answering without limits.
func testMemcacheRefused(t *testing.T, tg target) {
	cmd := exec.Command(tg.bin, tg.args...)
	cmd.Dir = runtimeTree(t)
	cmd.Env = []string{"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=localhost:11211", "RUNTIME_ROOT=runtime/current", "RUNTIME_SUBDIRECTORY=ratelimit",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + freePort(t), "HOST=127.0.0.1", "PORT=" + freePort(t)}
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("started with BACKEND_TYPE=memcache, it did not stop:\n%s", out)
	}
	if err == nil || !strings.Contains(string(out), "memcache") {
		t.Errorf("started with BACKEND_TYPE=memcache: %v, want a refusal that names memcache:\n%s", err, out)
	}
}
