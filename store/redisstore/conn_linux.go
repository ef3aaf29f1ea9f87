package redisstore

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeout returns a Dialer.Control that sets d as a TCP connection's
// TCP_USER_TIMEOUT: the kernel drops the connection when data it sent stays
// unacknowledged for d (a peer gone away while calls are in flight), and
// when keep-alive probes go unanswered for d.
func userTimeout(d time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(d / time.Millisecond)
	return func(network, _ string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" || ms <= 0 {
			return nil
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
		}); err != nil {
			return err
		}
		return serr
	}
}
