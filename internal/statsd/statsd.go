// Package statsd sends counters to a statsd server over UDP, as
// envoyproxy/ratelimit does with USE_STATSD: counts are summed in memory
// and flushed every interval as "name:n|c" lines, packed into datagrams
// of at most 1432 bytes. A lost datagram loses its counts, as statsd
// always may; sending never blocks a caller.
package statsd

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// maxDatagram keeps a datagram within one Ethernet frame.
const maxDatagram = 1432

// Client sums counters and flushes them. It is safe for concurrent use.
type Client struct {
	conn net.Conn
	mu   sync.Mutex
	m    map[string]uint64
	stop chan struct{}
	done chan struct{}
}

// New returns a client sending to addr (host:port) every interval (10 s
// when 0). Close it to flush and stop.
func New(addr string, interval time.Duration) (*Client, error) {
	conn, err := net.Dial("udp", addr)
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = 10 * time.Second
	}
	c := &Client{conn: conn, m: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop(interval)
	return c, nil
}

// Add counts n under name.
func (c *Client) Add(name string, n uint64) {
	c.mu.Lock()
	c.m[name] += n
	c.mu.Unlock()
}

func (c *Client) loop(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.Flush()
		case <-c.stop:
			c.Flush()
			return
		}
	}
}

// Flush sends the counts summed since the last flush.
func (c *Client) Flush() {
	c.mu.Lock()
	m := c.m
	c.m = make(map[string]uint64, len(m))
	c.mu.Unlock()
	var buf []byte
	for name, n := range m {
		line := strconv.AppendUint(append([]byte(name), ':'), n, 10)
		line = append(line, "|c"...)
		if len(buf) > 0 && len(buf)+1+len(line) > maxDatagram {
			c.conn.Write(buf)
			buf = buf[:0]
		}
		if len(buf) > 0 {
			buf = append(buf, '\n')
		}
		buf = append(buf, line...)
	}
	if len(buf) > 0 {
		c.conn.Write(buf)
	}
}

// Close flushes and stops the client.
func (c *Client) Close() error {
	close(c.stop)
	<-c.done
	return c.conn.Close()
}
