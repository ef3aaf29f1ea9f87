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
//     headers not complete), else
//   - the one whose request bodies arrive the slowest, once every request
//     it carries (one for HTTP/1, each stream for HTTP/2) waits for a body
//     its handler has waited for [BodyGrace] in all and that came at
//     under [MinBodyRate] over that wait: bodies trickled, or stopped.
//
// So neither idle, silent nor stalled connections (anyone's) can lock new
// callers out: a flood of silent connections is turned over every
// SilentGrace instead of every header deadline, and one of stalled bodies
// every BodyGrace. Only when every connection is serving a request whose
// body has arrived (or arrives fast enough), or is younger than the
// grace, do new connections wait, in the kernel's accept queue. A request
// being served is otherwise bounded in time by the server's own read and
// write deadlines.
//
// The listener learns each connection's state from its [Listener.ConnState]
// hook, set as http.Server.ConnState, and how its request bodies arrive
// from [Listener.Handler] wrapped around the server's handler (with
// [Listener.ConnContext] as http.Server.ConnContext); a connection the
// hooks have not named is never closed for room. Handler also answers a
// request whose body it did not read without reading the rest at the
// client's pace: past [DrainGrace] the connection is closed after the
// answer (Connection: close). Time is read with time.Now
// (testing/synctest fakes it). A Listener is safe for concurrent use.
package connlimit

import (
	"container/list"
	"context"
	"io"
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

// BodyGrace is how long a handler must have waited for a request's body,
// in all, before the connection may be closed for room at the bound for
// a body arriving under [MinBodyRate]: 2 s. A client that sends its body
// as it sends its request is never waited for that long; one on a link
// that stalls for seconds is closed only at the bound, where the
// alternative is that nobody new is served until the read deadline.
const BodyGrace = 2 * time.Second

// MinBodyRate is the rate, in bytes per second of the handler's waiting,
// under which a request body past [BodyGrace] counts as stalled: 4 KiB/s,
// a fifth of what a 2G (EDGE) link uploads. Time the handler spends not
// reading (a proxy's upstream taking the body slowly) does not count
// against the client. It is what a place costs an attacker at the bound:
// 4 KiB a second for each, 16 MiB a second for the default 4096.
const MinBodyRate = 4 << 10

// DrainGrace is how long, once the answer starts, the server may go on
// reading the rest of a request body the handler did not read (Go's
// server reads up to 256 KiB of it to keep the connection): 250 ms. A
// body the client has sent is drained at once and the connection kept;
// one still arriving past the grace ends the connection after the answer
// (Connection: close), instead of holding it, at the client's pace, until
// the read deadline.
const DrainGrace = 250 * time.Millisecond

// Listener is a net.Listener holding at most Max open connections.
type Listener struct {
	net.Listener
	max int

	mu     sync.Mutex
	room   *sync.Cond // signalled when a connection closes, goes idle or goes silent
	open   int
	idle   list.List                    // of *conn, idle the longest first
	silent list.List                    // of *conn, silent the longest first
	bodies map[*conn]map[*body]struct{} // the bodies each connection's handlers wait for
	closed bool

	reclaimed, reclaimedSilent, reclaimedStalled atomic.Int64
}

// New bounds ln to n open connections (at least 1).
func New(ln net.Listener, n int) *Listener {
	l := &Listener{Listener: ln, max: max(n, 1), bodies: map[*conn]map[*body]struct{}{}}
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
	// active is how many of its requests the handler serves now (one
	// for HTTP/1, its streams for HTTP/2), counted by Listener.Handler.
	active atomic.Int32
}

// Close closes the connection and gives its place back.
func (c *conn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

// Accept waits for a connection and for room for it: at the bound it
// closes the connection idle the longest, else the one silent the
// longest once silent for [SilentGrace], else the one with the slowest
// stalled body, or, with none of them, waits for one to close, go idle or
// pass its grace.
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
// SilentGrace, else the one whose body stalls the most. With none, wait
// is how long until one may qualify (zero: none can). l.mu is held.
func (l *Listener) victim(now time.Time) (victim *conn, wait time.Duration) {
	if e := l.idle.Front(); e != nil {
		victim = e.Value.(*conn)
		l.reclaimed.Add(1)
	} else if e := l.silent.Front(); e != nil && !now.Before(e.Value.(*conn).since.Add(SilentGrace)) {
		victim = e.Value.(*conn)
		l.reclaimedSilent.Add(1)
	} else {
		var bodyWait time.Duration
		if victim, bodyWait = l.stalled(now); victim != nil {
			delete(l.bodies, victim)
			l.reclaimedStalled.Add(1)
		} else {
			if e != nil {
				wait = e.Value.(*conn).since.Add(SilentGrace).Sub(now)
			}
			if len(l.bodies) > 0 && (wait == 0 || bodyWait < wait) {
				wait = bodyWait
			}
			return nil, wait
		}
	}
	l.move(victim, nil, now)
	return victim, 0
}

// stalled is the connection whose request bodies arrive the slowest, of
// those every request of which (one for HTTP/1, each stream for HTTP/2)
// waits for a body that its handler has waited for BodyGrace in all at
// under MinBodyRate, or nil, and else how long until one may qualify if
// its clients send nothing more (BodyGrace/4 when no handler waits for a
// body now). l.mu is held.
func (l *Listener) stalled(now time.Time) (worst *conn, wait time.Duration) {
	var worstRate float64
	wait = BodyGrace / 4
	for c, bs := range l.bodies {
		if int32(len(bs)) < c.active.Load() {
			continue // a request without a body, or with one arrived, is served
		}
		stalled, rate := true, 0.0 // rate: its fastest body's
		for b := range bs {
			waited, n := b.waited(now), b.n.Load()
			r := float64(n) / max(waited.Seconds(), 1e-9)
			if waited < BodyGrace || r >= MinBodyRate {
				stalled = false
				if b.since.Load() != 0 { // waiting now: it qualifies at this wait
					at := max(BodyGrace, time.Duration(float64(n)/MinBodyRate*float64(time.Second))+time.Millisecond)
					wait = min(wait, max(at-waited, time.Millisecond))
				}
			}
			rate = max(rate, r)
		}
		if stalled && (worst == nil || rate < worstRate) {
			worst, worstRate = c, rate
		}
	}
	return worst, wait
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
	delete(l.bodies, c)
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

// ReclaimedStalled is how many connections were closed to make room
// because their request body stalled.
func (l *Listener) ReclaimedStalled() int64 { return l.reclaimedStalled.Load() }

// Stalling is how many connections are reading a request body now.
func (l *Listener) Stalling() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bodies)
}

// connKey is the context key of a request's connection.
type connKey struct{}

// ConnContext is the http.Server.ConnContext hook that lets
// [Listener.Handler] find a request's connection.
func (l *Listener) ConnContext(ctx context.Context, nc net.Conn) context.Context {
	if c := l.find(nc); c != nil {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}

// Handler wraps h, the handler of the server on l, to watch how HTTP/1
// request bodies arrive: while the handler waits for a body the listener
// may close its connection for room once it stalls (see [BodyGrace]), and
// when the answer starts before the body was read whole, the server reads
// the rest for at most [DrainGrace] before it closes the connection after
// the answer, instead of at the client's pace (HTTP/1: an HTTP/2 stream's
// unread body is reset by the server). A connection of HTTP/2 streams is
// reclaimed only when every stream it carries is such a stalled body.
func (l *Listener) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*conn)
		if c != nil && c.l != l {
			c = nil
		}
		if c != nil {
			c.active.Add(1)
			defer c.active.Add(-1)
		}
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		b := &body{ReadCloser: r.Body}
		r.Body = b
		if c != nil {
			b.l, b.c = l, c
			l.mu.Lock()
			if !c.gone {
				if l.bodies[c] == nil {
					l.bodies[c] = map[*body]struct{}{}
				}
				l.bodies[c][b] = struct{}{}
			}
			l.mu.Unlock()
		}
		defer b.done()
		if r.ProtoMajor != 1 {
			h.ServeHTTP(w, r)
			return
		}
		dw := &drainWriter{ResponseWriter: w, b: b}
		defer dw.answering()
		h.ServeHTTP(dw, r)
	})
}

// body is a request body whose arrival the listener watches: how long
// its handler has waited in Read, and for how many bytes.
type body struct {
	io.ReadCloser
	l *Listener // with c, nil when the connection is not the listener's
	c *conn

	since  atomic.Int64 // time.Now().UnixNano() the pending Read began, 0: none
	wait   atomic.Int64 // nanoseconds spent in Reads that returned
	n      atomic.Int64 // bytes read
	ended  atomic.Bool  // read to its end, or the handler is done with it
	forget sync.Once
}

// Read reads from the body, timing the wait.
func (b *body) Read(p []byte) (int, error) {
	t := time.Now()
	b.since.Store(t.UnixNano())
	n, err := b.ReadCloser.Read(p)
	b.since.Store(0)
	b.wait.Add(int64(time.Since(t)))
	b.n.Add(int64(n))
	if err == io.EOF {
		b.ended.Store(true)
		b.done()
	}
	return n, err
}

// waited is how long the handler has waited for the body as of now,
// the Read pending included.
func (b *body) waited(now time.Time) time.Duration {
	w := time.Duration(b.wait.Load())
	if s := b.since.Load(); s != 0 {
		w += now.Sub(time.Unix(0, s))
	}
	return w
}

// done stops the listener's watch of the body: it has arrived, or the
// handler returned.
func (b *body) done() {
	if b.l == nil {
		return
	}
	b.forget.Do(func() {
		b.l.mu.Lock()
		if bs := b.l.bodies[b.c]; bs != nil {
			delete(bs, b)
			if len(bs) == 0 {
				delete(b.l.bodies, b.c)
			}
		}
		b.l.mu.Unlock()
	})
}

// drainWriter is a ResponseWriter that, once the answer starts (or the
// handler returns) before its request's body was read whole, lets the
// server read the rest for DrainGrace at most.
type drainWriter struct {
	http.ResponseWriter
	b       *body
	started bool
}

// answering bounds the reading of the rest of the body, once.
func (w *drainWriter) answering() {
	if w.started {
		return
	}
	w.started = true
	if !w.b.ended.Load() {
		// Past the deadline the server's read of the rest fails, and it
		// closes the connection after the answer (Connection: close when
		// the answer had not started).
		http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now().Add(DrainGrace))
	}
}

// WriteHeader starts the answer.
func (w *drainWriter) WriteHeader(code int) {
	if code >= 200 {
		w.answering()
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes the answer.
func (w *drainWriter) Write(p []byte) (int, error) {
	w.answering()
	return w.ResponseWriter.Write(p)
}

// Flush sends what the answer has so far.
func (w *drainWriter) Flush() {
	w.answering()
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the ResponseWriter under w, for http.ResponseController.
func (w *drainWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Max is the bound.
func (l *Listener) Max() int { return l.max }
