package rls

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/fairgate/fairgate/internal/connlimit"
)

// DefaultMaxCalls is how many calls the service holds at once unless
// Limits.MaxCalls says otherwise. A call holds its message, up to
// MaxMessage, while it runs: about 2 MiB of the process for a message of
// 1 MB, read and decoded (bench/RESULTS.md), so 128 calls of the largest
// messages hold some 250 MiB, under the 512 MiB of docs/service.md with
// room for the connections and the rest. Envoy's calls are small and
// answered within the store's deadline: 128 at once pass some 1,300
// calls a second even while every one waits the whole default deadline
// (100 ms).
const DefaultMaxCalls = 128

// Limits are what a [Bound] allows.
type Limits struct {
	// MaxCalls is how many calls may be in flight at once: gRPC calls of
	// any method (the rate limit service, health, reflection, an unknown
	// one) and /json requests together. Zero means DefaultMaxCalls.
	MaxCalls int
	// CallTimeout bounds each gRPC call from its headers to its end, its
	// message's arrival included, so that a caller that never sends its
	// message does not hold its place for ever: a call still running then
	// ends with DeadlineExceeded. Streams (health Watch, reflection) end
	// then too. Zero means none.
	CallTimeout time.Duration
}

// Bound bounds what the callers of the service hold at once, whoever they
// are: the calls in flight, counted when a gRPC call's headers arrive,
// before its message is read (gRPC reads a whole message, up to
// MaxMessage, before any handler or interceptor runs), and when a /json
// request starts, before its body is read; a call past the bound is
// refused at once, gRPC with ResourceExhausted and /json with 503. A call
// counts until its stream ends, however it ends (answered, refused by its
// handler, a message that does not decode or is too large, cancelled, its
// connection lost), so the count cannot leak.
//
// With [Bound.Listener] it also tells a connlimit.Listener which gRPC
// connections are idle (no call in flight), so that at the connection
// bound the one idle the longest is closed to make room.
//
// A Bound is safe for concurrent use; one serves one gRPC server.
type Bound struct {
	max     int64
	timeout time.Duration
	calls   atomic.Int64
	refused atomic.Int64

	mu    sync.Mutex
	conns map[string]*boundConn // by remote address
}

// NewBound returns a Bound with limits l.
func NewBound(l Limits) *Bound {
	n := l.MaxCalls
	if n <= 0 {
		n = DefaultMaxCalls
	}
	return &Bound{max: int64(n), timeout: l.CallTimeout, conns: map[string]*boundConn{}}
}

// InFlight is how many calls are in flight now.
func (b *Bound) InFlight() int { return int(b.calls.Load()) }

// Refused is how many calls were refused at the bound.
func (b *Bound) Refused() int64 { return b.refused.Load() }

// Max is the bound on calls in flight.
func (b *Bound) Max() int { return int(b.max) }

// acquire takes a place for a call, if there is one.
func (b *Bound) acquire() bool {
	for {
		n := b.calls.Load()
		if n >= b.max {
			b.refused.Add(1)
			return false
		}
		if b.calls.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (b *Bound) release() { b.calls.Add(-1) }

// refusal is the error of a call refused at the bound.
func (b *Bound) refusal() string {
	return fmt.Sprintf("rls: %d calls in flight, the most this server holds at once: try again shortly", b.max)
}

// ServerOption is the gRPC server option that counts every call when its
// headers arrive (a tap handle, which runs before the stream is served).
func (b *Bound) ServerOption() grpc.ServerOption { return grpc.InTapHandle(b.tap) }

// tap admits a call or refuses it, before its message is read. The call
// gives its place back when its context ends: the stream's, which gRPC
// cancels when the stream ends however it ends, or the deadline this
// adds, whichever comes first.
func (b *Bound) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if !b.acquire() {
		return nil, status.Error(codes.ResourceExhausted, b.refusal())
	}
	c := b.connOf(ctx)
	c.enter()
	cancel := context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); b.timeout > 0 && (!ok || time.Until(d) > b.timeout) {
		// Envoy's calls carry a deadline of their own (20 ms by
		// default), sooner: those need no timer more.
		ctx, cancel = context.WithTimeout(ctx, b.timeout)
	}
	context.AfterFunc(ctx, func() {
		cancel()
		c.leave()
		b.release()
	})
	return ctx, nil
}

// JSON wraps envoyproxy/ratelimit's /json handler h: a request takes a
// place before its body is read, and past the bound is answered 503 with
// Retry-After: 1 (429 would say OVER_LIMIT).
func (b *Bound) JSON(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !b.acquire() {
			w.Header().Set("Retry-After", "1")
			http.Error(w, b.refusal(), http.StatusServiceUnavailable)
			return
		}
		defer b.release()
		h(w, r)
	}
}

// Listener returns cl, the gRPC server's listener, as one that tells cl
// which of its connections are idle: each one from its start until its
// first call, and again whenever its last call in flight ends. Serve the
// gRPC server of this Bound on it.
func (b *Bound) Listener(cl *connlimit.Listener) net.Listener {
	return &boundListener{Listener: cl, cl: cl, b: b}
}

type boundListener struct {
	net.Listener
	cl *connlimit.Listener
	b  *Bound
}

// Accept accepts a connection (connlimit makes room for it) and marks it
// idle.
func (l *boundListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &boundConn{Conn: nc, cl: l.cl, b: l.b, key: nc.RemoteAddr().String()}
	l.b.mu.Lock()
	l.b.conns[c.key] = c
	l.b.mu.Unlock()
	l.cl.ConnState(nc, http.StateIdle)
	return c, nil
}

// boundConn is an accepted gRPC connection with its calls in flight.
type boundConn struct {
	net.Conn // connlimit's
	cl       *connlimit.Listener
	b        *Bound
	key      string
	once     sync.Once

	mu    sync.Mutex
	calls int
}

// connOf is the connection a call's context came on, or nil (a server not
// served on a Bound's Listener).
func (b *Bound) connOf(ctx context.Context) *boundConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[p.Addr.String()]
}

// enter counts a call in flight on c: c is not idle.
func (c *boundConn) enter() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls++; c.calls == 1 {
		c.cl.ConnState(c.Conn, http.StateActive)
	}
}

// leave ends a call on c: with none left, c is idle.
func (c *boundConn) leave() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls--; c.calls == 0 {
		c.cl.ConnState(c.Conn, http.StateIdle)
	}
}

// Close closes the connection and forgets it.
func (c *boundConn) Close() error {
	c.once.Do(func() {
		c.b.mu.Lock()
		if c.b.conns[c.key] == c {
			delete(c.b.conns, c.key)
		}
		c.b.mu.Unlock()
	})
	return c.Conn.Close()
}

// NetConn is the connection under c (connlimit finds its own through it).
func (c *boundConn) NetConn() net.Conn { return c.Conn }
