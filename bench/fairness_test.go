package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/server"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// The noisy-neighbour benchmark of issue 24 §3: an upstream of fixed
// capacity, nine steady tenants and one migrating its fleet with
// expensive requests at high concurrency, inside its rate limit.
const (
	upWorkers    = 16                     // the upstream's capacity
	cheapTime    = 5 * time.Millisecond   // a steady tenant's request
	costlyTime   = 200 * time.Millisecond // the noisy tenant's
	steadyRate   = 40                     // requests a second, per steady tenant (Poisson)
	noisyStreams = 64                     // the noisy tenant's concurrent clients
	fairRun      = 10 * time.Second
	// warmUp is how long the steady tenants run before the noisy one
	// starts and the measurement begins: the noisy tenant arrives among
	// tenants already at work, as in the story of the issue.
	warmUp = time.Second
)

// fairUpstream holds a worker for each request's service time; requests
// beyond its 16 workers queue (first come, first served), so latency grows
// with queueing. busy counts worker-nanoseconds, for utilisation.
type fairUpstream struct {
	workers chan struct{}
	busy    atomic.Int64
}

func (u *fairUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := cheapTime
	if strings.HasPrefix(r.URL.Path, "/expensive") {
		d = costlyTime
	}
	select {
	case u.workers <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	start := time.Now()
	time.Sleep(d)
	u.busy.Add(int64(time.Since(start)))
	<-u.workers
	w.Write([]byte("ok"))
}

// tenantStats are one tenant's outcomes in a run.
type tenantStats struct {
	mu        sync.Mutex
	latencies []time.Duration // of successful requests
	ok, total int
}

func (s *tenantStats) add(d time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	if ok {
		s.ok++
		s.latencies = append(s.latencies, d)
	}
}

// fairResult is one scenario's figures.
type fairResult struct {
	p50, p99   time.Duration // the steady tenants' successful requests
	success    float64       // the steady tenants' share of 2xx
	noisyRate  float64       // the noisy tenant's completed requests a second
	noisyShare float64       // of the upstream's workers, on average
	util       float64       // the upstream's busy share
	// gateWaited is the share of the steady tenants' requests that
	// waited over 1 ms in fairgate's capacity gate (-1: no gate).
	gateWaited float64
}

// gatedFront is fairgate's proxy with the registry its gate's metrics go
// to, so that the run can say how long the steady tenants waited in it.
type gatedFront struct {
	http.Handler
	reg *prometheus.Registry
}

// waitedOver1ms is the share of class's requests that waited over 1 ms in
// the gate, from its wait histogram; -1 without one.
func (g gatedFront) waitedOver1ms(class string) float64 {
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "fairgate_upstream_capacity_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() != class {
				continue
			}
			h := m.GetHistogram()
			for _, bk := range h.GetBucket() {
				if bk.GetUpperBound() == 0.001 {
					return 1 - float64(bk.GetCumulativeCount())/float64(max(1, h.GetSampleCount()))
				}
			}
		}
	}
	return -1
}

// fairScenario is a front (the thing under test) before the upstream.
type fairScenario struct {
	name  string
	front func(b *testing.B, up *url.URL) http.Handler
	noisy bool
}

// runFair drives one scenario for fairRun and measures it.
func runFair(b *testing.B, sc fairScenario) fairResult {
	up := &fairUpstream{workers: make(chan struct{}, upWorkers)}
	us := httptest.NewServer(up)
	defer us.Close()
	u, _ := url.Parse(us.URL)
	front := sc.front(b, u)
	fs := httptest.NewServer(front)
	defer fs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 10 * time.Second}
	do := func(tenant, path string) (time.Time, time.Duration, bool) {
		req, _ := http.NewRequest("GET", fs.URL+path, nil)
		req.Header.Set("X-API-Key", "key-"+tenant)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return start, time.Since(start), false
		}
		resp.Body.Close()
		return start, time.Since(start), resp.StatusCode == 200
	}
	measured := time.Now().Add(warmUp)
	ctx, cancel := context.WithDeadline(context.Background(), measured.Add(fairRun))
	defer cancel()
	var steady tenantStats
	var noisyDone atomic.Int64
	var wg sync.WaitGroup
	for i := range 9 {
		tenant := fmt.Sprint("steady", i)
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 24))
			next := time.Now()
			for ctx.Err() == nil {
				next = next.Add(time.Duration(r.ExpFloat64() * float64(time.Second) / steadyRate))
				time.Sleep(time.Until(next))
				wg.Go(func() {
					if start, d, ok := do(tenant, "/cheap"); !start.Before(measured) {
						steady.add(d, ok)
					}
				})
			}
		})
	}
	if sc.noisy {
		for range noisyStreams {
			wg.Go(func() {
				time.Sleep(time.Until(measured))
				for ctx.Err() == nil {
					if _, _, ok := do("noisy", "/expensive"); ok {
						noisyDone.Add(1)
					} else {
						time.Sleep(10 * time.Millisecond) // a refused client backs off a little
					}
				}
			})
		}
	}
	time.Sleep(time.Until(measured))
	start := time.Now()
	busy0 := up.busy.Load()
	<-ctx.Done()
	elapsed := time.Since(start)
	busy := up.busy.Load() - busy0
	wg.Wait()
	slices.Sort(steady.latencies)
	res := fairResult{success: float64(steady.ok) / float64(max(1, steady.total)),
		noisyRate: float64(noisyDone.Load()) / elapsed.Seconds(),
		util:      float64(busy) / float64(upWorkers) / float64(elapsed), gateWaited: -1}
	if g, ok := front.(gatedFront); ok {
		res.gateWaited = g.waitedOver1ms("api")
	}
	res.noisyShare = res.noisyRate * costlyTime.Seconds() / upWorkers
	if n := len(steady.latencies); n > 0 {
		res.p50, res.p99 = steady.latencies[n/2], steady.latencies[n*99/100]
	}
	return res
}

// fairgateFront is fairgate's proxy with policy yaml, every tenant's key
// "key-<tenant>".
func fairgateFront(yaml string) func(b *testing.B, up *url.URL) http.Handler {
	return func(b *testing.B, up *url.URL) http.Handler {
		cfg, err := config.Parse("fair.yaml", []byte(yaml))
		if err != nil {
			b.Fatal(err)
		}
		lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
		if err != nil {
			b.Fatal(err)
		}
		var keys []auth.APIKey
		for _, t := range []string{"noisy", "steady0", "steady1", "steady2", "steady3", "steady4", "steady5", "steady6", "steady7", "steady8"} {
			sum := sha256.Sum256([]byte("key-" + t))
			keys = append(keys, auth.APIKey{SHA256: hex.EncodeToString(sum[:]), Tenant: t})
		}
		a, err := auth.New(context.Background(), auth.Config{APIKeys: keys})
		if err != nil {
			b.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		s, err := server.New(server.Config{Limiter: lim, Auth: a, Upstream: up, Capacity: cfg.UpstreamCapacity, Registerer: reg})
		if err != nil {
			b.Fatal(err)
		}
		return gatedFront{s, reg}
	}
}

// ratePolicy: every tenant 100 requests a second (burst 100): the noisy
// tenant's fleet, at most 80 a second on 16 workers, stays inside it.
const ratePolicy = `default_plan: pro
default_class: api
classes: {api: {}, export: {}}
routes:
  - {route: "GET /expensive", class: export}
plans:
  pro: [{limit: 100, period: 1s, burst: 100}]
`

// globalGate is one concurrency limit for everyone: upWorkers requests in
// flight, a request over it waits up to 500 ms, then 503.
func globalGate(b *testing.B, up *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(up)
	sem := make(chan struct{}, upWorkers)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(500 * time.Millisecond)
		defer t.Stop()
		select {
		case sem <- struct{}{}:
		case <-t.C:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "over capacity", http.StatusServiceUnavailable)
			return
		}
		defer func() { <-sem }()
		rp.ServeHTTP(w, r)
	})
}

// BenchmarkFairConcurrency is issue 24 §3's comparison: the nine steady
// tenants' p50/p99 and success, the noisy tenant's goodput and share, and
// the upstream's utilisation, for (a) no limiter, (b) fairgate's rate limits
// alone, (c) one global concurrency limit, (d1) per-tenant concurrency
// limits (every tenant 4 requests in flight), and fairgate's capacity gate
// with (d2) a learned and (d3) a fixed limit, beside runs without the
// noisy tenant. FAIRGATE_BENCH_TARGETS picks scenarios by name;
// FAIRGATE_BENCH_MARGIN and FAIRGATE_BENCH_TOLERANCE set the gate's.
//
//	cd bench && go test -run '^$' -bench FairConcurrency -benchtime 1x -timeout 15m
func BenchmarkFairConcurrency(b *testing.B) {
	direct := func(b *testing.B, up *url.URL) http.Handler { return httputil.NewSingleHostReverseProxy(up) }
	learned := fairgateFront(ratePolicy + "upstream_capacity: {floor: 4, ceiling: 256" + benchField("tolerance") + benchField("margin") + "}\n")
	fixed := fairgateFront(ratePolicy + "upstream_capacity: {limit: 16" + benchField("margin") + "}\n")
	scenarios := []fairScenario{
		{name: "quiet (no noisy tenant), no limiter", front: direct},
		{name: "(a) no limiter", front: direct, noisy: true},
		{name: "(b) rate limits only", front: fairgateFront(ratePolicy), noisy: true},
		{name: "(c) one global concurrency limit", front: globalGate, noisy: true},
		{name: "(d1) per-tenant concurrency 4", front: fairgateFront(strings.Replace(ratePolicy, "burst: 100}]", "burst: 100}, {concurrency: 4}]", 1)), noisy: true},
		{name: "(d2) capacity gate, learned", front: learned, noisy: true},
		{name: "(d3) capacity gate, fixed 16", front: fixed, noisy: true},
		// The same fronts without the noisy tenant: the target's "run
		// without the noisy tenant" for (d2) and (d3).
		{name: "quiet, capacity gate, learned", front: learned},
		{name: "quiet, capacity gate, fixed 16", front: fixed},
	}
	if only := os.Getenv("FAIRGATE_BENCH_TARGETS"); only != "" { // a subset, by scenario name
		re, err := regexp.Compile(only)
		if err != nil {
			b.Fatalf("FAIRGATE_BENCH_TARGETS: %v", err)
		}
		scenarios = slices.DeleteFunc(scenarios, func(sc fairScenario) bool { return !re.MatchString(sc.name) })
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-40s %9s %9s %8s %12s %11s %6s %12s\n", "scenario", "p50", "p99", "success", "noisy req/s", "noisy share", "util", "gate wait>1ms")
	for _, sc := range scenarios {
		r := runFair(b, sc)
		waited := "-"
		if r.gateWaited >= 0 {
			waited = fmt.Sprintf("%.2f%%", 100*r.gateWaited)
		}
		fmt.Fprintf(&sb, "%-40s %9v %9v %7.2f%% %12.1f %10.0f%% %5.0f%% %12s\n", sc.name, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond),
			100*r.success, r.noisyRate, 100*r.noisyShare, 100*r.util, waited)
	}
	fmt.Print(sb.String())
}

// benchField is FAIRGATE_BENCH_<NAME> as the gate's field name, for
// trying other tolerances and margins; nothing (the default) without it.
func benchField(name string) string {
	if v, err := strconv.ParseFloat(os.Getenv("FAIRGATE_BENCH_"+strings.ToUpper(name)), 64); err == nil {
		return ", " + name + ": " + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return ""
}
