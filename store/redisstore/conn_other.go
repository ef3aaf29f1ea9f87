//go:build !linux

package redisstore

import (
	"syscall"
	"time"
)

// userTimeout is nil off Linux, which has no TCP_USER_TIMEOUT: a peer gone
// away while calls are in flight is found by the client's PING (pingEvery,
// then writeTimeout for its answer).
func userTimeout(time.Duration) func(network, address string, c syscall.RawConn) error { return nil }
