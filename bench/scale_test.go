package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
)

// scaleConns is the total load of every scale run: wrk connections, spread
// evenly over the instances.
const scaleConns = 64

// scaleSystem is one limiter run as a fleet of instances for the scale
// benchmark: how to start instance i on a backend, and what wrk sends it.
type scaleSystem struct {
	name string
	body string // wrk's request body, one or more %d (the rotating key)
	hot  string // the body of every tenth request, if any (a hot tenant's)
	path string
	// start starts instance i against the backend and returns its HTTP
	// address and pid.
	start func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (addr string, pid int, stop func())
}

// scaleBackend is the Redis every instance of a run shares: one server or
// a Cluster.
type scaleBackend struct {
	name  string
	addrs []string // masters first
	pids  []int
	url   string // fairgate's --store
}

// scaleRun is one measured run of a fleet.
type scaleRun struct {
	decisions int
	rps       float64
	fleetUs   float64 // the instances' CPU per decision, µs, all summed
	redisUs   float64 // every Redis process's CPU per decision, µs
	calls     float64 // Redis commands per decision (commandstats, script bodies' calls included)
	scripts   float64 // script calls (EVALSHA, EVAL, FCALL) per decision
	scriptUs  float64 // µs Redis spent in script calls per decision (commandstats)
	hottest   float64 // the busiest Redis process's share of all Redis CPU
	redisSys  float64 // Redis's read and write system calls per decision (/proc/<pid>/io)
	fleetSys  float64 // the instances' read and write system calls per decision
	non2xx    int
	p99       time.Duration
}

// BenchmarkScale measures what spreading one load over more instances
// costs: scaleConns wrk connections in all, spread over N = 1, 4 and 16
// instances of the real binary sharing one Redis, and a 3-master Redis
// Cluster, each instance driven by its own wrk. It reads every process's
// CPU from /proc and Redis's INFO commandstats, and reports per decision
// the Redis CPU, the fleet's CPU (every instance summed), Redis commands
// and script calls; beside fairgate's /v1/take (one key, rotating over
// 100,000) and /v1/check (three layers of rotating tenants) run the same
// way: redis_rate (go-redis, GCRA in Redis) behind the same HTTP handler
// as httpfloor's, and envoyproxy/ratelimit's /json with one descriptor
// when FAIRGATE_BENCH_ENVOY_RLS names its binary (built outside the
// repository). Rounds are interleaved; every run starts its fleet afresh
// and stops it after.
//
//	cd bench && go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 60m .
//
// Where the machine has two or more CPUs, the Redis processes are pinned
// to the last CPU and the instances and wrk to the others (taskset), so
// that Redis's CPU per decision is its own work rather than the cost of
// sharing a core with the fleet, and every fleet size has the same CPUs
// (FAIRGATE_SCALE_PIN=0 turns it off).
//
// FAIRGATE_BENCH_ALT names another fairgate build whose /v1/take runs
// beside this one's (an A/B). FAIRGATE_SCALE_N=1,16 picks the fleet sizes, FAIRGATE_SCALE_SYSTEMS and
// FAIRGATE_SCALE_BACKENDS regexps keep systems and backends,
// FAIRGATE_SCALE_ROUNDS (3) and FAIRGATE_SCALE_SECONDS (6) size the runs,
// and FAIRGATE_SCALE_PACE=ms makes each connection wait that long between
// requests: the same offered load at every fleet size (64 connections at
// 10 ms: at most 6,400 a second), below what saturates this machine.
func BenchmarkScale(b *testing.B) {
	redistest.Need(b)
	if _, err := exec.LookPath("wrk"); err != nil {
		b.Skip("wrk is not installed: scripts/ensure-wrk.sh installs it")
	}
	dir := b.TempDir()
	fg, floor := buildServers(b, dir)
	cfg := filepath.Join(dir, "fairgate.yaml")
	os.WriteFile(cfg, []byte(serviceConfig), 0o600)
	ns := envInts(b, "FAIRGATE_SCALE_N", []int{1, 4, 16})
	rounds := envInts(b, "FAIRGATE_SCALE_ROUNDS", []int{3})[0]
	per := time.Duration(envInts(b, "FAIRGATE_SCALE_SECONDS", []int{6})[0]) * time.Second
	pace := 0
	if os.Getenv("FAIRGATE_SCALE_PACE") != "" {
		pace = envInts(b, "FAIRGATE_SCALE_PACE", nil)[0]
	}

	pin := runtime.NumCPU() >= 2 && os.Getenv("FAIRGATE_SCALE_PIN") != "0"
	fleetCPUs := fmt.Sprintf("0-%d", runtime.NumCPU()-2)
	// on runs a fleet process (an instance or wrk) on the fleet's CPUs.
	on := func(name string, args ...string) (string, []string) {
		if !pin {
			return name, args
		}
		return "taskset", append([]string{"-c", fleetCPUs, name}, args...)
	}
	pinRedis := func(pids []int) {
		if !pin {
			return
		}
		for _, p := range pids {
			if out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(runtime.NumCPU()-1), strconv.Itoa(p)).CombinedOutput(); err != nil {
				b.Fatalf("taskset Redis %d: %v\n%s", p, err, out)
			}
		}
	}
	var backends []*scaleBackend
	if keep(b, "FAIRGATE_SCALE_BACKENDS", "redis") {
		rs, err := redistest.Start()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(rs.Close)
		backends = append(backends, &scaleBackend{name: "redis", addrs: []string{rs.Addr}, pids: []int{redisPID(rs)}, url: "redis://" + rs.Addr})
		pinRedis(backends[len(backends)-1].pids)
	}
	if keep(b, "FAIRGATE_SCALE_BACKENDS", "cluster") {
		cl, err := redistest.StartCluster(3, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		be := &scaleBackend{name: "cluster", addrs: cl.Addrs(), url: "redis-cluster://" + strings.Join(cl.Addrs(), ",")}
		for _, n := range cl.Nodes {
			be.pids = append(be.pids, redisPID(n))
		}
		pinRedis(be.pids)
		backends = append(backends, be)
	}

	fairgate := func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
		a := freeAddr(b)
		name, args := on(fg, "serve", "--config", cfg, "--store", be.url, "--listen", a)
		cmd := start(b, a, name, args...)
		return a, cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }
	}
	systems := []scaleSystem{
		{name: "take", path: "/v1/take", body: `{"key":"k%d","limit":1000000000,"period_ms":3600000}`, start: fairgate},
		{name: "check", path: "/v1/check", body: `{"tenant":"t%d","route":"GET /v1/search"}`, start: fairgate},
		// One hot tenant sends 10% of the requests, on a class without unit
		// grants and on one with grants of 50 (lease: 50).
		{name: "check-hot", path: "/v1/check", body: `{"tenant":"t%d","route":"GET /v1/search"}`, hot: `{"tenant":"hot","route":"GET /v1/search"}`, start: fairgate},
		{name: "check-hot-lease", path: "/v1/check", body: `{"tenant":"t%d","route":"GET /v1/search"}`, hot: `{"tenant":"hot","route":"GET /v1/leased"}`, start: fairgate},
		{name: "redis_rate", path: "/take", body: `{"key":"k%d","limit":1000000000,"period_ms":3600000}`,
			start: func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
				a := freeAddr(b)
				name, args := on(floor, "-listen", a, "-mode", "redis_rate", "-redis", strings.Join(be.addrs, ","))
				cmd := start(b, a, name, args...)
				return a, cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }
			}},
	}
	// The floors: the same HTTP handler deciding nothing, without Redis and
	// with one rueidis GET per request (auto-pipelined): what any fleet of
	// that many processes pays to serve, and to make one Redis call per
	// decision, on this machine.
	for _, mode := range []string{"floor", "floor+redis"} {
		systems = append(systems, scaleSystem{name: mode, path: "/take", body: `{"key":"k%d","limit":1000000000,"period_ms":3600000}`,
			start: func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
				a := freeAddr(b)
				name, args := on(floor, "-listen", a, "-mode", mode, "-redis", strings.Join(be.addrs, ","))
				cmd := start(b, a, name, args...)
				return a, cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }
			}})
	}
	if alt := os.Getenv("FAIRGATE_BENCH_ALT"); alt != "" { // an A/B: another build of fairgate, run the same way
		systems = append(systems, scaleSystem{name: "take-alt", path: "/v1/take", body: systems[0].body,
			start: func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
				a := freeAddr(b)
				name, args := on(alt, "serve", "--config", cfg, "--store", be.url, "--listen", a)
				cmd := start(b, a, name, args...)
				return a, cmd.Process.Pid, func() { cmd.Process.Kill(); cmd.Wait() }
			}})
	}
	if peer := os.Getenv("FAIRGATE_BENCH_ENVOY_RLS"); peer != "" {
		rt := rlsRuntime(b, dir)
		systems = append(systems, scaleSystem{name: "envoy-rls", path: "/json",
			body: `{"domain":"bench","descriptors":[{"entries":[{"key":"tenant","value":"t%d"}]}]}`,
			start: func(b *testing.B, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
				return startEnvoyRLS(b, peer, rt, be, on)
			}})
	}
	systems = slices.DeleteFunc(systems, func(s scaleSystem) bool { return !keep(b, "FAIRGATE_SCALE_SYSTEMS", s.name) })

	res := map[string][]scaleRun{}
	key := func(be, sys string, n int) string { return fmt.Sprintf("%s/%s/%d", be, sys, n) }
	for range rounds {
		for _, be := range backends {
			for _, sys := range systems {
				for _, n := range ns {
					r := runFleet(b, dir, be, sys, n, per, pace, on)
					res[key(be.name, sys.name, n)] = append(res[key(be.name, sys.name, n)], r)
				}
			}
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-8s %-15s %3s %9s %10s %10s %9s %9s %10s %8s %9s %9s %8s %7s\n", "backend", "system", "N", "req/s", "redis µs", "fleet µs", "cmds", "scripts", "script µs", "hottest", "redis sys", "fleet sys", "p99", "non2xx")
	for _, be := range backends {
		for _, sys := range systems {
			for _, n := range ns {
				rs := res[key(be.name, sys.name, n)]
				med := func(f func(scaleRun) float64) float64 {
					xs := make([]float64, len(rs))
					for i, r := range rs {
						xs[i] = f(r)
					}
					return median(xs)
				}
				fmt.Fprintf(&sb, "%-8s %-15s %3d %9.0f %10.1f %10.1f %9.2f %9.3f %10.1f %8.2f %9.2f %9.2f %8v %7.0f\n", be.name, sys.name, n,
					med(func(r scaleRun) float64 { return r.rps }), med(func(r scaleRun) float64 { return r.redisUs }),
					med(func(r scaleRun) float64 { return r.fleetUs }), med(func(r scaleRun) float64 { return r.calls }),
					med(func(r scaleRun) float64 { return r.scripts }), med(func(r scaleRun) float64 { return r.scriptUs }),
					med(func(r scaleRun) float64 { return r.hottest }),
					med(func(r scaleRun) float64 { return r.redisSys }), med(func(r scaleRun) float64 { return r.fleetSys }),
					time.Duration(med(func(r scaleRun) float64 { return float64(r.p99) })).Round(time.Microsecond),
					med(func(r scaleRun) float64 { return float64(r.non2xx) }))
			}
			// The ratios: the largest fleet over one instance, per
			// round, Redis and fleet CPU per decision.
			lo, hi := res[key(be.name, sys.name, ns[0])], res[key(be.name, sys.name, ns[len(ns)-1])]
			if len(ns) < 2 || len(lo) == 0 {
				continue
			}
			var rd, fl []float64
			for i := range lo {
				rd = append(rd, hi[i].redisUs/lo[i].redisUs)
				fl = append(fl, hi[i].fleetUs/lo[i].fleetUs)
			}
			fmt.Fprintf(&sb, "%s %s N=%d/N=%d: Redis µs per round %.2f, median %.2f×; fleet µs per round %.2f, median %.2f×\n",
				be.name, sys.name, ns[len(ns)-1], ns[0], rd, median(rd), fl, median(fl))
			b.ReportMetric(median(rd), be.name+"-"+sys.name+"-redis-x")
			b.ReportMetric(median(fl), be.name+"-"+sys.name+"-fleet-x")
		}
	}
	fmt.Print(sb.String()) // whole: a benchmark's log is cut at ten lines
}

// runFleet starts n instances of sys on be, drives them for d with
// scaleConns/n connections each (each its own wrk, its own key offset;
// each connection waiting pace ms between requests when pace > 0), and
// stops them.
func runFleet(b *testing.B, dir string, be *scaleBackend, sys scaleSystem, n int, d time.Duration, pace int, on func(string, ...string) (string, []string)) scaleRun {
	b.Helper()
	type inst struct {
		addr string
		pid  int
	}
	insts := make([]inst, n)
	for i := range n {
		a, pid, stop := sys.start(b, be, on)
		defer stop()
		insts[i] = inst{a, pid}
	}
	time.Sleep(500 * time.Millisecond) // let start-up work settle
	t := target{name: fmt.Sprintf("%s-%s", be.name, sys.name), body: sys.body, hot: sys.hot, pace: pace}
	scripts := make([]string, n)
	for i := range n {
		scripts[i] = t.wrkScript(b, dir, i*100000/n)
	}
	perNode := func() []time.Duration {
		ds := make([]time.Duration, len(be.pids))
		for i, p := range be.pids {
			ds[i] = procCPU(p)
		}
		return ds
	}
	instPids := make([]int, n)
	for i, x := range insts {
		instPids[i] = x.pid
	}
	rsys0, fsys0 := sysCalls(be.pids), sysCalls(instPids)
	fleet0, nodes0, stats0 := cpuOf(insts, func(x inst) int { return x.pid }), perNode(), commandStats(b, be.addrs)
	outs := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			wn, wa := on("wrk", "-t1", "-c"+strconv.Itoa(scaleConns/n), "-d"+d.String(), "--latency", "-s", scripts[i], "http://"+insts[i].addr+sys.path)
			out, err := exec.Command(wn, wa...).CombinedOutput()
			if err != nil {
				b.Errorf("wrk %s %d: %v\n%s", t.name, i, err, out)
			}
			outs[i] = out
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	fleet, nodes, stats := cpuOf(insts, func(x inst) int { return x.pid })-fleet0, perNode(), commandStats(b, be.addrs).minus(stats0)
	rsys, fsys := sysCalls(be.pids)-rsys0, sysCalls(instPids)-fsys0
	var redis, busiest time.Duration
	for i := range nodes {
		d := nodes[i] - nodes0[i]
		redis += d
		busiest = max(busiest, d)
	}
	var r scaleRun
	for i, out := range outs {
		w := parseWrk(b, fmt.Sprintf("%s %d", t.name, i), out)
		r.decisions += w.reqs
		r.non2xx += w.non2xx
		r.p99 = max(r.p99, w.p99)
	}
	dec := float64(r.decisions)
	r.rps = dec / d.Seconds()
	r.fleetUs = float64(fleet.Microseconds()) / dec
	r.redisUs = float64(redis.Microseconds()) / dec
	r.calls = float64(stats.calls) / dec
	r.scripts = float64(stats.scripts) / dec
	r.scriptUs = float64(stats.scriptUs) / dec
	r.hottest = float64(busiest) / float64(max(redis, 1))
	r.redisSys = float64(rsys) / dec
	r.fleetSys = float64(fsys) / dec
	return r
}

func cpuOf[T any](xs []T, pid func(T) int) time.Duration {
	var sum time.Duration
	for _, x := range xs {
		sum += procCPU(pid(x))
	}
	return sum
}

// sysCalls sums the read and write system calls (syscr + syscw in
// /proc/<pid>/io) the processes have made.
func sysCalls(pids []int) int64 {
	var n int64
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "syscr: "); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			} else if v, ok := strings.CutPrefix(line, "syscw: "); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// cmdStats is INFO commandstats summed over servers: every command's
// calls, and the script calls' count and time.
type cmdStats struct{ calls, scripts, scriptUs int64 }

func (s cmdStats) minus(o cmdStats) cmdStats {
	return cmdStats{s.calls - o.calls, s.scripts - o.scripts, s.scriptUs - o.scriptUs}
}

var cmdstatLine = regexp.MustCompile(`(?m)^cmdstat_([a-z_|]+):calls=(\d+),usec=(\d+)`)

// commandStats reads INFO commandstats of every server at addrs.
func commandStats(b *testing.B, addrs []string) cmdStats {
	var s cmdStats
	for _, a := range addrs {
		info, err := redistest.Do(a, "INFO", "commandstats")
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range cmdstatLine.FindAllStringSubmatch(info, -1) {
			calls, _ := strconv.ParseInt(m[2], 10, 64)
			us, _ := strconv.ParseInt(m[3], 10, 64)
			switch m[1] {
			case "info":
				continue // this reading's own
			case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
				s.scripts += calls
				s.scriptUs += us
			}
			s.calls += calls
		}
	}
	return s
}

// startEnvoyRLS starts envoyproxy/ratelimit at bin on the backend (a
// Cluster as REDIS_TYPE=cluster), serving the bench domain, and returns
// its /json address.
func startEnvoyRLS(b *testing.B, bin, runtime string, be *scaleBackend, on func(string, ...string) (string, []string)) (string, int, func()) {
	grpcAddr, httpAddr, debugAddr := freeAddr(b), freeAddr(b), freeAddr(b)
	_, port, _ := net.SplitHostPort(grpcAddr)
	_, httpPort, _ := net.SplitHostPort(httpAddr)
	_, debugPort, _ := net.SplitHostPort(debugAddr)
	typ := "single"
	if len(be.addrs) > 1 {
		typ = "cluster"
	}
	name, args := on(bin)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE="+typ, "REDIS_URL="+strings.Join(be.addrs, ","), "USE_STATSD=false", "LOG_LEVEL=warn",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port, "HOST=127.0.0.1", "PORT="+httpPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", httpAddr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			b.Fatalf("envoyproxy/ratelimit did not listen on %s within 20 s", httpAddr)
		}
	}
	return httpAddr, cmd.Process.Pid, stop
}

// envInts reads a comma-separated list of integers from the environment.
func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var xs []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, v)
		}
		xs = append(xs, n)
	}
	return xs
}

// keep reports whether the regexp in the environment variable name (none:
// everything) matches s.
func keep(b *testing.B, name, s string) bool {
	v := os.Getenv(name)
	if v == "" {
		return true
	}
	re, err := regexp.Compile(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return re.MatchString(s)
}
