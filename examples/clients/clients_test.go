package clients_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/internal/testwait"
)

// example is one client example: the runtime it needs, the oldest version
// it supports, and its app.
type example struct {
	dir     string   // under examples/clients
	runtime string   // the program that runs it
	version []string // args that make runtime exit 0 when it is recent enough
	minimum string   // that version, for the skip message
	app     string   // the example app, in dir
	unit    []string // args that run its unit tests, in dir
}

var (
	python = example{dir: "python", runtime: "python3", app: "app.py", minimum: "3.9", unit: []string{"-m", "unittest", "-v"},
		version: []string{"-c", "import sys; sys.exit(sys.version_info < (3, 9))"}}
	node = example{dir: "node", runtime: "node", app: "app.js", minimum: "18", unit: []string{"--test"},
		version: []string{"-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 18 ? 0 : 1)"}}
)

// internalToken is fairgate's internal token in these tests: /v1/check
// needs it.
const internalToken = "internal-token-for-the-clients"

// need skips t unless ex's runtime, recent enough, is installed.
func need(t *testing.T, ex example) {
	t.Helper()
	testenv.External(t, ex.runtime+" and a fairgate binary it builds")
	bin, err := exec.LookPath(ex.runtime)
	if err != nil {
		t.Skipf("%s is not installed: install it (Debian: apt-get install %s) to run the %s example's test", ex.runtime, map[string]string{"python3": "python3", "node": "nodejs"}[ex.runtime], ex.dir)
	}
	if err := exec.Command(bin, ex.version...).Run(); err != nil {
		t.Skipf("%s is older than %s, the oldest the %s example supports", ex.runtime, ex.minimum, ex.dir)
	}
}

// process is a program the test started, ended at the test's end.
type process struct {
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer // its output, the line awaited included
	done chan struct{}
}

// start runs name args… in dir with env added, and returns once a line
// of its output matches ready, with the line's first submatch.
func start(t *testing.T, dir string, env []string, ready *regexp.Regexp, name string, args ...string) (*process, string) {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); pw.Close(); close(p.done) }()
	t.Cleanup(p.stop)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(p.logs, sc.Text())
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select { // the first such line only
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(p.logs, pr)
	}()
	select {
	case s := <-found:
		return p, s
	case <-p.done:
		t.Fatalf("%s exited before it was ready: %s", name, p.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not ready within 30 s: %s", name, p.logs.String())
	}
	return nil, ""
}

// stop ends p and waits for it.
func (p *process) stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// waitLog waits for a line of p's output holding what (written before
// the answer that shows it, read by the test a moment later).
func (p *process) waitLog(t *testing.T, what string) {
	t.Helper()
	testwait.EventuallyNil(t, 10*time.Second, fmt.Sprintf("%q in the log", what), func() error {
		if !strings.Contains(p.logs.String(), what) {
			return fmt.Errorf("the log:\n%s", p.logs.String())
		}
		return nil
	})
}

var servingLine = regexp.MustCompile(`"msg":"serving","listen":"([^"]+)"`)

// startFairgate runs `fairgate serve` on fairgate.yaml with the internal
// token, and args, and returns it with its address.
func startFairgate(t *testing.T, args ...string) (*process, string) {
	t.Helper()
	cfg, err := filepath.Abs("fairgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--config", cfg}, args...)
	return start(t, t.TempDir(), []string{"FAIRGATE_DRAIN=0", "FAIRGATE_INTERNAL_TOKEN=" + internalToken}, servingLine, testenv.FairgateBinary(t), args...)
}

var listeningLine = regexp.MustCompile(`^listening on (http://\S+)`)

// startApp runs ex's app with env (its FAIRGATE_* settings) on a free
// port and returns it with its base URL.
func startApp(t *testing.T, ex example, env ...string) (*process, string) {
	t.Helper()
	bin, _ := exec.LookPath(ex.runtime)
	return start(t, ex.dir, append([]string{"PORT=0", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"}, env...), listeningLine, bin, ex.app)
}

// deadAddr is a loopback address where nothing listens (a moment ago).
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return ln.Addr().String()
}

type answer struct {
	code   int
	header http.Header
	body   map[string]any
}

var client = &http.Client{Timeout: 10 * time.Second}

// get asks the app at base for path as the holder of token (none: ""),
// and with hdr (name, value, …).
func get(t *testing.T, method, url, token string, hdr ...string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header}
	json.Unmarshal(b, &a.body)
	return a
}

func (a answer) String() string {
	return fmt.Sprintf("%d %v %v", a.code, a.header, a.body)
}

// spoof are headers a client could send to pass as tenant-b: the
// middleware takes the tenant from the app's authentication, never these.
var spoof = []string{"X-Tenant", "tenant-b", "X-Fairgate-Tenant", "tenant-b", "X-Api-Key", "token-b"}

func TestPython(t *testing.T) { testExample(t, python) }
func TestNode(t *testing.T)   { testExample(t, node) }

func testExample(t *testing.T, ex example) {
	need(t, ex)
	t.Run("unit tests", func(t *testing.T) {
		cmd := exec.Command(ex.runtime, ex.unit...)
		cmd.Dir, cmd.Env = ex.dir, append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", ex.runtime, strings.Join(ex.unit, " "), err, out)
		}
	})
	t.Run("limits", func(t *testing.T) { testLimits(t, ex) })
	t.Run("store out", func(t *testing.T) { testStoreOut(t, ex) })
	t.Run("unreachable", func(t *testing.T) { testUnreachable(t, ex) })
	t.Run("connections", func(t *testing.T) { testConnections(t, ex) })
	t.Run("long route", func(t *testing.T) { testLongRoute(t, ex) })
}

// testLongRoute: a tenant over its limit cannot get through by a long
// path. The path is the client's, and its encoding in the check's body
// (Python quotes '"' as %22, JSON escapes it as \") made a body over
// fairgate's 64 KiB, answered 413, which the app (failing open) took for
// fairgate unreachable and served unlimited. Now a route over 8 KiB is
// answered 414 without asking, and a route within it still limited.
func testLongRoute(t *testing.T, ex example) {
	_, addr := startFairgate(t)
	// Node reads request lines of 16 KiB by default: let it read the
	// attack's, to show the middleware, not node, refuses it.
	_, base := startApp(t, ex, "FAIRGATE_URL=http://"+addr, "FAIRGATE_TOKEN="+internalToken, "NODE_OPTIONS=--max-http-header-size=131072")
	for i := range 4 {
		a := get(t, "GET", base+"/hello", "token-a")
		if want := map[bool]int{true: 429, false: 200}[i == 3]; a.code != want {
			t.Fatalf("tenant-a's request %d: %v; want %d", i+1, a, want)
		}
	}
	// The request line is sent raw: an HTTP client would encode the '"'.
	raw := func(path string) int {
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: app\r\nAuthorization: Bearer token-a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("POST of a %d-byte path: %v", len(path), err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	long := "/orders/" + strings.Repeat(`"`, map[string]int{"python": 23000, "node": 40000}[ex.dir])
	if code := raw(long); code != 414 {
		t.Fatalf("tenant-a, over its limit, POST of a %d-byte path of '\"': %d; want 414 (200 is the limit bypassed)", len(long), code)
	}
	if code := raw("/orders/" + strings.Repeat(`"`, 2000)); code != 429 {
		t.Fatalf("tenant-a, over its limit, POST of a path of 2000 '\"' (within the bound): %d; want 429", code)
	}
}

// testLimits: against fairgate with its internal token, each verified
// tenant gets its own burst of 3 with the rate limit headers on the app's
// answers, then 429 with Retry-After and a problem body, whatever tenant
// the client's headers name; with fairgate stopped, the app configured to
// fail closed answers 503 with Retry-After 5.
func testLimits(t *testing.T, ex example) {
	fg, addr := startFairgate(t)
	app, base := startApp(t, ex, "FAIRGATE_URL=http://"+addr, "FAIRGATE_TOKEN="+internalToken, "FAIRGATE_ON_UNREACHABLE=closed")
	for i := range 3 {
		a := get(t, "GET", base+"/hello", "token-a", spoof...)
		if a.code != 200 || a.body["tenant"] != "tenant-a" || a.header.Get("RateLimit-Limit") != "3" || a.header.Get("RateLimit-Remaining") != strconv.Itoa(2-i) {
			t.Fatalf("tenant-a's request %d: %v; want 200 for tenant-a with RateLimit-Limit 3, RateLimit-Remaining %d (app: %s)", i+1, a, 2-i, app.logs.String())
		}
		if a.header.Get("RateLimit-Reset") == "" || a.header.Get("Content-Type") != "application/json" {
			t.Errorf("tenant-a's request %d: %v; want the app's own headers and RateLimit-Reset", i+1, a)
		}
	}
	a := get(t, "GET", base+"/hello", "token-a", spoof...)
	retry, err := strconv.Atoi(a.header.Get("Retry-After"))
	if a.code != 429 || err != nil || retry < 1 || retry > 10 || a.header.Get("RateLimit-Remaining") != "0" ||
		a.header.Get("Content-Type") != "application/problem+json" || a.body["status"] != 429.0 || a.body["policy"] != "free.tenant.1m" || a.body["retry_after_seconds"] != float64(retry) {
		t.Fatalf("tenant-a over its burst: %v; want 429, Retry-After of 1 to 10 s, RateLimit-Remaining 0 and a problem body", a)
	}
	if a := get(t, "GET", base+"/hello", "token-b"); a.code != 200 || a.body["tenant"] != "tenant-b" || a.header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("tenant-b after tenant-a's limit (and its requests naming tenant-b): %v; want 200 with its own burst untouched (RateLimit-Remaining 2)", a)
	}
	if a := get(t, "GET", base+"/hello", "", spoof[:4]...); a.code != 401 {
		t.Fatalf("no credential: %v; want the app's own 401", a)
	}
	fg.stop()
	a = get(t, "GET", base+"/hello", "token-b")
	if a.code != 503 || a.header.Get("Retry-After") != "5" || a.body["code"] != "rate_limiter_unavailable" {
		t.Fatalf("fairgate stopped, the app failing closed: %v; want 503 with Retry-After 5", a)
	}
	app.waitLog(t, "), failing closed")
	app.waitLog(t, "fairgate could not decide (")
}

// testStoreOut: with fairgate's store out, the app (failing open when
// fairgate itself is unreachable) answers as fairgate says: a route of a
// class failing open is served, one failing closed is 503 with
// Retry-After 5.
func testStoreOut(t *testing.T, ex example) {
	_, addr := startFairgate(t, "--store", "redis://"+deadAddr(t))
	_, base := startApp(t, ex, "FAIRGATE_URL=http://"+addr, "FAIRGATE_TOKEN="+internalToken)
	if a := get(t, "GET", base+"/hello", "token-a"); a.code != 200 || a.body["tenant"] != "tenant-a" || a.header.Get("RateLimit-Limit") != "3" {
		t.Fatalf("a route failing open, the store out: %v; want 200 with the fallback's headers", a)
	}
	a := get(t, "POST", base+"/orders", "token-a")
	if a.code != 503 || a.header.Get("Retry-After") != "5" || a.body["code"] != "rate_limiter_unavailable" || a.body["status"] != 503.0 {
		t.Fatalf("a route failing closed, the store out: %v; want fairgate's 503 with Retry-After 5", a)
	}
}

// testUnreachable: fairgate where nothing listens, or too slow to answer
// within the app's timeout: the app's setting decides, open (served,
// without rate limit headers) or closed (503, Retry-After 5).
func testUnreachable(t *testing.T, ex example) {
	slow, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	go func() {
		for {
			c, err := slow.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	for _, tt := range []struct{ name, addr, mode string }{
		{"nothing listening", deadAddr(t), "open"},
		{"nothing listening", deadAddr(t), "closed"},
		{"no answer", slow.Addr().String(), "open"},
		{"no answer", slow.Addr().String(), "closed"},
	} {
		app, base := startApp(t, ex, "FAIRGATE_URL=http://"+tt.addr, "FAIRGATE_ON_UNREACHABLE="+tt.mode, "FAIRGATE_TIMEOUT_MS=200")
		a := get(t, "GET", base+"/hello", "token-a")
		switch {
		case tt.mode == "open" && (a.code != 200 || a.body["tenant"] != "tenant-a" || a.header.Get("RateLimit-Limit") != ""):
			t.Errorf("%s, failing open: %v; want 200 without rate limit headers", tt.name, a)
		case tt.mode == "closed" && (a.code != 503 || a.header.Get("Retry-After") != "5"):
			t.Errorf("%s, failing closed: %v; want 503 with Retry-After 5", tt.name, a)
		}
		app.waitLog(t, "), failing "+tt.mode)
		app.waitLog(t, "fairgate could not decide (")
		app.stop()
	}
}

// testConnections: the app asks /v1/check with fairgate's internal token,
// the verified tenant and the route, over one keep-alive connection for
// many requests, and over a new one when fairgate has closed the idle one.
func testConnections(t *testing.T, ex example) {
	var conns atomic.Int64
	var mu sync.Mutex
	var bad []string
	fake := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Tenant, Route, IP string }
		err := json.NewDecoder(r.Body).Decode(&body)
		if r.URL.Path != "/v1/check" || r.Header.Get("Authorization") != "Bearer "+internalToken || err != nil ||
			body.Tenant != "tenant-a" || body.Route != "GET /hello" || body.IP != "127.0.0.1" {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%s %s %q %+v %v", r.Method, r.URL.Path, r.Header.Get("Authorization"), body, err))
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"allowed":true,"status":200,"reason":"allowed","policy":"p","retry_after_ms":0,"headers":{"RateLimit-Limit":"9"},"decisions":[]}`)
	}))
	fake.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	fake.Start()
	t.Cleanup(fake.Close)
	_, base := startApp(t, ex, "FAIRGATE_URL="+fake.URL, "FAIRGATE_TOKEN="+internalToken, "FAIRGATE_ON_UNREACHABLE=closed")
	for i := range 5 {
		if a := get(t, "GET", base+"/hello", "token-a", spoof...); a.code != 200 || a.header.Get("RateLimit-Limit") != "9" {
			t.Fatalf("request %d: %v; want 200 with the fake fairgate's headers", i+1, a)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 requests in turn opened %d connections to fairgate, want 1 kept alive", n)
	}
	fake.CloseClientConnections() // as fairgate closes an idle one
	if a := get(t, "GET", base+"/hello", "token-a"); a.code != 200 || a.header.Get("RateLimit-Limit") != "9" {
		t.Fatalf("after fairgate closed the idle connection: %v; want 200 over a new one", a)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("after fairgate closed the idle connection: %d connections in all, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("checks not as sent by the app for tenant-a's GET /hello with the token:\n%s", strings.Join(bad, "\n"))
	}
}
