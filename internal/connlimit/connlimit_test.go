package connlimit

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
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
