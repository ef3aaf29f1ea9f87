package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// BenchmarkSilentConns is BenchmarkIdleConnsRSS's sibling for connections
// that send nothing: a flood of them from one address, each reconnecting
// as soon as the server closes it, against `fairgate serve` with
// --max-connections max, and meanwhile a client's GETs of /healthz, one at
// a time on new connections, as in issue 32's attack (where each GET
// waited for the 5 s header deadline to close a silent connection). It
// reports the client's median and slowest latency, how many GETs failed
// (-v logs why), and the flood's connections per second. In the body=
// stalled runs each flood connection sends a POST /v1/check whose
// Content-Length says 100,000 and 1 byte of it, then nothing (the second
// attacker review's slow body).
//
//	cd bench && go test -run '^$' -bench SilentConns -benchtime 1x -count 3
//
// FAIRGATE_BIN, if set, is the binary to measure instead of this tree's.
func BenchmarkSilentConns(b *testing.B) {
	bin := fairgateBin(b)
	for _, m := range []struct {
		max, flood int
		body       string
	}{{200, 400, ""}, {4096, 9000, ""}, {200, 400, "stalled"}, {1024, 2048, "stalled"}} {
		name := fmt.Sprintf("max=%d/flood=%d", m.max, m.flood)
		if m.body != "" {
			name += "/body=" + m.body
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				lat, failed, rate := silentConns(b, bin, m.max, m.flood, m.body != "")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "legit-p50-ms")
				b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1e3, "legit-max-ms")
				b.ReportMetric(float64(failed), "legit-failed")
				b.ReportMetric(rate, "flood-conns/s")
			}
		})
	}
}

// silentConns runs the binary with --max-connections max, keeps flood
// silent connections to it from 127.0.0.1 (with stalled, each sends a
// request whose body stalls after 1 byte), and times 9 GETs of /healthz
// made meanwhile, 200 ms apart, each on a new connection. It returns the
// latencies sorted, how many GETs failed, and how many connections a
// second the flood made while they ran.
func silentConns(b *testing.B, bin string, max, flood int, stalled bool) ([]time.Duration, int, float64) {
	addr := freeAddr(b)
	cmd := serveBinary(b, bin, addr, "--max-connections", strconv.Itoa(max))
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var (
		mu      sync.Mutex
		live    = map[net.Conn]bool{}
		stopped bool
		dials   atomic.Int64
		wg      sync.WaitGroup
	)
	for range flood {
		wg.Go(func() {
			d := net.Dialer{Timeout: 10 * time.Second}
			one := make([]byte, 1)
			for {
				c, err := d.Dial("tcp", addr)
				mu.Lock()
				if stopped {
					mu.Unlock()
					if err == nil {
						c.Close()
					}
					return
				}
				if err != nil {
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				live[c] = true
				mu.Unlock()
				dials.Add(1)
				if stalled {
					io.WriteString(c, "POST /v1/check HTTP/1.1\r\nHost: fairgate\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
				}
				for {
					if _, err := c.Read(one); err != nil {
						break
					}
				}
				mu.Lock()
				delete(live, c)
				mu.Unlock()
				c.Close()
			}
		})
	}
	defer func() {
		mu.Lock()
		stopped = true
		for c := range live {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	// Until the flood has made its connections (those past the server's
	// bound and the kernel's queue keep trying).
	for start := time.Now(); dials.Load() < int64(flood) && time.Since(start) < 3*time.Second; {
		time.Sleep(50 * time.Millisecond)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var lat []time.Duration
	failed := 0
	from, began := dials.Load(), time.Now()
	for range 9 {
		t := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			failed++
			b.Logf("GET /healthz under the flood: %v %v", err, resp)
		}
		lat = append(lat, time.Since(t))
		time.Sleep(200 * time.Millisecond)
	}
	rate := float64(dials.Load()-from) / time.Since(began).Seconds()
	slices.Sort(lat)
	return lat, failed, rate
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

// BenchmarkIdleGRPCConnsRSS starts the real `fairgate serve` binary with
// the Envoy rate limit service and opens 15,000 HTTP/2 connections to its
// gRPC listener that each make one call (a health check) and then stay
// idle, as a client holding memory would (15,000 such connections held
// 290 MB once, for as long as the client kept them). It reports the
// server's peak resident memory (VmHWM) and how many of the connections
// it still held at the end: at most --max-connections (4096), the one
// idle the longest closed to make room for each new one.
//
//	cd bench && go test -run '^$' -bench IdleGRPCConnsRSS -benchtime 1x
//
// FAIRGATE_BIN, if set, is the binary to measure instead of this tree's.
func BenchmarkIdleGRPCConnsRSS(b *testing.B) {
	bin := fairgateBin(b)
	cfg := filepath.Join(b.TempDir(), "rls.yaml")
	if err := os.WriteFile(cfg, []byte("rls:\n  config:\n    - domain: edge\n      descriptors:\n        - key: remote_address\n          rate_limit: {unit: second, requests_per_unit: 10}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	const n = 15_000
	b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
		for b.Loop() {
			addr, grpcAddr := freeAddr(b), freeAddr(b)
			cmd := start(b, addr, bin, "serve", "--listen", addr, "--grpc-listen", grpcAddr, "--config", cfg)
			conns := make([]net.Conn, 0, n)
			for i := range n {
				c, err := net.Dial("tcp", grpcAddr)
				if err != nil {
					b.Fatalf("connection %d: %v", i, err)
				}
				conns = append(conns, c)
				if err := healthCheck(c); err != nil {
					b.Fatalf("connection %d: %v", i, err)
				}
			}
			peak := procStatus(b, cmd.Process.Pid, "VmHWM:")
			held := 0
			for _, c := range conns {
				if stillOpen(c) {
					held++
				}
				c.Close()
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(held), "held-conns")
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
}

// healthCheck makes one gRPC health check on c, in HTTP/2 frames, and
// reads its answer to the end; c stays open.
func healthCheck(c net.Conn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"}, {":authority", "fairgate"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil { // an empty HealthCheckRequest
		return err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return nil // the trailers
			}
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY: %v", f.ErrCode)
		}
	}
}

// stillOpen reports whether the server still holds c: a connection it
// closed reads to its end at once (after whatever it sent before), one
// it holds waits for the short deadline.
func stillOpen(c net.Conn) bool {
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(buf)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return true
		case err != nil:
			return false
		}
	}
}
