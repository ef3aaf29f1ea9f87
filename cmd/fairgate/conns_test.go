package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/internal/rls"
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
	resp, err := http.Get(base + "/metrics")
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
