package redisstore

import (
	"net"
	"time"

	"github.com/redis/rueidis"
)

// The connection settings every store URL gets (connOptions), chosen so
// that an idle instance costs Redis almost nothing: a dead connection is
// found by the kernel (TCP keep-alive and, on Linux, TCP_USER_TIMEOUT),
// which sends Redis no command, and the client's own PING of a silent
// connection is rare.
const (
	// pingEvery is how long a connection may stay silent before the client
	// PINGs it (rueidis's keep-alive, ClientOption.Dialer.KeepAlive): each
	// PING is a command Redis runs, on every connection of every
	// instance. It finds a server that keeps the connection but stops
	// answering; a peer gone away is found sooner by the kernel.
	pingEvery = 30 * time.Second
	// tcpKeepAlive is the kernel's keep-alive probing of an idle
	// connection: the first probe after a second of silence, then one a
	// second, the connection dropped after tcpKeepAliveProbes unanswered.
	tcpKeepAlive       = time.Second
	tcpKeepAliveProbes = 9
	// writeTimeout bounds how long a command waits on a connection for
	// Redis to take it and answer the client's PING (rueidis's
	// ConnWriteTimeout; the URL's write_timeout overrides it); on Linux it
	// is also the connection's TCP_USER_TIMEOUT: data Redis's host does not
	// acknowledge for that long drops the connection, so that calls sent
	// to a peer gone away (a host lost, a network cut) fail over to a new
	// connection within it, without waiting for a PING.
	writeTimeout = 10 * time.Second
	// cacheBytes bounds each connection's client-side cache: it holds only
	// the few reads made with DoCache (see connOptions).
	cacheBytes = 1 << 20
)

// connOptions sets opt's keep-alive and client-side caching.
//
// Client-side caching is on for the reads made with DoCache, and only
// them: the versions of the stored API keys and of the run-time overlay,
// and the job queues' depths. Redis tracks each such read (RESP3 CLIENT
// TRACKING, opt-in: CLIENT CACHING YES before the read) and pushes an
// invalidation on the same connection when the key changes (the client
// reads a connection that has made such a read at all times, so it
// applies an invalidation as it comes); a connection that breaks drops
// its whole cache. Every other command, every decision above all, goes to
// Redis: Do never answers from the cache. RESP2 (protocol=2) has no
// tracking on the connection itself: no cache then.
func connOptions(opt *rueidis.ClientOption) {
	opt.DisableCache = opt.AlwaysRESP2
	opt.CacheSizeEachConn = cacheBytes
	opt.Dialer.KeepAlive = pingEvery
	opt.Dialer.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: tcpKeepAlive, Interval: tcpKeepAlive, Count: tcpKeepAliveProbes}
	if opt.ConnWriteTimeout == 0 {
		opt.ConnWriteTimeout = writeTimeout
	}
	opt.Dialer.Control = userTimeout(opt.ConnWriteTimeout)
}
