package connlimit

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/internal/testcerts"
)

// pipes is a net.Listener whose connections the test hands it: the server
// ends of net.Pipe pairs.
type pipes struct {
	c      chan net.Conn
	closed chan struct{}
}

func newPipes() *pipes { return &pipes{c: make(chan net.Conn), closed: make(chan struct{})} }

func (p *pipes) Accept() (net.Conn, error) {
	select {
	case c := <-p.c:
		return c, nil
	case <-p.closed:
		return nil, net.ErrClosed
	}
}
func (p *pipes) Close() error   { close(p.closed); return nil }
func (p *pipes) Addr() net.Addr { return &net.TCPAddr{} }

// dial hands the listener a new connection and returns the client's end.
func (p *pipes) dial() net.Conn {
	client, server := net.Pipe()
	go func() { p.c <- server }()
	return client
}

// accepted is the result of one Accept.
type accepted struct {
	c   net.Conn
	err error
}

// acceptAsync calls l.Accept in the background.
func acceptAsync(l *Listener) chan accepted {
	out := make(chan accepted, 1)
	go func() {
		c, err := l.Accept()
		out <- accepted{c, err}
	}()
	return out
}

// closedByServer reports whether the server closed the client's end c.
func closedByServer(c net.Conn) bool {
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

// TestIdleReclaimedAtTheBound: at the bound a new connection closes the
// one idle the longest; with none idle it waits until one goes idle or
// closes; the count never passes the bound.
func TestIdleReclaimedAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 2)
		defer l.Close()
		var clients [2]net.Conn
		var conns [2]net.Conn
		for i := range 2 {
			clients[i] = p.dial()
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			conns[i] = c
		}
		// Both busy (new or active): the third waits.
		third := p.dial()
		got := acceptAsync(l)
		synctest.Wait()
		select {
		case a := <-got:
			t.Fatalf("a third connection was accepted over the bound of 2: %v", a.err)
		default:
		}
		// The second goes idle, then the first: the second, idle the
		// longest, makes the room.
		l.ConnState(conns[1], http.StateIdle)
		a := <-got
		if a.err != nil {
			t.Fatal(a.err)
		}
		if !closedByServer(clients[1]) || l.Open() != 2 || l.Reclaimed() != 1 {
			t.Fatalf("after reclaiming: the idle connection closed %v, %d open, %d reclaimed; want true, 2, 1", closedByServer(clients[1]), l.Open(), l.Reclaimed())
		}
		// An idle connection that becomes active again is not taken.
		l.ConnState(conns[0], http.StateIdle)
		l.ConnState(conns[0], http.StateActive)
		fourth := p.dial()
		got = acceptAsync(l)
		synctest.Wait()
		select {
		case a := <-got:
			t.Fatalf("an active connection was reclaimed: %v", a.err)
		default:
		}
		// A connection that closes makes room too.
		conns[0].Close()
		if a := <-got; a.err != nil || l.Open() != 2 || l.Reclaimed() != 1 {
			t.Fatalf("after a close: %v, %d open, %d reclaimed", a.err, l.Open(), l.Reclaimed())
		}
		// A late idle hook of a closed connection does not count it.
		l.ConnState(conns[0], http.StateIdle)
		if l.Idle() != 0 {
			t.Fatalf("a closed connection is idle: %d", l.Idle())
		}
		third.Close()
		fourth.Close()
	})
}

// TestCloseEndsWaitingAccept: closing the listener ends an Accept that
// waits for room.
func TestCloseEndsWaitingAccept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 1)
		p.dial()
		if _, err := l.Accept(); err != nil {
			t.Fatal(err)
		}
		p.dial()
		got := acceptAsync(l)
		synctest.Wait()
		l.Close()
		if a := <-got; !errors.Is(a.err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", a.err)
		}
	})
}

// TestConnStateThroughTLS: the hook finds the listener's connection under
// a TLS connection, as http.Server passes it.
func TestConnStateThroughTLS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 1)
		defer l.Close()
		client := p.dial()
		defer client.Close()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		l.ConnState(tls.Server(c, &tls.Config{}), http.StateIdle)
		if l.Idle() != 1 {
			t.Fatalf("%d idle, want the TLS connection's", l.Idle())
		}
		other := New(newPipes(), 1)
		other.ConnState(c, http.StateIdle)
		if other.Idle() != 0 {
			t.Fatal("a listener counted another's connection")
		}
	})
}

// TestSilentReclaimedAfterGrace: at the bound with none idle, a new
// connection closes the one silent (accepted, no request yet) the longest,
// once it has been silent for SilentGrace, and waits until then; one that
// sent its request is never taken, and an idle one goes first.
func TestSilentReclaimedAfterGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 3)
		defer l.Close()
		var clients, conns [3]net.Conn
		var since [3]time.Time
		for i := range 3 {
			clients[i] = p.dial()
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			conns[i], since[i] = c, time.Now()
			l.ConnState(c, http.StateNew)
			time.Sleep(10 * time.Millisecond)
		}
		// The first sends its request: silent are the second (the
		// longest) and the third.
		l.ConnState(conns[0], http.StateActive)
		if l.Silent() != 2 {
			t.Fatalf("%d silent, want 2", l.Silent())
		}
		fourth := p.dial()
		got := acceptAsync(l)
		synctest.Wait()
		select {
		case a := <-got:
			t.Fatalf("a silent connection was closed for room before its grace: %v", a.err)
		default:
		}
		a := <-got
		if a.err != nil {
			t.Fatal(a.err)
		}
		if at, want := time.Now(), since[1].Add(SilentGrace); !at.Equal(want) {
			t.Errorf("room made %v after the second went silent, want %v (its grace)", at.Sub(since[1]), SilentGrace)
		}
		if !closedByServer(clients[1]) || l.Open() != 3 || l.ReclaimedSilent() != 1 || l.Reclaimed() != 0 {
			t.Fatalf("after reclaiming: the silent connection closed %v, %d open, %d silent and %d idle reclaimed; want true, 3, 1, 0", closedByServer(clients[1]), l.Open(), l.ReclaimedSilent(), l.Reclaimed())
		}
		conns[1] = a.c
		l.ConnState(a.c, http.StateNew)
		// An idle connection goes before a silent one, even one long past
		// its grace.
		time.Sleep(10 * SilentGrace)
		l.ConnState(conns[0], http.StateIdle)
		fifth := p.dial()
		if a := <-acceptAsync(l); a.err != nil {
			t.Fatal(a.err)
		} else {
			defer a.c.Close()
		}
		if !closedByServer(clients[0]) || l.ReclaimedSilent() != 1 || l.Reclaimed() != 1 {
			t.Fatalf("with one idle: the idle connection closed %v, %d silent and %d idle reclaimed; want true, 1, 1", closedByServer(clients[0]), l.ReclaimedSilent(), l.Reclaimed())
		}
		// Connections that send their request are not taken, and a late
		// StateNew of a closed one does not count it.
		l.ConnState(conns[1], http.StateActive)
		l.ConnState(conns[2], http.StateActive)
		conns[0].Close()
		l.ConnState(conns[0], http.StateNew)
		if l.Silent() != 0 || l.Open() != 3 {
			t.Fatalf("%d silent, %d open; want 0, 3", l.Silent(), l.Open())
		}
		sixth := p.dial()
		got = acceptAsync(l)
		time.Sleep(10 * SilentGrace)
		synctest.Wait()
		select {
		case a := <-got:
			t.Fatalf("a connection serving its request was closed for room: %v", a.err)
		default:
		}
		conns[2].Close()
		if a := <-got; a.err != nil || l.ReclaimedSilent() != 1 || l.Reclaimed() != 1 {
			t.Fatalf("after a close: %v, %d silent and %d idle reclaimed; want 1, 1", a.err, l.ReclaimedSilent(), l.Reclaimed())
		}
		for _, c := range []net.Conn{fourth, fifth, sixth, clients[2]} {
			c.Close()
		}
	})
}

// TestServerServesPastSilentConnections: a real http.Server over TLS with
// HTTP/2, bound to 3 connections, one serving a long request and two
// silent (one that never starts its TLS handshake, one that finished it
// for h2 but never sent the HTTP/2 preface). A new client is served once
// the oldest silent one passes SilentGrace, before the server's own 5 s
// deadlines would have closed any; then the next silent one goes, and the
// connection serving a request is never taken. The time is synctest's.
func TestServerServesPastSilentConnections(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "connlimit"); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	realNow := time.Now() // the certificates' clock, not the bubble's
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 3)
		release := make(chan struct{})
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/long" {
					<-release
				}
				io.WriteString(w, r.Proto)
			}),
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			ConnState:         l.ConnState,
			ErrorLog:          log.New(io.Discard, "", 0),
			TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}},
		}
		served := make(chan error, 1)
		go func() { served <- srv.ServeTLS(l, "", "") }()
		clientTLS := &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}, Time: func() time.Time { return realNow }}
		// client is an HTTP/2 client on a connection of its own.
		client := func() *http.Client {
			return &http.Client{Transport: &http.Transport{
				ForceAttemptHTTP2: true,
				DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					c := tls.Client(p.dial(), clientTLS)
					return c, c.HandshakeContext(ctx)
				},
			}}
		}
		get := func(c *http.Client, path string) chan string {
			out := make(chan string, 1)
			go func() {
				resp, err := c.Get("https://localhost" + path)
				if err != nil {
					out <- err.Error()
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				out <- string(b)
			}()
			return out
		}
		busy := client()
		long := get(busy, "/long")
		synctest.Wait()
		// Silent: one that never starts its handshake, then one that
		// finishes it (h2) and sends nothing.
		start := time.Now()
		noHello := p.dial()
		synctest.Wait()
		noPreface := tls.Client(p.dial(), clientTLS)
		if err := noPreface.Handshake(); err != nil {
			t.Fatal(err)
		}
		if p := noPreface.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("negotiated %q, want h2", p)
		}
		synctest.Wait()
		if l.Open() != 3 || l.Silent() != 2 {
			t.Fatalf("%d open, %d silent; want 3, 2", l.Open(), l.Silent())
		}

		legit := client()
		if got := <-get(legit, "/"); got != "HTTP/2.0" {
			t.Fatalf("the new client got %q", got)
		}
		if at := time.Since(start); at >= 5*time.Second {
			t.Errorf("the new client was served after %v, when a deadline closed a silent connection; want it served once one passed its grace (%v)", at, SilentGrace)
		}
		if !closedByServer(noHello) {
			t.Error("the connection silent the longest is still open")
		}
		select {
		case got := <-long:
			t.Fatalf("the connection serving a request was closed: %q", got)
		default:
		}
		// The served client's connection is idle: it would go first, so
		// it starts a long request too.
		long2 := get(legit, "/long")
		synctest.Wait()
		if l.Idle() != 0 || l.Silent() != 1 {
			t.Fatalf("%d idle, %d silent; want 0, 1", l.Idle(), l.Silent())
		}
		legit2 := client()
		if got := <-get(legit2, "/"); got != "HTTP/2.0" {
			t.Fatalf("the second new client got %q", got)
		}
		if !closedByServer(noPreface) {
			t.Error("the connection without an HTTP/2 preface is still open")
		}
		if l.ReclaimedSilent() != 2 {
			t.Errorf("%d silent connections reclaimed, want 2", l.ReclaimedSilent())
		}
		close(release)
		for _, c := range []chan string{long, long2} {
			if got := <-c; got != "HTTP/2.0" {
				t.Fatalf("a long request got %q", got)
			}
		}
		for _, c := range []*http.Client{busy, legit, legit2} {
			c.CloseIdleConnections()
		}
		noHello.Close()
		noPreface.Close()
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Fatal(err)
		}
		synctest.Wait()
	})
}

// TestStalledBodiesReclaimed: a real http.Server over pipes, bound to 3
// connections, each serving a POST: one whose body comes at 8 KiB/s
// (twice MinBodyRate), one whose handler waits 10 s before it reads a body
// that has come whole (a slow upstream, not a slow client), and one whose
// client sent 1 byte of 100,000 and stopped. A new connection is accepted
// by closing the stalled one once its handler has waited BodyGrace for
// it, and only it; the time is synctest's.
func TestStalledBodiesReclaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipes()
		l := New(p, 3)
		read := make(chan string, 3)
		srv := &http.Server{
			Handler: l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/later" {
					time.Sleep(10 * time.Second)
				}
				b, err := io.ReadAll(r.Body)
				read <- fmt.Sprint(r.URL.Path, " ", len(b), " ", err)
			})),
			ConnState:   l.ConnState,
			ConnContext: l.ConnContext,
			ErrorLog:    log.New(io.Discard, "", 0),
		}
		go srv.Serve(l)
		defer srv.Close()
		post := func(path string, n int, first []byte, then func(c net.Conn)) net.Conn {
			c := p.dial()
			go func() {
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", path, n, first)
				then(c)
			}()
			return c
		}
		fast := post("/fast", 64<<10, nil, func(fast net.Conn) { // 8 KiB every second
			for range 8 {
				if _, err := fast.Write(make([]byte, 8<<10)); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		})
		later := post("/later", 5, []byte("hello"), func(net.Conn) {})
		stalled := post("/stalled", 100000, []byte("a"), func(net.Conn) {})
		synctest.Wait()
		start := time.Now()
		fourth := p.dial()
		go io.WriteString(fourth, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if !closedByServer(stalled) {
			t.Fatal("the stalled connection was not closed")
		}
		if waited := time.Since(start); waited < BodyGrace || waited > BodyGrace+BodyGrace/4 {
			t.Errorf("room made after %v, want BodyGrace (%v) and a look", waited, BodyGrace)
		}
		if l.ReclaimedStalled() != 1 || l.ReclaimedSilent() != 0 || l.Reclaimed() != 0 {
			t.Fatalf("reclaimed stalled %d silent %d idle %d; want 1, 0, 0", l.ReclaimedStalled(), l.ReclaimedSilent(), l.Reclaimed())
		}
		if resp, err := http.ReadResponse(bufio.NewReader(fourth), nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("the new connection's GET: %v %v", resp, err)
		}
		got := []string{<-read, <-read} // the stalled handler's read fails; the GET's has nothing
		slices.Sort(got)
		if got[0] != "/ 0 <nil>" || !strings.HasPrefix(got[1], "/stalled 1 ") || got[1] == "/stalled 1 <nil>" {
			t.Fatalf("the handlers read %q, want the GET's nothing and the stalled body's error", got)
		}
		for range 2 {
			go io.Copy(io.Discard, fast)
			go io.Copy(io.Discard, later)
		}
		want := map[string]bool{"/fast 65536 <nil>": true, "/later 5 <nil>": true}
		for range 2 {
			if got := <-read; !want[got] {
				t.Errorf("a handler read %q, want one of %v", got, want)
			}
		}
		for _, c := range []net.Conn{fast, later, fourth} {
			c.Close()
		}
	})
}
