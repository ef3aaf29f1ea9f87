package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/internal/testwait"
)

// Tests stop `fairgate serve` at once; the drain test asks for its own.
func init() { os.Setenv("FAIRGATE_DRAIN", "0") }

// TestServeAndShutdown runs `fairgate serve` on the embedded memory store,
// takes a limit over HTTP, then ends it as SIGTERM would.
func TestServeAndShutdown(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0")
	stderr := sv.logs
	resp, err := http.Post("http://"+sv.addr+"/v1/take", "application/json", strings.NewReader(`{"key":"k","limit":1,"period_ms":1000}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("take: %v %v", resp, err)
	}
	resp.Body.Close()
	sv.stop()
	if !strings.Contains(stderr.String(), "admin API not started: set FAIRGATE_ADMIN_TOKEN") {
		t.Errorf("no line saying the admin API is off without a token: %s", stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"shutting down"`) {
		t.Errorf("no shutdown log line: %s", stderr.String())
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"help"}, 0, "Usage:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"serve", "--store", "mongodb://x"}, 1, `unknown scheme "mongodb"`},
		{[]string{"serve", "--store", "memory://?max_keys=-1"}, 1, "not a positive integer"},
		{[]string{"serve", "--store", "redis://u:p@h:1?password=QSECRET"}, 1, `bad URL "redis://u:xxxxx@h:1?password=xxxxx": unknown parameter "password"`},
		{[]string{"serve", "--store", "memory://?password=QSECRET"}, 1, `store "memory://?password=xxxxx": unknown option "password"`},
		{[]string{"serve", "--store-timeout", "soon"}, 2, `store timeout "soon"`},
		{[]string{"serve", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"serve", "--listen", "256.0.0.1:99999"}, 1, "listen on"},
		{[]string{"serve", "--config", "testdata/bad.yaml"}, 1, "testdata/bad.yaml:4: plans.free[0].burst: burst -5 is outside"},
		{[]string{"serve", "--config", "testdata/missing.yaml"}, 1, "no such file"},
		{[]string{"check-config", "testdata/bad.yaml"}, 1, "testdata/bad.yaml:9: classes.search.share: share 2 is outside (0, 1]"},
		{[]string{"check-config"}, 0, "examples/fairgate.yaml: ok"},
		{[]string{"check-config", "--help"}, 0, "usage: fairgate check-config [FILE]"}, // today: open --help
		{[]string{"check-config", "testdata/jwks.yaml"}, 0, "note: auth.jwt.jwks_url http://127.0.0.1:9/jwks.json was not fetched: serve fetches it at start, waits up to 5s, and refuses to start without it"},
		{[]string{"check-config", "-x"}, 2, "takes one file and no flags"},
		// Every problem, even two on one line (today only the fail mode).
		{[]string{"check-config", "testdata/two-on-a-line.yaml"}, 1, "classes.search.share: share 2.5 is outside (0, 1]"},
		{[]string{"check-config", "testdata/two-on-a-line.yaml"}, 1, `classes.search.fail: fail mode "maybe"`},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(out.String()+errb.String(), tt.msg) {
			t.Errorf("run(%q) = %d, %q; want %d with %q", tt.args, code, out.String()+errb.String(), tt.code, tt.msg)
		}
	}
}

// serving is a `fairgate serve` running in the test process.
type serving struct {
	addr string              // the main listener
	logs *testenv.SyncBuffer // what it wrote to stderr
	stop func()              // ends it as SIGTERM would and checks it exits 0 within 15 s
	term func()              // begins that end without waiting for it
}

// startServe runs `fairgate serve args…` until it listens.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	addrc := make(chan string, 1)
	done := make(chan int, 1)
	sv := &serving{logs: &testenv.SyncBuffer{}, term: cancel}
	go func() {
		done <- runReady(ctx, append([]string{"serve"}, args...), io.Discard, sv.logs, func(a string) { addrc <- a })
	}()
	select {
	case sv.addr = <-addrc:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, sv.logs.String())
	}
	sv.stop = func() {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("serve exited %d after shutdown: %s", code, sv.logs.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatal("serve did not shut down")
		}
	}
	return sv
}

// TestSIGHUPReloads serves a config file (not polled, so that only the
// signal can reload it), breaks it and sends SIGHUP (the
// running config stays, the problem is logged), then fixes it and sends
// SIGHUP again (it is applied).
func TestSIGHUPReloads(t *testing.T) {
	example, path := exampleCopy(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", path, "--config-poll", "1h")
	logs := sv.logs
	waitLog := func(what string) {
		t.Helper()
		testwait.EventuallyNil(t, 30*time.Second, "a log line with "+what, func() error {
			if !strings.Contains(logs.String(), what) {
				return fmt.Errorf("the logs:\n%s", logs.String())
			}
			return nil
		})
	}
	bad := strings.Replace(string(example), "{share: 0.25, fail: open}", "{share: 3, fail: open}", 1)
	os.WriteFile(path, []byte(bad), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog("config reload refused")
	waitLog("share 3 is outside (0, 1]")
	os.WriteFile(path, example, 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitLog(`"msg":"config reloaded"`)
	sv.stop()
}

// TestAdminListener: with a token the admin API listens on its own address
// and refuses requests without the token.
func TestAdminListener(t *testing.T) {
	adminAddr := freeAddr(t)
	const token = "admin-token-for-the-test-0001"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr)
	get := func(tok string) int { return statusOf(t, "GET", "http://"+adminAddr+"/admin/config", "", tok) }
	if c := get(""); c != 401 {
		t.Errorf("no token: %d", c)
	}
	if c := get("wrong-token-wrong-token"); c != 401 {
		t.Errorf("wrong token: %d", c)
	}
	if c := get(token); c != 200 {
		t.Errorf("token: %d", c)
	}
	sv.stop()
}

// TestAdminTokenTooShort: a short token is refused at start naming where
// it came from, the variable and the flag, and how to make a good one.
func TestAdminTokenTooShort(t *testing.T) {
	t.Setenv("FAIRGATE_ADMIN_TOKEN", "short")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &out, &errb)
	for _, want := range []string{"admin token (from FAIRGATE_ADMIN_TOKEN) is 5 characters", "--admin-token-file", "openssl rand -hex 16"} {
		if code == 0 || !strings.Contains(errb.String(), want) {
			t.Errorf("serve with a 5-character admin token: %d %q, want a failure naming %q", code, errb.String(), want)
		}
	}
	t.Setenv("FAIRGATE_ADMIN_TOKEN", "")
	file := filepath.Join(t.TempDir(), "worker")
	os.WriteFile(file, []byte("tooshort\n"), 0o600)
	errb.Reset()
	code = run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--worker-token-file", file}, &out, &errb)
	if want := "worker token (from --worker-token-file " + file + ") is 8 characters"; code == 0 || !strings.Contains(errb.String(), want) {
		t.Errorf("serve with an 8-character worker token file: %d %q, want a failure naming %q", code, errb.String(), want)
	}
}

// TestOutboundProvidersReload: the outbound endpoints serve the config's
// providers, and a reload that renames one takes effect.
func TestOutboundProvidersReload(t *testing.T) {
	example, path := exampleCopy(t)
	t.Setenv("FAIRGATE_WORKER_TOKEN", "worker-token-for-the-test-01")
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", path, "--config-poll", "50ms")
	acquire := func(provider string) int {
		return statusOf(t, "POST", "http://"+sv.addr+"/v1/outbound/acquire", `{"provider":"`+provider+`","tenant":"acme"}`, "worker-token-for-the-test-01")
	}
	if c := acquire("sms"); c != 200 {
		t.Fatalf("acquire sms: %d", c)
	}
	if c := acquire("email"); c != 400 {
		t.Fatalf("acquire an unknown provider: %d, want 400", c)
	}
	renamed := strings.Replace(string(example), "\n  sms:\n", "\n  email:\n", 1)
	if renamed == string(example) {
		t.Fatal("the example config has no sms provider to rename")
	}
	os.WriteFile(path, []byte(renamed), 0o600)
	testwait.EventuallyNil(t, 30*time.Second, "the renamed provider served after the reload", func() error {
		if acquire("email") != 200 {
			return fmt.Errorf("the logs:\n%s", sv.logs.String())
		}
		return nil
	})
	if c := acquire("sms"); c != 400 {
		t.Errorf("acquire the removed provider: %d, want 400", c)
	}
	sv.stop()
}

// statusOf sends a request, with a bearer token unless tok is empty, and
// returns the response's status.
func statusOf(t *testing.T, method, url, body, tok string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestJobsThroughServe: a tenant enqueues through `fairgate serve` with
// its API key and a worker leases and acks with the worker token.
func TestJobsThroughServe(t *testing.T) {
	t.Setenv("FAIRGATE_WORKER_TOKEN", "worker-token-for-the-test-02")
	sv := startServe(t, "--listen", "127.0.0.1:0")
	base := "http://" + sv.addr
	req, _ := http.NewRequest("POST", base+"/v1/jobs/report", strings.NewReader(`{"month":"2026-11"}`))
	req.Header.Set("X-API-Key", "demo-acme-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		ID string `json:"job_id"`
	}
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 202 || e.ID == "" {
		t.Fatalf("enqueue: %d %+v", resp.StatusCode, e)
	}
	if c := statusOf(t, "POST", base+"/v1/jobs/report/lease", "", ""); c != 401 {
		t.Fatalf("lease without the worker token: %d", c)
	}
	req, _ = http.NewRequest("POST", base+"/v1/jobs/report/lease", nil)
	req.Header.Set("Authorization", "Bearer worker-token-for-the-test-02")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		ID    string `json:"job_id"`
		Lease string
	}
	json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if resp.StatusCode != 200 || l.ID != e.ID {
		t.Fatalf("lease: %d %+v", resp.StatusCode, l)
	}
	if c := statusOf(t, "POST", base+"/v1/jobs/"+l.ID+"/ack", `{"lease":"`+l.Lease+`"}`, "worker-token-for-the-test-02"); c != 200 {
		t.Fatalf("ack: %d", c)
	}
	sv.stop()
}

// TestGRPCListener: with --grpc-listen, the Envoy rate limit service of the
// example config answers a real gRPC client, and health says SERVING.
func TestGRPCListener(t *testing.T) {
	addr := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--grpc-listen", addr)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	req := &rlspb.RateLimitRequest{Domain: "edge", HitsAddend: 10, Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	c := rlspb.NewRateLimitServiceClient(conn)
	if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
		t.Fatalf("first: %v %v", r, err)
	}
	if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("over the example's 10 per second: %v %v", r, err)
	}
	sv.stop()
}

// freeAddr returns a loopback address that was free a moment ago, for a
// listener the test cannot ask to pick its own port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// exampleCopy writes the example config to a file of the test's own and
// returns its content and path.
func exampleCopy(t *testing.T) ([]byte, string) {
	t.Helper()
	example, err := os.ReadFile("../../examples/fairgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(path, example, 0o600); err != nil {
		t.Fatal(err)
	}
	return example, path
}

// TestRLSOnlyConfig: a config with only the rls section serves the Envoy
// service; the HTTP decision API says it has no policy; the proxy refuses
// to start without one.
func TestRLSOnlyConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	cfg := "rls:\n  config:\n    - domain: edge\n      descriptors:\n        - key: remote_address\n          rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--grpc-listen", addr, "--config", path)
	defer sv.stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlspb.RateLimitRequest{Domain: "edge", HitsAddend: 10, Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	c := rlspb.NewRateLimitServiceClient(conn)
	for _, want := range []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT} {
		if r, err := c.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != want {
			t.Fatalf("rls-only config: %v %v, want %v", r, err, want)
		}
	}
	resp, err := http.Post("http://"+sv.addr+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","method":"GET","path":"/"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "no policy") {
		t.Fatalf("/v1/check without a policy: %d %s, want 404 saying so", resp.StatusCode, body)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--config", path, "--upstream", "http://127.0.0.1:1", "--internal-listen", "127.0.0.1:0"}, io.Discard, &stderr); code == 0 || !strings.Contains(stderr.String(), "--upstream needs a policy") {
		t.Fatalf("--upstream without a policy: exit %d, %s", code, stderr.String())
	}
}

// TestCapacityReload: `fairgate serve --upstream` with upstream_capacity
// reports the gate's limit at /metrics; a reload changes it, and a file
// with a bad section is refused and leaves the gate in force.
func TestCapacityReload(t *testing.T) {
	example, path := exampleCopy(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer up.Close()
	with := func(section string) {
		if err := os.WriteFile(path, append(append([]byte{}, example...), "\nupstream_capacity: "+section+"\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	with("{limit: 7}")
	internal := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--internal-listen", internal, "--upstream", up.URL, "--config", path, "--config-poll", "50ms")
	limit := func() string {
		resp, err := http.Get("http://" + internal + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "fairgate_upstream_capacity_limit "); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	waitLimit := func(want string) {
		t.Helper()
		testwait.EventuallyNil(t, 30*time.Second, "the gate's limit "+want, func() error {
			if got := limit(); got != want {
				return fmt.Errorf("it is %q:\n%s", got, sv.logs.String())
			}
			return nil
		})
	}
	waitLimit("7")
	with("{limit: 9, max_wait: 100ms}")
	waitLimit("9")
	with("{limit: 0}")
	testwait.EventuallyNil(t, 30*time.Second, "the bad section refused by name", func() error {
		if !strings.Contains(sv.logs.String(), "upstream_capacity.limit: 0 requests in flight") {
			return fmt.Errorf("the logs:\n%s", sv.logs.String())
		}
		return nil
	})
	if got := limit(); got != "9" {
		t.Fatalf("after a refused reload the limit is %q, want 9 still", got)
	}
	sv.stop()
}
