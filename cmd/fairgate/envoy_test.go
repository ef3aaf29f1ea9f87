package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rlsxds/xdstest"
	"github.com/fairgate/fairgate/internal/statsdtest"
	"github.com/fairgate/fairgate/internal/testwait"
)

// writeDomain writes an envoyproxy/ratelimit config file of one domain
// with one key limited to n per hour.
func writeDomain(t *testing.T, dir, file, domain string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n"
	if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serveEnvoyEnv runs serve with env set, its gRPC service on a free
// loopback port (GRPC_HOST and GRPC_PORT added), and returns it, stopped
// at the test's end, with a client of that service (its connection too).
func serveEnvoyEnv(t *testing.T, env map[string]string) (*serving, *grpc.ClientConn, rlspb.RateLimitServiceClient) {
	t.Helper()
	grpcAddr := freeAddr(t)
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	env["GRPC_HOST"], env["GRPC_PORT"] = "127.0.0.1", grpcPort
	for k, v := range env {
		t.Setenv(k, v)
	}
	sv := startServe(t)
	t.Cleanup(sv.stop)
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sv, conn, rlspb.NewRateLimitServiceClient(conn)
}

// TestEnvoyEnvironment swaps envoyproxy/ratelimit for fairgate keeping its
// environment: the Redis of REDIS_*, the runtime directory of RUNTIME_*
// (a symbolic link swapped as that service's deployments do), its gRPC and
// HTTP ports, statsd, REDIS_AUTH on a Redis that asks for a password; files added, changed and removed are picked up
// without a signal, and a bad file keeps the last good config.
func TestEnvoyEnvironment(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start("--requirepass", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	root := t.TempDir()
	v1 := filepath.Join(root, "v1", "ratelimit", "config")
	writeDomain(t, v1, "a.yaml", "a", 2)
	if err := os.Symlink(filepath.Join(root, "v1"), filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	// statsd over TCP, that service's default (STATSD_PROTOCOL unset).
	statsdSrv := statsdtest.Listen(t, "tcp")
	httpAddr := freeAddr(t)
	_, httpPort, _ := net.SplitHostPort(httpAddr)
	_, statsdPort, _ := net.SplitHostPort(statsdSrv.Addr)
	sv, _, c := serveEnvoyEnv(t, map[string]string{
		"RUNTIME_ROOT": filepath.Join(root, "current"), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr, "REDIS_AUTH": "s3cret", "CACHE_KEY_PREFIX": "envtest_",
		"HOST": "127.0.0.1", "PORT": httpPort,
		"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": statsdPort, "STATS_FLUSH_INTERVAL": "100ms", "EXTRA_TAGS": "deploy:t1",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "TRACING_ENABLED": "true", "FAIRGATE_CONFIG_POLL": "100ms",
	})
	if sv.addr != httpAddr {
		t.Fatalf("HTTP on %s, want HOST:PORT %s", sv.addr, httpAddr)
	}
	if logs := sv.logs.String(); !strings.Contains(logs, `"msg":"tracing on"`) || strings.Contains(logs, "does not support") {
		t.Errorf("TRACING_ENABLED=true did not turn tracing on (or something is reported unsupported): %s", logs)
	} else if strings.Contains(logs, "s3cret") {
		t.Errorf("the Redis password is in the log: %s", logs)
	}
	askLimit := func(domain string) (rlspb.RateLimitResponse_Code, uint32) {
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return r.OverallCode, r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	ask := func(domain string) rlspb.RateLimitResponse_Code { code, _ := askLimit(domain); return code }
	for i, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if got := ask("a"); got != want {
			t.Fatalf("call %d on a: %v, want %v", i, got, want)
		}
	}
	if key, err := redistest.DoAuth(srv.Addr, "s3cret", "RANDOMKEY"); err != nil || !strings.HasPrefix(key, "envtest_") {
		t.Errorf("a key in Redis: %q %v, want it under CACHE_KEY_PREFIX", key, err)
	}
	// /json, as that service's HTTP port serves it.
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(`{"domain":"a","descriptors":[{"entries":[{"key":"k","value":"w"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"overallCode":"OK"`) || !strings.Contains(string(body), `"limitRemaining":1`) {
		t.Fatalf("/json: %d %s", resp.StatusCode, body)
	}
	if resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(`{"domain":`)); err != nil || resp.StatusCode != 400 {
		t.Fatalf("/json with a bad body: %v %v, want 400", resp, err)
	}
	if resp, err := http.Get("http://" + httpAddr + "/healthcheck"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthcheck: %v %v", resp, err)
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not picked up within 10s: %s", what, sv.logs.String())
			}
		}
	}
	// A file added to the directory.
	writeDomain(t, v1, "b.yaml", "b", 1)
	eventually("a file added", func() bool {
		return ask("b") == rlspb.RateLimitResponse_OK && ask("b") == rlspb.RateLimitResponse_OVER_LIMIT
	})
	// A bad file: the last good config stays, and the log says why.
	os.WriteFile(filepath.Join(v1, "bad.yaml"), []byte("domain: c\ndescriptors:\n  - key: k\n    colour: red\n"), 0o600)
	eventually("a bad file", func() bool { return strings.Contains(sv.logs.String(), "colour") })
	if ask("b") != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatal("a bad file changed the running config")
	}
	os.Remove(filepath.Join(v1, "bad.yaml"))
	// The root's link swapped to a new directory where a is 5 per hour
	// and b is gone.
	v2 := filepath.Join(root, "v2", "ratelimit", "config")
	writeDomain(t, v2, "a.yaml", "a", 5)
	tmp := filepath.Join(root, "next")
	if err := os.Symlink(filepath.Join(root, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(root, "current")); err != nil {
		t.Fatal(err)
	}
	eventually("the link swapped", func() bool { _, n := askLimit("a"); return n == 5 })
	if ask("b") != rlspb.RateLimitResponse_OK {
		t.Fatal("a removed file's domain still limits")
	}
	// statsd, over TCP, with EXTRA_TAGS: the rule's statistics, and the
	// config loads (at start, each file change) and the refused bad file.
	want := map[string]bool{
		"ratelimit.service.rate_limit.a.k.total_hits.__deploy=t1:": true,
		"ratelimit.service.config_load_success.__deploy=t1:":       true,
		"ratelimit.service.config_load_error.__deploy=t1:":         true,
	}
	var got []string
	for deadline := time.After(10 * time.Second); len(want) > 0; {
		select {
		case l := <-statsdSrv.Lines:
			l = strings.TrimSuffix(l, "\n")
			got = append(got, l)
			for w := range want {
				if strings.HasPrefix(l, w) {
					delete(want, w)
				}
			}
		case <-deadline:
			t.Fatalf("statsd over TCP: got %q, missing %v", got, want)
		}
	}
}

// TestEnvoyEnvironmentXDS: with CONFIG_TYPE=GRPC_XDS_SOTW the domains come
// from the go-control-plane management server CONFIG_GRPC_XDS_* name, and
// follow its updates (the debug listener's /rlconfig too); GRPC_MAX_CONNECTION_AGE sends clients away to
// reconnect.
func TestEnvoyEnvironmentXDS(t *testing.T) {
	m, err := xdstest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if err := m.Set("rl-node", "1", xdstest.Domain("x", 1, confpb.RateLimitUnit_HOUR)); err != nil {
		t.Fatal(err)
	}
	debugAddr := freeAddr(t)
	debugHost, debugPort, _ := net.SplitHostPort(debugAddr)
	sv, conn, c := serveEnvoyEnv(t, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": m.Addr, "CONFIG_GRPC_XDS_NODE_ID": "rl-node",
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_MAX_CONNECTION_AGE": "1s", "GRPC_MAX_CONNECTION_AGE_GRACE": "100ms", "DEBUG_HOST": debugHost, "DEBUG_PORT": debugPort})
	limitOf := func(domain string) uint32 {
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: strconv.FormatInt(time.Now().UnixNano(), 10)}}},
		}})
		if err != nil {
			return 0 // the port opens once the first config is in
		}
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	for _, step := range []struct {
		version string
		n       uint32
	}{{"1", 1}, {"2", 9}} {
		if step.version != "1" {
			if err := m.Set("rl-node", step.version, xdstest.Domain("x", step.n, confpb.RateLimitUnit_HOUR)); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(10 * time.Second); limitOf("x") != step.n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("version %s: the limit is not %d within 10s: %s", step.version, step.n, sv.logs.String())
			}
		}
		// The debug listener's /rlconfig shows xDS's domain in force.
		if code, body := debugGet(t, "http://"+debugAddr+"/rlconfig", ""); code != 200 || !strings.Contains(body, fmt.Sprintf("x.k: unit=HOUR requests_per_unit=%d,", step.n)) {
			t.Errorf("version %s: /rlconfig %d %q, want x.k at %d per hour", step.version, code, body, step.n)
		}
	}
	// The connection is at most a second old: the server's GOAWAY puts it
	// back to idle, and the next call connects again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Idle; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection stayed %v: no GOAWAY after GRPC_MAX_CONNECTION_AGE", s)
		}
	}
	if limitOf("x") != 9 {
		t.Fatal("no answer after the GOAWAY")
	}
}

// TestEnvoyEnvironmentPerSecond: with REDIS_PERSECOND, the windows of one
// second are counted on the per-second Redis and the others on the main
// one, as envoyproxy/ratelimit splits them; the answers are the same.
func TestEnvoyEnvironmentPerSecond(t *testing.T) {
	redistest.Need(t)
	main, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	perSecond, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer perSecond.Close()
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "config")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "d.yaml"), []byte("domain: d\ndescriptors:\n  - key: s\n    rate_limit: {unit: second, requests_per_unit: 1000}\n  - key: m\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o600)
	_, _, c := serveEnvoyEnv(t, map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "rl", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": main.Addr,
		"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": perSecond.Addr, "HOST": "127.0.0.1", "PORT": "0"})
	for i, want := range []string{"OK OK OK", "OK OK OK", "OVER_LIMIT OK OVER_LIMIT"} {
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "s", Value: "x"}}},
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "m", Value: "x"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.OverallCode.String() + " " + r.Statuses[0].Code.String() + " " + r.Statuses[1].Code.String(); got != want {
			t.Fatalf("call %d: %s, want %s", i, got, want)
		}
	}
	for _, x := range []struct {
		name string
		srv  *redistest.Server
	}{{"main", main}, {"per-second", perSecond}} {
		if n, err := redistest.Do(x.srv.Addr, "DBSIZE"); err != nil || n != "1" {
			t.Errorf("%s Redis holds %s keys (%v), want 1", x.name, n, err)
		}
	}
	if ttl, _ := redistest.Do(perSecond.Addr, "EVAL", "return redis.call('PTTL', redis.call('RANDOMKEY'))", "0"); ttl == "" || len(ttl) > 4 {
		t.Errorf("the per-second Redis's key lives %s ms, want at most a second", ttl)
	}
}

// TestEnvoyXDSOpensOnFirstConfig: with CONFIG_TYPE=GRPC_XDS_SOTW the gRPC
// port stays closed until the first config from the management server is
// in force (fairgate used to answer OK to everything until then), as
// envoyproxy/ratelimit's does; then it serves that config.
// FORCE_START_WITHOUT_INITIAL_CONFIG=true opens it at once.
func TestEnvoyXDSOpensOnFirstConfig(t *testing.T) {
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprint("force=", force), func(t *testing.T) {
			m, err := xdstest.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Stop()
			env := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": m.Addr, "CONFIG_GRPC_XDS_NODE_ID": "rl-node", "HOST": "127.0.0.1", "PORT": "0"}
			if force {
				env["FORCE_START_WITHOUT_INITIAL_CONFIG"] = "true"
			}
			_, _, c := serveEnvoyEnv(t, env)
			grpcAddr := "127.0.0.1:" + os.Getenv("GRPC_PORT")
			open := func() bool {
				conn, err := net.DialTimeout("tcp", grpcAddr, time.Second)
				if err == nil {
					conn.Close()
				}
				return err == nil
			}
			if force {
				testwait.Eventually(t, 10*time.Second, "the gRPC port to open with FORCE_START_WITHOUT_INITIAL_CONFIG=true and no config", open)
			} else {
				// Once the stream has asked, with nothing to send, only a
				// config can open the port.
				testwait.Eventually(t, 10*time.Second, "fairgate's xDS stream to ask for a config", func() bool { return m.Requests() > 0 })
				if open() {
					t.Fatal("the gRPC port is open before any config is in")
				}
			}
			if err := m.Set("rl-node", "1", xdstest.Domain("x", 1, confpb.RateLimitUnit_HOUR)); err != nil {
				t.Fatal(err)
			}
			req := &rlspb.RateLimitRequest{Domain: "x", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
			testwait.EventuallyNil(t, 10*time.Second, "the first config to be served", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				r, err := c.ShouldRateLimit(ctx, req)
				if err == nil && r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
					err = fmt.Errorf("answered %v", r)
				}
				return err
			})
		})
	}
}
