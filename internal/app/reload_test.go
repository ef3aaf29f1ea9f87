package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/policy"
)

// parse parses a config for a test.
func parse(t *testing.T, data string) *config.Config {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRestartPending: a reload that changes a setting the daemon keeps
// from its start names it, by its name in the file, and one that changes
// only what a reload puts in force names none; the same value written
// another way (an empty map, a pattern compiled again) is no change.
func TestRestartPending(t *testing.T) {
	example := string(examples.Config())
	const statsd = "\n  statsd: {address: 127.0.0.1:8125, dogstatsd: true, tags: {}, mogrifiers: [{pattern: '^a\\.(.*)$', name: a}]}\n"
	withStatsd := strings.Replace(example, "  tenant_key: tenant\n", "  tenant_key: tenant"+statsd, 1)
	for _, c := range []struct {
		name     string
		from, to string // to replaces from in the example; both "" for none
		base     string // the running config; "" for the example
		want     []string
	}{
		{name: "the same file"},
		{name: "a plan's limit", from: "{limit: 120, period: 1m, burst: 30}", to: "{limit: 7, period: 1m, burst: 30}"},
		{name: "queue weights", from: "weights: {enterprise: 4", to: "weights: {enterprise: 8"},
		{name: "trusted proxies", from: "trusted_proxies: []", to: "trusted_proxies: [10.0.0.0/8]"},
		{name: "the rls domains", from: "requests_per_unit: 600", to: "requests_per_unit: 700"},
		{name: "headers", from: "headers: draft", to: "headers: x", want: []string{"headers"}},
		{name: "a queue kind", from: "    import: {", to: "    imports: {", want: []string{"queues"}},
		{name: "dependencies", from: "consecutive_failures: 5", to: "consecutive_failures: 6", want: []string{"dependencies"}},
		{name: "dashboard", from: "dashboard: on", to: "dashboard: off", want: []string{"dashboard"}},
		{name: "instances", from: "instances: 1", to: "instances: 3", want: []string{"instances"}},
		{name: "no dependencies written as {}", from: "dependencies:\n  upstream: {consecutive_failures: 5, failure_ratio: 0.5, min_requests: 20, window: 10s, cooldown: 30s}", to: "dependencies: {}",
			base: strings.Replace(example, "dependencies:\n  upstream: {consecutive_failures: 5, failure_ratio: 0.5, min_requests: 20, window: 10s, cooldown: 30s}", "", 1)},
		{name: "statsd added", from: "  tenant_key: tenant\n", to: "  tenant_key: tenant" + statsd, want: []string{"statsd"}},
		{name: "statsd the same", from: "  tenant_key: tenant\n", to: "  tenant_key: tenant" + statsd, base: withStatsd},
		{name: "xds added", from: "  tenant_key: tenant\n", to: "  tenant_key: tenant\n  xds: {address: 127.0.0.1:18000}\n", want: []string{"rls.xds"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := cmpOr(c.base, example)
			next := strings.Replace(example, c.from, c.to, 1)
			if next == example && c.from != "" {
				t.Fatalf("%q is not in the example", c.from)
			}
			if got := restartPending(parse(t, base), parse(t, next)); !slices.Equal(got, c.want) {
				t.Errorf("restartPending = %q, want %q", got, c.want)
			}
		})
	}
	noRLS := example[:strings.Index(example, "\nrls:\n")] + "\n" + example[strings.Index(example, "\n# The live dashboard"):]
	if got := restartPending(parse(t, example), parse(t, noRLS)); !slices.Equal(got, []string{"rls"}) {
		t.Errorf("the rls section removed: restartPending = %q, want [rls] (the /json endpoint)", got)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestEveryConfigFieldIsPlaced: each field of config.Config is either put
// in force by a reload (swap) or kept from the start (fixedAtStart), never
// both, so that a new field is placed on purpose.
func TestEveryConfigFieldIsPlaced(t *testing.T) {
	fixed := map[string]bool{}
	for _, f := range fixedAtStart {
		fixed[f.field] = true
		if _, ok := reflect.TypeFor[config.Config]().FieldByName(f.field); !ok {
			t.Errorf("fixedAtStart names %s, which config.Config does not have", f.field)
		}
	}
	for f := range reflect.TypeFor[config.Config]().Fields() {
		if !f.IsExported() {
			continue
		}
		live := slices.Contains(liveFields, f.Name)
		if live == fixed[f.Name] {
			t.Errorf("config.Config.%s: in liveFields %v, in fixedAtStart %v: want exactly one", f.Name, live, fixed[f.Name])
		}
	}
}

// TestMergeDomains: xDS's domains join the file's with the rls section's
// defaults; a domain both configure is refused by name; the domains given
// are not changed (they are merged again with each new file).
func TestMergeDomains(t *testing.T) {
	cfg := parse(t, "rls:\n  fail: closed\n  algorithm: gcra\n  config:\n    - domain: edge\n      descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	xds := []rls.Domain{{Name: "mesh"}}
	got, err := mergeDomains(cfg, xds)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got.Domains {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"edge", "mesh"}) {
		t.Errorf("merged domains %q, want [edge mesh]", names)
	}
	if m := got.Domains[1]; m.Fail != policy.FailClosed || m.Algorithm.String() != "gcra" {
		t.Errorf("xDS's domain took fail %v, algorithm %v; want the section's closed, gcra", m.Fail, m.Algorithm)
	}
	if xds[0].Fail == policy.FailClosed {
		t.Error("mergeDomains changed the xDS domains it was given")
	}
	if len(cfg.RLS.Domains) != 1 {
		t.Errorf("mergeDomains changed the file's domains: %d", len(cfg.RLS.Domains))
	}
	if _, err := mergeDomains(cfg, []rls.Domain{{Name: "edge"}}); err == nil || !strings.Contains(err.Error(), `rls domain "edge" comes both from the config file and from xDS`) {
		t.Errorf("a domain of both: %v", err)
	}
}

// freeAddr is a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestReloadSwapsTheGraph runs `fairgate serve` as a proxy with a config
// file and reloads it through the admin API: a new limit is in force at
// once; a file that also changes the header form is applied but for it,
// and the log line and fairgate_config_restart_pending name headers (on
// main nothing said so); a file that parses but does not build (no policy
// for the proxy) is refused and the graph in force keeps serving; putting
// the header form back clears the pending restart.
func TestReloadSwapsTheGraph(t *testing.T) {
	const token = "admin-token-for-the-reload-test"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(limit, headers string) string {
		return "default_plan: free\ndefault_class: read\nheaders: " + headers + "\nplans:\n  free: [{limit: " + limit + ", period: 1m}]\nclasses:\n  read: {share: 1.0, fail: open}\n"
	}
	write(file("100", "draft"))
	internal, admin := freeAddr(t), freeAddr(t)
	logs := &testenv.SyncBuffer{}
	serveProxy(t, path, "127.0.0.1:0", internal, admin, slog.New(slog.NewJSONHandler(logs, nil)))
	reload := func() int {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+admin+"/admin/reload", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// check is the limit in force and the header names of a decision.
	check := func() (int64, string) {
		t.Helper()
		resp, err := http.Post("http://"+internal+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","class":"read"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			Headers   map[string]string `json:"headers"`
			Decisions []struct {
				Limit int64 `json:"limit"`
			} `json:"decisions"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Decisions) == 0 {
			t.Fatalf("/v1/check: %d %v %+v", resp.StatusCode, err, r)
		}
		return r.Decisions[0].Limit, strings.Join(slices.Sorted(maps.Keys(r.Headers)), ",")
	}
	pending := func() string {
		t.Helper()
		resp, err := http.Get("http://" + internal + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, `fairgate_config_restart_pending{setting="headers"} `); ok {
				return strings.TrimSpace(v)
			}
		}
		return "absent"
	}
	limit, draft := check()
	if limit != 100 || pending() != "0" {
		t.Fatalf("at start: limit %d, restart pending %s; want 100, 0", limit, pending())
	}

	write(file("50", "draft"))
	if code := reload(); code != 200 {
		t.Fatalf("reload of a new limit: %d\n%s", code, logs)
	}
	if limit, _ := check(); limit != 50 {
		t.Errorf("after the reload the limit is %d, want 50", limit)
	}
	if strings.Contains(logs.String(), "until the next restart") {
		t.Errorf("a reload of a live setting logged a pending restart:\n%s", logs)
	}

	write(file("40", "x"))
	if code := reload(); code != 200 {
		t.Fatalf("reload of a new limit and header form: %d\n%s", code, logs)
	}
	limit, form := check()
	if limit != 40 || form != draft {
		t.Errorf("after the reload: limit %d, headers %s; want 40 and the form at start, %s", limit, form, draft)
	}
	if got := pending(); got != "1" {
		t.Errorf(`fairgate_config_restart_pending{setting="headers"} = %s, want 1`, got)
	}
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "until the next restart") {
			line = l
		}
	}
	if !strings.Contains(line, `"settings":["headers"]`) || !strings.Contains(line, "rate limit headers' form") {
		t.Errorf("the log does not name the setting that waits for a restart, and why: %q", line)
	}

	write("rls:\n  config:\n    - domain: edge\n      descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	if code := reload(); code != http.StatusUnprocessableEntity {
		t.Errorf("reload of a file without a policy for the proxy: %d, want 422", code)
	}
	if !strings.Contains(logs.String(), "--upstream needs a policy") {
		t.Errorf("the refused reload does not say why:\n%s", logs)
	}
	if limit, _ := check(); limit != 40 || pending() != "1" {
		t.Errorf("after a refused reload: limit %d, restart pending %s; want the graph in force: 40, 1", limit, pending())
	}

	write(file("30", "draft"))
	if code := reload(); code != 200 {
		t.Fatalf("reload: %d", code)
	}
	if limit, _ := check(); limit != 30 || pending() != "0" {
		t.Errorf("with the header form at start again: limit %d, restart pending %s; want 30, 0", limit, pending())
	}
}

// TestReloadMergesXDSAgain: the xDS domains in force are merged again
// with each new file, so that its rls defaults reach them at the reload
// (before, the defaults of the file at start stayed until a restart); a
// file whose domain xDS also brings does not build, and names the domain.
func TestReloadMergesXDSAgain(t *testing.T) {
	d := &daemon{log: slog.New(slog.DiscardHandler), bg: t.Context()}
	const section = "rls:\n  fail: %s\n  config:\n    - domain: %s\n      descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	g, err := d.buildGraph(parse(t, fmt.Sprintf(section, "open", "edge")), nil)
	if err != nil {
		t.Fatal(err)
	}
	g.xds = []rls.Domain{{Name: "mesh"}} // as swapXDS keeps them
	next, err := d.buildGraph(parse(t, fmt.Sprintf(section, "closed", "edge")), g)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(next.rls.Domains); n != 2 || next.rls.Domains[1].Name != "mesh" || next.rls.Domains[1].Fail != policy.FailClosed {
		t.Errorf("after the reload the domains are %+v; want edge and mesh, mesh with the new file's fail: closed", next.rls.Domains)
	}
	if _, err := d.buildGraph(parse(t, fmt.Sprintf(section, "open", "mesh")), g); err == nil || !strings.Contains(err.Error(), `"mesh"`) {
		t.Errorf("a file with xDS's domain built: %v", err)
	}
}

// TestReloadPairsPolicyAndCredentials: a reload that renames the plan a
// key names (ent to ent2, the key moved with it) never decides a request
// by one file's policy and the other's key, which would put the tenant on
// the default plan (1 request an hour) for a moment. Reloads alternate
// the two files while requests with the key run; each file's Envoy
// section is large, so that building and swapping take long enough for
// requests to fall between the parts of a swap.
func TestReloadPairsPolicyAndCredentials(t *testing.T) {
	const token = "admin-token-for-the-pairing-test"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	sum := sha256.Sum256([]byte("pairing-test-key"))
	var rls strings.Builder
	rls.WriteString("rls:\n  tenant_key: tenant\n  config:\n    - domain: big\n      descriptors:\n")
	for i := range 3000 {
		fmt.Fprintf(&rls, "        - {key: k%d, rate_limit: {unit: minute, requests_per_unit: 10}}\n", i)
	}
	file := func(plan string) string {
		return "default_plan: free\ndefault_class: read\nplans:\n  free: [{limit: 1, period: 1h}]\n  " + plan + ": [{limit: 100000, period: 1s}]\n" +
			"classes:\n  read: {share: 1.0, fail: open}\nauth:\n  api_keys:\n    - {sha256: " + hex.EncodeToString(sum[:]) + ", tenant: acme, plan: " + plan + "}\n" + rls.String()
	}
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	write := func(plan string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(file(plan)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ent")
	public, internal, admin := freeAddr(t), freeAddr(t), freeAddr(t)
	serveProxy(t, path, public, internal, admin, slog.New(slog.DiscardHandler))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[string]int{}
	for _, target := range []string{"/v1/me/limits", "/x"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://"+public+target, nil)
				req.Header.Set("X-API-Key", "pairing-test-key")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests || bytes.Contains(body, []byte(`"plan":"free"`)) {
					mu.Lock()
					bad[fmt.Sprintf("%s %d %.80s", target, resp.StatusCode, body)]++
					mu.Unlock()
				}
			}
		})
	}
	for i := range 12 {
		write([]string{"ent2", "ent"}[i%2])
		req, _ := http.NewRequest("POST", "http://"+admin+"/admin/reload", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("reload %d: %d", i, resp.StatusCode)
		}
	}
	close(stop)
	wg.Wait()
	for k, n := range bad {
		t.Errorf("%d× %s: decided on the default plan, by one file's policy and the other's key", n, k)
	}
}

// serveProxy runs the daemon in proxy mode (an upstream that never
// answers) with the config file at path on the given listeners until the
// test ends.
func serveProxy(t *testing.T, path, public, internal, admin string, log *slog.Logger) {
	t.Helper()
	c, err := ParseServe([]string{"--listen", public, "--config", path, "--config-poll", "1h", "--upstream", "http://127.0.0.1:1",
		"--internal-listen", internal, "--admin-listen", admin}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runServe(t, c, log)
}

// runServe runs Serve with c until the test ends, and returns once it
// listens; a Serve that ends with an error fails the test.
func runServe(t *testing.T, c ServeConfig, log *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() { done <- Serve(ctx, c, log, func(a string) { ready <- a }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
}
