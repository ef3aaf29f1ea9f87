package statsd_test

import (
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/internal/statsdtest"
)

// listen starts a fake statsd server speaking proto (tcp or udp).
func listen(t *testing.T, proto string) *statsdtest.Server { return statsdtest.Listen(t, proto) }

// expect reads lines until every one of want has come, and fails on
// any other (each line ends in '\n', so a line cut in two or run into
// the next fails).
func expect(t *testing.T, f *statsdtest.Server, want ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, w := range want {
		missing[w+"\n"] = true
	}
	deadline := time.After(10 * time.Second)
	for len(missing) > 0 {
		select {
		case l := <-f.Lines:
			if !missing[l] {
				t.Fatalf("statsd received %q, want only %q", l, want)
			}
			delete(missing, l)
		case <-deadline:
			t.Fatalf("statsd did not receive %q", slices.Sorted(maps.Keys(missing)))
		}
	}
}

// TestProtocols: counters (summed, those not zero) and gauges reach a
// statsd server over TCP (gostats's default, envoyproxy/ratelimit's) and
// over UDP, one line each in statsd's format, in datagrams of at most
// 1432 bytes over UDP.
func TestProtocols(t *testing.T) {
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			f := listen(t, proto)
			c, err := statsd.New(statsd.Config{Address: f.Addr, Protocol: proto, Interval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Add("ratelimit.service.config_load_success", 1)
			c.Add("ratelimit.service.rate_limit.d.k.total_hits", 2)
			c.Add("ratelimit.service.rate_limit.d.k.total_hits", 3)
			c.Add("zero", 0)
			c.Gauges(func(set func(string, uint64)) { set("ratelimit.localcache.entryCount", 7) })
			want := []string{"ratelimit.service.config_load_success:1|c", "ratelimit.service.rate_limit.d.k.total_hits:5|c", "ratelimit.localcache.entryCount:7|g"}
			for i := range 200 { // more than one datagram
				name := fmt.Sprintf("ratelimit.service.rate_limit.d.key_%s%d.over_limit", strings.Repeat("x", i%40), i)
				c.Add(name, uint64(i+1))
				want = append(want, fmt.Sprintf("%s:%d|c", name, i+1))
			}
			c.Flush()
			expect(t, f, want...)
			c.Flush()
			// Gauges each flush; counters only when they moved.
			expect(t, f, "ratelimit.localcache.entryCount:7|g")
			c.Add("last", 1)
			c.Flush()
			expect(t, f, "last:1|c", "ratelimit.localcache.entryCount:7|g")
		})
	}
}

// TestTags: EXTRA_TAGS on every line as envoyproxy/ratelimit puts them:
// folded into the name in plain statsd (gostats's ".__k=v", keys sorted,
// '.', ':' and '|' of a value as '_'); as "|#k:v,…" in DogStatsD, after
// the mogrifiers (its README's example).
func TestTags(t *testing.T) {
	tags := map[string]string{"version": "1.2.3", "env": "prod", "empty": ""}
	mog := []statsd.Mogrifier{{
		Pattern: regexp.MustCompile(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`),
		Name:    "ratelimit.service.rate_limit.$3",
		Tags:    map[string]string{"domain": "$1", "descriptor": "$2"},
	}}
	for _, tc := range []struct {
		name  string
		proto string
		dog   bool
		mog   []statsd.Mogrifier
		want  []string
	}{
		{"statsd over tcp", "tcp", false, nil, []string{
			"ratelimit.service.config_load_error.__env=prod.__version=1_2_3:1|c",
			"ratelimit.service.rate_limit.d.k_v.total_hits.__env=prod.__version=1_2_3:4|c",
			"ratelimit.localcache.hitCount.__env=prod.__version=1_2_3:9|g",
		}},
		{"dogstatsd", "udp", true, nil, []string{
			"ratelimit.service.config_load_error:1|c|#env:prod,version:1_2_3",
			"ratelimit.service.rate_limit.d.k_v.total_hits:4|c|#env:prod,version:1_2_3",
			"ratelimit.localcache.hitCount:9|g|#env:prod,version:1_2_3",
		}},
		{"dogstatsd with mogrifiers", "udp", true, mog, []string{
			"ratelimit.service.config_load_error:1|c|#env:prod,version:1_2_3",
			"ratelimit.service.rate_limit.total_hits:4|c|#env:prod,version:1_2_3,descriptor:k_v,domain:d",
			"ratelimit.localcache.hitCount:9|g|#env:prod,version:1_2_3",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := listen(t, tc.proto)
			c, err := statsd.New(statsd.Config{Address: f.Addr, Protocol: tc.proto, Interval: time.Hour, Tags: tags, DogStatsD: tc.dog, Mogrifiers: tc.mog})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Add("ratelimit.service.config_load_error", 1)
			c.Add("ratelimit.service.rate_limit.d.k_v.total_hits", 4)
			c.Gauges(func(set func(string, uint64)) { set("ratelimit.localcache.hitCount", 9) })
			c.Flush()
			expect(t, f, tc.want...)
		})
	}
}

// TestBadConfig: what New refuses, with why.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  statsd.Config
		want string
	}{
		{statsd.Config{Address: "localhost:8125", Protocol: "sctp"}, `protocol "sctp"`},
		{statsd.Config{Address: "localhost"}, "want host:port"},
		{statsd.Config{Address: "localhost:8125", Tags: map[string]string{"a|b": "c"}}, `tag key "a|b"`},
		{statsd.Config{Address: "localhost:8125", Mogrifiers: []statsd.Mogrifier{{Pattern: regexp.MustCompile("x"), Name: "y"}}}, "go with DogStatsD"},
	} {
		c, err := statsd.New(tc.cfg)
		if err == nil {
			c.Close()
			t.Errorf("New(%+v) = nil error, want one with %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want %q in it", tc.cfg, err, tc.want)
		}
	}
}

// TestTCPReconnect: when the statsd server drops the connection, the
// client dials again and later flushes arrive on the new one.
func TestTCPReconnect(t *testing.T) {
	f := listen(t, "tcp")
	c, err := statsd.New(statsd.Config{Address: f.Addr, Protocol: "tcp", Interval: time.Hour, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Add("before", 1)
	c.Flush()
	expect(t, f, "before:1|c")
	first := <-f.Conns
	first.Close()
	// Writes on the cut connection fail (or are lost) until the client
	// notices; it then dials again and the next flushes arrive.
	deadline := time.After(10 * time.Second)
	for {
		c.Add("after", 1)
		c.Flush()
		select {
		case <-f.Conns:
			for {
				c.Add("after", 1)
				c.Flush()
				select {
				case l := <-f.Lines:
					if strings.HasPrefix(l, "after:") {
						return
					}
				case <-deadline:
					t.Fatal("reconnected, but no line arrived")
				case <-time.After(10 * time.Millisecond):
				}
			}
		case <-deadline:
			t.Fatal("the client did not connect again")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestQueueBound: with no statsd server to take them, flushes neither
// block nor grow without bound: past MaxQueued bytes, lines are dropped
// and counted; Close returns.
func TestQueueBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: dialling is refused
	c, err := statsd.New(statsd.Config{Address: addr, Protocol: "tcp", Interval: time.Hour, MaxQueued: 1000, Retry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		for j := range 50 {
			c.Add("ratelimit.service.rate_limit.d.k"+strings.Repeat("x", j)+".total_hits", uint64(i+1))
		}
		c.Flush()
	}
	if c.Dropped() < 50*90 {
		t.Errorf("Dropped() = %d, want most of the 5000 lines", c.Dropped())
	}
	c.Close()
}
