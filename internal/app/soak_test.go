package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkSoak runs `fairgate serve` in this process at a fixed rate of
// /v1/check decisions over 10,000 tenants, on the memory store and on
// Redis, for FAIRGATE_SOAK (default 10m), and prints a line every 30 s:
// resident memory, heap in use, goroutines and open file descriptors. The
// last third of the run must stay within 10% of its first sample's memory
// and keep its goroutines and descriptors (the test fails otherwise).
//
//	FAIRGATE_SOAK=10m go test -run '^$' -bench Soak -benchtime 1x -timeout 30m ./internal/app
func BenchmarkSoak(b *testing.B) {
	redistest.Need(b)
	d := 10 * time.Minute
	if v := os.Getenv("FAIRGATE_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	for _, st := range []string{"memory://", "redis://" + srv.Addr} {
		name := strings.SplitN(st, ":", 2)[0]
		b.Run("store="+name, func(b *testing.B) { soak(b, st, d) })
	}
}

// sample is one reading of the process.
type sample struct {
	at              time.Duration
	rssKB, heapKB   int64
	goroutines, fds int
}

func soak(b *testing.B, storeURL string, d time.Duration) {
	name := strings.SplitN(storeURL, ":", 2)[0]
	c, err := ParseServe([]string{"--listen", "127.0.0.1:0", "--store", storeURL}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, c, slog.New(slog.DiscardHandler), func(a string) { addr <- a }) }()
	base := "http://" + <-addr
	const rate = 2000 // decisions a second
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var wg sync.WaitGroup
	var sent, failed int64
	var mu sync.Mutex
	start := time.Now()
	stop := start.Add(d)
	for w := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for k := 0; ; k++ {
				next := start.Add(time.Duration(k*16+w) * time.Second / rate)
				if next.After(stop) {
					return
				}
				time.Sleep(time.Until(next))
				body := fmt.Sprintf(`{"tenant":"t%d","route":"GET /v1/search"}`, r.IntN(10_000))
				resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
				mu.Lock()
				sent++
				if err != nil || resp.StatusCode != 200 {
					failed++
				}
				mu.Unlock()
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	var samples []sample
	read := func() sample {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fds, _ := os.ReadDir("/proc/self/fd")
		return sample{time.Since(start).Round(time.Second), rssKB(), int64(ms.HeapInuse >> 10), runtime.NumGoroutine(), len(fds)}
	}
	every := max(d/20, time.Second)
	tick := time.NewTicker(every)
	for time.Now().Before(stop) {
		<-tick.C
		s := read()
		samples = append(samples, s)
		// Printed, not logged: a benchmark's log is cut after ten lines.
		fmt.Printf("soak %s t=%v rss=%d MB heap=%d MB goroutines=%d fds=%d\n", name, s.at, s.rssKB>>10, s.heapKB>>10, s.goroutines, s.fds)
	}
	tick.Stop()
	wg.Wait()
	cancel()
	<-done
	if failed > 0 {
		b.Errorf("%d of %d requests failed", failed, sent)
	}
	b.ReportMetric(float64(sent)/d.Seconds(), "req/s")
	// After warm-up (the first third), nothing grows.
	warm := samples[len(samples)/3]
	last := samples[len(samples)-1]
	b.ReportMetric(float64(last.rssKB>>10), "rss-MB")
	if last.rssKB > warm.rssKB*11/10+8<<10 {
		b.Errorf("resident memory grew after warm-up: %d → %d KB", warm.rssKB, last.rssKB)
	}
	if last.goroutines > warm.goroutines+8 || last.fds > warm.fds+8 {
		b.Errorf("goroutines %d → %d, descriptors %d → %d after warm-up", warm.goroutines, last.goroutines, warm.fds, last.fds)
	}
}

// rssKB is the process's resident memory in KB (Linux).
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}
