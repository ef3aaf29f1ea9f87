package limiter_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// The proof of measured costs (docs/cost.md, "Proof"). Tenants on
// different budgets send completions through a front, 32 clients each,
// to a test upstream that streams each answer as server-sent events, of
// a length drawn from a seeded random source, and ends it with
// usage.total_tokens; the front admits a request at its estimate
// (max_tokens, else the class's default) and settles it at that usage.
// Over ten of the plans' periods ("minutes") runProof checks, for each
// tenant:
//
//  1. The charged total is the sum of the true costs, exactly. The day
//     quota (5,000,000 a day, never reached; a fixed window the run does
//     not leave) counts every unit booked on it, admissions and
//     settlements, and its count equals the sum of the usage the
//     upstream reported to the tenant. On the GCRA layer, what the store
//     booked equals that sum less the units the debt bound forgave plus
//     the units a refund could not give back to a full key, each counted
//     from the store's answers.
//  2. Tokens per period stay within the budget: in every window of one
//     period P, the units the store booked on the tenant's GCRA layer
//     (estimates admitted, settlements as applied, refunds negative) are
//     at most limit + 2 × burst. The bound, from the algorithm: a take is
//     admitted only while its TAT stays within now + τ (τ = burst ×
//     emission), a settlement's charge stops at now + 2τ (a debt of at
//     most one burst), and each booked unit moves the TAT by one emission
//     interval (at least P / limit) while only a refund, booked
//     negative, moves it back; so over [t, t+P], units × emission ≤
//     (t + P + 2τ) − t. One burst is what GCRA admits from idle, the
//     other the debt that settlements over their estimates may leave:
//     with 32 requests in flight, each settling over its estimate, the
//     debt is bounded by the debt bound (one burst), not by one request's
//     cap. Over the whole run the same argument bounds the true tokens:
//     Σ true − the units forgiven (fairgate_settlement_unapplied_units_total)
//     ≤ span / emission + 2 × burst.
//
// and TestMeasuredCostProof checks the third:
//
//  3. A tenant with long generations (its estimates far under the true
//     costs, its debt at the bound) does not lower another tenant's
//     throughput: the quiet tenants' runs with it are their runs without
//     it. Exactly, booking for booking, on the memory store, whose clock
//     is simulated (testing/synctest; every event of a client falls on a
//     nanosecond of its own, so that a run is deterministic); on Redis
//     and Redis Cluster, which decide by Redis TIME in real time, the two
//     runs go side by side and a quiet tenant's true tokens with the
//     noisy one must be at least half of those without: a real-time
//     throughput is the machine's as much as fairgate's, and this check
//     is for gross interference only.
//
// On the memory store a period is a minute and a run takes ten simulated
// minutes. On Redis and Cluster the periods are scaled down to a "minute"
// of 1 s, ten of them; the upstream's pace (100 tokens a simulated
// second) and the clients' think times and back-off scale with it; costs
// and budgets do not.

// proofTenant is one tenant of the proof.
type proofTenant struct {
	name string
	plan string
	// long: long generations, the noisy neighbour: no max_tokens half
	// the time (the default estimate is charged, far under the true
	// cost), else max_tokens at the cap, and lengths near the model's
	// most.
	long bool
}

// The proof's tenants: two quiet ones on the smallest and largest
// budgets, and the noisy one.
var (
	quietSmall = proofTenant{name: "quiet-small", plan: "small"}
	quietLarge = proofTenant{name: "quiet-large", plan: "large"}
	noisy      = proofTenant{name: "noisy", plan: "medium", long: true}
)

// proofPlans are the budgets, tokens per period.
var proofPlans = map[string]struct{ limit, burst int64 }{
	"small":  {12_000, 6_000},
	"medium": {24_000, 8_000},
	"large":  {48_000, 12_000},
}

const (
	proofClients = 32        // concurrent clients per tenant
	proofCap     = 4000      // the estimate's cap: the most a request is charged at admission
	proofDefault = 1000      // the estimate of a request without max_tokens
	proofDay     = 5_000_000 // the day quota: never reached, it counts what was charged
	proofModel   = 4000      // the upstream's longest generation
	proofChunk   = 200       // tokens per streamed event
)

// proofPolicy is the proof's policy: per plan a GCRA budget per period
// and a day quota; one measured class, completions, at POST
// /v1/completions. The day quota is a fixed window of 24 h whose window
// starts 12 h before now (the windows start at Offset + k × 24 h since
// the epoch), so that no run leaves it.
func proofPolicy(period time.Duration, now time.Time) policy.Policy {
	day := 24 * time.Hour
	dayUs := int64(day / time.Microsecond)
	off := time.Duration(((now.Add(-12*time.Hour).UnixMicro()%dayUs)+dayUs)%dayUs) * time.Microsecond
	plans := map[string]policy.Plan{}
	for name, b := range proofPlans {
		plans[name] = policy.Plan{Name: name, Rules: []policy.Rule{
			{Name: "minute", Limit: algo.Limit{Limit: b.limit, Period: period, Burst: b.burst}},
			{Name: "day", Limit: algo.Limit{Limit: proofDay, Period: day, Algorithm: algo.FixedWindow, Offset: off}},
		}}
	}
	tenants := map[string]policy.Tenant{}
	for _, tn := range []proofTenant{quietSmall, quietLarge, noisy} {
		tenants[tn.name] = policy.Tenant{Plan: tn.plan}
	}
	return policy.Policy{
		Plans: plans, DefaultPlan: "small", Tenants: tenants,
		Classes: map[string]policy.Class{
			"other": {Name: "other", Share: 1},
			"completions": {Name: "completions", Share: 1, Fail: policy.FailClosed, Cost: &policy.MeasuredCost{Unit: "tokens",
				Estimate: policy.Estimate{JSON: "max_tokens", Default: proofDefault, Cap: proofCap},
				Measure:  policy.Measure{SSE: "usage.total_tokens"}}},
		},
		DefaultClass: "other",
		Routes:       []policy.Route{{Pattern: "POST /v1/completions", Class: "completions"}},
	}
}

// A front stands between the proof's clients and its upstream: it
// admits each completion request under the limiter (at its estimate,
// settling), forwards it, streams the answer back as it comes and
// settles the request at the usage the stream ends with. The proof
// runs every front of proofFronts on every store. The limiter is the
// proof's (its store records what is booked, its clock is the run's);
// a front built on it, such as the proxy of `serve --upstream`, plugs
// in as one more entry.
type front struct {
	name string
	// handler builds the front on l, forwarding to the upstream at
	// upstream (a base URL) through rt: an in-memory network, which the
	// simulated clock needs.
	handler func(t *testing.T, l *limiter.Limiter, upstream string, rt http.RoundTripper) http.Handler
	// sign marks r as tenant's, the way the front identifies callers.
	sign func(r *http.Request, tenant string)
	// wait is how long a client refused with resp waits before it asks
	// again: exact, for the clients to keep their budget busy in a
	// scaled run.
	wait func(resp *http.Response) time.Duration
}

// proofFronts are the fronts the proof runs.
var proofFronts = []front{libraryFront}

// libraryFront is a front built on the library, as a Go service would:
// Decide with Settles and the estimate of the class's cost
// (policy.Estimate.From), and Limiter.Settle once the upstream's stream
// has ended. The tenant comes from X-Tenant (as if verified); a refusal
// carries Retry-After and, exactly, X-Retry-After-Us.
var libraryFront = front{
	name: "library",
	handler: func(t *testing.T, l *limiter.Limiter, upstream string, rt http.RoundTripper) http.Handler {
		client := &http.Client{Transport: rt}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var doc any
			_ = json.Unmarshal(body, &doc) // not JSON: no estimate in it
			req := policy.Request{Tenant: r.Header.Get("X-Tenant"), Method: r.Method, Path: r.URL.Path, Settles: true}
			res, err := l.Snapshot().Resolve(req, time.Now())
			if err == nil && res.Measured != nil {
				req.Cost, req.HasCost = res.Measured.Estimate.From(r.Header, doc), true
			}
			d, err := l.Decide(r.Context(), req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if !d.Allowed {
				w.Header().Set("Retry-After", limitheader.RetryAfter(d.RetryAfter))
				w.Header().Set("X-Retry-After-Us", strconv.FormatInt((d.RetryAfter+time.Microsecond-1).Microseconds(), 10)) // rounded up
				status := http.StatusTooManyRequests
				if d.Reason == limiter.ReasonUnavailable {
					status = http.StatusServiceUnavailable
				}
				http.Error(w, string(d.Reason), status)
				return
			}
			if d.Settlement == nil {
				t.Errorf("%s: an admitted completion without a settlement: %+v", req.Tenant, d)
				return
			}
			up, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.Path, bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := client.Do(up)
			if err != nil || resp.StatusCode != http.StatusOK {
				// The upstream failed: the tenant got nothing, and is
				// refunded its estimate.
				if err == nil {
					resp.Body.Close()
				}
				if _, err := l.Settle(context.WithoutCancel(r.Context()), &d, 0); err != nil {
					t.Errorf("settle a failed request: %v", err)
				}
				http.Error(w, "upstream failed", http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusOK)
			flusher, _ := w.(http.Flusher)
			trueCost, measured := d.Settlement.Cost, false
			sse := d.Resolution.Measured.Measure.SSE
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Text()
				io.WriteString(w, line+"\n")
				if line == "" && flusher != nil {
					flusher.Flush() // an event ends: pass it on now
				}
				if data, ok := strings.CutPrefix(line, "data:"); ok {
					var v any
					if json.Unmarshal([]byte(strings.TrimSpace(data)), &v) == nil {
						if n, ok := policy.JSONCount(v, sse); ok {
							trueCost, measured = n, true
						}
					}
				}
			}
			if !measured {
				t.Errorf("a stream of %s ended without its usage", req.Tenant)
			}
			if _, err := l.Settle(context.WithoutCancel(r.Context()), &d, trueCost); err != nil {
				t.Errorf("settle: %v", err)
			}
		})
	},
	sign: func(r *http.Request, tenant string) { r.Header.Set("X-Tenant", tenant) },
	wait: func(resp *http.Response) time.Duration {
		us, err := strconv.ParseInt(resp.Header.Get("X-Retry-After-Us"), 10, 64)
		if err != nil {
			return time.Second
		}
		return time.Duration(us) * time.Microsecond
	},
}

// completion is the body of a request to the test upstream. MaxTokens
// is what a client declares (the estimate); Prompt and Want simulate
// the model: the answer has min(Want, MaxTokens, proofModel) tokens, and
// costs Prompt more.
type completion struct {
	User      string `json:"user"`
	MaxTokens int64  `json:"max_tokens,omitempty"`
	Prompt    int64  `json:"prompt_tokens"`
	Want      int64  `json:"want_tokens"`
}

// trueCost is what the upstream reports the request used.
func (c completion) trueCost() int64 {
	gen := min(c.Want, proofModel)
	if c.MaxTokens > 0 {
		gen = min(gen, c.MaxTokens)
	}
	return c.Prompt + gen
}

// upstream is the test's completion API: it streams an answer of
// proofChunk tokens an event, one event per proofChunk × tokenTime, and
// ends it with an event carrying usage.total_tokens, then [DONE]. It
// sums the usage it reported, per user: the true costs.
type upstream struct {
	tokenTime time.Duration
	mu        sync.Mutex
	used      map[string]int64
	answers   map[string]int
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var c completion
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	total := c.trueCost()
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	for left := total - c.Prompt; left > 0; left -= proofChunk {
		n := min(left, proofChunk)
		time.Sleep(time.Duration(n) * u.tokenTime)
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"%d tokens\"}}]}\n\n", n)
		flusher.Flush()
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n",
		c.Prompt, total-c.Prompt, total)
	u.mu.Lock()
	u.used[c.User] += total
	u.answers[c.User]++
	u.mu.Unlock()
}

// booking is units a store booked on a key at its clock (µs): a take's
// cost, or a settlement's applied units (negative: a refund).
type booking struct {
	at, units int64
}

// ledger is the proof's store: the store it wraps, recording every unit
// booked per key, and per key the units a settlement's charge could not
// apply (the debt bound) or its refund could not give back (the key was
// full). It sees what the store answered, whichever front called it.
type ledger struct {
	store.Store
	mu         sync.Mutex
	booked     map[string][]booking
	unapplied  map[string]int64
	unrefunded map[string]int64
}

func newLedger(st store.Store) *ledger {
	return &ledger{Store: st, booked: map[string][]booking{}, unapplied: map[string]int64{}, unrefunded: map[string]int64{}}
}

// Local reports whether the wrapped store is local (no store deadline).
func (g *ledger) Local() bool {
	l, ok := g.Store.(store.Local)
	return ok && l.Local()
}

func (g *ledger) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	err := g.Store.Take(ctx, checks, res)
	if err == nil && res.Allowed {
		g.mu.Lock()
		for _, c := range checks {
			if c.Cost > 0 {
				g.booked[c.Key] = append(g.booked[c.Key], booking{res.Now.UnixMicro(), c.Cost})
			}
		}
		g.mu.Unlock()
	}
	return err
}

func (g *ledger) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	err := g.Store.Settle(ctx, id, adjs, res)
	if err == nil {
		g.mu.Lock()
		for i, a := range adjs {
			s := res.Settled[i]
			if s.Repeated {
				continue
			}
			if s.Applied != 0 {
				g.booked[a.Key] = append(g.booked[a.Key], booking{res.Now.UnixMicro(), s.Applied})
			}
			if a.Delta > 0 {
				g.unapplied[a.Key] += a.Delta - s.Applied
			} else {
				g.unrefunded[a.Key] += s.Applied - a.Delta
			}
		}
		g.mu.Unlock()
	}
	return err
}

// bookings returns key's bookings in time order.
func (g *ledger) bookings(key string) []booking {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := slices.Clone(g.booked[key])
	slices.SortStableFunc(b, func(x, y booking) int { return int(x.at - y.at) })
	return b
}

// maxWindow is the most units b (in time order) books in a closed window
// [a, a+period] starting at any whole µs a, and that a. The bookings a
// window holds change only where a or a+period crosses one, so the
// windows starting within a µs of a booking, or of a booking − period,
// take every value there is.
func maxWindow(b []booking, period int64) (most, start int64) {
	prefix := make([]int64, len(b)+1)
	for i, x := range b {
		prefix[i+1] = prefix[i] + x.units
	}
	at := func(t int64) int {
		i, _ := slices.BinarySearchFunc(b, t, func(x booking, t int64) int { return cmpInt(x.at, t) })
		return i
	}
	for _, x := range b {
		for _, a := range []int64{x.at - 1, x.at, x.at + 1, x.at - period - 1, x.at - period, x.at - period + 1} {
			if sum := prefix[at(a+period+1)] - prefix[at(a)]; sum > most {
				most, start = sum, a
			}
		}
	}
	return most, start
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// proofRun is one run of the proof.
type proofRun struct {
	name    string        // for the logs
	period  time.Duration // P, the plans' period
	windows int           // how many periods the clients send for
	tenants []proofTenant
	open    func() (store.Store, error) // a store with keys of this run's own
	front   front
	seed    uint64
	// residues gives each client's events a nanosecond of its own (mod
	// 1 µs), for a deterministic run under the simulated clock.
	residues bool
}

// tenantResult is what one tenant got in a run.
type tenantResult struct {
	Admitted int   // requests answered
	Refused  int64 // requests refused (429)
	TrueCost int64 // Σ usage the upstream reported
	// Minute holds what was booked on the tenant's GCRA layer, in time
	// order (for the comparison of runs on the simulated clock).
	Minute []booking
}

// runProof runs r, checks bounds 1 and 2 for each tenant, and returns
// what each got; nil when the run could not be made. It calls no
// t.Fatal: two runs may go side by side in goroutines of one test.
func runProof(t *testing.T, r proofRun) map[string]tenantResult {
	t.Helper()
	start := time.Now()
	pol := proofPolicy(r.period, start)
	st, err := r.open()
	if err != nil {
		t.Error(err)
		return nil
	}
	lg := newLedger(st)
	// No store deadline: a take that timed out may still run, charging a
	// request refused; what the store does when it fails is the
	// failover test's (TestSettleOnceUnderFailover).
	l, err := limiter.New(limiter.Config{Store: lg, Policy: pol, Timeout: -1})
	if err != nil {
		t.Error(err)
		return nil
	}
	up := &upstream{tokenTime: (r.period / 6000).Truncate(time.Microsecond), used: map[string]int64{}, answers: map[string]int{}}
	upNet := serveMem(up)
	defer upNet.close()
	frontNet := serveMem(r.front.handler(t, l, "http://upstream", upNet.transport))
	defer frontNet.close()
	client := &http.Client{Transport: frontNet.transport}

	end := start.Add(time.Duration(r.windows) * r.period)
	refusals := map[string]*atomic.Int64{}
	for _, tn := range r.tenants {
		refusals[tn.name] = new(atomic.Int64)
	}
	var wg sync.WaitGroup
	for _, tn := range r.tenants {
		for ci := range proofClients {
			// Each client has a number of its own, whatever tenants
			// run: its random source's stream and its nanosecond.
			n := slices.Index([]proofTenant{quietSmall, quietLarge, noisy}, tn)*proofClients + ci
			c := proofClient{t: t, r: &r, tenant: tn, http: client, end: end, refused: refusals[tn.name],
				rng: rand.New(rand.NewPCG(r.seed, uint64(n))), residue: int64(n)}
			wg.Go(c.run)
		}
	}
	wg.Wait()

	out := map[string]tenantResult{}
	var admitted int64
	for _, tn := range r.tenants {
		res, err := l.Snapshot().Resolve(policy.Request{Tenant: tn.name, Method: "POST", Path: "/v1/completions", Settles: true}, time.Now())
		if err != nil || len(res.Layers) != 2 {
			t.Errorf("%s: %+v, %v", tn.name, res.Layers, err)
			return nil
		}
		minute, day := res.Layers[0], res.Layers[1]
		up.mu.Lock()
		got := tenantResult{Admitted: up.answers[tn.name], Refused: refusals[tn.name].Load(), TrueCost: up.used[tn.name], Minute: lg.bookings(minute.Key)}
		up.mu.Unlock()
		admitted += int64(got.Admitted)
		out[tn.name] = got

		// 1. The charged total: the day quota's count, read with a
		// take of cost 0, is the sum of the true costs.
		var peek store.Result
		if err := lg.Store.Take(context.Background(), []store.Check{{Key: day.Key, Limit: day.Limit}}, &peek); err != nil {
			t.Error(err)
			return nil
		}
		if charged := proofDay - peek.Decisions[0].Remaining; charged != got.TrueCost {
			t.Errorf("%s: charged %d on its day quota, want %d, the sum of its true costs (%d requests)", tn.name, charged, got.TrueCost, got.Admitted)
		}

		// 2. Tokens per minute: at most limit + 2 × burst booked in any
		// window of one period, and over the run Σ true − forgiven
		// at most span / emission + 2 × burst.
		lim := minute.Limit
		em := (int64(lim.Period/time.Microsecond) + lim.Limit - 1) / lim.Limit
		b := got.Minute
		most, at := maxWindow(b, int64(r.period/time.Microsecond))
		bound := lim.Limit + 2*lim.Capacity()
		if most > bound {
			t.Errorf("%s: %d units booked in the period from %v, over limit %d + 2 × burst %d = %d", tn.name, most, time.UnixMicro(at).Sub(start), lim.Limit, lim.Capacity(), bound)
		}
		lg.mu.Lock()
		forgiven, unrefunded := lg.unapplied[minute.Key], lg.unrefunded[minute.Key]
		lg.mu.Unlock()
		var booked int64
		for _, x := range b {
			booked += x.units
		}
		if want := got.TrueCost - forgiven + unrefunded; booked != want {
			t.Errorf("%s: %d units booked on its GCRA layer, want %d: the true costs %d less %d forgiven plus %d kept", tn.name, booked, want, got.TrueCost, forgiven, unrefunded)
		}
		span := b[len(b)-1].at - b[0].at
		if runBound := span/em + 2*lim.Capacity(); got.TrueCost-forgiven > runBound {
			t.Errorf("%s: %d true tokens, %d of them forgiven by the debt bound, over span %v / emission + 2 × burst = %d", tn.name, got.TrueCost, forgiven, time.Duration(span)*time.Microsecond, runBound)
		}
		t.Logf("%s: %-11s %4d requests (%4d refused), %7d true tokens: %.2f × limit × %d periods; most booked in a period: limit + %.2f bursts (bound: + 2); the debt bound forgave %d, full keys kept %d of refunds",
			r.name, tn.name, got.Admitted, got.Refused, got.TrueCost, float64(got.TrueCost)/float64(lim.Limit*int64(r.windows)), r.windows,
			float64(most-lim.Limit)/float64(lim.Capacity()), forgiven, unrefunded)
	}
	// Every admitted request was settled once, none failed, and the
	// metric of units forgiven is the ledger's.
	var forgiven int64
	lg.mu.Lock()
	for _, n := range lg.unapplied {
		forgiven += n
	}
	lg.mu.Unlock()
	if s := l.Guard().Stats(); s.SettlementsApplied != admitted || s.SettlementsFailed != 0 || s.SettlementUnappliedUnits != forgiven {
		t.Errorf("settlements: %d applied, %d failed, %d units unapplied; want %d, 0, %d", s.SettlementsApplied, s.SettlementsFailed, s.SettlementUnappliedUnits, admitted, forgiven)
	}
	return out
}

// proofClient is one of a tenant's 32 clients: it sends a completion,
// reads its stream to the end, thinks up to a simulated second and sends
// the next, until the run ends. A refused request is sent again after
// the front's retry-after and a jitter that doubles with each refusal of
// the request, up to 64 simulated seconds (as SDKs back off): clients
// that all came back at their retry-after would be refused about 30
// times for each one admitted, and the run would be mostly refusals.
type proofClient struct {
	t       *testing.T
	r       *proofRun
	tenant  proofTenant
	http    *http.Client
	end     time.Time
	refused *atomic.Int64
	rng     *rand.Rand
	// residue is the nanosecond (mod 1 µs) each of the client's events
	// falls on, under r.residues: its requests, and so its store calls,
	// the upstream's events of its answers (paced in whole µs) and its
	// settlements. No two clients then call the store at the same
	// instant, and the simulated run is the same whatever the scheduler
	// does.
	residue int64
}

// sleep sleeps d, and on to the client's nanosecond.
func (c *proofClient) sleep(d time.Duration) {
	at := time.Now().Add(d)
	if c.r.residues {
		at = at.Add(time.Duration((c.residue - at.UnixNano()%1000 + 1000) % 1000))
	}
	time.Sleep(time.Until(at))
}

// next is the client's next request: quiet tenants declare max_tokens
// (1000 to the cap) and get at least half of it, plus a prompt of up to
// 400; the noisy one sends no max_tokens half the time and asks for
// 2500 to 4000 tokens with a longer prompt, else max_tokens at the cap
// and 3000 to 4000.
func (c *proofClient) next() completion {
	rng := c.rng
	req := completion{User: c.tenant.name, Prompt: 20 + rng.Int64N(381)}
	switch {
	case !c.tenant.long:
		req.MaxTokens = 1000 + rng.Int64N(proofCap-999)
		req.Want = req.MaxTokens/2 + rng.Int64N(req.MaxTokens/2+1)
	case rng.IntN(2) == 0: // the default estimate is charged
		req.Prompt += 200 + rng.Int64N(600)
		req.Want = 2500 + rng.Int64N(proofModel-2499)
	default:
		req.MaxTokens = proofCap
		req.Want = 3000 + rng.Int64N(proofModel-2999)
	}
	return req
}

func (c *proofClient) run() {
	t, second := c.t, c.r.period/60
	c.sleep(time.Duration(c.rng.Int64N(int64(second))))
	for time.Now().Before(c.end) {
		body, _ := json.Marshal(c.next())
		for refused := 0; time.Now().Before(c.end); {
			req, _ := http.NewRequest("POST", "http://front/v1/completions", bytes.NewReader(body))
			c.r.front.sign(req, c.tenant.name)
			resp, err := c.http.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.StatusCode == http.StatusOK {
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
					t.Errorf("%s: a stream ended early: %v\n%s", c.tenant.name, err, b)
				}
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Errorf("%s: status %d", c.tenant.name, resp.StatusCode)
				return
			}
			c.refused.Add(1)
			refused = min(refused+1, 6)
			c.sleep(c.r.front.wait(resp) + time.Duration(c.rng.Int64N(int64(second)<<refused)))
		}
		c.sleep(time.Duration(c.rng.Int64N(int64(second))))
	}
}

// memNet serves an http.Handler on an in-memory network: net.Pipe pairs,
// whose far ends a listener hands the server. Under testing/synctest a
// goroutine blocked on a real socket is never durably blocked, so the
// simulated clock would never move; one blocked on a pipe is.
type memNet struct {
	conns     chan net.Conn
	done      chan struct{}
	once      sync.Once
	srv       *http.Server
	transport *http.Transport
}

func serveMem(h http.Handler) *memNet {
	n := &memNet{conns: make(chan net.Conn), done: make(chan struct{}), srv: &http.Server{Handler: h}}
	n.transport = &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 4 * proofClients, DisableCompression: true}
	go n.srv.Serve(n)
	return n
}

func (n *memNet) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case n.conns <- s:
		return c, nil
	case <-n.done:
	case <-ctx.Done():
	}
	c.Close()
	s.Close()
	return nil, net.ErrClosed
}

// Accept, Close and Addr make memNet the server's net.Listener.
func (n *memNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

func (n *memNet) Close() error {
	n.once.Do(func() { close(n.done) })
	return nil
}

func (n *memNet) Addr() net.Addr { return &net.UnixAddr{Name: "mem", Net: "mem"} }

// close stops the server and the clients' connections.
func (n *memNet) close() {
	n.srv.Close()
	n.transport.CloseIdleConnections()
}

// TestMeasuredCostProof is the proof (see the top of this file) on the
// memory store under a simulated clock, on Redis and on Redis Cluster,
// for each front.
func TestMeasuredCostProof(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	all := []proofTenant{quietSmall, quietLarge, noisy}
	quiet := []proofTenant{quietSmall, quietLarge}
	for _, f := range proofFronts {
		t.Run(f.name+"/memory", func(t *testing.T) {
			// Ten simulated minutes, with and without the noisy tenant:
			// the quiet tenants' runs are the same, booking for booking.
			var with, without map[string]tenantResult
			for _, c := range []struct {
				name    string
				tenants []proofTenant
				out     *map[string]tenantResult
			}{{"with", all, &with}, {"without", quiet, &without}} {
				synctest.Test(t, func(t *testing.T) {
					*c.out = runProof(t, proofRun{name: c.name, period: time.Minute, windows: 10, tenants: c.tenants, front: f, seed: seed, residues: true,
						open: func() (store.Store, error) { return memstore.New(memstore.Config{}), nil }})
				})
			}
			for _, tn := range quiet {
				if diff := cmp.Diff(without[tn.name], with[tn.name], cmp.AllowUnexported(booking{})); diff != "" {
					t.Errorf("%s with the noisy tenant differs from alone (-alone +with):\n%s", tn.name, diff)
				}
			}
		})
		for _, name := range []string{"redis", "cluster"} {
			t.Run(f.name+"/"+name, func(t *testing.T) {
				redistest.Need(t)
				t.Parallel() // ten real seconds each: Redis and Cluster side by side
				url := ""
				if name == "redis" {
					srv, err := redistest.Start()
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(srv.Close)
					url = "redis://" + srv.Addr
				} else {
					cl, err := redistest.StartCluster(3, 0)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(cl.Close)
					url = "redis-cluster://" + strings.Join(cl.Addrs(), ",")
				}
				open := func(prefix string) func() (store.Store, error) {
					return func() (store.Store, error) {
						st, err := redisstore.New(redisstore.Config{URL: url, Prefix: prefix})
						if err == nil {
							t.Cleanup(func() { st.Close() })
						}
						return st, err
					}
				}
				// The two runs side by side, each on keys of its own: a
				// "minute" of 1 s, ten of them.
				var with, without map[string]tenantResult
				var wg sync.WaitGroup
				wg.Go(func() {
					with = runProof(t, proofRun{name: "with", period: time.Second, windows: 10, tenants: all, front: f, seed: seed, open: open("proof-with:")})
				})
				wg.Go(func() {
					without = runProof(t, proofRun{name: "without", period: time.Second, windows: 10, tenants: quiet, front: f, seed: seed, open: open("proof-without:")})
				})
				wg.Wait()
				if with == nil || without == nil {
					return
				}
				for _, tn := range quiet {
					w, wo := with[tn.name].TrueCost, without[tn.name].TrueCost
					t.Logf("%s: %d true tokens with the noisy tenant, %d without", tn.name, w, wo)
					if 2*w < wo {
						t.Errorf("%s: %d true tokens with the noisy tenant, under half the %d without", tn.name, w, wo)
					}
				}
			})
		}
	}
}
