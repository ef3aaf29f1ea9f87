// Package connlimit bounds the open connections of an HTTP server's
// listener.
//
// Every open connection holds memory (its goroutine and buffers, some
// 25 KB), idle keep-alive ones included, until the server's idle timeout:
// without a bound, a client that opens connections and leaves them idle
// grows the process at will. A [Listener] holds at most its Max open
// connections. At the bound it makes room by closing the connection idle
// the longest, so that idle connections (anyone's) can never lock new
// callers out; only when none is idle do new connections wait, in the
// kernel's accept queue, for one to close. Connections that are not idle
// are bounded in time by the server's own read and write deadlines.
//
// The listener learns which connections are idle from its [Listener.ConnState]
// hook, set as http.Server.ConnState. It is safe for concurrent use.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener holding at most Max open connections.
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	room   *sync.Cond // signalled when a connection closes or goes idle
	open   int
	idle   list.List // of *conn, idle the longest first
	closed bool

	reclaimed atomic.Int64
}

// New bounds ln to n open connections (at least 1).
func New(ln net.Listener, n int) *Listener {
	l := &Listener{Listener: ln, max: max(n, 1)}
	l.room = sync.NewCond(&l.mu)
	return l
}

// conn is an accepted connection, counted until its first Close.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
	// elem is its place in l.idle while idle; gone says it was released.
	// Both guarded by l.mu.
	elem *list.Element
	gone bool
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

// Accept waits for a connection and for room for it: at the bound it
// closes the connection idle the longest, or, with none idle, waits for
// one to close or go idle.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for l.open >= l.max && !l.closed {
		if e := l.idle.Front(); e != nil {
			victim := e.Value.(*conn)
			l.idle.Remove(e)
			victim.elem = nil
			l.mu.Unlock()
			victim.Close() // its release makes the room
			l.reclaimed.Add(1)
			l.mu.Lock()
			continue
		}
		l.room.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		nc.Close()
		return nil, net.ErrClosed
	}
	l.open++
	l.mu.Unlock()
	return &conn{Conn: nc, l: l}, nil
}

// Close closes the listener; an Accept waiting for room returns.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.room.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// release forgets c: its place is free.
func (l *Listener) release(c *conn) {
	l.mu.Lock()
	if c.elem != nil {
		l.idle.Remove(c.elem)
		c.elem = nil
	}
	c.gone = true
	l.open--
	l.room.Signal()
	l.mu.Unlock()
}

// ConnState is the http.Server.ConnState hook that tells the listener
// which of its connections are idle (between requests, reclaimable).
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c := l.find(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case s == http.StateIdle && c.elem == nil && !c.gone:
		c.elem = l.idle.PushBack(c)
		l.room.Signal()
	case s != http.StateIdle && c.elem != nil:
		l.idle.Remove(c.elem)
		c.elem = nil
	}
}

// find is the listener's connection under nc (a TLS connection wraps it),
// or nil.
func (l *Listener) find(nc net.Conn) *conn {
	for {
		switch x := nc.(type) {
		case *conn:
			if x.l == l {
				return x
			}
			return nil
		case interface{ NetConn() net.Conn }:
			nc = x.NetConn()
		default:
			return nil
		}
	}
}

// Open is how many connections are open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Idle is how many of them are idle now.
func (l *Listener) Idle() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.Len()
}

// Reclaimed is how many idle connections were closed to make room.
func (l *Listener) Reclaimed() int64 { return l.reclaimed.Load() }

// Max is the bound.
func (l *Listener) Max() int { return l.max }
