package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/store/memstore"
)

// exchange sends one request on the keep-alive connection c and reads the
// answer; open reports whether the server kept the connection (a second
// read then blocks instead of ending).
func exchange(t *testing.T, c net.Conn, br *bufio.Reader, path, headers string) (status int, closing bool) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: fairgate\r\n"+headers+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Close
}

// serverClosed reports whether the server closed c: a read ends with EOF
// (a kept connection would wait; the deadline only ends a broken test).
func serverClosed(t *testing.T, c net.Conn, br *bufio.Reader) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := br.ReadByte()
	return errors.Is(err, io.EOF)
}

// TestUnauthorizedClosesConnection: on the proxy's public listener an
// answer 401 closes the connection, so that a client without a valid
// credential cannot hold idle connections; a verified client keeps its
// keep-alive, and so does a trusted proxy, whose connection carries other
// clients. A 401 for a missing internal token closes too; /v1/authz's 401
// is about the gateway's client, not the gateway: its connection stays.
func TestUnauthorizedClosesConnection(t *testing.T) {
	up := upstreamEcho(t)
	for _, trusted := range []bool{false, true} {
		ip := auth.ClientIP{}
		if trusted {
			ip.Trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: up,
			ClientIP: ip, InternalToken: "internal-token-for-the-test", Metrics: http.NotFoundHandler(), ForwardAuth: config.ForwardAuth{Gateway: "traefik"}})
		if err != nil {
			t.Fatal(err)
		}
		pub := httptest.NewServer(s)
		defer pub.Close()
		internal := httptest.NewServer(s.Internal())
		defer internal.Close()
		dial := func(ts *httptest.Server) (net.Conn, *bufio.Reader) {
			c, err := net.Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		}
		c, br := dial(pub)
		if code, closing := exchange(t, c, br, "/v1/users/1", "X-API-Key: key-acme\r\n"); code != 200 || closing {
			t.Fatalf("trusted %v: a verified request: %d, Connection: close %v", trusted, code, closing)
		}
		if code, closing := exchange(t, c, br, "/v1/users/1", "X-API-Key: key-unknown\r\n"); code != 401 || closing == trusted {
			t.Fatalf("trusted %v: a 401 on the public listener: %d, Connection: close %v; want it closed only from an untrusted peer", trusted, code, closing)
		}
		if trusted {
			// The trusted proxy's connection goes on serving.
			if code, _ := exchange(t, c, br, "/v1/users/1", "X-API-Key: key-acme\r\n"); code != 200 {
				t.Fatalf("the trusted proxy's connection after a 401: %d", code)
			}
			continue
		}
		if !serverClosed(t, c, br) {
			t.Fatal("the server kept the connection after its 401")
		}
		c, br = dial(internal)
		if code, closing := exchange(t, c, br, "/metrics", ""); code != 401 || !closing || !serverClosed(t, c, br) {
			t.Fatalf("no internal token: %d, Connection: close %v; want 401 and the connection closed", code, closing)
		}
		c, br = dial(internal)
		if code, closing := exchange(t, c, br, "/v1/authz", "X-API-Key: key-unknown\r\nX-Forwarded-Uri: /v1/users/1\r\nX-Forwarded-Method: GET\r\n"); code != 401 || closing {
			t.Fatalf("forward auth's 401: %d, Connection: close %v; want the gateway's connection kept", code, closing)
		}
		if code, _ := exchange(t, c, br, "/healthz", ""); code != 200 {
			t.Fatalf("the gateway's connection after forward auth's 401: %d", code)
		}
	}
}
