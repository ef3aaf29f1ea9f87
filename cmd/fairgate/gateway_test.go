package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authzpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttppb "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/envoyenv"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// gatewayConfig is the example config with an API key for tenant newco,
// 127.0.0.1 (the gateway) trusted, and extra.
func gatewayConfig(t *testing.T, extra string) string {
	t.Helper()
	example, path := exampleCopy(t)
	sum := sha256.Sum256([]byte("key-newco"))
	cfg := strings.NewReplacer(
		"trusted_proxies: []", "trusted_proxies: [127.0.0.1]",
		"  api_keys:\n", fmt.Sprintf("  api_keys:\n    - {sha256: %s, tenant: newco}\n", hex.EncodeToString(sum[:])),
	).Replace(string(example)) + "\n" + extra
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// upstreamAPI is the API behind the gateway: it answers "ok" and records
// the identity headers each request reached it with.
type upstreamAPI struct {
	*httptest.Server
	mu      sync.Mutex
	tenants []string
	limits  []string // the RateLimit-Limit each request reached it with
	paths   []string // the path each request reached it with, as a WHATWG parser (Node) routes it
	// lookalikes are headers that reached it looking like fairgate's
	// with '_' for '-' (X_Fairgate_Tenant): CGI, WSGI and Rack read them
	// as fairgate's own.
	lookalikes []string
}

// apiBase is the base URL the API resolves request targets against.
var apiBase, _ = url.Parse("http://api/")

func newUpstreamAPI(t *testing.T) *upstreamAPI {
	u := &upstreamAPI{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.tenants = append(u.tenants, r.Header.Get("X-Fairgate-Tenant")+"/"+r.Header.Get("X-Fairgate-Plan"))
		u.limits = append(u.limits, r.Header.Get("RateLimit-Limit"))
		routed := "?"
		if ref, err := url.Parse(r.RequestURI); err == nil { // as Node's new URL(req.url, base): cut at a raw '#', "//x" a host, dots resolved
			routed = path.Clean("/" + apiBase.ResolveReference(ref).Path)
		}
		u.paths = append(u.paths, routed)
		for k := range r.Header {
			if d := strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(k)); d != strings.ToLower(k) && (strings.HasPrefix(d, "x-fairgate-") || strings.HasPrefix(d, "ratelimit-")) {
				u.lookalikes = append(u.lookalikes, k)
			}
		}
		u.mu.Unlock()
		w.Write([]byte("ok"))
	}))
	t.Cleanup(u.Close)
	return u
}

// fromIP is a client that connects from the loopback address ip, so that
// the gateway sees distinct clients.
func fromIP(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// gatewayFile is an example gateway config with its addresses replaced:
// the gateway's own, fairgate's (127.0.0.1:8080) and the API's
// (127.0.0.1:9000).
func gatewayFile(t *testing.T, name, own, gw, fairgate, api string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../examples/gateways", name))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(own, gw, "127.0.0.1:8080", fairgate, "127.0.0.1:9000", api).Replace(string(b))
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startProcess runs a gateway until the test ends and waits until addr
// accepts connections.
func startProcess(t *testing.T, addr string, name string, args []string, env ...string) {
	t.Helper()
	testenv.External(t, name)
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: make test installs it (scripts/ensure-gateways.sh)", name)
	}
	var out testenv.SyncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that its workers end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s: %s", name, addr, out.String())
		}
	}
}

type gwAnswer struct {
	code    int
	header  http.Header
	problem map[string]any
}

func gwDo(t *testing.T, c *http.Client, method, url, key string, hdr ...string) gwAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	req.Header.Set("X-Fairgate-Tenant", "acme") // a client's try at another identity
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := gwAnswer{code: resp.StatusCode, header: resp.Header}
	json.Unmarshal(body, &a.problem)
	return a
}

// testThroughGateway is what every gateway must do with fairgate behind
// it: a tenant under its burst reaches the API with its verified identity
// (never the one the client sent) and the RateLimit headers (given to the
// client too where the gateway can: toClient), over it gets 429 with
// Retry-After and RateLimit headers; no spelling of a path escapes its
// class; a free route is free; anonymous routes are limited per client
// address.
func testThroughGateway(t *testing.T, base string, api *upstreamAPI, toClient bool) {
	a, b := fromIP("127.0.0.2"), fromIP("127.0.0.3")
	// The search class allows newco a burst of 8, by any spelling.
	for i, p := range []string{"/v1/search", "/v1/%73earch", "/V1/Search", "/v1//search", "/v1/search?q=1", "/v1/x/../search", "/v1/search/", "HEAD /v1/search"} {
		method := "GET"
		if m, path, ok := strings.Cut(p, " "); ok {
			method, p = m, path
		}
		r := gwDo(t, a, method, base+p, "key-newco")
		if r.code != 200 || toClient && r.header.Get("RateLimit-Limit") == "" {
			t.Fatalf("search %d (%s): %d %v", i, p, r.code, r.header)
		}
	}
	r := gwDo(t, a, "GET", base+"/v1/search", "key-newco")
	if r.code != 429 || r.header.Get("Retry-After") == "" || r.header.Get("RateLimit-Remaining") != "0" || r.problem["status"] != float64(429) {
		t.Fatalf("over the burst: %d %v %v", r.code, r.header, r.problem)
	}
	api.mu.Lock()
	for i, s := range api.tenants {
		if s != "newco/free" || !toClient && api.limits[i] == "" {
			t.Fatalf("the API saw the identity %q (want newco/free; the client sent acme), RateLimit-Limit %q", s, api.limits[i])
		}
	}
	api.mu.Unlock()
	// A free route is free, whatever the method.
	for i := range 40 {
		method := []string{"GET", "HEAD"}[i%2]
		if r := gwDo(t, a, method, base+"/healthz", "key-newco"); r.code != 200 {
			t.Fatalf("free route, %s %d: %d", method, i, r.code)
		}
	}
	// No credential on a tenant route: 401.
	if r := gwDo(t, a, "GET", base+"/v1/search", ""); r.code != 401 {
		t.Fatalf("no credential: %d, want 401", r.code)
	}
	// Anonymous login: 5 a quarter-hour per client address.
	for i := range 5 {
		if r := gwDo(t, a, "POST", base+"/v1/login", ""); r.code != 200 {
			t.Fatalf("login %d from 127.0.0.2: %d", i, r.code)
		}
	}
	if r := gwDo(t, a, "POST", base+"/v1/login", ""); r.code != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("6th login from 127.0.0.2: %d %v, want 429", r.code, r.header)
	}
	if r := gwDo(t, b, "POST", base+"/v1/login", ""); r.code != 200 {
		t.Fatalf("login from 127.0.0.3: %d, want 200 (its own limit)", r.code)
	}
}

// spoofs are the headers every gateway's forward-auth request has been
// read from: a client's copies, aimed at a free path, a GET, or a login.
func spoofs(path, method string) []string {
	return []string{"X-Original-URI", path, "X-Original-Method", method, "X-Forwarded-Uri", path, "X-Forwarded-Method", method,
		"X-Original-URL", "http://api.example" + path, "X-Tenant", "acme"}
}

// testGatewaySpoofing is what a client's own headers must not do through
// any gateway: make fairgate believe another path, method or tenant. It
// runs after testThroughGateway, with newco over its search budget.
// Before each gateway was named, behind Caddy a spent budget passed 20 of
// 20 as /healthz, logins were unlimited as GET /healthz, a request
// without a credential reached a tenant route as a login, and X-Tenant:
// acme charged acme.
func testGatewaySpoofing(t *testing.T, base string, api *upstreamAPI) {
	c := fromIP("127.0.0.5")
	passed := 0
	for range 20 {
		if r := gwDo(t, c, "GET", base+"/v1/search", "key-newco", spoofs("/healthz", "GET")...); r.code == 200 {
			passed++
		}
	}
	if passed > 4 { // the budget refills one every 2 s
		t.Errorf("over the search budget with the client's own X-Original-URI: /healthz: %d of 20 passed", passed)
	}
	for i := range 6 {
		r := gwDo(t, c, "POST", base+"/v1/login", "", spoofs("/healthz", "GET")...)
		if want := map[bool]int{true: 200, false: 429}[i < 5]; r.code != want {
			t.Fatalf("login %d spoofed as GET /healthz: %d, want %d (5 a quarter-hour)", i, r.code, want)
		}
	}
	if r := gwDo(t, c, "GET", base+"/v1/search", "", spoofs("/v1/login", "POST")...); r.code != 401 {
		t.Errorf("no credential on a tenant route, spoofed as a login: %d, want 401", r.code)
	}
	// Look-alikes of the identity headers never reach the API.
	gwDo(t, c, "GET", base+"/v1/users/1", "key-newco", "X_Fairgate_Tenant", "acme", "X_Fairgate_Plan", "enterprise")
	gwDo(t, c, "GET", base+"/v1/users/1", "key-newco", "X.Fairgate.Tenant", "acme", "X-Fairgate.Plan", "enterprise", "X_Fairgate.Tenant", "acme")
	// X-Tenant is fairgate's tenant_header here: the gateway must not
	// pass the client's on.
	if r := gwDo(t, c, "GET", base+"/v1/users/1", "", "X-Tenant", "acme"); r.code != 401 {
		t.Errorf("X-Tenant: acme without a credential: %d, want 401 (never charged to acme)", r.code)
	}
	// A raw '#' in the request line: a WHATWG upstream (Node) routes the
	// path up to it; it was charged as the free /healthz and served as
	// /v1/search. It is refused, or (where the gateway forwards it
	// escaped, as Caddy does) charged as what the API routes.
	for range 6 {
		if code := rawGet(t, base, "/v1/search#/../../healthz", "key-newco"); code == 200 {
			api.mu.Lock()
			routed := api.paths[len(api.paths)-1]
			api.mu.Unlock()
			if routed != "/healthz" {
				t.Fatalf("GET /v1/search#/../../healthz passed as the free /healthz and the API routed it to %s", routed)
			}
		}
	}
	// A leading "//": Node reads "//x/v1/search" as the host x and the
	// path /v1/search; it was charged as /x/v1/search, the default class.
	if code := rawGet(t, base, "//x/v1/search", "key-newco"); code == 200 {
		api.mu.Lock()
		routed := api.paths[len(api.paths)-1]
		api.mu.Unlock()
		if routed != "/x/v1/search" {
			t.Errorf("GET //x/v1/search passed as another class while the API routed %s", routed)
		}
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.lookalikes) > 0 {
		t.Errorf("the API saw %v: look-alikes of fairgate's identity headers, with '_' for '-'", api.lookalikes)
	}
	for i, id := range api.tenants {
		if strings.Contains(id, "{") || strings.Contains(id, "acme") || strings.Contains(api.limits[i], "{") {
			t.Errorf("the API saw the identity %q, RateLimit-Limit %q: never a placeholder or the client's", id, api.limits[i])
		}
	}
}

// rawGet sends GET target over a connection of its own, exactly as
// written (Go's client would cut a fragment), and returns the status.
func rawGet(t *testing.T, base, target, key string) int {
	t.Helper()
	host := strings.TrimPrefix(base, "http://")
	conn, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\nConnection: close\r\n\r\n", target, host, key)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startNginx runs the real nginx with examples/gateways/<file> in front of
// fairgate and api, and returns its address.
func startNginx(t *testing.T, file, fairgate, api string) string {
	t.Helper()
	gw := freeAddr(t)
	conf := gatewayFile(t, file, "127.0.0.1:8000", gw, fairgate, api)
	dir := filepath.Dir(conf)
	startProcess(t, gw, "nginx", []string{"-p", dir, "-c", conf, "-g", "daemon off; pid " + dir + "/nginx.pid; error_log stderr;"})
	return gw
}

// TestNginxAuthRequest drives the real nginx with examples/gateways/nginx.conf.
func TestNginxAuthRequest(t *testing.T) {
	api := newUpstreamAPI(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", gatewayConfig(t, "forward_auth: {gateway: nginx, tenant_header: X-Tenant}\n"))
	defer sv.stop()
	gw := startNginx(t, "nginx.conf", sv.addr, api.Listener.Addr().String())
	testThroughGateway(t, "http://"+gw, api, true)
	testGatewaySpoofing(t, "http://"+gw, api)
}

// TestNginxFailClosed: with the store out, a route that fails closed is a
// true 503 with Retry-After through nginx (fairgate's 403 and
// X-Fairgate-Status rebuilt by the example's error_page).
func TestNginxFailClosed(t *testing.T) {
	api := newUpstreamAPI(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--store", "redis://"+freeAddr(t), "--config", gatewayConfig(t, "forward_auth: {gateway: nginx}\n"))
	defer sv.stop()
	gw := startNginx(t, "nginx.conf", sv.addr, api.Listener.Addr().String())
	r := gwDo(t, fromIP("127.0.0.2"), "POST", "http://"+gw+"/v1/users", "key-newco")
	if r.code != 503 || r.header.Get("Retry-After") != "5" || r.problem["status"] != float64(503) {
		t.Fatalf("fail-closed route with the store out: %d %v %v, want 503 with Retry-After 5", r.code, r.header, r.problem)
	}
	if r := gwDo(t, fromIP("127.0.0.2"), "GET", "http://"+gw+"/v1/search", "key-newco"); r.code != 200 {
		t.Fatalf("fail-open route with the store out: %d, want 200 (the fallback decides)", r.code)
	}
}

// startCaddy runs the real Caddy with examples/gateways/Caddyfile in front
// of fairgate and api, and returns its address.
func startCaddy(t *testing.T, fairgate, api string) string {
	t.Helper()
	gw := freeAddr(t)
	conf := gatewayFile(t, "Caddyfile", "127.0.0.1:8001", gw, fairgate, api)
	dir := filepath.Dir(conf)
	startProcess(t, gw, "caddy", []string{"run", "--config", conf, "--adapter", "caddyfile"}, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "HOME="+dir)
	return gw
}

// TestCaddyForwardAuth drives the real Caddy with examples/gateways/Caddyfile.
func TestCaddyForwardAuth(t *testing.T) {
	api := newUpstreamAPI(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", gatewayConfig(t, "forward_auth: {gateway: caddy, tenant_header: X-Tenant}\n"))
	defer sv.stop()
	gw := startCaddy(t, sv.addr, api.Listener.Addr().String())
	testThroughGateway(t, "http://"+gw, api, false)
	testGatewaySpoofing(t, "http://"+gw, api)
}

// settleConfig is fairgate's config for the settlement tests behind gw:
// testpolicy.Tokens at 100,000 tokens a year (no refill while a test
// runs: class llm, POST /v1/chat, has a burst of 50,000), tenant newco
// (key-newco), and a gateway that says whether its upstream settles
// (forward_auth.settles: if so the estimate is charged, else the cap).
func settleConfig(t *testing.T, gw string, settles bool) string {
	t.Helper()
	sum := sha256.Sum256([]byte("key-newco"))
	cfg := testpolicy.Tokens(100_000, "8760h") + fmt.Sprintf(`trusted_proxies: [127.0.0.1]
forward_auth: {gateway: %s, settles: %v}
auth:
  api_keys:
    - {sha256: %x, tenant: newco}
`, gw, settles, sum)
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// settlingAPI is an API behind a gateway: it answers each request with
// its true cost in X-Usage-Tokens (the X-True-Cost the test sends,
// standing for the tokens a model used; "fail" makes it answer 502 with
// a cost of 0) and, when it settles, posts the settlement handle the
// gateway gave it to fairgate's /v1/settle with that cost.
type settlingAPI struct {
	*httptest.Server
	settles bool
	mu      sync.Mutex
	handles []string // the X-Fairgate-Settlement values each request reached it with
	settled []string // what each settle answered: status and body
}

// newSettlingAPI starts the API; fairgate is where it settles, "" for an
// API that does not (the gateway settles).
func newSettlingAPI(t *testing.T, fairgate string) *settlingAPI {
	a := &settlingAPI{settles: fairgate != ""}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handle := r.Header.Get("X-Fairgate-Settlement")
		cost, status := cmp.Or(r.Header.Get("X-True-Cost"), "0"), http.StatusOK
		if cost == "fail" {
			cost, status = "0", http.StatusBadGateway // an error answer: settled at 0
		}
		a.mu.Lock()
		a.handles = append(a.handles, strings.Join(r.Header.Values("X-Fairgate-Settlement"), "|"))
		a.mu.Unlock()
		if handle != "" && a.settles {
			resp, err := http.Post("http://"+fairgate+"/v1/settle", "application/json", strings.NewReader(fmt.Sprintf(`{"handle": %q, "cost": %s}`, handle, cost)))
			answer := fmt.Sprint(err)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answer = fmt.Sprintf("%d %s", resp.StatusCode, body)
			}
			a.mu.Lock()
			a.settled = append(a.settled, answer)
			a.mu.Unlock()
		}
		w.Header().Set("X-Usage-Tokens", cost)
		w.WriteHeader(status)
	}))
	t.Cleanup(a.Close)
	return a
}

// testSettleThroughGateway is what a gateway in front of a measured-cost
// API must do: each admitted completion is settled at its true cost, by
// the API with a handle of its own that the gateway gave it, never the
// one the client sent (a garbage one, or a real handle of its own earlier
// request, which would leave a request unsettled), or by the gateway
// itself (api.settles false: then the API is given none); and the
// tenant is charged exactly the sum of the true costs on every layer.
func testSettleThroughGateway(t *testing.T, base, fairgate string, api *settlingAPI, passesUnit bool) {
	c := fromIP("127.0.0.2")
	requests := []struct{ estimate, cost string }{
		{"1000", "2500"}, // more than estimated: charged the rest
		{"4000", "120"},  // less: refunded
		{"", "500"},      // no estimate: the default 500
		{"300", "fail"},  // the API failed: settled at 0, the estimate refunded
		{"99999", "3999"},
		{"1", "7000"}, // a client that lowballs its estimate pays its true cost
	}
	const trueTotal = 2500 + 120 + 500 + 0 + 3999 + 7000
	forged := "fg1.eyJpIjoiIn0.AAAA"
	for i, rq := range requests {
		hdr := []string{"X-True-Cost", rq.cost, "X-Fairgate-Settlement", forged}
		if rq.estimate != "" {
			hdr = append(hdr, "X-Max-Tokens", rq.estimate)
		}
		r := gwDo(t, c, "POST", base+"/v1/chat", "key-newco", hdr...)
		if want := map[bool]int{true: 502, false: 200}[rq.cost == "fail"]; r.code != want {
			t.Fatalf("completion %d: %d, want %d", i, r.code, want)
		}
		if u := r.header.Get("RateLimit-Unit"); passesUnit && u != "tokens" {
			t.Errorf("completion %d: RateLimit-Unit %q, want tokens (the budget's unit, passed on by the gateway)", i, u)
		}
		api.mu.Lock()
		got := api.handles[len(api.handles)-1]
		api.mu.Unlock()
		if strings.Contains(got, forged) || strings.Contains(got, "|") || (got == "") == api.settles {
			t.Fatalf("completion %d reached the API with X-Fairgate-Settlement %q (the client sent %q; the API settles: %v)", i, got, forged, api.settles)
		}
		if got != "" {
			forged = got // the next request tries to pass this real handle as its own
		}
	}
	// A request of a class without a measured cost carries no handle, and
	// not the client's either.
	if r := gwDo(t, c, "GET", base+"/v1/users/1", "key-newco", "X-Fairgate-Settlement", forged); r.code != 200 {
		t.Fatalf("GET /v1/users/1: %d", r.code)
	}
	api.mu.Lock()
	if got := api.handles[len(api.handles)-1]; got != "" {
		t.Errorf("GET /v1/users/1 reached the API with X-Fairgate-Settlement %q, want none (the client sent %q)", got, forged)
	}
	seen := map[string]bool{}
	for _, h := range api.handles[:len(requests)] {
		if h != "" && seen[h] {
			t.Errorf("two requests reached the API with one handle %q", h)
		}
		seen[h] = true
	}
	for i, s := range api.settled {
		if !strings.HasPrefix(s, "200 ") || !strings.Contains(s, `"repeated":false`) {
			t.Errorf("settle %d: %s", i, s)
		}
	}
	api.mu.Unlock()
	// The tenant's layers, read from the store: every true cost charged
	// once, and the GET's 1. A gateway settles after the answer is sent:
	// wait for it.
	testwait.EventuallyNil(t, 10*time.Second, "the tenant charged its true costs", func() error {
		req, _ := http.NewRequest("GET", "http://"+fairgate+"/v1/me/limits", nil)
		req.Header.Set("X-API-Key", "key-newco")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var me struct {
			Layers []struct {
				Policy           string
				Burst, Remaining int64
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&me); err != nil || len(me.Layers) != 2 {
			return fmt.Errorf("/v1/me/limits: %v %+v", err, me)
		}
		for _, l := range me.Layers {
			want := l.Burst - trueTotal // pro.llm.365d
			if l.Burst == 100000 {
				want-- // pro.tenant.365d: the GET too
			}
			if l.Remaining != want {
				return fmt.Errorf("%s: remaining %d of %d, want %d: the tenant's charge is not its true cost %d", l.Policy, l.Remaining, l.Burst, want, trueTotal)
			}
		}
		return nil
	})
}

// TestNginxSettles drives the real nginx with examples/gateways/nginx.conf
// in front of an API that settles each completion at its true cost.
func TestNginxSettles(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", settleConfig(t, "nginx", true))
	defer sv.stop()
	api := newSettlingAPI(t, sv.addr)
	gw := startNginx(t, "nginx.conf", sv.addr, api.Listener.Addr().String())
	testSettleThroughGateway(t, "http://"+gw, sv.addr, api, true)
}

// TestNginxSettlesItself drives the real nginx with
// examples/gateways/nginx-settles.conf, which settles each completion
// itself (post_action) at the cost the API's answer gives in
// X-Usage-Tokens.
func TestNginxSettlesItself(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", settleConfig(t, "nginx", false)) // as the example says: the cap, settled down
	defer sv.stop()
	api := newSettlingAPI(t, "")
	gw := startNginx(t, "nginx-settles.conf", sv.addr, api.Listener.Addr().String())
	testSettleThroughGateway(t, "http://"+gw, sv.addr, api, true)
}

// TestCaddySettles: TestNginxSettles with the real Caddy and
// examples/gateways/Caddyfile.
func TestCaddySettles(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", settleConfig(t, "caddy", true))
	defer sv.stop()
	api := newSettlingAPI(t, sv.addr)
	gw := startCaddy(t, sv.addr, api.Listener.Addr().String())
	testSettleThroughGateway(t, "http://"+gw, sv.addr, api, false) // the Caddyfile does not copy RateLimit-Unit (docs/gateways.md)
}

// TestGatewayExamplesParse checks the examples that cannot run here: the
// ingress-nginx Ingress (its snippets through the real nginx's config
// test, inside the locations ingress-nginx puts them in) and the Traefik
// dynamic config (its forwardAuth middleware's fields).
func TestGatewayExamplesParse(t *testing.T) {
	var ing struct {
		Kind     string
		Metadata struct{ Annotations map[string]string }
	}
	b, err := os.ReadFile("../../examples/gateways/ingress-nginx.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &ing); err != nil || ing.Kind != "Ingress" {
		t.Fatalf("ingress-nginx.yaml: %v (kind %q)", err, ing.Kind)
	}
	an := func(k string) string { return ing.Metadata.Annotations["nginx.ingress.kubernetes.io/"+k] }
	if !strings.HasSuffix(an("auth-url"), "/v1/authz") || !strings.Contains(an("auth-response-headers"), "X-Fairgate-Tenant") || !strings.Contains(an("auth-response-headers"), "X-Fairgate-Settlement") {
		t.Fatalf("ingress annotations: %v", ing.Metadata.Annotations)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`events {}
http {
  server {
    listen %s;
    location / {
      auth_request /_external-auth;
      %s
      proxy_pass http://127.0.0.1:9;
    }
    location = /_external-auth { internal; %s proxy_pass http://127.0.0.1:9/v1/authz; }
    %s
  }
}
`, freeAddr(t), an("configuration-snippet"), an("auth-snippet"), an("server-snippet"))
	if !strings.Contains(an("auth-snippet"), `proxy_set_header X-Tenant ""`) {
		t.Errorf("the Ingress does not empty the tenant header on the auth request: %q", an("auth-snippet"))
	}
	os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600)
	t.Run("nginx -t", func(t *testing.T) {
		testenv.External(t, "nginx")
		if out, err := exec.Command("nginx", "-t", "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-g", "pid "+dir+"/nginx.pid; error_log stderr;").CombinedOutput(); err != nil {
			t.Fatalf("the Ingress's snippets do not pass nginx -t: %v\n%s", err, out)
		}
	})
	var tr struct {
		HTTP struct {
			Middlewares map[string]struct {
				ForwardAuth struct {
					Address             string
					TrustForwardHeader  bool     `yaml:"trustForwardHeader"`
					AuthRequestHeaders  []string `yaml:"authRequestHeaders"`
					AuthResponseHeaders []string `yaml:"authResponseHeaders"`
				} `yaml:"forwardAuth"`
			}
		} `yaml:"http"`
	}
	if b, err = os.ReadFile("../../examples/gateways/traefik.yaml"); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tr); err != nil {
		t.Fatalf("traefik.yaml: %v", err)
	}
	fa := tr.HTTP.Middlewares["fairgate"].ForwardAuth
	if !strings.HasSuffix(fa.Address, "/v1/authz") || !slices.Contains(fa.AuthResponseHeaders, "X-Fairgate-Tenant") || !slices.Contains(fa.AuthResponseHeaders, "X-Fairgate-Settlement") {
		t.Fatalf("traefik forwardAuth: %+v", fa)
	}
	// Traefik passes every client header to fairgate unless
	// authRequestHeaders lists them: only the credential may pass.
	if fa.TrustForwardHeader || !slices.Equal(fa.AuthRequestHeaders, []string{"Authorization", "X-API-Key", "Origin", "Access-Control-Request-Method"}) {
		t.Fatalf("traefik forwardAuth passes client headers on: trustForwardHeader %v, authRequestHeaders %v", fa.TrustForwardHeader, fa.AuthRequestHeaders)
	}
	testEnvoyExample(t)
}

// testEnvoyExample decodes examples/gateways/envoy.yaml into Envoy's own
// types (no Envoy runs here) and checks what fairgate relies on: the
// path prefix, only the credential and the client address passed, and
// the identity headers given to the upstream.
func testEnvoyExample(t *testing.T) {
	b, err := os.ReadFile("../../examples/gateways/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var f hcmpb.HttpFilter
	if err := protojson.Unmarshal(js, &f); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy HTTP filter: %v", err)
	}
	if err := f.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	var ea authzpb.ExtAuthz
	if err := f.GetTypedConfig().UnmarshalTo(&ea); err != nil {
		t.Fatalf("envoy.yaml's typed_config is not ext_authz: %v", err)
	}
	if err := ea.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	hs := ea.GetHttpService()
	if hs.GetPathPrefix() != "/v1/authz" || ea.GetFailureModeAllow() {
		t.Fatalf("envoy.yaml: path_prefix %q, failure_mode_allow %v", hs.GetPathPrefix(), ea.GetFailureModeAllow())
	}
	var allowed, upstream []string
	for _, m := range hs.GetAuthorizationRequest().GetAllowedHeaders().GetPatterns() {
		allowed = append(allowed, m.GetExact()+m.GetPrefix())
	}
	for _, m := range hs.GetAuthorizationResponse().GetAllowedUpstreamHeaders().GetPatterns() {
		upstream = append(upstream, m.GetExact()+m.GetPrefix())
	}
	if !slices.Equal(allowed, []string{"x-api-key", "x-forwarded-for", "origin", "access-control-request-method"}) || !slices.Contains(upstream, "x-fairgate-tenant") {
		t.Fatalf("envoy.yaml passes %v to fairgate and %v to the upstream", allowed, upstream)
	}
}

// TestGatewayDocsShowTheTestedFiles: docs/gateways.md shows each example
// gateway config as it is in examples/gateways, the files the tests run.
func TestGatewayDocsShowTheTestedFiles(t *testing.T) {
	doc := string(mustRead(t, "../../docs/gateways.md"))
	for _, name := range []string{"nginx.conf", "nginx-settles.conf", "Caddyfile", "ingress-nginx.yaml", "traefik.yaml", "envoy.yaml"} {
		if !strings.Contains(doc, string(mustRead(t, filepath.Join("../../examples/gateways", name)))) {
			t.Errorf("docs/gateways.md does not show examples/gateways/%s as it is", name)
		}
	}
}

// TestSecurityDocNamesRealTests: every test, fuzz target and benchmark
// docs/security.md names as holding a surface exists in the tree, so the
// threat table cannot point at a test that was renamed or removed.
func TestSecurityDocNamesRealTests(t *testing.T) {
	doc := string(mustRead(t, "../../docs/security.md"))
	defined := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		for _, line := range strings.Split(string(mustRead(t, path)), "\n") {
			if name, ok := strings.CutPrefix(line, "func "); ok {
				if i := strings.IndexByte(name, '('); i > 0 {
					defined[name[:i]] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, part := range strings.Split(doc, "`")[1:] {
		if strings.HasPrefix(part, "Test") || strings.HasPrefix(part, "Fuzz") || strings.HasPrefix(part, "Benchmark") {
			if strings.ContainsAny(part, " (") {
				continue
			}
			named++
			if !defined[part] {
				t.Errorf("docs/security.md names %s, which no test file defines", part)
			}
		}
	}
	if named < 40 {
		t.Errorf("docs/security.md names %d tests; the threat table has fewer than it should", named)
	}
}

// protoYAML decodes YAML into m strictly (protojson refuses an unknown
// field, and an Any whose type is not linked in) and, if validate, checks
// it with Envoy's own validation rules (protoc-gen-validate's).
func protoYAML(t *testing.T, what string, y []byte, m proto.Message, validate bool) {
	t.Helper()
	js, err := sigsyaml.YAMLToJSON(y)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("%s does not decode into %s: %v", what, m.ProtoReflect().Descriptor().FullName(), err)
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok && validate {
		if err := v.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// protoValue decodes a YAML value already decoded into Go values (a patch
// of an EnvoyFilter) into m, strictly; validated as a whole if validate.
func protoValue(t *testing.T, what string, v any, m proto.Message, validate bool) {
	t.Helper()
	y, err := sigsyaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	protoYAML(t, what, y, m, validate)
}

// exampleRequest is the request the rate_limits actions are evaluated on.
type exampleRequest struct {
	remote  string
	headers map[string]string
}

// descriptorsOf is what Envoy sends fairgate for r on a route with these
// rate_limits: one descriptor per entry whose actions all produce an
// entry, as Envoy's rate limit policy does (the actions the examples use;
// any other fails the test, so that an example cannot use one unchecked).
func descriptorsOf(t *testing.T, rls []*routepb.RateLimit, r exampleRequest) []*commonpb.RateLimitDescriptor {
	t.Helper()
	var out []*commonpb.RateLimitDescriptor
	for _, rl := range rls {
		d := &commonpb.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			switch {
			case a.GetGenericKey() != nil:
				k := cmp.Or(a.GetGenericKey().GetDescriptorKey(), "generic_key")
				d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRemoteAddress() != nil:
				d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: "remote_address", Value: r.remote})
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := r.headers[strings.ToLower(h.GetHeaderName())]
				if !ok {
					if h.GetSkipIfAbsent() {
						continue
					}
					d = nil
				} else {
					d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: h.GetDescriptorKey(), Value: v})
				}
			default:
				t.Fatalf("the examples' descriptorsOf does not know the action %v: teach it", a)
			}
			if d == nil {
				break
			}
		}
		if d != nil && len(d.Entries) > 0 {
			out = append(out, d)
		}
	}
	return out
}

// rlsLimits asks fairgate, loaded with examples/rls/ratelimit-config.yaml,
// which limit each descriptor falls under: "600/MINUTE", or "none".
func rlsLimits(t *testing.T, domain string, ds []*commonpb.RateLimitDescriptor) []string {
	t.Helper()
	doms, err := config.ParseRLSFile("../../examples/rls/ratelimit-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rls.New(rls.Config{Domains: doms}, lim.Guard(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range resp.GetStatuses() {
		if l := st.GetCurrentLimit(); l != nil {
			got = append(got, fmt.Sprintf("%d/%s", l.GetRequestsPerUnit(), l.GetUnit()))
		} else {
			got = append(got, "none")
		}
	}
	return got
}

// checkRateLimitFilter checks the ratelimit filter's config the examples
// share: domain edge, fail closed, gRPC v3 to the cluster named.
func checkRateLimitFilter(t *testing.T, what string, f *hcmpb.HttpFilter) *ratelimitpb.RateLimit {
	t.Helper()
	var rl ratelimitpb.RateLimit
	if f.GetName() != "envoy.filters.http.ratelimit" {
		t.Fatalf("%s: filter %q, want envoy.filters.http.ratelimit", what, f.GetName())
	}
	if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatalf("%s: the filter's typed_config is not envoy.extensions.filters.http.ratelimit.v3.RateLimit: %v", what, err)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if rl.GetDomain() != "edge" || !rl.GetFailureModeDeny() || rl.GetRateLimitService().GetTransportApiVersion() != corepb.ApiVersion_V3 {
		t.Fatalf("%s: domain %q, failure_mode_deny %v, transport_api_version %v", what, rl.GetDomain(), rl.GetFailureModeDeny(), rl.GetRateLimitService().GetTransportApiVersion())
	}
	return &rl
}

// checkRLSCluster: the cluster reaches fairgate's gRPC port over HTTP/2.
func checkRLSCluster(t *testing.T, what string, c *clusterpb.Cluster) {
	t.Helper()
	var po upstreamhttppb.HttpProtocolOptions
	if err := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(&po); err != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Fatalf("%s: cluster %s does not speak HTTP/2 (gRPC): %v", what, c.GetName(), err)
	}
	ep := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if ep.GetPortValue() != 8081 {
		t.Fatalf("%s: cluster %s calls port %d, fairgate's gRPC port is 8081", what, c.GetName(), ep.GetPortValue())
	}
}

// apiRequest has an API key; plainRequest has none.
var (
	apiRequest   = exampleRequest{remote: "203.0.113.7", headers: map[string]string{"x-api-key": "key-1"}}
	plainRequest = exampleRequest{remote: "203.0.113.7"}
)

// TestRLSExamplesParse checks examples/rls, which cannot run here (no
// Envoy, Istio or Kubernetes): envoy.yaml decodes strictly into Envoy's
// Bootstrap, the Istio EnvoyFilters' patches into the types Istio patches
// (the filter, the cluster, the virtual host's rate_limits), and the
// descriptors the routes' actions produce each fall under a rule of
// ratelimit-config.yaml in fairgate's rls; fairgate.env starts fairgate
// with nothing unsupported, reading the directory that file goes in; and
// the Envoy Gateway objects carry the fields docs/rls.md speaks of.
func TestRLSExamplesParse(t *testing.T) {
	var boot bootstrappb.Bootstrap
	protoYAML(t, "examples/rls/envoy.yaml", mustRead(t, "../../examples/rls/envoy.yaml"), &boot, true)
	clusters := map[string]*clusterpb.Cluster{}
	for _, c := range boot.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	var hcm hcmpb.HttpConnectionManager
	if err := boot.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	if !hcm.GetUseRemoteAddress().GetValue() {
		t.Error("envoy.yaml: without use_remote_address, remote_address is the client's X-Forwarded-For: any client picks its own counter")
	}
	rl := checkRateLimitFilter(t, "envoy.yaml", hcm.GetHttpFilters()[0])
	rlsCluster := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if clusters[rlsCluster] == nil {
		t.Fatalf("envoy.yaml: the filter calls cluster %q, which is not defined", rlsCluster)
	}
	checkRLSCluster(t, "envoy.yaml", clusters[rlsCluster])
	routes := map[string][]*routepb.RateLimit{}
	for _, r := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		routes[r.GetMatch().GetPrefix()] = r.GetRoute().GetRateLimits()
	}
	for _, c := range []struct {
		route string
		req   exampleRequest
		want  []string
	}{
		{"/api/", apiRequest, []string{"600/MINUTE", "100/MINUTE"}},
		{"/api/", plainRequest, []string{"600/MINUTE"}},
		{"/", apiRequest, []string{"600/MINUTE"}},
	} {
		if got := rlsLimits(t, rl.GetDomain(), descriptorsOf(t, routes[c.route], c.req)); !slices.Equal(got, c.want) {
			t.Errorf("envoy.yaml: route %s, headers %v: fairgate's limits %v, want %v", c.route, c.req.headers, got, c.want)
		}
	}

	// Istio: the patches' values, as Istio hands them to Envoy.
	type envoyFilter struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   struct{ Name, Namespace string }
		Spec       struct {
			WorkloadSelector struct{ Labels map[string]string } `yaml:"workloadSelector"`
			ConfigPatches    []struct {
				ApplyTo string `yaml:"applyTo"`
				Match   any
				Patch   struct {
					Operation string
					Value     any
				}
			} `yaml:"configPatches"`
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(mustRead(t, "../../examples/rls/istio.yaml"))))
	dec.KnownFields(true)
	var (
		istioRL      *ratelimitpb.RateLimit
		istioCluster clusterpb.Cluster
		istioVH      routepb.VirtualHost
	)
	seen := map[string]bool{}
	for {
		var ef envoyFilter
		if err := dec.Decode(&ef); err == io.EOF {
			break
		} else if err != nil || ef.Kind != "EnvoyFilter" {
			t.Fatalf("istio.yaml: %v (kind %q)", err, ef.Kind)
		}
		for _, p := range ef.Spec.ConfigPatches {
			what := "istio.yaml " + ef.Metadata.Name + " " + p.ApplyTo
			seen[p.ApplyTo+" "+p.Patch.Operation] = true
			switch p.ApplyTo {
			case "HTTP_FILTER":
				var f hcmpb.HttpFilter
				protoValue(t, what, p.Patch.Value, &f, true)
				istioRL = checkRateLimitFilter(t, what, &f)
			case "CLUSTER":
				protoValue(t, what, p.Patch.Value, &istioCluster, true)
				checkRLSCluster(t, what, &istioCluster)
			case "VIRTUAL_HOST":
				// a MERGE value is part of a virtual host: strict
				// decoding, and validation of the part given
				protoValue(t, what, p.Patch.Value, &istioVH, false)
				for _, r := range istioVH.GetRateLimits() {
					if err := r.ValidateAll(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
			default:
				t.Fatalf("%s: not checked here", what)
			}
		}
	}
	if !seen["HTTP_FILTER INSERT_BEFORE"] || !seen["CLUSTER ADD"] || !seen["VIRTUAL_HOST MERGE"] {
		t.Fatalf("istio.yaml patches %v: want the filter inserted, the cluster added, the rate_limits merged", seen)
	}
	if got := istioRL.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != istioCluster.GetName() {
		t.Fatalf("istio.yaml: the filter calls cluster %q, the patch adds %q", got, istioCluster.GetName())
	}
	if got := rlsLimits(t, istioRL.GetDomain(), descriptorsOf(t, istioVH.GetRateLimits(), apiRequest)); !slices.Equal(got, []string{"600/MINUTE", "100/MINUTE"}) {
		t.Errorf("istio.yaml: fairgate's limits %v, want 600/MINUTE and 100/MINUTE", got)
	}

	// fairgate's side: started with fairgate.env, it reads the runtime
	// directory ratelimit-config.yaml says to put that file in.
	env := map[string]string{}
	for _, line := range strings.Split(string(mustRead(t, "../../examples/rls/fairgate.env")), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			env[k] = v
		}
	}
	res, err := envoyenv.Read(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || len(res.Unsupported) > 0 {
		t.Fatalf("fairgate.env: %v, unsupported %v", err, res.Unsupported)
	}
	if v, ok := env["FAIRGATE_CONFIG"]; !ok || v != "" {
		t.Errorf("fairgate.env does not empty FAIRGATE_CONFIG: in fairgate's container image (Containerfile) its example file would win over the environment")
	}
	if !strings.Contains(string(res.Config), "runtime_dir: /data/ratelimit/config") || !strings.Contains(string(mustRead(t, "../../examples/rls/ratelimit-config.yaml")), "/data/ratelimit/config/") {
		t.Fatalf("fairgate.env makes %q: not the directory ratelimit-config.yaml names", res.Config)
	}

	// Envoy Gateway: the fields used, decoded into a local struct that
	// refuses unknown fields. It is not the CRD's schema (that cannot be
	// fetched here): a misspelt field of these is caught, a wrong value
	// only as far as checked below.
	type limit struct {
		Requests int
		Unit     string
	}
	var egObjects struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   *struct{ Name string }
		Provider   *struct{ Type string }
		Gateway    *struct {
			ControllerName string `json:"controllerName"`
		}
		RateLimit *struct {
			Backend struct {
				Type  string
				Redis struct{ URL string }
			}
		} `json:"rateLimit"`
		Spec *struct {
			TargetRefs []struct{ Group, Kind, Name string } `json:"targetRefs"`
			RateLimit  struct {
				Type   string
				Global struct {
					Rules []struct {
						ClientSelectors []struct {
							Headers []struct {
								Name, Type string
							}
							SourceCIDR *struct{ Type, Value string } `json:"sourceCIDR"`
						} `json:"clientSelectors"`
						Limit limit
					}
				}
			} `json:"rateLimit"`
		}
	}
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(mustRead(t, "../../examples/rls/envoy-gateway.yaml")), "\n---\n") {
		egObjects.RateLimit, egObjects.Spec = nil, nil
		if err := sigsyaml.UnmarshalStrict([]byte(doc), &egObjects); err != nil {
			t.Fatalf("envoy-gateway.yaml: %v", err)
		}
		kinds[egObjects.Kind] = true
		switch egObjects.Kind {
		case "EnvoyGateway":
			if egObjects.RateLimit == nil || egObjects.RateLimit.Backend.Type != "Redis" {
				t.Errorf("envoy-gateway.yaml: EnvoyGateway rateLimit %+v", egObjects.RateLimit)
			}
		case "BackendTrafficPolicy":
			rl := egObjects.Spec.RateLimit
			if rl.Type != "Global" || len(rl.Global.Rules) != 2 || rl.Global.Rules[0].Limit != (limit{600, "Minute"}) || rl.Global.Rules[1].Limit != (limit{100, "Minute"}) {
				t.Errorf("envoy-gateway.yaml: BackendTrafficPolicy rateLimit %+v: not envoy.yaml's limits", rl)
			}
		}
	}
	if !kinds["EnvoyGateway"] || !kinds["BackendTrafficPolicy"] {
		t.Fatalf("envoy-gateway.yaml has %v", kinds)
	}
}

// TestRLSDocsShowTheTestedFiles: docs/rls.md shows each file of
// examples/rls as it is, the files TestRLSExamplesParse checks.
func TestRLSDocsShowTheTestedFiles(t *testing.T) {
	doc := string(mustRead(t, "../../docs/rls.md"))
	for _, name := range []string{"envoy.yaml", "istio.yaml", "envoy-gateway.yaml", "ratelimit-config.yaml", "fairgate.env", "envoy-tokens.yaml", "ratelimit-tokens.yaml", "fairgate-tokens.yaml"} {
		if !strings.Contains(doc, string(mustRead(t, filepath.Join("../../examples/rls", name)))) {
			t.Errorf("docs/rls.md does not show examples/rls/%s as it is", name)
		}
	}
}
