package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
)

// The learned capacity under attack (issue 32 §5): before an upstream of
// 16 workers, a victim tenant keeps the upstream busy with cheap requests,
// and another tenant, inside its limits, tries to talk the learned limit
// down.
const (
	victimWork    = 5 * time.Millisecond // a victim's request holds a worker this long
	victimClients = 16                   // back to back
	attackRun     = 5 * time.Second
)

// workerUpstream holds one of its 16 workers for each request while it
// reads the request's body and for its service time: victimWork, or
// ?sleep=N ms. Beyond 16, requests queue for a worker. /fail answers 503
// at once, without a worker.
type workerUpstream struct{ workers chan struct{} }

func (u *workerUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/fail" {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
		return
	}
	select {
	case u.workers <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	defer func() { <-u.workers }()
	io.Copy(io.Discard, r.Body)
	d := victimWork
	if ms, err := strconv.Atoi(r.URL.Query().Get("sleep")); err == nil {
		d = time.Duration(ms) * time.Millisecond
	}
	time.Sleep(d)
	w.Write([]byte("ok"))
}

// attack is one tenant's way to talk the limit down, inside its limits:
// clients of its, each sending request after request.
type attack struct {
	name    string
	clients int
	request func(base string) *http.Request
}

// trickledBody is ten bytes sent one every 30 ms.
func trickledBody() io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for range 10 {
			time.Sleep(30 * time.Millisecond)
			if _, err := pw.Write([]byte("x")); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

var attacks = []attack{
	{name: "no attack"},
	{"6 slow requests (?sleep=300)", 6, func(base string) *http.Request {
		r, _ := http.NewRequest("GET", base+"/work?sleep=300", nil)
		return r
	}},
	{"6 bodies trickled over 300 ms", 6, func(base string) *http.Request {
		r, _ := http.NewRequest("POST", base+"/work", trickledBody())
		return r
	}},
	{"fast 503s (2 clients, 5 ms apart)", 2, func(base string) *http.Request {
		time.Sleep(5 * time.Millisecond)
		r, _ := http.NewRequest("GET", base+"/fail", nil)
		return r
	}},
}

// attackPolicy lets both tenants send far more than they do.
const attackPolicy = `default_plan: pro
default_class: api
classes: {api: {}}
plans:
  pro: [{limit: 1000000, period: 1s}]
`

// attackResult is one run's figures.
type attackResult struct {
	victimRate, attackerRate float64       // completed requests a second (2xx; the attacker's answers of any status)
	victimP50, victimP99     time.Duration // the victim's successful requests
	limitMedian, limitLeast  int           // the gate's limit, read every 50 ms
}

// runAttack drives the victim alone for warmUp, then beside the attacker
// for attackRun, through front before a workerUpstream.
func runAttack(b *testing.B, front func(b *testing.B, up *url.URL) http.Handler, at attack) attackResult {
	us := httptest.NewServer(&workerUpstream{workers: make(chan struct{}, upWorkers)})
	defer us.Close()
	u, _ := url.Parse(us.URL)
	h := front(b, u)
	fs := httptest.NewServer(h)
	defer fs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	measured := time.Now().Add(warmUp)
	ctx, cancel := context.WithDeadline(context.Background(), measured.Add(attackRun))
	defer cancel()
	var victim, attacker atomic.Int64
	var mu sync.Mutex
	var latencies []time.Duration // the victim's
	do := func(tenant string, req *http.Request, n *atomic.Int64, any bool) {
		req.Header.Set("X-API-Key", "key-"+tenant)
		start := time.Now()
		resp, err := client.Do(req.WithContext(ctx))
		if err != nil {
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if (any || resp.StatusCode == 200) && start.After(measured) && ctx.Err() == nil {
			n.Add(1)
			if !any {
				mu.Lock()
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
			}
		}
	}
	var wg sync.WaitGroup
	for range victimClients {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequest("GET", fs.URL+"/work", nil)
				do("steady0", req, &victim, false)
			}
		})
	}
	for range at.clients {
		wg.Go(func() {
			time.Sleep(time.Until(measured))
			for ctx.Err() == nil {
				do("noisy", at.request(fs.URL), &attacker, true)
			}
		})
	}
	time.Sleep(time.Until(measured))
	var limits []int
	g, gated := h.(gatedFront)
	for ctx.Err() == nil {
		if gated {
			limits = append(limits, g.limit())
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	res := attackResult{victimRate: float64(victim.Load()) / attackRun.Seconds(), attackerRate: float64(attacker.Load()) / attackRun.Seconds()}
	if n := len(latencies); n > 0 {
		slices.Sort(latencies)
		res.victimP50, res.victimP99 = latencies[n/2], latencies[n*99/100]
	}
	if len(limits) > 0 {
		slices.Sort(limits)
		res.limitMedian, res.limitLeast = limits[len(limits)/2], limits[0]
	}
	return res
}

// limit is the gate's limit in force, from fairgate_upstream_capacity_limit.
func (g gatedFront) limit() int {
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "fairgate_upstream_capacity_limit" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return -1
}

// BenchmarkCapacityAttack is issue 32 §5's comparison: a victim's
// throughput before an upstream of 16 workers, behind fairgate's capacity
// gate with a fixed limit of 16 (the upstream's true capacity) and with a
// learned one (floor 4, ceiling 64, initial 16), with no attack and under
// each attack of another tenant inside its limits: six slow requests at a
// time, six bodies trickled over 300 ms at a time, a stream of fast 503s.
// The target: the learned gate under attack keeps at least 90% of the
// victim's throughput behind the fixed one. FAIRGATE_BENCH_TARGETS picks
// attacks by name.
//
//	cd bench && go test -run '^$' -bench CapacityAttack -benchtime 1x -count 3 -timeout 15m
func BenchmarkCapacityAttack(b *testing.B) {
	fixed := fairgateFront(attackPolicy + "upstream_capacity: {limit: 16}\n")
	learned := fairgateFront(attackPolicy + "upstream_capacity: {floor: 4, ceiling: 64, initial: 16}\n")
	ats := attacks
	if only := os.Getenv("FAIRGATE_BENCH_TARGETS"); only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			b.Fatalf("FAIRGATE_BENCH_TARGETS: %v", err)
		}
		ats = slices.DeleteFunc(slices.Clone(ats), func(a attack) bool { return !re.MatchString(a.name) })
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-34s %-26s  %-26s %9s %s\n", "", "the victim behind fixed 16", "the victim behind learned", "", "learned limit")
	fmt.Fprintf(&sb, "%-34s %6s %8s %9s  %7s %8s %9s %9s %s\n", "attack", "req/s", "p50", "p99", "req/s", "p50", "p99", "ratio", "p50 (least)")
	for _, at := range ats {
		f := runAttack(b, fixed, at)
		l := runAttack(b, learned, at)
		fmt.Fprintf(&sb, "%-34s %6.0f %8v %9v  %7.0f %8v %9v %8.0f%% %8d (%d)\n", at.name,
			f.victimRate, f.victimP50.Round(10*time.Microsecond), f.victimP99.Round(10*time.Microsecond),
			l.victimRate, l.victimP50.Round(10*time.Microsecond), l.victimP99.Round(10*time.Microsecond),
			100*l.victimRate/max(1, f.victimRate), l.limitMedian, l.limitLeast)
	}
	fmt.Print(sb.String())
}
