package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFloodRSS starts the real `fairgate serve` binary with its
// default settings (the embedded config, the memory store) and floods it
// with one request mix per sub-benchmark, reporting the process's peak
// resident memory (VmHWM) in MiB. The target is 512 MiB whatever the mix
// (issue 18 §4: 15,000 sliding-log takes once took it to 1.26 GB).
//
//	cd bench && go test -run '^$' -bench FloodRSS -benchtime 1x
//
// FAIRGATE_BIN, if set, is the binary to measure instead of this tree's
// (to compare with another build).
func BenchmarkFloodRSS(b *testing.B) {
	bin := fairgateBin(b)
	logKey := func(i int) string {
		return fmt.Sprintf(`{"key":"log-%d","limit":10000,"period_ms":3600000,"cost":10000,"algorithm":"sliding_log"}`, i)
	}
	longKey := func(i int) string {
		return fmt.Sprintf(`{"key":"%d-%s","limit":1,"period_ms":31622400000}`, i, strings.Repeat("k", 4000))
	}
	payload := strings.Repeat("x", 60<<10)
	mixes := []struct {
		name string
		n    int
		req  func(base string, i int) *http.Request
	}{
		{"mix=sliding-logs", 15_000, func(base string, i int) *http.Request {
			return post(base+"/v1/take", logKey(i), "")
		}},
		{"mix=long-keys-twice", 40_000, func(base string, i int) *http.Request { // the second take of each is rejected: the near cache
			return post(base+"/v1/take", longKey(i/2), "")
		}},
		{"mix=job-payloads", 6_000, func(base string, i int) *http.Request {
			key := []string{"demo-acme-key", "demo-globex-key"}[i%2]
			return post(base+"/v1/jobs/report", `{"pad":"`+payload+`"}`, key)
		}},
	}
	for _, m := range mixes {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				peak, codes := flood(b, bin, m.n, m.req)
				b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
				b.Logf("%s: %d requests, answers %v, peak RSS %d MiB", m.name, m.n, codes, peak>>20)
			}
		})
	}
}

// fairgateBin is the binary FAIRGATE_BIN names, or else this tree's,
// built into a temporary directory.
func fairgateBin(b *testing.B) string {
	if bin := os.Getenv("FAIRGATE_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(b.TempDir(), "fairgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fairgate")
	build.Dir = ".." // the main module, not this one
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func post(url, body, apiKey string) *http.Request {
	r, _ := http.NewRequest("POST", url, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		r.Header.Set("X-API-Key", apiKey)
	}
	return r
}

// serveBinary runs `bin serve --listen addr` with args after, and waits
// until its /healthz answers. The caller kills it.
func serveBinary(b *testing.B, bin, addr string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), "FAIRGATE_DRAIN=0", "FAIRGATE_ADMIN_TOKEN=")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			return cmd
		}
		if time.Since(start) > 10*time.Second {
			cmd.Process.Kill()
			cmd.Wait()
			b.Fatalf("fairgate did not start: %s", logs.String())
		}
	}
}

// flood runs the binary, sends n requests from 8 connections, and returns
// the process's peak RSS in bytes and the count of each status answered.
func flood(b *testing.B, bin string, n int, req func(base string, i int) *http.Request) (int64, map[int]int) {
	addr := freeAddr(b)
	cmd := serveBinary(b, bin, addr)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://" + addr
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var next atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				resp, err := client.Do(req(base, i))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return procStatus(b, cmd.Process.Pid, "VmHWM:"), codes
}
