package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testcerts"
	"github.com/fairgate/fairgate/internal/testwait"
)

// keepAlive opens a connection to addr, sends one GET of path with the
// extra header lines, reads the answer and leaves the connection open.
func keepAlive(t *testing.T, addr, path, headers string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: fairgate\r\n"+headers+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return c, br, resp
}

// closedByServer reports whether the server closed the connection (a read
// ends with EOF; the deadline only ends a broken test).
func closedByServer(c net.Conn, br *bufio.Reader) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// metric reads one sample of /metrics at base.
func metric(t *testing.T, base, name string) float64 {
	t.Helper()
	return metricVia(t, http.DefaultClient, base, name)
}

// metricVia reads one sample of /metrics at base with the client c.
func metricVia(t *testing.T, c *http.Client, base, name string) float64 {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestServeBoundsIdleConnections: with --max-connections 20, a client that
// opens 100 keep-alive connections and leaves them idle never holds more
// than 20: each new one is served by closing the one idle the longest,
// so idle connections cannot lock anyone out either.
func TestServeBoundsIdleConnections(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--max-connections", "20")
	defer sv.stop()
	type held struct {
		c  net.Conn
		br *bufio.Reader
	}
	var conns []held
	for i := range 100 {
		c, br, resp := keepAlive(t, sv.addr, "/healthz", "")
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("connection %d: %d, Connection: close %v", i, resp.StatusCode, resp.Close)
		}
		conns = append(conns, held{c, br})
	}
	base := "http://" + sv.addr
	if open := metric(t, base, `fairgate_connections_open{listener="main"}`); open > 20 {
		t.Errorf("%v connections open, want at most 20", open)
	}
	if n := metric(t, base, `fairgate_connections_reclaimed_total{listener="main",state="idle"}`); n < 80 {
		t.Errorf("%v idle connections reclaimed, want at least 80", n)
	}
	for i, h := range conns[:50] {
		if !closedByServer(h.c, h.br) {
			t.Fatalf("idle connection %d of the first 50 is still open", i)
		}
	}
}

// TestServeServesPastSilentConnections: with --max-connections 20 held by
// 20 connections that sent nothing, a new client's GET /healthz is served
// by closing the one silent the longest (once silent for
// connlimit.SilentGrace), not once the 5 s header deadline closes one:
// when it is answered the oldest is closed, the 19 others are still open,
// and the listener counts one silent connection reclaimed.
func TestServeServesPastSilentConnections(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--max-connections", "20")
	defer sv.stop()
	var silent []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	c, br, resp := keepAlive(t, sv.addr, "/healthz", "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /healthz past 20 silent connections: %d", resp.StatusCode)
	}
	if !closedByServer(silent[0], bufio.NewReader(silent[0])) {
		t.Fatal("the connection silent the longest is still open")
	}
	one := make([]byte, 1)
	for i, s := range silent[1:] {
		// One the server holds waits for the short deadline; the header
		// deadline would have closed them all at once.
		s.SetReadDeadline(time.Now().Add(time.Millisecond))
		var ne net.Error
		if _, err := s.Read(one); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("silent connection %d of 20 was closed too (%v): the new client waited for the header deadline", i+2, err)
		}
	}
	// The count, read on the served client's own connection (so that no
	// other is reclaimed for it).
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: fairgate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	mresp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`fairgate_connections_reclaimed_total{listener="main",state="silent"} 1` + "\n",
		`fairgate_connections_reclaimed_total{listener="main",state="idle"} 0` + "\n",
		`fairgate_connections_silent{listener="main"} 19` + "\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestServeClosesAfterUnauthorized: in proxy mode a client's connection
// that is answered 401 is closed at once (Connection: close) instead of
// idling for the 2-minute idle timeout; 100 such connections leave none
// open.
func TestServeClosesAfterUnauthorized(t *testing.T) {
	internal := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--internal-listen", internal)
	defer sv.stop()
	for i := range 100 {
		c, br, resp := keepAlive(t, sv.addr, "/v1/users/1", "X-API-Key: not-a-key\r\n")
		if resp.StatusCode != 401 || !resp.Close {
			t.Fatalf("connection %d: %d, Connection: close %v; want 401 and close", i, resp.StatusCode, resp.Close)
		}
		if !closedByServer(c, br) {
			t.Fatalf("connection %d stayed open after its 401", i)
		}
	}
	if open := metric(t, "http://"+internal, `fairgate_connections_open{listener="main"}`); open != 0 {
		t.Errorf("%v connections open on the public listener after 100 answered 401, want 0", open)
	}
}

// TestServeBoundsGRPC: the gRPC listener holds at most rls.DefaultMaxCalls
// calls in flight, each counted when its headers arrive, before its
// message is read (a client that sends calls of 1 MB messages and keeps
// hundreds in flight grew the process without bound): past them a call
// is refused with RESOURCE_EXHAUSTED, and calls pass again once one ends.
// Its connections are bounded by --max-connections, idle ones (no call in
// flight) closed to make room, as the HTTP listeners'.
func TestServeBoundsGRPC(t *testing.T) {
	grpcAddr := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--grpc-listen", grpcAddr, "--max-connections", "8")
	defer sv.stop()
	base := "http://" + sv.addr
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.9"}}},
	}}
	c := rlspb.NewRateLimitServiceClient(conn)
	// Calls that send their headers and not their message.
	var cancels []context.CancelFunc
	for range rls.DefaultMaxCalls {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels = append(cancels, cancel)
		if _, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlspb.RateLimitService_ShouldRateLimit_FullMethodName); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, base, "fairgate_rls_calls_in_flight") < rls.DefaultMaxCalls {
		if time.Now().After(deadline) {
			t.Fatalf("%v calls in flight, want %d", metric(t, base, "fairgate_rls_calls_in_flight"), rls.DefaultMaxCalls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ShouldRateLimit(ctx, req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call past %d in flight: %v, want RESOURCE_EXHAUSTED", rls.DefaultMaxCalls, err)
	}
	if n := metric(t, base, "fairgate_rls_calls_refused_total"); n != 1 {
		t.Errorf("fairgate_rls_calls_refused_total %v, want 1", n)
	}
	cancels[0]()
	for {
		r, err := c.ShouldRateLimit(ctx, req)
		if err == nil && r.OverallCode == rlspb.RateLimitResponse_OK {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("with a place free: %v %v", r, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, cancel := range cancels {
		cancel()
	}
	// 40 connections, each idle after one call: at most 8 stay open.
	for i := range 40 {
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		if _, err := rlspb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if open := metric(t, base, `fairgate_connections_open{listener="grpc"}`); open > 8 {
		t.Errorf("%v gRPC connections open, want at most 8", open)
	}
	if n := metric(t, base, `fairgate_connections_reclaimed_total{listener="grpc",state="idle"}`); n < 32 {
		t.Errorf("%v idle gRPC connections reclaimed, want at least 32", n)
	}
}

// TestServeServesPastUnreadBodies: with --max-connections 20, 20
// connections that each send GET /healthz with a Content-Length of
// 200,000, one byte of it and then nothing (a body /healthz never reads)
// are each answered at once with Connection: close and closed by the
// server, though their clients send nothing more (the server used to
// read the rest of such a body, at the client's pace, until the 30 s read
// deadline, holding the place meanwhile); a new client's GET /healthz is
// then served. Plain and over TLS.
func TestServeServesPastUnreadBodies(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "bodies"); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(caPEM)
	for _, tc := range []struct {
		name string
		args []string
		dial func(addr string) (net.Conn, error)
	}{
		{"plain", nil, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{"TLS", []string{"--tls-cert-file", dir + "/server.crt", "--tls-key-file", dir + "/server.key"}, func(addr string) (net.Conn, error) {
			return tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sv := startServe(t, append([]string{"--listen", "127.0.0.1:0", "--max-connections", "20"}, tc.args...)...)
			defer sv.stop()
			// The 20 at once: each is answered only after the drain grace
			// (connlimit.DrainGrace), which one after another adds up to 5 s.
			var wg sync.WaitGroup
			for i := range 20 {
				c, err := tc.dial(sv.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				wg.Go(func() {
					if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\na"); err != nil {
						t.Error(err)
						return
					}
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					br := bufio.NewReader(c)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("connection %d with an unread body: no answer: %v", i, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !resp.Close {
						t.Errorf("connection %d with an unread body: %d, Connection: close %v; want 200 and close", i, resp.StatusCode, resp.Close)
						return
					}
					if !closedByServer(c, br) {
						t.Errorf("connection %d with an unread body is still open after its answer", i)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			c, err := tc.dial(sv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != 200 || resp.Close {
				t.Fatalf("a new client after them: %v %v", resp, err)
			}
		})
	}
}

// TestServeReclaimsStalledUploads: in proxy mode, with --max-connections
// 20 held by 19 proxied uploads that each sent 1 byte of 100,000 and
// stalled (the upstream reading their bodies) and one request whose body
// has arrived and that waits for the upstream's answer, a new client's
// GET /healthz is served by closing the upload stalled the longest (once
// past connlimit.BodyGrace), not once the 30 s read deadline closes one:
// when it is answered the first upload's connection is closed, the 18
// others are still open, the request waiting for the upstream is answered
// when the upstream answers, and the listener counts one stalled
// connection reclaimed.
func TestServeReclaimsStalledUploads(t *testing.T) {
	started := make(chan struct{}, 32)
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first := make([]byte, 1)
		r.Body.Read(first)
		started <- struct{}{}
		b, err := io.ReadAll(r.Body)
		if r.URL.Path == "/up/wait" {
			<-release
		}
		fmt.Fprintf(w, "%d %v", len(b)+1, err)
	}))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(cfg, []byte(`default_plan: free
default_class: read
classes: {read: {}}
plans:
  free:
    - {limit: 100000, period: 1h}
anonymous:
  - name: upload
    route: "POST /up/{x...}"
    limits: [{limit: 100000, period: 1h, by: ip}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	internal := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--max-connections", "20", "--upstream", up.URL, "--internal-listen", internal, "--config", cfg)
	defer sv.stop()
	var conns []net.Conn
	defer func() { // before the server stops: it waits for requests
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(req string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", sv.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started: // the upstream has its first byte: fairgate waits for the next
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream did not get the request")
		}
		return c, bufio.NewReader(c)
	}
	waiting, wbr := open("POST /up/wait HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	var stalled []net.Conn
	for range 19 {
		c, _ := open("POST /up/stall HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\na")
		stalled = append(stalled, c)
		time.Sleep(10 * time.Millisecond) // the first stalls the longest
	}
	if _, _, resp := keepAlive(t, sv.addr, "/healthz", ""); resp.StatusCode != 200 {
		t.Fatalf("GET /healthz past 19 stalled uploads: %d", resp.StatusCode)
	}
	if !closedByServer(stalled[0], bufio.NewReader(stalled[0])) {
		t.Fatal("the upload stalled the longest is still open")
	}
	one := make([]byte, 1)
	for i, s := range append(stalled[1:], waiting) {
		s.SetReadDeadline(time.Now().Add(time.Millisecond))
		var ne net.Error
		if _, err := s.Read(one); !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("connection %d of the 19 others was closed too (%v)", i+2, err)
		}
	}
	once.Do(func() { close(release) })
	waiting.SetReadDeadline(time.Now().Add(10 * time.Second))
	wresp, err := http.ReadResponse(wbr, nil)
	if err != nil {
		t.Fatalf("the request waiting for the upstream: %v", err)
	}
	b, _ := io.ReadAll(wresp.Body)
	if wresp.StatusCode != 200 || string(b) != "5 <nil>" {
		t.Fatalf("the request waiting for the upstream: %d %q", wresp.StatusCode, b)
	}
	base := "http://" + internal
	for name, want := range map[string]float64{
		`fairgate_connections_reclaimed_total{listener="main",state="stalled"}`: 1,
		`fairgate_connections_reclaimed_total{listener="main",state="silent"}`:  0,
		`fairgate_connections_reclaimed_total{listener="main",state="idle"}`:    0,
	} {
		if got := metric(t, base, name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
}

// TestServeReclaimsStalledHTTP2Streams: over TLS with HTTP/2 and
// --max-connections 5, five connections that each carry a POST /v1/take
// stream whose body never comes (the second attacker review's h2 hold:
// about 100 bytes a place) do not lock a new client out: once the
// handlers have waited BodyGrace for the bodies, a connection of them is
// closed and the new client's GET /healthz is served; the listener counts
// that one connection reclaimed as stalled (not idle: an HTTP/2 connection
// whose first stream the server has not read yet is idle, so the test
// waits, over the streams' own connections, until none is).
func TestServeReclaimsStalledHTTP2Streams(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "h2"); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	roots.AppendCertsFromPEM(caPEM)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--max-connections", "5", "--tls-cert-file", dir+"/server.crt", "--tls-key-file", dir+"/server.key")
	defer sv.stop()
	var writers []*io.PipeWriter
	defer func() {
		for _, w := range writers {
			w.CloseWithError(errors.New("test over"))
		}
	}()
	var last *http.Transport
	for i := range 5 {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		// The stream is sent once its HEADERS frame is written on its own
		// connection, whose TLS handshake the server has answered.
		sent := make(chan struct{})
		trace := &httptrace.ClientTrace{WroteHeaders: func() { close(sent) }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", "https://"+sv.addr+"/v1/take", pr)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
		select { // one connection each, in turn
		case <-sent:
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %d: its headers are not sent within 10s", i+1)
		}
		last = tr
	}
	// Each stream's handler waits for its body: read over the last
	// stream's own connection (HTTP/2 carries the GET beside it), the five
	// connections are open and none is idle (an HTTP/2 connection is idle
	// until its first stream is read) or silent.
	via := &http.Client{Transport: last}
	for _, state := range []string{"open", "idle", "silent"} {
		want := map[string]float64{"open": 5}[state]
		name := `fairgate_connections_` + state + `{listener="main"}`
		testwait.Eventually(t, 10*time.Second, fmt.Sprintf("%s at %v", name, want), func() bool {
			return metricVia(t, via, "https://"+sv.addr, name) == want
		})
	}
	c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}}
	start := time.Now()
	resp, err := c.Get("https://" + sv.addr + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz behind 5 stalled HTTP/2 streams: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("GET /healthz: %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
	}
	t.Logf("served after %v", time.Since(start))
	for state, want := range map[string]float64{"stalled": 1, "silent": 0, "idle": 0} {
		name := `fairgate_connections_reclaimed_total{listener="main",state="` + state + `"}`
		if got := metricVia(t, c, "https://"+sv.addr, name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
}
