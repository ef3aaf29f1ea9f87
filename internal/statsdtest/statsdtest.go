// Package statsdtest runs a statsd server on a loopback port for tests:
// the lines it receives, over TCP or UDP, as they came.
package statsdtest

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
)

// MaxDatagram is the longest datagram statsd clients should send (a
// 1500-byte MTU less the IP and UDP headers, with room to spare).
const MaxDatagram = 1432

// TooLong is the line a UDP Server reports for a datagram longer than
// MaxDatagram, before its lines.
const TooLong = "datagram too long\n"

// Server is a statsd server on a loopback port.
type Server struct {
	// Addr is where it listens.
	Addr string
	// Lines are the lines received, each ending in '\n' as sent (a line
	// the connection closed before its end has none).
	Lines chan string
	// Conns are the TCP connections accepted, for a test to cut.
	Conns chan net.Conn
}

// Listen starts a server speaking proto ("tcp" or "udp"), stopped at the
// test's end.
func Listen(t testing.TB, proto string) *Server {
	t.Helper()
	s := &Server{Lines: make(chan string, 10000), Conns: make(chan net.Conn, 100)}
	var wg sync.WaitGroup
	if proto == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.Addr = pc.LocalAddr().String()
		wg.Go(func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if n > MaxDatagram {
					s.Lines <- TooLong
				}
				for _, l := range strings.SplitAfter(string(buf[:n]), "\n") {
					if l != "" {
						s.Lines <- l
					}
				}
			}
		})
		t.Cleanup(func() { pc.Close(); wg.Wait() })
		return s
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	var mu sync.Mutex
	var all []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			select {
			case s.Conns <- c:
			default:
			}
			wg.Go(func() {
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if l != "" {
						s.Lines <- l
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range all {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}
