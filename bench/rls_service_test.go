package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/internal/redistest"
)

// rlsDomain is the benchmark's envoyproxy/ratelimit config: a tenant's
// limit and a route's under it, never reached.
const rlsDomain = `domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000000000}
`

// rlsRuntime writes envoyproxy/ratelimit's runtime directory under dir,
// with the bench domain, and returns its root.
func rlsRuntime(b *testing.B, dir string) string {
	runtime := filepath.Join(dir, "runtime")
	os.MkdirAll(filepath.Join(runtime, "ratelimit", "config"), 0o755)
	if err := os.WriteFile(filepath.Join(runtime, "ratelimit", "config", "bench.yaml"), []byte(rlsDomain), 0o600); err != nil {
		b.Fatal(err)
	}
	return runtime
}

// rlsService is one rate limit service process under test, on a Redis of
// its own.
type rlsService struct {
	name  string
	cmd   *exec.Cmd
	redis *redistest.Server
	conn  *grpc.ClientConn
	// httpAddr is where envoyproxy/ratelimit and fairgate in its place
	// serve /json and /healthcheck.
	httpAddr string
}

// startRLS starts bin with envoyproxy/ratelimit's environment (the same
// for both services: fairgate reads it in that service's place); the
// floors (name floor-*) take their address and Redis as flags.
func startRLS(b *testing.B, name, bin, runtime string) *rlsService {
	b.Helper()
	redistest.Need(b)
	r, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
	_, port, _ := net.SplitHostPort(grpcAddr)
	_, httpPort, _ := net.SplitHostPort(httpAddr)
	_, debugPort, _ := net.SplitHostPort(freeAddr(b))
	var cmd *exec.Cmd
	switch name {
	case "fairgate", "fairgate-alt":
		cmd = exec.Command(bin, "serve")
	case "floor-grpc":
		cmd = exec.Command(bin, "-listen", grpcAddr)
	case "floor-grpc+redis":
		cmd = exec.Command(bin, "-listen", grpcAddr, "-redis", r.Addr)
	default:
		cmd = exec.Command(bin)
	}
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+r.Addr, "USE_STATSD=false", "LOG_LEVEL=warn",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+port, "HOST=127.0.0.1", "PORT="+httpPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort,
		"FAIRGATE_INTERNAL_LISTEN=127.0.0.1:0", "FAIRGATE_ADMIN_LISTEN=127.0.0.1:0", "FAIRGATE_DRAIN=0")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	s := &rlsService{name: name, cmd: cmd, redis: r, httpAddr: httpAddr}
	s.conn, err = grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	c := rlspb.NewRateLimitServiceClient(s.conn)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := c.ShouldRateLimit(context.Background(), rlsRequest(0, 1)); err == nil {
			break
		} else if time.Now().After(deadline) {
			b.Fatalf("%s did not answer within 20s: %v", name, err)
		}
	}
	return s
}

func (s *rlsService) close() {
	s.conn.Close()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.redis.Close()
}

// rlsRequest is call i's request: one descriptor (the tenant's) or two
// (and the route's under it), over 10,000 tenants.
func rlsRequest(i, descriptors int) *rlspb.RateLimitRequest {
	t := "t" + strconv.Itoa(i%10_000)
	req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: t}}},
	}}
	if descriptors == 2 {
		req.Descriptors = append(req.Descriptors, &commonpb.RateLimitDescriptor{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "tenant", Value: t}, {Key: "path", Value: "/v1/search"}}})
	}
	return req
}

// procCPU is a process's used CPU (user + system) from /proc.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * (time.Second / 100) // CLK_TCK is 100 on Linux
}

// redisPID is the pid of a test Redis.
func redisPID(r *redistest.Server) int {
	info, _ := redistest.Do(r.Addr, "INFO", "server")
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// round is one measured run of a service.
type round struct {
	calls              int
	wall               time.Duration
	p99                time.Duration
	svcCPU, redisCPU   time.Duration
	decisionsPerCPUSec float64
}

// drive sends calls on streams goroutines over one connection for d.
func (s *rlsService) drive(b *testing.B, streams, descriptors int, d time.Duration) round {
	c := rlspb.NewRateLimitServiceClient(s.conn)
	rpid := redisPID(s.redis)
	svc0, red0 := procCPU(s.cmd.Process.Pid), procCPU(rpid)
	var next atomic.Int64
	lat := make([][]time.Duration, streams)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for g := range streams {
		wg.Go(func() {
			for time.Now().Before(end) {
				i := int(next.Add(1))
				t := time.Now()
				r, err := c.ShouldRateLimit(context.Background(), rlsRequest(i, descriptors))
				if err != nil || r.OverallCode != rlspb.RateLimitResponse_OK {
					b.Errorf("%s: %v %v", s.name, r, err)
					return
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	r := round{calls: len(all), wall: wall, svcCPU: procCPU(s.cmd.Process.Pid) - svc0, redisCPU: procCPU(rpid) - red0}
	if len(all) > 0 {
		r.p99 = all[len(all)*99/100]
	}
	r.decisionsPerCPUSec = float64(r.calls*descriptors) / (r.svcCPU + r.redisCPU).Seconds()
	return r
}

// BenchmarkRLSService drives fairgate's binary and envoyproxy/ratelimit's
// side by side, each on a Redis of its own, both started with the same
// envoyproxy/ratelimit environment and config directory, with one and two
// descriptors per call at 16 and 64 concurrent streams, rounds
// interleaved. It reports per service the calls/s, p99, and the CPU per
// decision of the service and of its Redis, read from /proc; and the
// ratio of decisions per CPU-second (service + Redis), fairgate over the
// peer. Beside them run two floors (cmd/rlsfloor): grpc-go answering
// without work, and grpc-go with one Redis script call of INCRBY and
// EXPIRE per descriptor: what no service built on them can go below. The
// peer is optional: FAIRGATE_BENCH_ENVOY_RLS names its binary
// (docs/rls.md says how to build it from a snapshot outside this repo).
// FAIRGATE_BENCH_ALT names another fairgate build to run beside this one
// (an A/B in one run); FAIRGATE_BENCH_NO_FLOORS=1 leaves the floors out.
//
//	cd bench && FAIRGATE_BENCH_ENVOY_RLS=/tmp/rl/ratelimit go test -run '^$' -bench RLSService -benchtime 1x -timeout 30m
func BenchmarkRLSService(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "fairgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fairgate")
	build.Dir = ".." // the main module, as a user builds it
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	runtime := rlsRuntime(b, dir)
	floor := filepath.Join(dir, "rlsfloor")
	if out, err := exec.Command("go", "build", "-o", floor, "./cmd/rlsfloor").CombinedOutput(); err != nil {
		b.Fatalf("go build rlsfloor: %v\n%s", err, out)
	}
	svcs := []*rlsService{startRLS(b, "fairgate", bin, runtime)}
	if peer := os.Getenv("FAIRGATE_BENCH_ENVOY_RLS"); peer != "" {
		svcs = append(svcs, startRLS(b, "envoyproxy-ratelimit", peer, runtime))
	}
	if alt := os.Getenv("FAIRGATE_BENCH_ALT"); alt != "" { // an A/B: another build of fairgate, beside it
		svcs = append(svcs, startRLS(b, "fairgate-alt", alt, runtime))
	}
	if os.Getenv("FAIRGATE_BENCH_NO_FLOORS") == "" {
		svcs = append(svcs, startRLS(b, "floor-grpc", floor, runtime), startRLS(b, "floor-grpc+redis", floor, runtime))
	}
	defer func() {
		for _, s := range svcs {
			s.close()
		}
	}()
	const rounds, per = 3, 4 * time.Second
	for _, descriptors := range []int{1, 2} {
		for _, streams := range []int{16, 64} {
			b.Run(fmt.Sprintf("descriptors=%d/streams=%d", descriptors, streams), func(b *testing.B) {
				res := make([][]round, len(svcs))
				for range rounds {
					for i, s := range svcs {
						res[i] = append(res[i], s.drive(b, streams, descriptors, per))
					}
				}
				for i, s := range svcs {
					med := func(f func(r round) float64) float64 {
						v := make([]float64, len(res[i]))
						for j, r := range res[i] {
							v[j] = f(r)
						}
						slices.Sort(v)
						return v[len(v)/2]
					}
					dec := func(r round) float64 { return float64(r.calls * descriptors) }
					b.ReportMetric(med(func(r round) float64 { return float64(r.calls) / r.wall.Seconds() }), s.name+"-calls/s")
					b.ReportMetric(med(func(r round) float64 { return float64(r.p99.Microseconds()) }), s.name+"-p99-µs")
					b.ReportMetric(med(func(r round) float64 { return float64(r.svcCPU.Microseconds()) / dec(r) }), s.name+"-svc-µs/decision")
					b.ReportMetric(med(func(r round) float64 { return float64(r.redisCPU.Microseconds()) / dec(r) }), s.name+"-redis-µs/decision")
				}
				if len(svcs) > 1 && svcs[1].name == "envoyproxy-ratelimit" {
					ratios := make([]float64, rounds)
					for j := range rounds {
						ratios[j] = res[0][j].decisionsPerCPUSec / res[1][j].decisionsPerCPUSec
					}
					b.Logf("decisions per CPU-second, fairgate / envoyproxy-ratelimit, per round: %.2f", ratios)
					slices.Sort(ratios)
					b.ReportMetric(ratios[len(ratios)/2], "ratio-decisions/cpu-s")
				}
			})
		}
	}
}
