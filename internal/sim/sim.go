package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// Policy is a limit with the text it was given as: a rate limit, a
// concurrency limit, or both, layered as fairgate layers them (a request
// needs a slot and a token; refused either, it takes neither).
type Policy struct {
	Text string
	// Limit is the rate limit; zero without one.
	Limit algo.Limit
	// Concurrency is the requests in flight at most; zero without a
	// concurrency layer.
	Concurrency int64
	// Unit names what the rate layer counts, such as tokens (a class's
	// cost.unit), for the table and the chart; empty means requests or
	// units, as the traffic's costs say.
	Unit string
}

// hasRate reports a rate layer.
func (p Policy) hasRate() bool { return p.Limit.Limit > 0 }

// Describe is the policy's layers in words.
func (p Policy) Describe() string {
	switch {
	case !p.hasRate():
		return fmt.Sprintf("%d in flight", p.Concurrency)
	case p.Concurrency > 0:
		return fmt.Sprintf("%v and %d in flight", p.Limit, p.Concurrency)
	}
	return p.Limit.String()
}

// capacity is the chart's full scale: the rate layer's capacity, or the
// concurrency limit.
func (p Policy) capacity() int64 {
	if p.hasRate() {
		return p.Limit.Capacity()
	}
	return p.Concurrency
}

// MaxConcurrency bounds a policy's concurrency layer.
const MaxConcurrency = 1_000_000

// ParsePolicy reads "limit=60,period=1m,burst=60,algorithm=token_bucket"
// (burst and algorithm optional; period a Go duration or 1d), with or
// without "concurrency=N" (requests in flight), or "concurrency=N" alone;
// "unit=tokens" names what the limit counts (see [Policy.Unit]).
func ParsePolicy(s string) (Policy, error) {
	p := Policy{Text: s}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return p, fmt.Errorf("policy %q: %q is not name=value", s, kv)
		}
		if seen[k] {
			return p, fmt.Errorf("policy %q: %s given twice", s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "limit", "burst":
			var n int64
			if n, err = strconv.ParseInt(v, 10, 64); err != nil {
				err = errors.New("not a whole number")
			}
			if k == "limit" {
				p.Limit.Limit = n
			} else {
				p.Limit.Burst = n
			}
		case "period":
			p.Limit.Period, err = parseDuration(v)
		case "algorithm":
			p.Limit.Algorithm, err = algo.ParseAlgorithm(v)
		case "concurrency":
			if p.Concurrency, err = strconv.ParseInt(v, 10, 64); err != nil {
				err = errors.New("not a whole number")
			}
			if err == nil && (p.Concurrency < 1 || p.Concurrency > MaxConcurrency) {
				err = fmt.Errorf("want 1 to %d requests in flight", MaxConcurrency)
			}
		case "unit":
			if p.Unit = v; !policy.ValidUnit(v) {
				err = fmt.Errorf("want %s", policy.UnitRule)
			}
		default:
			return p, fmt.Errorf("policy %q: unknown field %q: want limit, period, burst, algorithm, concurrency or unit", s, k)
		}
		if err != nil {
			return p, fmt.Errorf("policy %q: %s=%q: %v", s, k, v, err)
		}
	}
	rate := seen["limit"] || seen["period"] || seen["burst"] || seen["algorithm"]
	if rate && (!seen["limit"] || !seen["period"]) || !rate && !seen["concurrency"] {
		return p, fmt.Errorf("policy %q: limit and period are required (or concurrency alone)", s)
	}
	if !rate {
		return p, nil
	}
	if err := p.Limit.Validate(); err != nil {
		return p, fmt.Errorf("policy %q: %w", s, err)
	}
	return p, nil
}

// parseDuration is time.ParseDuration plus whole days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("want a positive duration such as 1s, 1m or 7d")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 1s, 1m or 7d")
	}
	return d, nil
}

// MaxRequests bounds the requests a traffic description may make, so that
// a typo cannot ask for a billion.
const MaxRequests = 1_000_000

// Arrival is one request of the traffic: when it comes, how long it is in
// flight once admitted, what admission charges and what it really cost.
type Arrival struct {
	At, Hold time.Duration
	// Estimate is what admission charges: a measured request's estimate,
	// or the fixed cost of one that is not measured (1 unless its clause
	// says "cost N").
	Estimate int64
	// Cost is the request's true cost: what a measured request is settled
	// at when it ends (At + Hold); Estimate for one that is not measured.
	Cost int64
	// Measured reports a request charged Estimate at admission and
	// settled at Cost when it ends (a class with a measured cost).
	Measured bool
}

// count is a clause's estimate or cost: Lo, or a whole number drawn
// uniformly from Lo to Hi for each request.
type count struct{ Lo, Hi int64 }

// draw returns a count for one request.
func (c count) draw(r *rand.PCG) int64 {
	if c.Hi == c.Lo {
		return c.Lo
	}
	return c.Lo + int64(r.Uint64()%uint64(c.Hi-c.Lo+1))
}

// parseCount reads "N" or "A..B" (A <= B), each from lo to algo.MaxCount.
func parseCount(s string, lo int64) (count, error) {
	a, b, isRange := strings.Cut(s, "..")
	if !isRange {
		b = a
	}
	x, err1 := strconv.ParseInt(a, 10, 64)
	y, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || x < lo || y > algo.MaxCount || x > y {
		return count{}, fmt.Errorf("want a whole number from %d to %d, or a range such as 500..4000", lo, algo.MaxCount)
	}
	return count{x, y}, nil
}

// ParseTraffic reads a traffic description: clauses separated by ';' or
// new lines, each one of
//
//	burst N at T            N requests at time T
//	steady R/s from T to U  R requests a second, evenly, from T up to U
//	every D from T to U     one request every D from T up to U
//
// each optionally followed, in any order, by
//
//	hold D                  how long its requests are in flight (for a
//	                        concurrency layer; a measured request is
//	                        settled when it ends); zero without
//	cost N                  what each request costs (1 without)
//	estimate E cost N       a measured cost: admission charges E, and the
//	                        request is settled at N when it ends
//
// where E and N are a whole number or a range A..B, a number drawn for
// each request uniformly from A to B by a generator seeded with seed, so
// that a description and a seed always make the same requests. An
// estimate is at least 1 (a measured request is never free); a cost may
// be 0. Times are durations since the start (1s, 1m30s). Lines starting
// with '#' are comments. It returns the arrivals, sorted by time.
func ParseTraffic(s string, seed uint64) ([]Arrival, error) {
	var out []Arrival
	rng := rand.NewPCG(seed, 0x6661697267617465) // "fairgate"
	clauses := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' })
	for i, c := range clauses {
		c = strings.TrimSpace(c)
		if c == "" || strings.HasPrefix(c, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("traffic clause %d %q: %s", i+1, c, fmt.Sprintf(format, args...))
		}
		f := strings.Fields(c)
		var hold time.Duration
		var estimate, cost *count
		for n := len(f); n >= 6 && (f[n-2] == "hold" || f[n-2] == "estimate" || f[n-2] == "cost"); n = len(f) {
			word, v := f[n-2], f[n-1]
			f = f[:n-2]
			switch word {
			case "hold":
				d, err := parseDuration(v)
				if err != nil || d <= 0 {
					return nil, bad("hold %q: want a positive duration such as 200ms", v)
				}
				if hold > 0 {
					return nil, bad("hold given twice")
				}
				hold = d
			case "estimate":
				e, err := parseCount(v, 1)
				if err != nil {
					return nil, bad("estimate %q: %v (a measured request is never free)", v, err)
				}
				if estimate != nil {
					return nil, bad("estimate given twice")
				}
				estimate = &e
			case "cost":
				k, err := parseCount(v, 0)
				if err != nil {
					return nil, bad("cost %q: %v", v, err)
				}
				if cost != nil {
					return nil, bad("cost given twice")
				}
				cost = &k
			}
		}
		if estimate != nil && cost == nil {
			return nil, bad("an estimate needs the true cost its requests are settled at: add cost N or cost A..B")
		}
		first := len(out)
		switch {
		case len(f) == 4 && f[0] == "burst" && f[2] == "at":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				return nil, bad("burst size %q: want a positive integer", f[1])
			}
			at, err := parseDuration(f[3])
			if err != nil {
				return nil, bad("time %q: %v", f[3], err)
			}
			if len(out)+n > MaxRequests {
				return nil, bad("more than %d requests in all", MaxRequests)
			}
			for range n {
				out = append(out, Arrival{At: at})
			}
		case len(f) == 6 && (f[0] == "steady" || f[0] == "every") && f[2] == "from" && f[4] == "to":
			from, err1 := parseDuration(f[3])
			to, err2 := parseDuration(f[5])
			if err1 != nil || err2 != nil || to <= from {
				return nil, bad("want from T to U with U after T, such as from 40s to 90s")
			}
			var step time.Duration
			if f[0] == "steady" {
				r, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "/s"), 64)
				if err != nil || !strings.HasSuffix(f[1], "/s") || !(r > 0) || math.IsInf(r, 0) {
					return nil, bad("rate %q: want requests per second such as 0.5/s", f[1])
				}
				step = time.Duration(float64(time.Second) / r)
			} else {
				d, err := parseDuration(f[1])
				if err != nil || d <= 0 {
					return nil, bad("interval %q: want a positive duration", f[1])
				}
				step = d
			}
			if step <= 0 || int64((to-from)/step) > MaxRequests-int64(len(out)) {
				return nil, bad("more than %d requests in all", MaxRequests)
			}
			for t := from; t < to; t += step {
				out = append(out, Arrival{At: t})
			}
		default:
			return nil, bad("want burst N at T, steady R/s from T to U, or every D from T to U, each optionally with hold D, cost N, estimate E")
		}
		for i := first; i < len(out); i++ {
			a := &out[i]
			a.Hold, a.Estimate, a.Cost = hold, 1, 1
			switch {
			case estimate != nil:
				a.Estimate, a.Cost, a.Measured = estimate.draw(rng), cost.draw(rng), true
			case cost != nil:
				a.Cost = cost.draw(rng)
				a.Estimate = a.Cost
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("traffic %q describes no request", s)
	}
	slices.SortStableFunc(out, func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
	return out, nil
}

// CheckTraffic reports a request p could never admit: one whose charge
// at admission (its estimate, or its cost) is over the rate layer's
// burst, as check-config reports a measured class's cap over a burst.
func (p Policy) CheckTraffic(arrivals []Arrival) error {
	if !p.hasRate() {
		return nil
	}
	for _, a := range arrivals {
		if a.Estimate > p.Limit.Capacity() {
			what := "costs"
			if a.Measured {
				what = "is estimated at"
			}
			return fmt.Errorf("policy %q: the request at %v %s %d, over the burst %d: it could never be admitted (lower its estimate or cost, or raise the burst)", p.Text, a.At, what, a.Estimate, p.Limit.Capacity())
		}
	}
	return nil
}

// Request is one simulated request's decision.
type Request struct {
	At      time.Duration
	Allowed bool
	// Remaining is the capacity left after the decision: the rate
	// layer's (signed: negative is a debt a settlement left), or free
	// slots without one.
	Remaining int64
	Retry     time.Duration
	// InFlight is the requests in flight after the decision; NoSlot
	// reports a request refused by the concurrency layer.
	InFlight int64
	NoSlot   bool
	// Estimate and Cost are the arrival's (see [Arrival]); Charged is
	// what admission took from the rate layer: Estimate when admitted, 0
	// when refused or without a rate layer.
	Estimate, Cost, Charged int64
	Measured                bool
}

// Settlement is the settlement of an admitted measured request when it
// ended ([algo.Limit.Settle]).
type Settlement struct {
	At time.Duration
	// Request indexes Run.Requests: the request settled.
	Request int
	// After is how many requests had been decided when it was applied:
	// it comes after Run.Requests[:After] and before the rest.
	After int
	// Delta is the true cost minus the estimate: the units asked to move
	// (negative: a refund).
	Delta int64
	// Applied is what moved: Delta, cut by the debt bound (a debt is at
	// most one burst) or by what makes the limit full (a refund).
	Applied int64
	// Remaining is the capacity after, signed: negative is a debt.
	Remaining int64
}

// Sample is the capacity left at a time (a peek, which changes nothing),
// and the requests in flight then.
type Sample struct {
	At        time.Duration
	Remaining int64
	InFlight  int64
}

// Run is one policy's run.
type Run struct {
	Policy      Policy
	Requests    []Request
	Settlements []Settlement
	Samples     []Sample
	Admitted    int
	Rejected    int
	// Costs reports traffic with a cost other than 1 or a measured cost:
	// the table then sums the units charged and settled.
	Costs bool
}

// epoch is the virtual clock's start, in µs: a fixed, window-aligned
// instant, so fixed windows start at 0 of the run.
const epoch = int64(1_800_000_000) * 1_000_000 / 86_400_000_000 * 86_400_000_000

// pending is a measured request's settlement to come.
type pending struct {
	at time.Duration
	i  int // the request, which orders settlements of one time
}

// Simulate runs p over the arrivals until end, sampling the remaining
// capacity and the requests in flight every step and just before and
// after each request and settlement. A request needs a slot (when p has
// a concurrency layer), held for its Hold, and its Estimate of tokens
// (when p has a rate layer); refused a slot it takes no token, refused a
// token it gives its slot back. An admitted measured request is settled
// at its Cost when it ends, at At + Hold: after every request before
// that time, and after those at that time that came before it. It uses
// the algorithm code itself: [algo.Limit.Eval] and [algo.Limit.Settle].
func Simulate(p Policy, arrivals []Arrival, end, step time.Duration) Run {
	r := Run{Policy: p}
	var st algo.State
	var ends []time.Duration // admitted requests' ends, sorted
	var due []pending        // settlements to come, sorted by (at, i)
	us := func(d time.Duration) int64 { return epoch + int64(d/time.Microsecond) }
	release := func(at time.Duration) {
		n, _ := slices.BinarySearch(ends, at+1)
		ends = ends[n:]
	}
	remaining := func(at time.Duration) int64 {
		if !p.hasRate() {
			return p.Concurrency - int64(len(ends))
		}
		// A settlement of nothing is a peek that keeps the sign: Eval's
		// remaining stops at 0, a debt's is below.
		o, _ := p.Limit.Settle(st, us(at), us(at), 0)
		return o.Remaining
	}
	peek := func(at time.Duration) {
		release(at)
		r.Samples = append(r.Samples, Sample{at, remaining(at), int64(len(ends))})
	}
	next := time.Duration(0)
	// settle applies the first settlement due, sampling every step up to
	// its time when steps is set.
	settle := func(steps bool) {
		d := due[0]
		due = due[1:]
		for ; steps && next < d.at; next += step {
			peek(next)
		}
		peek(d.at)
		q := &r.Requests[d.i]
		delta := q.Cost - q.Estimate
		o, ns := p.Limit.Settle(st, us(d.at), us(q.At), delta)
		st = ns
		r.Settlements = append(r.Settlements, Settlement{At: d.at, Request: d.i, After: len(r.Requests), Delta: delta, Applied: o.Applied, Remaining: o.Remaining})
		peek(d.at)
	}
	// advance samples every step before t (and at t, when inclusive) and
	// applies the settlements due at or before t: a settlement due when a
	// request comes is of a request before it.
	advance := func(t time.Duration, inclusive bool) {
		for len(due) > 0 && due[0].at <= t {
			settle(true)
		}
		for ; next < t || inclusive && next == t; next += step {
			peek(next)
		}
	}
	for _, a := range arrivals {
		advance(a.At, false)
		peek(a.At)
		q := Request{At: a.At, Allowed: true, Estimate: a.Estimate, Cost: a.Cost, Measured: a.Measured}
		r.Costs = r.Costs || p.hasRate() && (a.Measured || a.Estimate != 1)
		if p.Concurrency > 0 && int64(len(ends)) >= p.Concurrency {
			q.Allowed, q.NoSlot, q.Retry = false, true, ends[0]-a.At
		}
		if q.Allowed && p.hasRate() {
			o, ns := p.Limit.Eval(st, us(a.At), a.Estimate)
			st = ns
			q.Allowed, q.Retry = o.Allowed, time.Duration(o.RetryUs)*time.Microsecond
			if o.Allowed {
				q.Charged = a.Estimate
			}
		}
		if q.Allowed && p.Concurrency > 0 {
			i, _ := slices.BinarySearch(ends, a.At+a.Hold)
			ends = slices.Insert(ends, i, a.At+a.Hold)
			release(a.At) // a request that holds for no time ends at once
		}
		q.Remaining, q.InFlight = remaining(a.At), int64(len(ends))
		if q.Charged > 0 && a.Measured { // admitted by the rate layer
			d := pending{a.At + a.Hold, len(r.Requests)}
			i, _ := slices.BinarySearchFunc(due, d, func(x, y pending) int {
				return cmp.Or(cmp.Compare(x.at, y.at), cmp.Compare(x.i, y.i))
			})
			due = slices.Insert(due, i, d)
		}
		r.Requests = append(r.Requests, q)
		if q.Allowed {
			r.Admitted++
		} else {
			r.Rejected++
		}
		peek(a.At)
	}
	advance(end, true)
	// Settlements past the end are applied all the same, as requests
	// past it are decided, without samples between them.
	for len(due) > 0 {
		settle(false)
	}
	return r
}

// RemainingAt is the capacity left at t (the last sample at or before t).
func (r *Run) RemainingAt(t time.Duration) int64 {
	i, _ := slices.BinarySearchFunc(r.Samples, t, func(s Sample, t time.Duration) int {
		if s.At <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return r.Policy.capacity()
	}
	return r.Samples[i-1].Remaining
}

// Lowest is the least capacity the run left at any time: below zero, the
// deepest debt.
func (r *Run) Lowest() int64 {
	low := r.Policy.capacity()
	for _, s := range r.Samples {
		low = min(low, s.Remaining)
	}
	return low
}
