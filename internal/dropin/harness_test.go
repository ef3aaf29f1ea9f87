package dropin_test

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/internal/statsdtest"
	"github.com/fairgate/fairgate/internal/testenv"
)

// target is a rate limit service binary, started as envoyproxy/ratelimit
// is: its environment and working directory, args the only flags.
type target struct {
	name string
	bin  string
	args []string
	// peer is envoyproxy/ratelimit itself, the control.
	peer bool
}

// targets are the control (when FAIRGATE_DROPIN_PEER names it) and fairgate.
func targets(t *testing.T) []target {
	var ts []target
	if p := os.Getenv("FAIRGATE_DROPIN_PEER"); p != "" {
		ts = append(ts, target{name: "envoyproxy-ratelimit", bin: p, peer: true})
	}
	return append(ts, target{name: "fairgate", bin: testenv.FairgateBinary(t), args: []string{"serve"}})
}

// env is a service's environment, as that service's settings name it.
type env map[string]string

// with returns a copy of e with kv (key, value, key, value…) set.
func (e env) with(kv ...string) env {
	out := env{}
	for k, v := range e {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// defaultSettings are the integration cases' own defaults: the runtime tree
// under the working directory, Redis over TCP. The listeners are on free
// loopback ports (set by start), and statistics go to a statsd listener
// over that service's default protocol (TCP), flushed every 100 ms, where
// the cases read them (there, from the in-process store).
func defaultSettings() env {
	return env{
		"RUNTIME_ROOT": "runtime/current", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "config",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
		"USE_STATSD": "true", "STATS_FLUSH_INTERVAL": "100ms",
	}
}

// redisSettings are makeSimpleRedisSettings there: the main Redis at main,
// the per-second one at perSecond, used when perSecondOn.
func redisSettings(main, perSecond string, perSecondOn bool, localCache int) env {
	return defaultSettings().with("BACKEND_TYPE", "redis", "REDIS_URL", main, "REDIS_PERSECOND_URL", perSecond,
		"REDIS_PERSECOND", strconv.FormatBool(perSecondOn), "LOCAL_CACHE_SIZE_IN_BYTES", strconv.Itoa(localCache))
}

// localhost is addr ("127.0.0.1:port") as those cases name it.
func localhost(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return "localhost:" + port
}

// service is one running target.
type service struct {
	t         *testing.T
	cmd       *exec.Cmd
	logs      *testenv.SyncBuffer
	grpcAddr  string
	dir       string
	stats     *statsdSink
	conn      *grpc.ClientConn
	rateLimit rlspb.RateLimitServiceClient
}

// freePort is a loopback port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// runtimeTree copies testdata/runtime (the integration cases' runtime tree)
// into a new working directory.
func runtimeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir("testdata/runtime", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, "runtime", strings.TrimPrefix(p, "testdata/runtime"))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// start runs tg in dir (a new runtime tree when "") with the environment
// s (and nothing else), its listeners on free loopback ports, and waits
// until its gRPC port accepts connections. It is killed at the test's end.
// A port free a moment ago can be bound by another test's process before
// tg binds it: a start that fails on "address already in use" is tried
// again on new ports, up to 5 times.
func (tg target) start(t *testing.T, dir string, s env) *service {
	t.Helper()
	if dir == "" {
		dir = runtimeTree(t)
	}
	var stats *statsdSink
	if s["USE_STATSD"] == "true" {
		stats = newStatsdSink(t)
		_, port, _ := net.SplitHostPort(stats.addr)
		s = s.with("STATSD_HOST", "127.0.0.1", "STATSD_PORT", port)
	}
	var sv *service
	for attempt := 1; sv == nil; attempt++ {
		s = s.with("HOST", "127.0.0.1", "PORT", freePort(t), "GRPC_HOST", "127.0.0.1", "GRPC_PORT", freePort(t),
			"DEBUG_HOST", "127.0.0.1", "DEBUG_PORT", freePort(t))
		sv = tg.launch(t, dir, s, attempt < 5)
	}
	sv.stats = stats
	conn, err := grpc.NewClient(sv.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sv.conn, sv.rateLimit = conn, rlspb.NewRateLimitServiceClient(conn)
	return sv
}

// launch starts tg once, as start does, and returns the service once its
// gRPC port accepts connections; nil when it exited because a port was
// taken and mayRetry.
func (tg target) launch(t *testing.T, dir string, s env, mayRetry bool) *service {
	t.Helper()
	sv := &service{t: t, logs: &testenv.SyncBuffer{}, dir: dir}
	sv.grpcAddr = "127.0.0.1:" + s["GRPC_PORT"]
	sv.cmd = exec.Command(tg.bin, tg.args...)
	sv.cmd.Dir = dir
	for k, v := range s {
		sv.cmd.Env = append(sv.cmd.Env, k+"="+v)
	}
	sv.cmd.Stdout, sv.cmd.Stderr = sv.logs, sv.logs
	sv.cmd.WaitDelay = 2 * time.Second
	if err := sv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { sv.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		sv.cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("%s's output:\n%s", tg.name, tail(sv.logs.String(), 4000))
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			if mayRetry && strings.Contains(sv.logs.String(), "address already in use") {
				t.Logf("%s: a port was taken before it bound it; starting again on new ports", tg.name)
				return nil
			}
			t.Fatalf("%s exited at start: %v\n%s", tg.name, sv.cmd.ProcessState, tail(sv.logs.String(), 4000))
		default:
		}
		if c, err := net.Dial("tcp", sv.grpcAddr); err == nil {
			c.Close()
			return sv
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s within 20s:\n%s", tg.name, sv.grpcAddr, tail(sv.logs.String(), 4000))
		}
	}
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// call asks ShouldRateLimit of domain with one descriptor per element of
// ds, each "k=v,k2=v2", and hits 1, failing the test on an error.
func (sv *service) call(domain string, ds ...string) *rlspb.RateLimitResponse {
	sv.t.Helper()
	r, err := sv.rateLimit.ShouldRateLimit(context.Background(), request(domain, 1, ds...))
	if err != nil {
		sv.t.Fatalf("ShouldRateLimit %s %v: %v", domain, ds, err)
	}
	return r
}

// statsdSink is a statsd server over TCP: counters summed, gauges last.
type statsdSink struct {
	addr     string
	mu       sync.Mutex
	counters map[string]int64
	gauges   map[string]int64
}

func newStatsdSink(t *testing.T) *statsdSink {
	t.Helper()
	srv := statsdtest.Listen(t, "tcp")
	s := &statsdSink{addr: srv.Addr, counters: map[string]int64{}, gauges: map[string]int64{}}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case l := <-srv.Lines:
				s.add(strings.TrimSuffix(l, "\n"))
			case <-done:
				return
			}
		}
	}()
	return s
}

// add records one line "name:value|type".
func (s *statsdSink) add(line string) {
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		return
	}
	val, typ, _ := strings.Cut(rest, "|")
	n, err := strconv.ParseFloat(val, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch typ {
	case "c":
		s.counters[name] += int64(n)
	case "g":
		s.gauges[name] = int64(n)
	}
}

// value is name's counter total or last gauge (0 when never sent).
func (s *statsdSink) value(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.counters[name]; ok {
		return v
	}
	return s.gauges[name]
}

// names lists every statistic received whose name contains sub.
func (s *statsdSink) names(sub string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n, v := range s.counters {
		if strings.Contains(n, sub) {
			out = append(out, fmt.Sprintf("%s=%d", n, v))
		}
	}
	for n, v := range s.gauges {
		if strings.Contains(n, sub) {
			out = append(out, fmt.Sprintf("%s=%d(g)", n, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// expect is the cases' reading of statistics at a checkpoint: it waits
// (at most 5 s) until each statistic of want has its value, then checks
// again after three flushes that none went past it.
func (sv *service) expect(what string, want map[string]int64) {
	sv.t.Helper()
	diff := func() string {
		var d []string
		for name, v := range want {
			if got := sv.stats.value(name); got != v {
				d = append(d, fmt.Sprintf("%s=%d (want %d)", name, got, v))
			}
		}
		sort.Strings(d)
		return strings.Join(d, ", ")
	}
	deadline := time.Now().Add(5 * time.Second)
	for diff() != "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if d := diff(); d != "" {
		sv.t.Errorf("%s: statistics %s; received: %s", what, d, sv.stats.names("ratelimit."))
	}
}
