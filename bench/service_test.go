package bench

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
)

// serviceConfig is the fairgate config of the service benchmark: limits
// no run reaches (every answer is a full decision, never a near-cache
// one), three layers on /v1/search (the tenant's, the class's, and a
// daily quota), and an API key for the proxy ("bench-key").
const serviceConfig = `default_plan: bench
default_class: read
plans:
  bench:
    - {limit: 1000000000, period: 1h}
    - {name: daily, limit: 1000000000, period: day}
classes:
  read: {share: 1.0, fail: open}
  search: {share: 0.5, fail: open}
  # A hot tenant's class in the scale benchmark: unit grants of 50.
  leased: {share: 0.5, fail: open, lease: 50}
  completions:
    share: 0.5
    fail: open
    cost:
      unit: tokens
      estimate: {header: X-Max-Tokens, default: 100, cap: 1000}
      measure: {header: X-Usage-Tokens}
routes:
  - {route: "GET /v1/users/{id}", class: read}
  - {route: "GET /v1/search", class: search}
  - {route: "GET /v1/leased", class: leased}
  - {route: "POST /v1/completions", class: completions}
  - {route: "POST /v1/echo", class: read}
auth:
  api_keys:
    - {sha256: b0962662e937d44c699c8305d90cbf190b3150c59b13863d1380b5cc3c711bb7, tenant: acme}
`

// target is one server under test and the request wrk sends it.
type target struct {
	name  string
	pid   int
	redis int    // the pid of the Redis it uses; 0: none
	url   string // wrk's URL
	body  string // a fmt format with one %d (the rotating key); "" for GET
	hdr   string // one extra header, "Name: value"
	pace  int    // ms each connection waits between requests; 0: none
	// hot, when set, is the body of every tenth request (a hot tenant's).
	hot string
	// settle, when set, makes every admitted answer's settlement handle
	// the next request: a POST /v1/settle of it at this true cost, on the
	// same connection pool. One settled decision is then two requests,
	// and figures are per decision (per /v1/check).
	settle int
}

// wrkRound is one wrk run against a target.
type wrkRound struct {
	reqs        int
	rps         float64
	p50, p99    time.Duration
	cpuUs, rdUs float64 // server and Redis CPU per request, µs
	non2xx      int
}

func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs a server process and waits until addr answers HTTP.
func start(b *testing.B, addr string, name string, args ...string) *exec.Cmd {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "FAIRGATE_DRAIN=0", "FAIRGATE_ADMIN_TOKEN=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s %v did not answer on %s within 20 s: %s", name, args, addr, stderr.String())
		}
	}
}

var (
	wrkTotal = regexp.MustCompile(`(\d+) requests in`)
	wrkNon   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkPct   = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)`)
)

// drive runs wrk (1 thread, conns connections) against t for d.
func (t target) drive(b *testing.B, dir string, conns int, d time.Duration) wrkRound {
	b.Helper()
	script := t.wrkScript(b, dir, 0)
	cpu0, rd0 := procCPU(t.pid), time.Duration(0)
	if t.redis != 0 {
		rd0 = procCPU(t.redis)
	}
	out, err := exec.Command("wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+d.String(), "--latency", "-s", script, t.url).CombinedOutput()
	if err != nil {
		b.Fatalf("wrk %s: %v\n%s", t.name, err, out)
	}
	cpu, rd := procCPU(t.pid)-cpu0, time.Duration(0)
	if t.redis != 0 {
		rd = procCPU(t.redis) - rd0
	}
	r := parseWrk(b, t.name, out)
	if t.settle > 0 { // a check and its settlement are one decision
		r.reqs /= 2
	}
	r.rps = float64(r.reqs) / d.Seconds()
	r.cpuUs = float64(cpu.Microseconds()) / float64(r.reqs)
	r.rdUs = float64(rd.Microseconds()) / float64(r.reqs)
	return r
}

// wrkScript writes t's wrk script under dir and returns its path. The
// rotating key of request n is offset+n mod 100,000.
func (t target) wrkScript(b *testing.B, dir string, offset int) string {
	script := filepath.Join(dir, fmt.Sprintf("%s-%d.lua", t.name, offset))
	lua := fmt.Sprintf("local n = %d\nrequest = function()\n  n = n + 1\n", offset)
	switch {
	case t.body != "":
		if t.hot != "" {
			lua += fmt.Sprintf("  if n %% 10 == 0 then\n    return wrk.format(\"POST\", nil, {[\"Content-Type\"] = \"application/json\"%s}, %q)\n  end\n", luaHdr(t.hdr), t.hot)
		}
		lua += fmt.Sprintf("  local k = n %% 100000\n  return wrk.format(\"POST\", nil, {[\"Content-Type\"] = \"application/json\"%s}, string.format(%q%s))\n",
			luaHdr(t.hdr), t.body, strings.Repeat(", k", strings.Count(t.body, "%d")))
	default:
		lua += fmt.Sprintf("  return wrk.format(\"GET\", nil, {%s})\n", strings.TrimPrefix(luaHdr(t.hdr), ", "))
	}
	lua += "end\n"
	if t.settle > 0 {
		// Handles wait in a queue; a request is a settlement when one waits.
		lua = strings.Replace(lua, "  n = n + 1\n", fmt.Sprintf(`  local h = table.remove(q)
  if h then
    return wrk.format("POST", "/v1/settle", {["Content-Type"] = "application/json"}, '{"handle":"' .. h .. '","cost":%d}')
  end
  n = n + 1
`, t.settle), 1)
		lua = "local q = {}\n" + lua + `response = function(status, headers, body)
  local h = string.match(body, '"settlement":"([^"]+)"')
  if h then table.insert(q, h) end
end
`
	}
	if t.pace > 0 {
		lua += fmt.Sprintf("delay = function() return %d end\n", t.pace)
	}
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		b.Fatal(err)
	}
	return script
}

// parseWrk reads wrk's output: requests, non-2xx answers and latencies.
func parseWrk(b *testing.B, name string, out []byte) wrkRound {
	var r wrkRound
	if m := wrkTotal.FindSubmatch(out); m != nil {
		r.reqs, _ = strconv.Atoi(string(m[1]))
	}
	if m := wrkNon.FindSubmatch(out); m != nil {
		r.non2xx, _ = strconv.Atoi(string(m[1]))
	}
	for _, m := range wrkPct.FindAllSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[3])]
		if string(m[1]) == "50" {
			r.p50 = time.Duration(v * float64(unit))
		} else {
			r.p99 = time.Duration(v * float64(unit))
		}
	}
	if r.reqs == 0 {
		b.Fatalf("wrk %s: no requests:\n%s", name, out)
	}
	return r
}

func luaHdr(h string) string {
	if h == "" {
		return ""
	}
	k, v, _ := strings.Cut(h, ": ")
	return fmt.Sprintf(", [%q] = %q", k, v)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkService drives the real binaries over loopback with wrk (C, one
// thread, 64 connections) and reads each server's CPU, and Redis's, from
// /proc: CPU per request on the server side, never a Go load client's.
// Rounds are interleaved (every target once per round); the log has each
// target's medians and the per-round ratios the targets of issue 23 name.
//
//	make bench-service    (cd bench && go test -run '^$' -bench '^BenchmarkService$' -benchtime 1x -timeout 30m)
//
// FAIRGATE_BENCH_ENVOY_RLS=/path/to/envoyproxy/ratelimit (built from a
// snapshot outside the repository) adds its /json beside /v1/check;
// FAIRGATE_BENCH_TARGETS=regexp keeps only the targets it matches (such
// as '^(floor|take-memory|check-memory)$'); FAIRGATE_BENCH_ALT names
// another fairgate build whose Redis paths (take, check, measured,
// settled: the "-alt" targets) run beside this one's (an A/B).
func BenchmarkService(b *testing.B) {
	redistest.Need(b)
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk is not installed: make bench-service installs it (scripts/ensure-wrk.sh)")
	}
	dir := b.TempDir()
	fg, floor := buildServers(b, dir)
	cfg := filepath.Join(dir, "fairgate.yaml")
	os.WriteFile(cfg, []byte(serviceConfig), 0o600)
	rs, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	rpid := redisPID(rs)
	const takeBody = `{"key":"k%d","limit":1000000000,"period_ms":3600000}`
	const checkBody = `{"tenant":"t%d","route":"GET /v1/search"}`
	// A measured-cost route: charged its estimate (X-Max-Tokens, else
	// 100), settled at 150 when the target settles.
	const measuredBody = `{"tenant":"t%d","route":"POST /v1/completions"}`
	serve := func(store string, extra ...string) (string, int) {
		a := freeAddr(b)
		cmd := start(b, a, fg, append([]string{"serve", "--config", cfg, "--store", store, "--listen", a}, extra...)...)
		return a, cmd.Process.Pid
	}
	floorAt := func(args ...string) (string, int) {
		a := freeAddr(b)
		return a, start(b, a, floor, append([]string{"-listen", a}, args...)...).Process.Pid
	}
	var ts []target
	a, pid := floorAt("-mode", "floor")
	ts = append(ts, target{name: "floor", pid: pid, url: "http://" + a + "/take", body: takeBody})
	a, pid = serve("memory://")
	ts = append(ts, target{name: "take-memory", pid: pid, url: "http://" + a + "/v1/take", body: takeBody},
		target{name: "check-memory", pid: pid, url: "http://" + a + "/v1/check", body: checkBody},
		target{name: "measured-memory", pid: pid, url: "http://" + a + "/v1/check", body: measuredBody},
		target{name: "settled-memory", pid: pid, url: "http://" + a + "/v1/check", body: measuredBody, settle: 150})
	a, pid = floorAt("-mode", "floor+redis", "-redis", rs.Addr)
	ts = append(ts, target{name: "floor+redis", pid: pid, redis: rpid, url: "http://" + a + "/take", body: takeBody})
	a, pid = floorAt("-mode", "redis_rate", "-redis", rs.Addr)
	ts = append(ts, target{name: "redis_rate", pid: pid, redis: rpid, url: "http://" + a + "/take", body: takeBody})
	a, pid = serve("redis://" + rs.Addr)
	ts = append(ts, target{name: "take-redis", pid: pid, redis: rpid, url: "http://" + a + "/v1/take", body: takeBody},
		target{name: "check-redis", pid: pid, redis: rpid, url: "http://" + a + "/v1/check", body: checkBody},
		target{name: "measured-redis", pid: pid, redis: rpid, url: "http://" + a + "/v1/check", body: measuredBody},
		target{name: "settled-redis", pid: pid, redis: rpid, url: "http://" + a + "/v1/check", body: measuredBody, settle: 150})
	if alt := os.Getenv("FAIRGATE_BENCH_ALT"); alt != "" { // an A/B: another build's Redis paths, on the same Redis
		ab := freeAddr(b)
		pid := start(b, ab, alt, "serve", "--config", cfg, "--store", "redis://"+rs.Addr, "--listen", ab).Process.Pid
		ts = append(ts, target{name: "take-redis-alt", pid: pid, redis: rpid, url: "http://" + ab + "/v1/take", body: takeBody},
			target{name: "check-redis-alt", pid: pid, redis: rpid, url: "http://" + ab + "/v1/check", body: checkBody},
			target{name: "measured-redis-alt", pid: pid, redis: rpid, url: "http://" + ab + "/v1/check", body: measuredBody},
			target{name: "settled-redis-alt", pid: pid, redis: rpid, url: "http://" + ab + "/v1/check", body: measuredBody, settle: 150})
	}
	up, upPID := floorAt("-mode", "upstream")
	a, pid = floorAt("-mode", "proxy", "-upstream", "http://"+up)
	ts = append(ts, target{name: "bare-proxy", pid: pid, url: "http://" + a + "/v1/users/1"})
	a, pid = serve("memory://", "--upstream", "http://"+up, "--internal-listen", freeAddr(b))
	ts = append(ts, target{name: "proxy", pid: pid, url: "http://" + a + "/v1/users/1", hdr: "X-API-Key: bench-key"})
	// The same proxy on a POST of a plain class and of a measured-cost
	// one, whose answer carries X-Usage-Tokens: 150 and is settled to it.
	ts = append(ts, target{name: "proxy-post", pid: pid, url: "http://" + a + "/v1/echo", hdr: "X-API-Key: bench-key", body: `{"prompt":"p%d"}`},
		target{name: "proxy-settled", pid: pid, url: "http://" + a + "/v1/completions", hdr: "X-API-Key: bench-key", body: `{"prompt":"p%d"}`})
	// The same three at a moderate rate (16 connections, each waiting 9 ms
	// between requests: about 1,700 a second): the latency a proxy adds.
	for _, p := range []target{{name: "direct", pid: upPID, url: "http://" + up + "/v1/users/1"}, ts[len(ts)-4], ts[len(ts)-3]} {
		p.name, p.pace = p.name+"@1.7k", 9
		ts = append(ts, p)
	}
	if peer := os.Getenv("FAIRGATE_BENCH_ENVOY_RLS"); peer != "" {
		ts = append(ts, envoyJSON(b, peer, dir))
	}
	if only := os.Getenv("FAIRGATE_BENCH_TARGETS"); only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			b.Fatalf("FAIRGATE_BENCH_TARGETS: %v", err)
		}
		ts = slices.DeleteFunc(ts, func(t target) bool { return !re.MatchString(t.name) })
	}
	runService(b, dir, ts)
}

// buildServers builds fairgate (in its own module, as a user builds it)
// and httpfloor into dir.
func buildServers(b *testing.B, dir string) (fg, floor string) {
	fg, floor = filepath.Join(dir, "fairgate"), filepath.Join(dir, "httpfloor")
	for _, x := range [][3]string{{fg, "./cmd/fairgate", ".."}, {floor, "./cmd/httpfloor", "."}} {
		build := exec.Command("go", "build", "-o", x[0], x[1])
		build.Dir = x[2]
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", x[1], err, out)
		}
	}
	return fg, floor
}

// runService runs the rounds and reports.
func runService(b *testing.B, dir string, ts []target) {
	const rounds, per = 3, 4 * time.Second
	res := map[string][]wrkRound{}
	for range rounds {
		for _, t := range ts {
			conns := 64
			if t.pace > 0 {
				conns = 16
			}
			res[t.name] = append(res[t.name], t.drive(b, dir, conns, per))
		}
	}
	med := func(name string, f func(wrkRound) float64) float64 {
		var xs []float64
		for _, r := range res[name] {
			xs = append(xs, f(r))
		}
		if len(xs) == 0 {
			return 0
		}
		return median(xs)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-14s %12s %12s %10s %9s %9s %7s\n", "target", "server µs/req", "redis µs/req", "req/s", "p50", "p99", "non-2xx")
	for _, t := range ts {
		fmt.Fprintf(&sb, "%-14s %12.1f %12.1f %10.0f %9v %9v %7.0f\n", t.name,
			med(t.name, func(r wrkRound) float64 { return r.cpuUs }), med(t.name, func(r wrkRound) float64 { return r.rdUs }),
			med(t.name, func(r wrkRound) float64 { return r.rps }),
			time.Duration(med(t.name, func(r wrkRound) float64 { return float64(r.p50) })).Round(time.Microsecond),
			time.Duration(med(t.name, func(r wrkRound) float64 { return float64(r.p99) })).Round(time.Microsecond),
			med(t.name, func(r wrkRound) float64 { return float64(r.non2xx) }))
	}
	// The ratios issue 23 sets targets for, per round (server + Redis CPU).
	for _, c := range [][2]string{{"take-memory", "floor"}, {"check-memory", "floor"}, {"take-redis", "redis_rate"}, {"floor+redis", "redis_rate"}, {"check-redis", "envoy-json"}, {"proxy", "bare-proxy"},
		{"settled-memory", "measured-memory"}, {"settled-redis", "measured-redis"}, {"proxy-settled", "proxy-post"},
		{"take-redis", "take-redis-alt"}, {"check-redis", "check-redis-alt"},
		{"settled-redis-alt", "measured-redis-alt"}, {"settled-redis", "settled-redis-alt"}} {
		if len(res[c[0]]) == 0 || len(res[c[1]]) == 0 {
			continue
		}
		var ratios []float64
		for i := range res[c[0]] {
			x, y := res[c[0]][i], res[c[1]][i]
			ratios = append(ratios, (x.cpuUs+x.rdUs)/(y.cpuUs+y.rdUs))
		}
		fmt.Fprintf(&sb, "%s / %s: per round %.2f, median %.2f×\n", c[0], c[1], ratios, median(ratios))
		b.ReportMetric(median(ratios), c[0]+"/"+c[1])
	}
	// What each proxy adds over going direct, at the moderate rate.
	for _, p := range []string{"bare-proxy@1.7k", "proxy@1.7k"} {
		if len(res[p]) == 0 {
			continue
		}
		d, x := res["direct@1.7k"], res[p]
		var cpu, p50, p99 []float64
		for i := range x {
			cpu = append(cpu, x[i].cpuUs)
			p50 = append(p50, float64(x[i].p50-d[i].p50)/1e3)
			p99 = append(p99, float64(x[i].p99-d[i].p99)/1e3)
		}
		fmt.Fprintf(&sb, "%s over direct: +%.0f µs CPU per request (the proxy's own), +%.0f µs p50, +%.0f µs p99 (medians of %v rounds; p99 per round %.0f)\n",
			p, median(cpu), median(p50), median(p99), len(x), p99)
	}
	fmt.Print(sb.String()) // whole: a benchmark's log is cut at ten lines
}

// envoyJSON starts envoyproxy/ratelimit at bin (on a Redis of its own),
// serving the bench domain, for its /json (two descriptors: the tenant's
// and its route's, as /v1/check's layers).
func envoyJSON(b *testing.B, bin, dir string) target {
	s := startRLS(b, "envoyproxy-ratelimit", bin, rlsRuntime(b, dir))
	b.Cleanup(s.close)
	return target{name: "envoy-json", pid: s.cmd.Process.Pid, redis: redisPID(s.redis), url: "http://" + s.httpAddr + "/json",
		body: `{"domain":"bench","descriptors":[{"entries":[{"key":"tenant","value":"t%d"}]},{"entries":[{"key":"tenant","value":"t%d"},{"key":"path","value":"/v1/search"}]}]}`}
}
