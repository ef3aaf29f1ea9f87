// Package redistest starts real redis-server processes on free loopback
// ports for tests: standalone servers and Redis Clusters formed with
// `redis-cli --cluster create`. Each process runs in its own temporary
// directory with persistence off and is killed by Close.
//
// A missing redis-server or redis-cli is an error that says how to install
// them; tests never skip for it. They skip under -short only, the fast tier
// that starts no external program (internal/testenv): [Main] then starts
// nothing, [Shared], [SharedCluster] and [Need] skip the test that asks, and
// every starter refuses with an error that says to call [Need].
//
// Ports: a server is started on a port the kernel just gave out, which
// another process may take before the server binds it; the starter then
// tries another port. A port is never given out twice within a process (a
// killed server keeps its port for [Server.Restart]), a cluster node's bus
// port (port + 10000) is checked free too, and a server is up only when the
// process answering on its port is the one started.
package redistest

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/testenv"
)

// Server is one running redis-server.
type Server struct {
	// Addr is host:port on the loopback interface.
	Addr string
	// Port is the TCP port.
	Port int
	dir  string
	args []string
	// password is what the server asks its clients for ("" for none).
	password string
	cmd      *exec.Cmd
	done     chan struct{}
}

const installHint = "install it: `make test` does so as root, or run `apt-get install redis-server`"

// errShort is what every starter returns under -short.
var errShort = errors.New("redistest: -short starts no redis-server: call redistest.Need(t) at the start of the test, so that it skips")

// Need skips t under -short (the fast tier starts no redis-server): every
// test that starts a server, or uses one, calls it first, directly or
// through [Shared] and [SharedCluster].
func Need(t testing.TB) {
	t.Helper()
	testenv.External(t, "redis-server")
}

// binary returns the path of a Redis binary or an error saying how to get it.
func binary(name string) (string, error) {
	if testenv.Short() {
		return "", errShort
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redistest: %s not found on PATH: %s", name, installHint)
	}
	return p, nil
}

// FreePort returns a free loopback port that no other caller in this
// process, and no server started here, is given, for a test that needs one
// more port for a server (its TLS port). The port may still be taken by
// another process before it is bound.
func FreePort() (int, error) { return freePort(false) }

// given holds every port freePort gave out in this process.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// freePort asks the kernel for a free loopback port that this process has
// not given out before, and, with bus, whose cluster bus port (port +
// 10000, which a cluster node binds too) is free as well.
func freePort(bus bool) (int, error) {
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	// Ports turned down stay bound until the end, so that the kernel gives
	// another one each time.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if given.ports[port] || bus && (port+10000 > 65535 || given.ports[port+10000]) {
			continue
		}
		if bus {
			b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
			if err != nil {
				continue
			}
			b.Close()
			given.ports[port+10000] = true
		}
		given.ports[port] = true
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port in 100 tries")
}

// Start starts a standalone redis-server with extra arguments appended to
// the defaults (for example "--cluster-enabled", "yes").
func Start(extra ...string) (*Server, error) {
	bin, err := binary("redis-server")
	if err != nil {
		return nil, err
	}
	password := ""
	if i := slices.Index(extra, "--requirepass"); i >= 0 && i+1 < len(extra) {
		password = extra[i+1]
	}
	bus := slices.Contains(extra, "--cluster-enabled")
	return startOnFreePort(bin, "fairgate-redis-", bus, password, func(port int, dir string) ([]string, error) {
		return append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--protected-mode", "no", "--loglevel", "warning", "--logfile", dir + "/redis.log",
		}, extra...), nil
	})
}

// startOnFreePort starts bin with the arguments args gives for a free
// port (see freePort; bus for a cluster node) and a directory of its own,
// trying another port up to five times (a port free a moment ago may be
// taken by the time the server binds it). password is what the server
// asks its clients for.
func startOnFreePort(bin, dirPattern string, bus bool, password string, args func(port int, dir string) ([]string, error)) (*Server, error) {
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePort(bus)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		a, err := args(port, dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir, args: a, password: password}
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// start runs the server and waits until it answers on its port.
func (s *Server) start(bin string) error {
	s.cmd = exec.Command(bin, s.args...)
	s.cmd.Dir = s.dir
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	pid := "process_id:" + strconv.Itoa(s.cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(s.dir + "/redis.log")
			return fmt.Errorf("redistest: redis-server on port %d exited at start: %s", s.Port, strings.TrimSpace(string(log)))
		default:
		}
		// Up when the process answering is this one, not another that
		// took the port first (this one then exits, failing to bind). A
		// server asking for a password it was not given here (an ACL file)
		// cannot say which it is: its asking is taken for an answer.
		info, err := DoAuth(s.Addr, s.password, "INFO", "server")
		if err == nil && strings.Contains(info, pid+"\r\n") || err != nil && strings.HasPrefix(err.Error(), "NOAUTH") {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redistest: redis-server on port %d did not answer INFO within 10s", s.Port)
}

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// for it to exit. It keeps the directory so the server can be restarted.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Restart kills the server and starts it again on the same port, with an
// empty script cache and (persistence being off) no data.
func (s *Server) Restart() error {
	s.Kill()
	bin, err := binary("redis-server")
	if err != nil {
		return err
	}
	var lastErr error
	for range 50 { // the port may take a moment to be free again
		if lastErr = s.start(bin); lastErr == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return lastErr
}

// Pause stops the process with SIGSTOP: it keeps its connections but
// answers nothing, like a stalled server. Resume undoes it.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

// Close kills the server and removes its directory. It is idempotent.
func (s *Server) Close() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// Cluster is a running Redis Cluster on loopback ports.
type Cluster struct {
	// Nodes holds every node, masters first.
	Nodes []*Server
}

// Addrs returns every node's address, masters first.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// StartCluster starts masters × (1 + replicas) cluster-enabled servers
// (with the extra redis-server arguments) and joins them with `redis-cli
// --cluster create`, waiting until every node reports cluster_state:ok.
func StartCluster(masters, replicas int, extra ...string) (*Cluster, error) {
	return StartClusterAuth(masters, replicas, "", extra...)
}

// StartClusterAuth is StartCluster with nodes that ask their clients, and
// each other, for password ("" for none).
func StartClusterAuth(masters, replicas int, password string, extra ...string) (*Cluster, error) {
	cli, err := binary("redis-cli")
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	if password != "" {
		extra = append([]string{"--requirepass", password, "--masterauth", password}, extra...)
	}
	for range masters * (1 + replicas) {
		s, err := Start(append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}, extra...)...)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	var args []string
	if password != "" {
		args = []string{"--no-auth-warning", "-a", password}
	}
	args = append(append(args, "--cluster", "create"), c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, err := DoAuth(n.Addr, password, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				return nil, fmt.Errorf("redistest: cluster node %s not ok after 30s: %q %v", n.Addr, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A replica can take over only once it replicates: wait until there
	// are as many replicas as asked for, each with its link to its master up.
	for replicas > 0 {
		up := 0
		for _, n := range c.Nodes {
			info, err := DoAuth(n.Addr, password, "INFO", "replication")
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
				up++
			}
		}
		if up == masters*replicas {
			break
		}
		if time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("redistest: %d of %d replicas replicating after 30s", up, masters*replicas)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c, nil
}

// Close kills every node. It is idempotent.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}

// ScriptCalls sums the EVALSHA and EVAL calls the servers at addrs have
// served (INFO commandstats).
func ScriptCalls(addrs ...string) (int, error) {
	calls, _, err := ScriptStats(addrs...)
	return calls, err
}

// ScriptStats sums the EVALSHA and EVAL calls the servers at addrs have
// served and the µs they spent in them (INFO commandstats).
func ScriptStats(addrs ...string) (calls int, usec int64, err error) {
	for _, addr := range addrs {
		st, err := commandStats(addr)
		if err != nil {
			return 0, 0, err
		}
		for _, name := range []string{"evalsha", "eval"} {
			calls += int(st[name].calls)
			usec += st[name].usec
		}
	}
	return calls, usec, nil
}

// Commands sums, by command, the calls the servers at addrs have served
// (INFO commandstats): lower-case names, "command|subcommand" for a
// container command's, the commands scripts call included. Each call of
// Commands is itself an INFO call on each server, counted by the next.
func Commands(addrs ...string) (map[string]int, error) {
	out := map[string]int{}
	for _, addr := range addrs {
		st, err := commandStats(addr)
		if err != nil {
			return nil, err
		}
		for name, s := range st {
			out[name] += int(s.calls)
		}
	}
	return out, nil
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads INFO commandstats of the server at addr, by command.
func commandStats(addr string) (map[string]cmdStat, error) {
	info, err := Do(addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats line %q: %w", line, err)
			}
			if k == "calls" {
				st.calls = n
			} else {
				st.usec = n
			}
		}
		out[name] = st
	}
	return out, nil
}

// Do sends one command to addr over a fresh connection and returns a simple
// reply as a string: a status, an integer, or a bulk string. An error reply
// is returned as an error. For test set-up and inspection only.
func Do(addr string, args ...string) (string, error) { return DoAuth(addr, "", args...) }

// DoAuth is Do on a server that asks for password (none when "").
func DoAuth(addr, password string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := send(conn, r, "AUTH", password); err != nil {
			return "", err
		}
	}
	return send(conn, r, args...)
}

// send writes one command on conn and reads its reply from r.
func send(conn net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redistest: unsupported reply %q", line)
}

// shared holds what Main and MainWithCluster started for the package's
// tests.
var shared struct {
	server  *Server
	cluster *Cluster
}

// Main is a TestMain body for packages whose tests share one standalone
// server: it starts the server (for [Shared]), runs the tests, closes the
// server and returns the exit code. A server that cannot start fails the
// run loudly. Under -short it starts nothing and runs the tests: those
// that ask for the server skip.
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }
func Main(m interface{ Run() int }) int {
	flag.Parse() // testing.M.Run would parse them; -short is needed first
	if testenv.Short() {
		return m.Run()
	}
	s, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared.server = s
	defer s.Close()
	return m.Run()
}

// MainWithCluster is Main that also starts a 3-master Redis Cluster (for
// [SharedCluster]), for packages whose tests run on both.
//
//	func TestMain(m *testing.M) { os.Exit(redistest.MainWithCluster(m)) }
func MainWithCluster(m interface{ Run() int }) int {
	flag.Parse()
	if testenv.Short() {
		return m.Run()
	}
	c, err := StartCluster(3, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared.cluster = c
	defer c.Close()
	return Main(m)
}

// Shared returns the standalone server [Main] or [MainWithCluster]
// started for the package's tests; under -short it skips t (see [Need]).
// Each test keeps to keys of its own prefix: the server is shared.
func Shared(t testing.TB) *Server {
	t.Helper()
	Need(t)
	if shared.server == nil {
		t.Fatal("redistest: no shared server: the package's TestMain must return redistest.Main(m) or redistest.MainWithCluster(m)")
	}
	return shared.server
}

// SharedCluster returns the cluster [MainWithCluster] started for the
// package's tests; under -short it skips t (see [Need]).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	Need(t)
	if shared.cluster == nil {
		t.Fatal("redistest: no shared cluster: the package's TestMain must return redistest.MainWithCluster(m)")
	}
	return shared.cluster
}

// MasterName is the name Sentinels watch their master under.
const MasterName = "mymaster"

// Sentinels is a Redis master, its replica and three Redis Sentinel
// processes (redis-server in sentinel mode) watching them as MasterName,
// with a quorum of 2.
type Sentinels struct {
	Master, Replica *Server
	Sentinels       []*Server
	// Password is what the sentinels ask for; "" for none.
	Password string
}

// StartSentinels starts the set and waits until every sentinel knows the
// replica. downAfter is the sentinels' down-after-milliseconds.
func StartSentinels(downAfter time.Duration) (*Sentinels, error) {
	return StartSentinelsWith(downAfter, "")
}

// StartSentinelsWith is StartSentinels with sentinels that ask their
// clients (and each other) for password ("" for none).
func StartSentinelsWith(downAfter time.Duration, password string) (*Sentinels, error) {
	return StartSentinelsAuth(downAfter, password, "")
}

// StartSentinelsAuth is StartSentinelsWith with a master and replica that
// ask their clients for dataPassword ("" for none); the sentinels are
// given it to watch them.
func StartSentinelsAuth(downAfter time.Duration, password, dataPassword string) (*Sentinels, error) {
	s := &Sentinels{Password: password}
	var auth []string
	if dataPassword != "" {
		auth = []string{"--requirepass", dataPassword, "--masterauth", dataPassword}
	}
	var err error
	if s.Master, err = Start(auth...); err != nil {
		return nil, err
	}
	if s.Replica, err = Start(append(auth, "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))...); err != nil {
		s.Close()
		return nil, err
	}
	bin, err := binary("redis-server")
	if err != nil {
		s.Close()
		return nil, err
	}
	for range 3 {
		sn, err := startSentinel(bin, s.Master.Port, downAfter, password, dataPassword)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ready := true
		for _, sn := range s.Sentinels {
			n, err := DoAuth(sn.Addr, password, "SENTINEL", "CKQUORUM", MasterName)
			ready = ready && err == nil && strings.HasPrefix(n, "OK")
			if r, err := DoAuth(sn.Addr, password, "INFO", "sentinel"); err != nil || !strings.Contains(r, "slaves=1") || !strings.Contains(r, "sentinels=3") {
				ready = false
			}
		}
		if ready {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, errors.New("redistest: the sentinels did not find the replica and each other within 30s")
		}
	}
}

// startSentinel starts one sentinel watching the master on masterPort.
func startSentinel(bin string, masterPort int, downAfter time.Duration, password, dataPassword string) (*Server, error) {
	return startOnFreePort(bin, "fairgate-sentinel-", false, password, func(port int, dir string) ([]string, error) {
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s/redis.log\nprotected-mode no\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			port, dir, dir, MasterName, masterPort, MasterName, downAfter.Milliseconds(), MasterName, MasterName)
		if password != "" {
			conf += fmt.Sprintf("requirepass %s\nsentinel sentinel-pass %s\n", password, password)
		}
		if dataPassword != "" {
			conf += fmt.Sprintf("sentinel auth-pass %s %s\n", MasterName, dataPassword)
		}
		return []string{dir + "/sentinel.conf", "--sentinel"}, os.WriteFile(dir+"/sentinel.conf", []byte(conf), 0o600)
	})
}

// Addrs returns the sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	var out []string
	for _, sn := range s.Sentinels {
		out = append(out, sn.Addr)
	}
	return out
}

// MasterPort returns the port of the master the sentinels agree on now
// (from the first sentinel that answers).
func (s *Sentinels) MasterPort() (int, error) {
	for _, sn := range s.Sentinels {
		info, err := DoAuth(sn.Addr, s.Password, "INFO", "sentinel")
		if err != nil {
			continue
		}
		// master0:name=mymaster,status=ok,address=127.0.0.1:6379,slaves=1,sentinels=3
		_, rest, ok := strings.Cut(info, "address=")
		if !ok {
			continue
		}
		addr, _, _ := strings.Cut(rest, ",")
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		return strconv.Atoi(port)
	}
	return 0, errors.New("redistest: no sentinel answered")
}

// Close stops every process of the set.
func (s *Sentinels) Close() {
	for _, sn := range s.Sentinels {
		sn.Close()
	}
	if s.Replica != nil {
		s.Replica.Close()
	}
	if s.Master != nil {
		s.Master.Close()
	}
}
