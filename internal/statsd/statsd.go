// Package statsd sends counters and gauges to a statsd server as
// envoyproxy/ratelimit does (through lyft/gostats, or its DogStatsD sink):
// counts are summed in memory and flushed every interval as
// "name:n|c\n" lines, gauges as "name:v|g\n", over TCP (that service's
// default, STATSD_PROTOCOL) or UDP, in datagrams of at most 1432 bytes.
//
// Tags (EXTRA_TAGS) are put on every line as there: in plain statsd
// folded into the name as gostats does ("name.__k1=v1.__k2=v2:1|c"); in
// DogStatsD as "name:1|c|#k1:v1,k2:v2", after the mogrifiers have renamed
// the stat.
//
// Sending never blocks a caller, nor a flush: flushed lines go into a
// bounded queue that one goroutine writes to the connection, dialling it
// again after an error (TCP), so a statsd server that is down, slow or
// gone costs at most the queue's bytes; lines that do not fit are dropped
// and counted (Dropped).
package statsd

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sizes of what is written at once: a UDP datagram stays within one
// Ethernet frame, as gostats's; a TCP write is up to 64 KiB.
const (
	maxDatagram = 1432
	maxTCPWrite = 64 << 10
)

// Defaults of Config's zero fields.
const (
	DefaultInterval  = 10 * time.Second
	DefaultMaxQueued = 4 << 20
	DefaultRetry     = 3 * time.Second
)

// Timeouts of the sender: dialling (TCP) and one write, as gostats's.
const (
	dialTimeout  = 1500 * time.Millisecond
	writeTimeout = time.Second
)

// Mogrifier renames the stats whose name matches Pattern, as
// envoyproxy/ratelimit's DogStatsD mogrifiers do: Name and the tags'
// values may use $0, $1, … for the match's groups. The first matching
// mogrifier applies.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	// Tags are the tags added, key to value.
	Tags map[string]string
}

// Config says where and how the client sends.
type Config struct {
	// Address is host:port.
	Address string
	// Protocol is "tcp" or "udp" (or net.Dial's tcp4, tcp6, udp4, udp6, as
	// gostats takes them); empty means "tcp", as gostats's default.
	Protocol string
	// Interval is how often counts are flushed; zero means 10 s.
	Interval time.Duration
	// Tags are put on every line (EXTRA_TAGS); a value's '.', ':' and '|'
	// become '_', as gostats does; an empty key or value is left out.
	Tags map[string]string
	// DogStatsD sends tags in DogStatsD's form (USE_DOG_STATSD), after
	// the Mogrifiers.
	DogStatsD  bool
	Mogrifiers []Mogrifier
	// MaxQueued bounds the bytes waiting to be sent; zero means 4 MiB.
	MaxQueued int
	// Retry is the wait before dialling again after an error; zero means
	// 3 s, as gostats's.
	Retry time.Duration
	// Log receives a WARN line when the connection fails, at most once per
	// Retry; nil means none.
	Log *slog.Logger
}

// Client sums counters, holds gauges and flushes them. It is safe for
// concurrent use.
type Client struct {
	cfg    Config
	suffix string // the plain form's serialized tags, or the DogStatsD "|#…"
	tags   []string

	mu     sync.Mutex
	m      map[string]uint64
	gauges []func(set func(name string, v uint64))

	qmu     sync.Mutex // held to send on q, and to close it
	qClosed bool
	q       chan []byte
	queued  atomic.Int64 // bytes in q
	dropped atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
	closed  sync.Once
}

// New returns a client sending to cfg.Address. It dials in the
// background: a statsd server that is not up yet is no error. Close it to
// flush and stop.
func New(cfg Config) (*Client, error) {
	switch cfg.Protocol {
	case "":
		cfg.Protocol = "tcp"
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("statsd: protocol %q: want tcp or udp (or tcp4, tcp6, udp4, udp6)", cfg.Protocol)
	}
	if _, _, err := net.SplitHostPort(cfg.Address); err != nil {
		return nil, fmt.Errorf("statsd: address %q: want host:port", cfg.Address)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = DefaultMaxQueued
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Mogrifiers) > 0 && !cfg.DogStatsD {
		return nil, errors.New("statsd: mogrifiers go with DogStatsD (USE_DOG_STATSD)")
	}
	for k := range cfg.Tags {
		if strings.ContainsAny(k, ":|,#=\n") {
			return nil, fmt.Errorf("statsd: tag key %q: want one without ':', '|', ',', '#', '=' or a line break", k)
		}
	}
	c := &Client{
		cfg: cfg, m: map[string]uint64{},
		q:    make(chan []byte, cfg.MaxQueued/64+1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Tags)) {
		v := cfg.Tags[k]
		if k == "" || v == "" {
			continue
		}
		v = tagValue(v)
		c.tags = append(c.tags, k+":"+v)
		c.suffix += ".__" + k + "=" + v
	}
	if cfg.DogStatsD {
		c.suffix = ""
	}
	go c.run()
	return c, nil
}

// tagValue is a tag's value with '.', ':' and '|' as '_', as gostats
// writes it; and a line break too, so that a value cannot start a line.
func tagValue(v string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', ':', '|', '\n', '\r':
			return '_'
		}
		return r
	}, v)
}

// Add counts n under name.
func (c *Client) Add(name string, n uint64) {
	c.mu.Lock()
	c.m[name] += n
	c.mu.Unlock()
}

// Gauges registers gen, called at each flush to set gauges through set
// (as gostats's stat generators are).
func (c *Client) Gauges(gen func(set func(name string, v uint64))) {
	c.mu.Lock()
	c.gauges = append(c.gauges, gen)
	c.mu.Unlock()
}

// Dropped is the lines dropped because the queue was full.
func (c *Client) Dropped() uint64 { return c.dropped.Load() }

// Flush queues the counts summed since the last flush (those not zero)
// and the gauges' values. It does not wait for the network.
func (c *Client) Flush() {
	c.mu.Lock()
	m := c.m
	c.m = make(map[string]uint64, len(m))
	gens := slices.Clone(c.gauges)
	c.mu.Unlock()
	limit := maxTCPWrite
	if strings.HasPrefix(c.cfg.Protocol, "udp") {
		limit = maxDatagram
	}
	var buf []byte
	lines := 0
	put := func(name string, v uint64, kind string) {
		line := c.line(name, v, kind)
		if len(buf) > 0 && len(buf)+len(line) > limit {
			c.enqueue(buf, lines)
			buf, lines = nil, 0
		}
		buf = append(buf, line...)
		lines++
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if m[name] != 0 {
			put(name, m[name], "|c")
		}
	}
	for _, g := range gens {
		g(func(name string, v uint64) { put(name, v, "|g") })
	}
	if len(buf) > 0 {
		c.enqueue(buf, lines)
	}
}

// line is one stat's line, with its tags, ending in '\n'.
func (c *Client) line(name string, v uint64, kind string) []byte {
	tags := c.tags
	if c.cfg.DogStatsD {
		for _, mg := range c.cfg.Mogrifiers {
			match := mg.Pattern.FindStringSubmatch(name)
			if match == nil {
				continue
			}
			name = expand(mg.Name, match)
			tags = slices.Clone(tags)
			for _, k := range slices.Sorted(maps.Keys(mg.Tags)) {
				tags = append(tags, k+":"+expand(mg.Tags[k], match))
			}
			break
		}
	}
	b := make([]byte, 0, len(name)+len(c.suffix)+24)
	b = append(b, name...)
	b = append(b, c.suffix...)
	b = append(b, ':')
	b = strconv.AppendUint(b, v, 10)
	b = append(b, kind...)
	if c.cfg.DogStatsD && len(tags) > 0 {
		b = append(b, "|#"...)
		b = append(b, strings.Join(tags, ",")...)
	}
	return append(b, '\n')
}

// groupRef is a mogrifier's $n.
var groupRef = regexp.MustCompile(`\$\d+`)

// expand puts match's groups in for the $n of s; a $n past the groups
// stays as it is, as there.
func expand(s string, match []string) string {
	return groupRef.ReplaceAllStringFunc(s, func(ref string) string {
		i, err := strconv.Atoi(ref[1:])
		if err != nil || i >= len(match) {
			return ref
		}
		return match[i]
	})
}

// enqueue puts b (lines lines) in the queue, or drops it when the queue
// is full or closed.
func (c *Client) enqueue(b []byte, lines int) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.qClosed {
		c.dropped.Add(uint64(lines))
		return
	}
	if c.queued.Add(int64(len(b))) > int64(c.cfg.MaxQueued) {
		c.queued.Add(-int64(len(b)))
		c.dropped.Add(uint64(lines))
		return
	}
	select {
	case c.q <- b:
	default:
		c.queued.Add(-int64(len(b)))
		c.dropped.Add(uint64(lines))
	}
}

// run flushes every interval and, in its own goroutine, sends.
func (c *Client) run() {
	defer close(c.done)
	sent := make(chan struct{})
	go c.send(sent)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.Flush()
		case <-c.stop:
			c.Flush()
			c.qmu.Lock()
			c.qClosed = true
			close(c.q)
			c.qmu.Unlock()
			<-sent
			return
		}
	}
}

// send writes the queue to the connection, dialling when there is none.
// A write that fails is dropped (and counted) and the connection closed;
// after Close it gives up on what it cannot send at once.
func (c *Client) send(sent chan<- struct{}) {
	defer close(sent)
	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var lastWarn time.Time
	gaveUp := false // stopping, and the last dial failed: drop the rest
	stopping := func() bool {
		select {
		case <-c.stop:
			return true
		default:
			return false
		}
	}
	for b := range c.q {
		c.queued.Add(-int64(len(b)))
		for conn == nil && !gaveUp {
			var err error
			conn, err = net.DialTimeout(c.cfg.Protocol, c.cfg.Address, dialTimeout)
			if err == nil {
				break
			}
			if time.Since(lastWarn) >= c.cfg.Retry {
				lastWarn = time.Now()
				c.cfg.Log.Warn("statsd: cannot connect; stats are queued, then dropped", slog.String("address", c.cfg.Address), slog.String("protocol", c.cfg.Protocol), slog.Any("error", err))
			}
			if stopping() {
				gaveUp = true
				break
			}
			select {
			case <-time.After(c.cfg.Retry):
			case <-c.stop:
			}
		}
		if conn == nil {
			c.dropped.Add(uint64(countLines(b)))
			continue
		}
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := conn.Write(b); err != nil {
			c.dropped.Add(uint64(countLines(b)))
			conn.Close()
			conn = nil
		}
	}
}

func countLines(b []byte) int { return strings.Count(string(b), "\n") }

// Close flushes and stops the client: what is queued is sent if the
// connection takes it at once, else dropped.
func (c *Client) Close() error {
	c.closed.Do(func() { close(c.stop) })
	<-c.done
	return nil
}
