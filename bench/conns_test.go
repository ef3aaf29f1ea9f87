package bench

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkIdleConnsRSS starts the real `fairgate serve` binary and opens
// 15,000 keep-alive connections that each send one request and then stay
// idle, as a client holding memory would (issue 32 §7: 15,000 connections
// idle after one 401 each took the proxy from 43 MB to 405 MB for the
// 2-minute idle timeout). It reports the server's peak resident memory
// (VmHWM) and how many of the connections it still held at the end.
//
//	cd bench && go test -run '^$' -bench IdleConnsRSS -benchtime 1x
//
// FAIRGATE_BIN, if set, is the binary to measure instead of this tree's.
func BenchmarkIdleConnsRSS(b *testing.B) {
	bin := fairgateBin(b)
	const n = 15_000
	for _, m := range []struct {
		name, path, header string
		proxy              bool
	}{
		// The proxy, a request with an unknown key: 401.
		{"after=401", "/v1/users/1", "X-API-Key: not-a-key\r\n", true},
		// The decision service, a request answered 200.
		{"after=200", "/healthz", "", false},
	} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				peak, held := idleConns(b, bin, n, m.proxy, m.path, m.header)
				b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
				b.ReportMetric(float64(held), "held-conns")
			}
		})
	}
}

// idleConns runs the binary, opens n connections each sending one GET of
// path, and returns the server's peak RSS and how many of the connections
// it had not closed once all were open.
func idleConns(b *testing.B, bin string, n int, proxy bool, path, header string) (int64, int) {
	addr := freeAddr(b)
	var args []string
	if proxy {
		args = []string{"--upstream", "http://127.0.0.1:1", "--internal-listen", freeAddr(b)}
	}
	cmd := serveBinary(b, bin, addr, args...)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: fairgate\r\n" + header + "\r\n")
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	peak := procStatus(b, cmd.Process.Pid, "VmHWM:")
	held := 0
	one := make([]byte, 1)
	for _, c := range conns {
		// A connection the server closed reads EOF at once; one it holds
		// waits for the short deadline.
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var ne net.Error
		if _, err := c.Read(one); errors.As(err, &ne) && ne.Timeout() {
			held++
		}
	}
	return peak, held
}
