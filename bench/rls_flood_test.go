package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// BenchmarkRLSFloodRSS starts the real `fairgate serve` binary with an rls
// section of one domain (on the memory store, the gRPC listener open) and
// sends it calls whose one descriptor carries its own limit (Envoy's
// per-route override) and a value of about 1 MB, unique per call: what a
// client that reaches the gRPC listener can send. It reports the process's
// resident memory 3 s after the last answer (VmRSS, after-MiB), the bytes
// and seconds of one /metrics scrape then, and the peak resident memory of
// the whole run, the scrape's included (VmHWM), against the 512 MiB
// ceiling of docs/service.md. The streams=1200 mix keeps 1,200 calls in
// flight at once, as a client can: fairgate holds at most --rls-max-calls
// (128) of them and refuses the rest with RESOURCE_EXHAUSTED before
// reading their messages (refused-calls); maxcalls=N runs it at another
// bound.
//
//	cd bench && go test -run '^$' -bench RLSFloodRSS -benchtime 1x
//
// FAIRGATE_BIN, if set, is the binary to measure instead of this tree's.
func BenchmarkRLSFloodRSS(b *testing.B) {
	bin := fairgateBin(b)
	cfg := filepath.Join(b.TempDir(), "rls.yaml")
	if err := os.WriteFile(cfg, []byte("rls:\n  config:\n    - domain: edge\n      descriptors:\n        - key: remote_address\n          rate_limit: {unit: second, requests_per_unit: 10}\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, mix := range []struct {
		calls, valueBytes, streams, maxCalls int
	}{
		{805, 1_000_000, 4, 0},      // issue 32's mix
		{805, 1_000_000, 256, 0},    // the same, with many calls at once
		{2400, 1_000_000, 1200, 0},  // 1,200 calls in flight, as the attacker kept
		{2400, 1_000_000, 1200, 64}, // the same, at other bounds
		{2400, 1_000_000, 1200, 256},
		{10_500, 1_000, 4, 0}, // every statistics key named, each past the longest name
	} {
		calls, valueBytes := mix.calls, mix.valueBytes
		name := fmt.Sprintf("calls=%d/value=%dB/streams=%d", calls, valueBytes, mix.streams)
		args := []string{"serve", "--config", cfg}
		if mix.maxCalls > 0 {
			name += fmt.Sprintf("/maxcalls=%d", mix.maxCalls)
			args = append(args, "--rls-max-calls", fmt.Sprint(mix.maxCalls))
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				addr, grpcAddr := freeAddr(b), freeAddr(b)
				cmd := start(b, addr, bin, append(args, "--listen", addr, "--grpc-listen", grpcAddr)...)
				pid := cmd.Process.Pid
				before := procStatus(b, pid, "VmRSS:")
				answers := rlsFlood(b, grpcAddr, calls, valueBytes, mix.streams)
				time.Sleep(3 * time.Second) // the Go runtime returns freed memory to the system in the background
				after := procStatus(b, pid, "VmRSS:")
				t0 := time.Now()
				scrape := scrapeBytes(b, "http://"+addr+"/metrics")
				took := time.Since(t0)
				peak := procStatus(b, pid, "VmHWM:") // the scrape's included
				b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
				b.ReportMetric(float64(after)/(1<<20), "after-MiB")
				b.ReportMetric(float64(scrape)/(1<<20), "scrape-MiB")
				b.ReportMetric(took.Seconds(), "scrape-s")
				b.ReportMetric(float64(answers["ResourceExhausted"]), "refused-calls")
				b.Logf("%d calls, answers %v; RSS %d MiB before, peak %d MiB, %d MiB after; /metrics %d bytes in %v",
					calls, answers, before>>20, peak>>20, after>>20, scrape, took.Round(time.Millisecond))
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
	}
}

// rlsFlood sends n calls, streams at once, each one descriptor with its own
// limit (1000 per hour) and a unique value of size bytes, and counts the
// answers by code (an error by its gRPC status code).
func rlsFlood(b *testing.B, addr string, n, size, streams int) map[string]int {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := rlspb.NewRateLimitServiceClient(conn)
	pad := strings.Repeat("v", size-8)
	var next atomic.Int64
	var mu sync.Mutex
	answers := map[string]int{}
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*commonpb.RateLimitDescriptor{{
					Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("%08d", i) + pad}},
					Limit:   &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1000, Unit: typepb.RateLimitUnit_HOUR},
				}}}
				r, err := c.ShouldRateLimit(context.Background(), req)
				code := status.Code(err).String()
				if err == nil {
					code = r.OverallCode.String()
				}
				mu.Lock()
				answers[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return answers
}

// scrapeBytes is the size of one GET of url's body.
func scrapeBytes(b *testing.B, url string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// procStatus reads a size field (such as "VmRSS:") of a process's
// /proc status, in bytes.
func procStatus(b *testing.B, pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
