// Package connlimit bounds the open connections of an HTTP server's
// listener.
//
// Every open connection holds memory (its goroutine and buffers, some
// 25 KB), idle keep-alive ones included, until the server's idle timeout:
// without a bound, a client that opens connections and leaves them idle
// grows the process at will. A [Listener] holds at most its Max open
// connections. At the bound it makes room by closing a connection that
// is not serving a request:
//
//   - the one idle the longest (between requests, keep-alive), else
//   - the one silent the longest, once it has been silent for
//     [SilentGrace]: accepted but with no request yet (nothing sent, a TLS
//     handshake or HTTP/2 preface not finished, or a first request's
//     headers not complete).
//
// So neither idle nor silent connections (anyone's) can lock new callers
// out: a flood of silent connections is turned over every SilentGrace
// instead of every header deadline. Only when every connection is serving
// a request, or is younger than the grace, do new connections wait, in
// the kernel's accept queue. Connections that are serving a request are
// bounded in time by the server's own read and write deadlines.
//
// The listener learns each connection's state from its [Listener.ConnState]
// hook, set as http.Server.ConnState; a connection the hook has not named
// is never closed for room. Time is read with time.Now (testing/synctest
// fakes it). A Listener is safe for concurrent use.
package connlimit

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// SilentGrace is how long a connection may stay silent (accepted, with
// no request yet) before it may be closed to make room at the bound:
// 500 ms. A client sends its request at once: in plain HTTP with the
// handshake's last packet or right after it, and behind TLS once its
// handshake is done, one round trip after the accept for TLS 1.3 and two
// for TLS 1.2 (HTTP/2's preface comes with the request). 500 ms covers a
// TLS 1.3 client with a round trip of up to 500 ms and a TLS 1.2 one of
// up to 250 ms (most paths between continents, not a geostationary
// satellite's); a slower one is closed only at the bound, where the
// alternative is that nobody new is served until a deadline. It is also
// what the bound costs an attacker: to keep every place silent and young
// it must open Max connections every SilentGrace (8,192 a second at the
// default bound of 4096), and a caller queued behind K of its
// connections waits about SilentGrace × K / Max.
const SilentGrace = 500 * time.Millisecond

// Listener is a net.Listener holding at most Max open connections.
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	room   *sync.Cond // signalled when a connection closes, goes idle or goes silent
	open   int
	idle   list.List // of *conn, idle the longest first
	silent list.List // of *conn, silent the longest first
	closed bool

	reclaimed, reclaimedSilent atomic.Int64
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
	// Guarded by l.mu: the list the connection is in (l.idle, l.silent or
	// none), its place there and since when; gone says it was released.
	in    *list.List
	elem  *list.Element
	since time.Time
	gone  bool
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

// Accept waits for a connection and for room for it: at the bound it
// closes the connection idle the longest, else the one silent the
// longest once silent for [SilentGrace], or, with neither, waits for one
// to close, go idle or pass the grace.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	for l.open >= l.max && !l.closed {
		victim, wait := l.victim(time.Now())
		if victim != nil {
			l.mu.Unlock()
			victim.Close() // its release makes the room
			l.mu.Lock()
			continue
		}
		var t *time.Timer
		if wait > 0 {
			t = time.AfterFunc(wait, func() {
				l.mu.Lock()
				l.room.Broadcast()
				l.mu.Unlock()
			})
		}
		l.room.Wait()
		if t != nil {
			t.Stop()
		}
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

// victim takes out of its list the connection to close for room at now:
// the one idle the longest, else the one silent the longest if silent for
// SilentGrace. With neither, wait is how long until the one silent the
// longest passes the grace (zero: none is silent). l.mu is held.
func (l *Listener) victim(now time.Time) (victim *conn, wait time.Duration) {
	if e := l.idle.Front(); e != nil {
		victim = e.Value.(*conn)
		l.reclaimed.Add(1)
	} else if e := l.silent.Front(); e != nil {
		c := e.Value.(*conn)
		if wait = c.since.Add(SilentGrace).Sub(now); wait > 0 {
			return nil, wait
		}
		victim = c
		l.reclaimedSilent.Add(1)
	} else {
		return nil, 0
	}
	l.move(victim, nil, now)
	return victim, 0
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
	l.move(c, nil, time.Time{})
	c.gone = true
	l.open--
	l.room.Signal()
	l.mu.Unlock()
}

// move puts c at the back of list to (nil: none) as of now, unless it is
// there already (it keeps its place) or was released. l.mu is held.
func (l *Listener) move(c *conn, to *list.List, now time.Time) {
	if c.gone || c.in == to {
		return
	}
	if c.in != nil {
		c.in.Remove(c.elem)
	}
	c.in, c.elem, c.since = to, nil, now
	if to != nil {
		c.elem = to.PushBack(c)
	}
}

// ConnState is the http.Server.ConnState hook that tells the listener
// which of its connections are idle (between requests) or silent (new,
// no request yet): the ones it may close for room.
func (l *Listener) ConnState(nc net.Conn, s http.ConnState) {
	c := l.find(nc)
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateIdle:
		l.move(c, &l.idle, time.Now())
	case http.StateNew:
		l.move(c, &l.silent, time.Now())
	default:
		l.move(c, nil, time.Time{})
		return
	}
	l.room.Signal()
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

// Silent is how many of them are silent now: accepted, no request yet.
func (l *Listener) Silent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.silent.Len()
}

// Reclaimed is how many idle connections were closed to make room.
func (l *Listener) Reclaimed() int64 { return l.reclaimed.Load() }

// ReclaimedSilent is how many silent connections were closed to make room.
func (l *Listener) ReclaimedSilent() int64 { return l.reclaimedSilent.Load() }

// Max is the bound.
func (l *Listener) Max() int { return l.max }
