package redisstore

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestConnectionOptions: every store URL gets client-side caching (but
// with protocol=2, which has no tracking on the connection), the client's
// PING of a silent connection only after pingEvery, TCP keep-alive a
// second, and TCP_USER_TIMEOUT at the write timeout (the URL's
// write_timeout, else writeTimeout), read back from a real socket.
func TestConnectionOptions(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, c := range []struct {
		url         string
		cache       bool
		userTimeout time.Duration
	}{
		{"redis://" + ln.Addr().String(), true, writeTimeout},
		{"redis://" + ln.Addr().String() + "?write_timeout=3s", true, 3 * time.Second},
		{"redis://" + ln.Addr().String() + "?protocol=2", false, writeTimeout},
		{"redis-cluster://" + ln.Addr().String(), true, writeTimeout},
		{"redis-sentinel://" + ln.Addr().String() + "/mymaster", true, writeTimeout},
	} {
		opt, err := parseURL(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if opt.DisableCache == c.cache || opt.Dialer.KeepAlive != pingEvery || opt.ConnWriteTimeout != c.userTimeout {
			t.Errorf("%s: cache %v, PING after %v, write timeout %v; want cache %v, %v, %v", c.url, !opt.DisableCache, opt.Dialer.KeepAlive, opt.ConnWriteTimeout, c.cache, pingEvery, c.userTimeout)
		}
		conn, err := opt.Dialer.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := conn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var ut, idle, intvl, cnt int
		raw.Control(func(fd uintptr) {
			ut, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
			idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
			intvl, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
			cnt, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
		})
		conn.Close()
		if time.Duration(ut)*time.Millisecond != c.userTimeout || idle != 1 || intvl != 1 || cnt != tcpKeepAliveProbes {
			t.Errorf("%s: TCP_USER_TIMEOUT %d ms, keep-alive idle %d s, interval %d s, %d probes; want %v, 1, 1, %d", c.url, ut, idle, intvl, cnt, c.userTimeout, tcpKeepAliveProbes)
		}
	}
}
